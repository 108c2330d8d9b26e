"""A fork server for the suite's ``appdeck`` processes: one per test worker, the program's
modules imported once, each server a fork of it.

An ``appdeck serve`` spends ~1 of its ~1.5 CPU-s of start-up importing ~1,400 modules, and the
suite starts ~150 of them (three per replica-set test). The zygote imports them once, the
ones a server imports as it starts too, and makes the built-in tools' schemas (``Tool.fixed``,
made once per process: from the code alone): a forked start and stop costs ~0.4 CPU-s, against
~0.7 when only the imports made before start-up were preloaded (2026-11-29). A start is a
``fork()``, and the child runs the installed command's own entry point
(``appdeck.__main__:main``) with the argv, environment, working directory, standard streams
and session the test asked for: the same code a fresh process runs, minus the imports.
What a fork cannot show (the program's imports in a fresh interpreter, its GC hold while
they load, the console script) is shown by the tests that still exec the command
(``tests/cli/test_serve.py``, ``tests/test_tuning.py``, ``fresh_process=True``).

The protocol, one connection per process, on the zygote's Unix socket:

- the worker sends one JSON object (``argv``, ``env``, ``cwd``, ``session``) with three file
  descriptors (stdin, stdout, stderr) as ``SCM_RIGHTS``;
- the zygote answers ``<pid>\\n`` once it forked, then ``<returncode>\\n`` when it reaped
  the child (a signal's death as ``-<signum>``, as :mod:`subprocess` says it), and closes.

Only this process's children, in this process's own session: the zygote exits when its
worker is gone (its parent changes), and never runs a test's code.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Final, NoReturn

PRELOAD: Final = (
    "appdeck.cli",
    "appdeck.cli.serve",
    "appdeck.app",
    "appdeck.assembly",
    # what it imports as it goes (``python -X importtime``): ~170 ms of every start
    "appdeck.cli.config",
    "appdeck.logs",
    "appdeck.transport.http11",
    "appdeck.observability.timed_redis",
    "appdeck.events.redis_cancels",
    "appdeck.fixtures.conformance",
    "appdeck.prompts.ci",
    "appdeck.prompts.data",
    "appdeck.prompts.deploy",
    "appdeck.prompts.ship",
    "asyncpg",
    "uvloop",
    "uvicorn.main",
)
"""What ``appdeck serve`` imports, before it starts and as it starts."""
PRELOAD_IF_PRESENT: Final = (
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.websockets_sansio_impl",
    "cryptography.hazmat.backends.openssl.backend",
    "typer._adapters",  # typer imports it to build the command line, at every command
)
"""Its dependencies' inner modules it imports as it starts: a release that moves one costs
each child that import again, never the zygote's start."""
MAX_REQUEST: Final = 1 << 20
READY_WITHIN_S: Final = 60.0
"""A bound on the zygote's own start (its imports: ~1.5 s quiet, many at load 15)."""
ROOT: Final = Path(__file__).resolve().parents[2]


# -- the zygote's side ------------------------------------------------------------------------


def _exit_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _child(
    request: dict[str, Any],
    fds: list[int],
    sockets: list[socket.socket],
    raw: list[int],
    ready: int,
) -> NoReturn:
    """In the forked child: become the process the test asked for and run the program. Its
    end is a fresh interpreter's (``SystemExit`` unwinds out of the zygote's loop: atexit
    handlers, non-daemon threads joined, streams flushed); a failure before the program
    runs is reported on its stderr and exits 1. ``ready`` is written once it is that
    process (its session, streams, directory and environment set): only then does the
    worker learn its pid, as ``Popen`` returns only once the new program runs."""
    try:
        for owned in sockets:
            owned.close()
        for fd in raw:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the rest are the interpreter's own
        if request["session"]:
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        from appdeck.__main__ import main

        os.write(ready, b"!")
        os.close(ready)
    except BaseException:
        traceback.print_exc()
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        os._exit(1)
    main()
    raise SystemExit(0)


def _warm_tools() -> None:
    """Every built-in tool family imported and its schemas made (``Tool.fixed``: they come
    from the code alone and are made once per process), as a server start would: ~0.3 CPU-s
    of each start, done once here for every child."""
    from appdeck.tools import families

    for _family, tools in families():
        for tool in tools:
            tool.fixed()


def serve(path: str) -> None:
    """The zygote: import, then fork on request until the worker that started it is gone."""
    from appdeck.tuning import hold_gc

    hold_gc()  # as the command does while it loads; each child's main() manages its own
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_IF_PRESENT:
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(name)
    _warm_tools()
    import gc

    gc.freeze()  # the imports' objects: shared with every child, never copied by a collection
    assert threading.active_count() == 1, "the zygote forks: it must have no other thread"

    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                connection, _ = listener.accept()
                with connection:
                    _fork_one(connection, listener, wake_read, wake_write, waiting)
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
        _reap(waiting)


