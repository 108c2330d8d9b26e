"""Keeps HAProxy's edge (:mod:`.edge`) in step with the data plane's shared state.

The control plane writes :class:`HostMap`, :class:`Challenges`, :class:`Certificates` and the
:class:`KeyGate`; their listeners are synchronous and only wake the mirror's task, which
copies the *current* state (level-triggered: a burst of changes is one pass, and a pass that
failed is simply tried again). A pass:

1. computes each map's wanted content and writes the file whole (a reload or a restart of
   HAProxy loads it), then changes HAProxy through its runtime API without reload:
   ``del map``/``set map``/``add map`` for a few changes, an atomic replacement
   (``prepare map`` → ``add map @ver`` → ``commit map``) for many or when HAProxy's content
   is unknown (the first pass, after :meth:`EdgeMirror.resync`, after a failure);
2. reads every changed map back (``show map``) and fails unless it is what was wanted;
3. certificates: ``new``/``set``/``commit ssl cert``, ``add``/``del ssl crt-list``,
   ``del ssl cert``, each certificate read back by serial (``show ssl cert``), its crt-list
   line by its names (``show ssl crt-list``).

:meth:`EdgeMirror.sync` runs a pass now and returns once HAProxy holds the state (what a
caller awaits before it reports a change as done). A closed (not loaded) KeyGate is not
copied: HAProxy outlives the control plane and keeps the keys it was last given, so apps
stay served across a restart of ``appdeck serve``; a HAProxy that never had keys answers
``starting`` (edge.py). Start the mirror after the shared state is loaded: it copies exactly
what it is given, so empty maps would unpublish every custom domain.

Last use: every ``use_poll_s`` the mirror reads the key-use stick table (entries used since
the last read) and hands ``key id → epoch second`` to :meth:`KeyGate.put_back`, which the
API-key service writes to the database with its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from dataclasses import dataclass
from typing import Final

from cryptography import x509

from appdeck.ingress.certs import Certificate, Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.haproxy import edge
from appdeck.ingress.haproxy.runtime_api import RuntimeApi, RuntimeApiError
from appdeck.ingress.hosts import HostMap
from appdeck.ingress.keys import GateKey, KeyGate

__all__ = ["EdgeMirror", "MirrorError"]

log = logging.getLogger("appdeck.ingress.haproxy")

FEW: Final = 64
"""Up to this many changes to one map are applied key by key, beyond it the map is replaced."""
PAYLOAD_BYTES: Final = 8 * 1024
"""One ``add map`` payload stays well inside HAProxy's 16 kB command buffer."""
REPLACE_TRIES: Final = 5
"""Commits of one map replacement refused as :data:`OVERTAKEN` before the pass fails."""
OVERTAKEN: Final = "Version number out of range"
"""HAProxy's answer to ``commit map @N`` once a version newer than N was committed: the
replicas of one install share their HAProxy, and two replicas starting at once (each
mirror's first pass replaces every map) prepare and commit the same maps side by side."""
START_TRIES: Final = 5
"""First passes :meth:`EdgeMirror.start` makes (``retry_s`` apart) before it fails: a replica
starting beside another may read back what the other committed just after it (their views of
the shared state differ for a moment), as the running mirror's passes may (they are retried)."""
KEY_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
ROUTE: Final = re.compile(r"[a-z0-9-]{1,63}")
HASH: Final = re.compile(r"[0-9a-f]{64}")
SNI: Final = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
"""A name a crt-list line may carry (an exact host or a ``*.`` wildcard)."""
MAP_LINE: Final = re.compile(r"0x[0-9a-f]+ (\S+) (\S*)")
USE_LINE: Final = re.compile(r"key=([0-9a-f]{64}) .*gpt0=([0-9]+)")


class MirrorError(RuntimeError):
    """HAProxy does not hold what it was given (read back differs)."""


@dataclass(frozen=True, slots=True)
class _Cert:
    """What is applied of a certificate: its serial and names."""

    serial: int
    hostnames: tuple[str, ...]


def _serial(chain_pem: bytes) -> int:
    return x509.load_pem_x509_certificate(chain_pem).serial_number


