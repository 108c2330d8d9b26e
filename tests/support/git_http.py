"""A loopback HTTPS smart-HTTP git server for tests: ``git http-backend`` (CGI) behind a small
threaded server on 127.0.0.1, with a certificate signed by a CA made here (``ca_file``: what the
Git runner is told to trust), requiring a token as GitHub does (``Authorization: Basic`` of
``x-access-token:<token>``; ``Bearer <token>`` is taken too).

Modes for the refusals: ``redirect_to`` answers every request with a 302 to another repository
path on the same server, ``stall`` holds every request until the server stops. ``requests``
records (method, path, authorised) of what was asked, never the header itself.
"""

from __future__ import annotations

import base64
import datetime
import hmac
import ipaddress
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_BACKEND = "/usr/lib/git-core/git-http-backend"
_MAX_BODY = 16 << 20


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_certificates(where: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 / localhost it signed: (ca, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("appdeck test CA"))
        .issuer_name(_name("appdeck test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    where.mkdir(parents=True, exist_ok=True)
    paths = (where / "ca.pem", where / "server.pem", where / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@dataclass
class GitHttpServer:
    root: Path
    """Repositories are served from here: ``https://127.0.0.1:<port>/<name>.git``."""
    token: str | None
    ca_file: Path
    port: int = 0
    redirect_to: str | None = None
    stall: bool = False
    requests: list[tuple[str, str, bool]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def url(self, name: str) -> str:
        return f"https://127.0.0.1:{self.port}/{name}"

    def authorised(self, header: str | None) -> bool:
        if self.token is None:
            return True
        if not header:
            return False
        kind, _, value = header.partition(" ")
        if kind.lower() == "bearer":
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if kind.lower() != "basic":
            return False
        try:
            plain = base64.b64decode(value.strip(), validate=True)
        except ValueError:
            return False
        _, _, password = plain.partition(b":")
        return hmac.compare_digest(password, self.token.encode())


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None  # nothing printed: a header must not end up in a log

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        served = self.server.served
        path = urlsplit(self.path).path
        ok = served.authorised(self.headers.get("Authorization"))
        served.requests.append((self.command, path, ok))
        if served.stall:
            served.stopping.wait(60)
            self._answer(503, {}, b"")
            return
        if served.redirect_to is not None:
            rest = path.split(".git", 1)[-1]
            self._answer(302, {"Location": served.url(served.redirect_to) + rest}, b"")
            return
        if not ok:
            self._answer(401, {"WWW-Authenticate": 'Basic realm="git"'}, b"no\n")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            self._answer(413, {}, b"")
            return
        body = self.rfile.read(length) if length else b""
        self._cgi(path, body)

    def _cgi(self, path: str, body: bytes) -> None:
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.server.served.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "HOME": "/nonexistent",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": urlsplit(self.path).query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "REMOTE_USER": "x-access-token",
        }
        for header, name in (
            ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
            ("Git-Protocol", "GIT_PROTOCOL"),
        ):
            if value := self.headers.get(header):
                env[name] = value
        done = subprocess.run(
            [_BACKEND], input=body, env=env, capture_output=True, timeout=30, check=False
        )
        head, _, content = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, content = done.stdout.partition(b"\n\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers[key.strip()] = value.strip()
        self._answer(status, headers, content)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, served: GitHttpServer, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.served = served
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(30)
        try:
            wrapped = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # a client that does not trust the CA hangs up in the handshake
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


@contextmanager
def git_http_server(
    root: Path,
    *,
    token: str | None,
    certificates: Path,
    redirect_to: str | None = None,
    stall: bool = False,
) -> Iterator[GitHttpServer]:
    """Serve the bare repositories under ``root`` over HTTPS on a loopback port until exit."""
    ca, cert, key = make_certificates(certificates)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    served = GitHttpServer(root, token, ca, redirect_to=redirect_to, stall=stall)
    server = _Server(served, context)
    served.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield served
    finally:
        served.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