def _fork_one(
    connection: socket.socket,
    listener: socket.socket,
    wake_read: int,
    wake_write: int,
    waiting: dict[int, socket.socket],
) -> None:
    fds = array.array("i")
    message, ancillary, _, _ = connection.recvmsg(MAX_REQUEST, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    try:
        request = json.loads(message)
        if len(fds) != 3:
            raise ValueError(f"three standard streams expected, got {len(fds)}")
    except ValueError as exc:
        connection.sendall(f"error {exc}\n".encode())
        for fd in fds:
            os.close(fd)
        return
    kept = connection.dup()  # the reply channel outlives this accept's `with`
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        owned = [listener, connection, kept, *waiting.values()]
        _child(request, list(fds), owned, [wake_read, wake_write, ready_read], ready_write)
    os.close(ready_write)
    for fd in fds:
        os.close(fd)
    with contextlib.closing(selectors.DefaultSelector()) as set_up:
        set_up.register(ready_read, selectors.EVENT_READ)
        set_up.select(timeout=READY_WITHIN_S)  # its byte, or EOF: it failed and exits
    os.close(ready_read)
    kept.sendall(f"{pid}\n".encode())
    waiting[pid] = kept


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = waiting.pop(pid, None)
        if reply is not None:
            with reply, contextlib.suppress(OSError):
                reply.sendall(f"{_exit_code(status)}\n".encode())


# -- the worker's side ------------------------------------------------------------------------


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class ForkedProcess:
    """What the tests use of :class:`asyncio.subprocess.Process`, for a zygote's child: its
    pid, its return code once it exited, ``wait``, ``send_signal``, ``terminate``, ``kill``.
    The exit status comes from the zygote (which reaps it) on the process's connection."""

    def __init__(self, pid: int, reply: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._reply = reply
        self._exited = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._waiters_lock = threading.Lock()
        threading.Thread(target=self._read_status, name=f"zygote-{pid}", daemon=True).start()

    def _read_status(self) -> None:
        data = b""
        with self._reply:
            while not data.endswith(b"\n"):
                chunk = self._reply.recv(64)
                if not chunk:
                    break
                data += chunk
        try:
            self.returncode = int(data)
        except ValueError:  # the zygote died: the child's status is lost with it
            self.returncode = -signal.SIGKILL
        with self._waiters_lock:
            self._exited.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, future)

    def wait_blocking(self, timeout: float) -> int | None:
        """The return code once the child ended within ``timeout`` seconds, else None."""
        self._exited.wait(timeout)
        return self.returncode

    async def wait(self) -> int:
        """Until the zygote reported the child's end (the caller bounds the wait)."""
        future = asyncio.get_running_loop().create_future()
        with self._waiters_lock:
            if not self._exited.is_set():
                self._waiters.append((asyncio.get_running_loop(), future))
            else:
                future.set_result(None)
        await future
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:  # reaped children's pids may be another's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The worker's zygote, started on first use (:func:`zygote`)."""

    def __init__(self, env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="zygote-", dir="/tmp")
        self.path = os.path.join(self._dir, "socket")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote", self.path],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + READY_WITHIN_S
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
            self.close()
            raise RuntimeError(f"the zygote did not start within {READY_WITHIN_S:.0f} s")
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            self.close()
            raise RuntimeError(f"the zygote did not start: {line!r}")

    def spawn(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path | str | None,
        stdin: int | None,
        stdout: int,
        stderr: int,
        session: bool,
    ) -> ForkedProcess:
        request = json.dumps(
            {"argv": argv, "env": env, "cwd": str(cwd or os.getcwd()), "session": session}
        ).encode()
        """Fork a child running ``argv`` (``stdin`` None: ``/dev/null``); its pid once it is
        set up."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        nothing = os.open(os.devnull, os.O_RDONLY) if stdin is None else None
        try:
            connection.settimeout(30.0)
            connection.connect(self.path)
            fds = array.array("i", [stdin if nothing is None else nothing, stdout, stderr])
            connection.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = connection.recv(1)
                if not chunk:
                    raise RuntimeError("the zygote closed the connection before forking")
                answer += chunk
            if answer.startswith(b"error"):
                raise RuntimeError(f"the zygote refused: {answer.decode().strip()}")
            connection.settimeout(None)
            return ForkedProcess(int(answer), connection)
        except BaseException:
            connection.close()
            raise
        finally:
            if nothing is not None:
                os.close(nothing)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, input=input, capture_output=True, text=True)`` for an
    ``appdeck`` command, as a fork of this worker's zygote (the output in files, so that no
    pipe fills while nobody reads it)."""
    with (
        tempfile.TemporaryFile() as given,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        given.write((input or "").encode())
        given.seek(0)
        child = zygote(env).spawn(
            argv,
            env=env,
            cwd=cwd,
            stdin=given.fileno(),
            stdout=out.fileno(),
            stderr=err.fileno(),
            session=False,
        )
        if child.wait_blocking(timeout) is None:
            child.kill()
            child.wait_blocking(10.0)
            raise subprocess.TimeoutExpired(argv, timeout)
        assert child.returncode is not None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            argv, child.returncode, out.read().decode(errors="replace"), err.read().decode()
        )


_zygote: Zygote | None = None
_lock = threading.Lock()


def zygote(env: dict[str, str]) -> Zygote:
    """This worker's zygote (started with ``env``, the first caller's: a child's own
    environment is the one it is spawned with), stopped when the worker exits."""
    global _zygote
    with _lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = Zygote(env)
            atexit.register(_zygote.close)
        return _zygote


if __name__ == "__main__":
    serve(sys.argv[1])