class EdgeMirror:
    """Copies the shared state into HAProxy (see the module)."""

    def __init__(
        self,
        api: RuntimeApi,
        paths: edge.EdgePaths,
        hosts: HostMap,
        challenges: Challenges,
        certs: Certificates,
        gate: KeyGate,
        *,
        use_poll_s: float = 10.0,
        retry_s: float = 1.0,
    ) -> None:
        self.api = api
        self.paths = paths
        self.hosts = hosts
        self.challenges = challenges
        self.certs = certs
        self.gate = gate
        self.use_poll_s = use_poll_s
        self.retry_s = retry_s
        self._maps: dict[str, dict[str, str] | None] = {}
        """Map name → what HAProxy holds (as last read back); None or absent: unknown."""
        self._certs: dict[str, _Cert] | None = None
        """Certificate name → what HAProxy serves; None: unknown (ask HAProxy)."""
        self._certs_given: dict[str, Certificate] | None = None
        """The certificates that ``_certs`` was read back for."""
        self._gate_dirty = True
        self._gate_wanted: dict[str, dict[str, str]] | None = None
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._used_since = 0
        for watched in (hosts, challenges, certs):
            watched.on_change(lambda _key: self._changed())
        gate.on_change(self._gate_changed)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Copy everything now (up to :data:`START_TRIES` passes), then keep copying on a
        task of its own."""
        self._loop = asyncio.get_running_loop()
        for attempt in range(1, START_TRIES + 1):
            try:
                await self.resync()
                break
            except (RuntimeApiError, MirrorError) as exc:
                if attempt == START_TRIES:
                    raise
                log.info("the edge's first pass failed, trying again: %s", exc)
                await asyncio.sleep(self.retry_s)
        self._task = asyncio.create_task(self._run(), name="edge-mirror")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _gate_changed(self) -> None:
        self._gate_dirty = True
        self._changed()

    def _changed(self) -> None:
        """A listener: may be called from any thread; only wakes the task."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self.use_poll_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_poll - loop.time())):
                    await self._wake.wait()
            if self._wake.is_set():
                self._wake.clear()
                try:
                    await self.sync()
                except Exception as exc:  # even a bug must not stop the mirror for good
                    expected = isinstance(exc, RuntimeApiError | MirrorError | OSError)
                    log.warning(
                        "the data plane's edge is behind, retrying: %s", exc, exc_info=not expected
                    )
                    await asyncio.sleep(self.retry_s)
                    self._wake.set()
            if loop.time() >= next_poll:
                next_poll = loop.time() + self.use_poll_s
                with contextlib.suppress(RuntimeApiError):
                    await self.collect_key_use()

    # --- passes ------------------------------------------------------------------------------

    async def resync(self) -> None:
        """Re-apply everything (after core (re)started HAProxy): nothing applied is assumed."""
        async with self._lock:
            self._maps.clear()
            self._certs = self._certs_given = None
        await self.sync()

    async def sync(self) -> None:
        """Apply the current state; returns once HAProxy holds it (read back)."""
        async with self._lock:
            try:
                for name, wanted in self._wanted_maps().items():
                    await self._apply_map(name, wanted)
                await self._apply_certs()
            except BaseException:
                self._maps.clear()  # unknown now: the next pass replaces whole
                self._certs = self._certs_given = None
                raise

    def _wanted_maps(self) -> dict[str, dict[str, str]]:
        tls: dict[str, str] = {}
        for cert in self._wanted_certs().values():
            until = str(int(cert.not_after * 1000))
            for host in cert.hostnames:
                tls[host] = max(tls.get(host, "0"), until, key=int)
        wanted = {
            "hosts": self.hosts.items(),
            "acme": self.challenges.items(),
            "tls": tls,
        }
        wanted.update(self._gate_maps())
        return wanted

    def _gate_maps(self) -> dict[str, dict[str, str]]:
        """``required``, ``keys`` and ``gate`` as the KeyGate has them (none while it is
        closed: see the module); recomputed only after the gate changed (10,000 keys take
        tens of milliseconds)."""
        if self._gate_dirty or self._gate_wanted is None:
            self._gate_dirty = False
            state = self.gate.snapshot()
            self._gate_wanted = {}
            if state.loaded:
                entries = ((digest, _entry(digest, key)) for digest, key in state.keys.items())
                self._gate_wanted = {
                    "required": {
                        r: str(a) for r, a in state.required.items() if ROUTE.fullmatch(r)
                    },
                    "keys": {digest: value for digest, value in entries if value},
                    "gate": {"open": "1"},
                }
        return self._gate_wanted

    # --- commands: answers judged here, not by words (a hostname may say "error") ---------

    async def _quiet(self, line: str, payload: str | None = None) -> None:
        """A command whose success is an empty answer (map changes)."""
        answer = (await self.api.raw(line, payload)).strip()
        if answer:
            raise MirrorError(f"{line.split(' ', 2)[:2]}: {answer[:200]}")

    async def _said(self, line: str, success: str, payload: str | None = None) -> None:
        """A command whose success answer contains ``success`` (certificate changes)."""
        answer = await self.api.raw(line, payload)
        if success not in answer:
            raise MirrorError(f"{line.split(' ', 3)[:3]}: {answer.strip()[:200]}")

    # --- maps --------------------------------------------------------------------------------

    async def _apply_map(self, name: str, wanted: dict[str, str]) -> None:
        held = self._maps.get(name)
        if held == wanted:
            return
        path = self.paths.map(name)
        edge.write_atomic(path, "".join(f"{k} {v}\n" for k, v in sorted(wanted.items())).encode())
        if held is None and str(path) not in await self.api.raw("show map"):
            self._maps[name] = wanted  # not in this config (tls.map without HTTPS): file only
            return
        changes = _diff(held, wanted)
        if held is None or changes is None or len(changes) > FEW:
            await self._replace_map(str(path), wanted)
            now = await self._read_map(str(path))
            if now != wanted:
                raise MirrorError(f"map {name}: HAProxy holds {len(now)} entries, not the wanted")
            self._maps[name] = now
            return
        for key, value in changes:
            if value is None:
                await self._quiet(f"del map {path} {key}")
            elif key in held:
                await self._quiet(f"set map {path} {key} {value}")
            else:
                await self._quiet(f"add map {path} {key} {value}")
        self._maps[name] = None  # unknown until each change is read back
        for key, value in changes:
            if await self._read_key(str(path), key) != value:
                raise MirrorError(f"map {name}: a change did not take")
        self._maps[name] = wanted

    async def _replace_map(self, path: str, wanted: dict[str, str]) -> None:
        """``prepare``/``add``/``commit``; made again when the commit is refused because another
        process committed a newer version meanwhile (:data:`REPLACE_TRIES`)."""
        for attempt in range(1, REPLACE_TRIES + 1):
            version = await self._prepared(path, wanted)
            answer = (await self.api.raw(f"commit map @{version} {path}")).strip()
            if not answer:
                return
            if not answer.startswith(OVERTAKEN) or attempt == REPLACE_TRIES:
                raise MirrorError(f"['commit', 'map']: {answer[:200]}")
            log.info("map %s was replaced by another process meanwhile: replacing it again", path)

    async def _prepared(self, path: str, wanted: dict[str, str]) -> str:
        """A new version of the map at ``path`` holding ``wanted``, not committed."""
        answer = await self.api.raw(f"prepare map {path}")
        found = re.search(r"New version created: ([0-9]+)", answer)
        if found is None:
            raise MirrorError(f"prepare map: {answer.strip()[:200]}")
        version = found.group(1)
        chunk: list[str] = []
        size = 0
        for key, value in wanted.items():
            line = f"{key} {value}"
            if size + len(line) > PAYLOAD_BYTES:
                await self._quiet(f"add map @{version} {path}", "\n".join(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line) + 1
        if chunk:
            await self._quiet(f"add map @{version} {path}", "\n".join(chunk))
        return version

    async def _read_key(self, path: str, key: str) -> str | None:
        """The value HAProxy holds for ``key`` (one lookup), None when it holds none."""
        answer = await self.api.raw(f"get map {path} {key}")
        if "found=yes" not in answer:
            return None
        found = re.search(r'value="([^"]*)"', answer)
        return None if found is None else found.group(1)

    async def _read_map(self, path: str) -> dict[str, str]:
        held: dict[str, str] = {}
        for line in (await self.api.raw(f"show map {path}")).splitlines():
            found = MAP_LINE.fullmatch(line.strip())
            if found is not None:
                if found.group(1) in held:  # a duplicate: never ours to leave
                    raise MirrorError(f"map {path}: a key twice")
                held[found.group(1)] = found.group(2)
        return held

    # --- certificates ------------------------------------------------------------------------

    def _wanted_certs(self) -> dict[str, Certificate]:
        """The certificates to serve: one whose names would not fit a crt-list line is left
        out (and said), never allowed to break the others."""
        wanted: dict[str, Certificate] = {}
        for name, cert in self.certs.items().items():
            if cert.hostnames and all(SNI.fullmatch(h) for h in cert.hostnames):
                wanted[name] = cert
            else:
                log.error("certificate %s not served: a name it covers is not a DNS name", name)
        return wanted

    async def _apply_certs(self) -> None:
        wanted = self._wanted_certs()
        if self._certs is not None and wanted == self._certs_given:
            return
        self._write_cert_files(wanted)
        if str(self.paths.crt_list) not in await self.api.raw("show ssl crt-list"):
            self._certs, self._certs_given = {}, wanted  # no HTTPS in this config: files only
            return
        held = self._certs if self._certs is not None else await self._read_certs()
        applied: dict[str, _Cert] = {}
        for name, cert in wanted.items():
            applied[name] = await self._put_cert(name, cert, held.get(name))
        for name in set(held) - set(wanted):
            file = self.paths.cert(name)
            await self._said(f"del ssl crt-list {self.paths.crt_list} {file}", "deleted")
            await self._said(f"del ssl cert {file}", "deleted")
        now = await self._read_certs()
        if now != applied:
            raise MirrorError("HAProxy's certificates are not the wanted ones")
        self._certs, self._certs_given = now, wanted

    def _write_cert_files(self, wanted: dict[str, Certificate]) -> None:
        """The certificates' files and the crt-list naming them (what a restart loads)."""
        for name, cert in wanted.items():
            edge.write_atomic(self.paths.cert(name), _pem(cert))
        lines = [
            f"{self.paths.cert(name)} {' '.join(cert.hostnames)}\n"
            for name, cert in sorted(wanted.items())
        ]
        edge.write_atomic(self.paths.crt_list, "".join(lines).encode())
        for file in self.paths.certs.glob("*.pem"):
            if file.stem not in wanted:
                file.unlink(missing_ok=True)

    async def _put_cert(self, name: str, cert: Certificate, held: _Cert | None) -> _Cert:
        want = _Cert(_serial(cert.chain_pem), cert.hostnames)
        if held == want:
            return want
        file = self.paths.cert(name)
        if held is None:
            await self._said(f"new ssl cert {file}", "New empty certificate store")
        await self._said(f"set ssl cert {file}", "Transaction", _pem(cert).decode())
        await self._said(f"commit ssl cert {file}", "Success!")
        if held is not None and held.hostnames != want.hostnames:
            await self._said(f"del ssl crt-list {self.paths.crt_list} {file}", "deleted")
            held = None
        if held is None:
            line = f"{file} {' '.join(cert.hostnames)}"
            await self._said(f"add ssl crt-list {self.paths.crt_list}", "Success!", line)
        return want

    async def _read_certs(self) -> dict[str, _Cert]:
        """What HAProxy serves from the crt-list: name → serial and names."""
        listing = await self.api.raw(f"show ssl crt-list {self.paths.crt_list}")
        held: dict[str, _Cert] = {}
        prefix = f"{self.paths.certs}/"
        for line in listing.splitlines():
            parts = line.split()
            if not parts or not parts[0].startswith(prefix) or not parts[0].endswith(".pem"):
                continue
            name = parts[0][len(prefix) : -len(".pem")]
            names = tuple(p for p in parts[1:] if not p.startswith("["))
            shown = await self.api.raw(f"show ssl cert {parts[0]}")
            found = re.search(r"^Serial: ([0-9A-Fa-f]+)", shown, re.MULTILINE)
            if found is None:
                raise MirrorError(f"certificate {name}: no serial shown")
            held[name] = _Cert(int(found.group(1), 16), names)
        return held

    # --- last use of keys --------------------------------------------------------------------

    async def collect_key_use(self) -> dict[str, float]:
        """Hand the keys used since the last call to the gate (``put_back``); returns them."""
        answer = await self.api.raw(
            f"show table {edge.KEY_USE_TABLE} data.gpt0 gt {self._used_since}"
        )
        keys = self.gate.snapshot().keys
        used: dict[str, float] = {}
        newest = self._used_since
        for line in answer.splitlines():
            found = USE_LINE.search(line)
            if found is None:
                continue
            at = int(found.group(2))
            newest = max(newest, at)
            key = keys.get(found.group(1))
            if key is not None and key.tracked:
                used[key.key_id] = max(used.get(key.key_id, 0.0), float(at))
        # the same second may see more uses: ask again from it (put_back keeps the newest)
        self._used_since = max(self._used_since, newest - 1)
        if used:
            self.gate.put_back(used)
        return used


@functools.lru_cache(maxsize=1 << 16)
def _entry(digest: str, key: GateKey) -> str | None:
    """``keys.map``'s value for a key, None when a field would not fit a map line."""
    if not HASH.fullmatch(digest) or not KEY_ID.fullmatch(key.key_id):
        return None
    return _key_value(key)


def _key_value(key: GateKey) -> str:
    expiry = 0 if key.expires_at is None else max(1, int(key.expires_at * 1000))
    return f"{key.app_id}:{'w' if key.write else 'r'}:{expiry}:{key.key_id}"


def _pem(cert: Certificate) -> bytes:
    """Chain then key, without blank lines (a runtime API payload ends at one)."""
    text = cert.chain_pem.strip() + b"\n" + cert.key_pem.strip() + b"\n"
    return b"\n".join(line for line in text.splitlines() if line.strip()) + b"\n"


def _diff(
    held: dict[str, str] | None, wanted: dict[str, str]
) -> list[tuple[str, str | None]] | None:
    """The changes from ``held`` to ``wanted`` (value None: delete); None when held is unknown."""
    if held is None:
        return None
    changes: list[tuple[str, str | None]] = [(k, None) for k in held if k not in wanted]
    changes += [(k, v) for k, v in wanted.items() if held.get(k) != v]
    return changes
