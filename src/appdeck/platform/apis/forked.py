"""The OpenAPI checks' children, forked from a warm parent instead of started cold.

Both checks of an app's OpenAPI material run hostile input in a process of their own, one per
check, killed at a deadline and capped by rlimits: ``discover_apis``' validator
(:meth:`~appdeck.platform.apis.catalog.ApiCatalog._validate`, openapi-spec-validator) and
``test_api``'s response check (:mod:`~appdeck.platform.apis.validation`, openapi-core). Started
as a fresh ``python -I`` each, a check paid for importing those libraries every time: ~0.6 s
of CPU before its first byte of work, on a document of ten lines.

:class:`WarmParent` starts one process (``python -I``, the minimal environment, a session of
its own) that imports them once, then forks a child per check. The child is what the cold
process was: its own process, stdin/stdout/stderr on pipes to the server, a new session, every
other descriptor closed before it reads a byte, the caps each check sets for itself
(``RLIMIT_AS``, ``RLIMIT_CPU``; the response check's audit hook), killed at the deadline by
the server. A fork shares nothing with its siblings after it: one check cannot see another's
document.

The wire, a ``SOCK_SEQPACKET`` pair (one message each way per event):

- server -> parent: ``{"id": n, "kind": ..., "options": {...}}`` with three descriptors
  (SCM_RIGHTS): the child's stdin, stdout and stderr;
- parent -> server: ``started <id> <pid>`` after each fork, ``failed <id> <errno>`` when it
  could not fork, ``exited <pid> <returncode>`` when it reaped one (a signal: minus its
  number, as :mod:`subprocess` says).

The parent exits when the server's end closes, or after :data:`IDLE_S` without a child (a
server that checks nothing does not keep its memory); the next check starts another. A parent
that dies is started again by the next check; the children it had are killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

__all__ = ["IDLE_S", "WarmChild", "WarmParent", "warm_parent"]

log = logging.getLogger("appdeck.apis.forked")

IDLE_S: Final = 300.0
"""How long the parent waits for a check, with no child running, before it exits."""
MAX_MESSAGE: Final = 4096
_BOOT: Final = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from appdeck.platform.apis.forked import serve; serve(int(sys.argv[2]))"
)


# -- the server's side -----------------------------------------------------------------------


class WarmChild:
    """One check's child: :meth:`communicate`, :meth:`kill`, :meth:`wait` (as
    :class:`asyncio.subprocess.Process` has them)."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int, exited: asyncio.Future[int]):
        self.pid = pid
        self._fds = (stdin, stdout, stderr)
        self._exited = exited

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def communicate(self, payload: bytes) -> tuple[bytes, bytes]:
        """Write ``payload`` to its stdin and close it; all it writes to stdout and stderr, once
        both are closed (it exited); then wait for it to be reaped."""
        loop = asyncio.get_running_loop()
        stdin, stdout, stderr = self._fds
        self._fds = (-1, -1, -1)  # the transports own them now
        writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(stdin, "wb", 0))
        out, err = _Collected(loop), _Collected(loop)
        await loop.connect_read_pipe(lambda: out, os.fdopen(stdout, "rb", 0))
        await loop.connect_read_pipe(lambda: err, os.fdopen(stderr, "rb", 0))
        try:
            writer.write(payload)
            writer.close()  # flushed, then closed: the child reads to its end
            result = await out.done, await err.done
            await self.wait()
            return result
        finally:
            if not writer.is_closing():
                writer.abort()
            out.close()
            err.close()

    def kill(self) -> None:
        if not self._exited.done():  # not reaped: the pid is still this child's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def close(self) -> None:
        """The pipes' descriptors not handed to :meth:`communicate`."""
        for fd in self._fds:
            if fd >= 0:
                os.close(fd)
        self._fds = (-1, -1, -1)


class _Collected(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.chunks: list[bytes] = []
        self.done: asyncio.Future[bytes] = loop.create_future()
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(b"".join(self.chunks))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class WarmParent:
    """The warm parent of one server process (:func:`warm_parent`), started at the first check.
    It outlives event loops (tests run many): each loop reads its answers with a task of its
    own, and a request's answers carry its id."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[int]] = {}
        """request id -> the pid it gets: forks asked and not answered yet."""
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._ids = itertools.count(1)

    async def spawn(self, kind: str, options: dict[str, Any] | None = None) -> WarmChild:
        """A child running check ``kind`` (see :data:`KINDS`) with ``options``; its pipes
        are the caller's to :meth:`WarmChild.communicate` on. OSError when no child could be
        made (the parent would not start, or could not fork)."""
        loop = asyncio.get_running_loop()
        for attempt in (1, 2):  # an idle parent may exit just as it is asked
            sock = self._ensure(loop)
            ident = next(self._ids)
            request = json.dumps({"id": ident, "kind": kind, "options": options or {}})
            ends = [os.pipe(), os.pipe(), os.pipe()]
            theirs = (ends[0][0], ends[1][1], ends[2][1])
            ours = (ends[0][1], ends[1][0], ends[2][0])
            started: asyncio.Future[int] = loop.create_future()
            self._pending[ident] = started
            try:
                try:
                    socket.send_fds(sock, [request.encode()], list(theirs))
                finally:
                    for fd in theirs:
                        os.close(fd)
                pid = await started
            except BaseException as exc:
                self._pending.pop(ident, None)
                for fd in ours:
                    os.close(fd)
                if isinstance(exc, EOFError | ConnectionError) and attempt == 1:
                    self._forget()
                    continue
                if isinstance(exc, OSError | EOFError):
                    raise OSError(f"the OpenAPI checks' parent failed: {exc}") from exc
                raise
            return WarmChild(pid, *ours, self._exits[pid])
        raise AssertionError("unreachable")

    def _ensure(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """The socket to a running parent (started if there is none), read on ``loop``."""
        if self._sock is None or self._process is None or self._process.poll() is not None:
            self._forget()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._process = subprocess.Popen(
                    [
                        sys.executable,
                        "-I",
                        "-c",
                        _BOOT,
                        str(Path(__file__).parents[3]),
                        str(theirs.fileno()),
                    ],
                    pass_fds=[theirs.fileno()],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
                    start_new_session=True,
                )
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            ours.setblocking(False)
            self._sock = ours
        if self._reader is None or self._reader.done() or self._reader.get_loop() is not loop:
            self._abandon_loop()
            self._reader = loop.create_task(self._read(self._sock), name="appdeck-openapi-parent")
        return self._sock

    async def _read(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                message = await loop.sock_recv(sock, MAX_MESSAGE)
                if not message:
                    break
                word, *rest = message.decode("ascii").split()
                if word == "started":
                    ident, pid = int(rest[0]), int(rest[1])
                    self._exits[pid] = loop.create_future()
                    waiter = self._pending.pop(ident, None)
                    if waiter is None or waiter.done():  # its check gave up: nobody reads it
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    else:
                        waiter.set_result(pid)
                elif word == "failed":
                    waiter = self._pending.pop(int(rest[0]), None)
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(BlockingIOError(int(rest[1]), "could not fork"))
                elif word == "exited":
                    done = self._exits.pop(int(rest[0]), None)
                    if done is not None and not done.done():
                        done.set_result(int(rest[1]))
        except (OSError, ValueError, IndexError) as exc:
            log.warning("the OpenAPI checks' parent process answered badly: %s", exc)
        if self._sock is sock:  # the parent is gone (not just this loop's reader)
            self._forget()

    def _abandon_loop(self) -> None:
        """Another event loop reads from here on: what waited on the old one is dropped, its
        children killed (their checks ended with their loop)."""
        if self._reader is not None and not self._reader.done():
            with contextlib.suppress(RuntimeError):  # its loop may be closed
                self._reader.cancel()
        self._reader = None
        self._fail_waiters()

    def _fail_waiters(self) -> None:
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if not waiter.done():
                with contextlib.suppress(RuntimeError):
                    waiter.set_exception(EOFError("the parent process exited"))
        exits, self._exits = self._exits, {}
        for pid, done in exits.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not done.done():
                with contextlib.suppress(RuntimeError):
                    done.set_result(-signal.SIGKILL)

    def _forget(self) -> None:
        """Stop using the parent (gone, or to be replaced): its waiters fail, its children
        are killed (nobody would reap them for us: they count as killed)."""
        self._abandon_loop()
        if self._sock is not None:
            self._sock.close()  # the parent sees its end close and exits
            self._sock = None
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)


_PARENT = WarmParent()


def warm_parent() -> WarmParent:
    """This process's warm parent (one per server: both checks share it)."""
    return _PARENT


# -- the warm parent's side --------------------------------------------------------------------


def _openapi(options: dict[str, Any]) -> int:
    """discover_apis' validator: the caps, then a document on stdin, the verdict on stdout."""
    import resource

    from appdeck.platform.apis.documents import validate_stdio

    memory, cpu = int(options["memory"]), int(options["cpu"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    validate_stdio()
    return 0


def _response(options: dict[str, Any]) -> int:
    """test_api's response check (it sets its own caps and audit hook)."""
    from appdeck.platform.apis import validation

    os.umask(0o077)
    return validation.main()


KINDS: Final[dict[str, Callable[[dict[str, Any]], int]]] = {
    "openapi": _openapi,
    "response": _response,
}


def _preload() -> None:
    """What the checks import, imported once here instead of in every child."""
    from appdeck.platform.apis import validation
    from appdeck.platform.apis.documents import preload as documents_preload

    documents_preload()
    validation.preload()


def serve(fd: int) -> None:
    """The warm parent's loop (``python -I -c`` :data:`_BOOT`): fork a child per request."""
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _preload()
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([fd, wake_r], [], [], None if children else IDLE_S)
        if not ready:
            return  # idle
        if wake_r in ready:
            os.read(wake_r, 512)
            _reap(sock, children)
        if fd in ready:
            try:
                message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
            except OSError:
                return
            if not message:
                return  # the server is gone
            if len(fds) != 3:
                for extra in fds:
                    os.close(extra)
                sock.send(f"failed {_ident(message)} {errno.EINVAL}".encode())
                continue
            try:
                pid = os.fork()
            except OSError as exc:
                sock.send(f"failed {_ident(message)} {exc.errno or errno.EAGAIN}".encode())
                pid = -1
            if pid == 0:
                _child(message, fds)  # never returns
            for passed in fds:
                os.close(passed)
            if pid > 0:
                children.add(pid)
                sock.send(f"started {_ident(message)} {pid}".encode())
            _reap(sock, children)


def _ident(message: bytes) -> int:
    try:
        return int(json.loads(message)["id"])
    except (ValueError, KeyError, TypeError):
        return 0


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        sock.send(f"exited {pid} {os.waitstatus_to_exitcode(status)}".encode())


def _child(message: bytes, fds: list[int]) -> None:
    """In the forked child: its own session, the three pipes as 0-2, nothing else open (the
    parent's socket least of all), then the check; exits, never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, _max_fd())  # the parent's socket and wake-up pipe among them
        request = json.loads(message)
        check = KINDS[request["kind"]]
        code = check(request["options"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except MemoryError:  # said without allocating: a traceback may not fit under the cap
        with contextlib.suppress(BaseException):
            os.write(2, b"MemoryError\n")
    except BaseException:  # noqa: BLE001 - said on stderr, as a cold child's traceback was
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536
