"""``workspace_tar``: a built release's workspace as a tar stream, for a pod to fetch.

The Kubernetes driver runs a release from the base image with the workspace the local
driver's ``prepare`` built (docs/kubernetes.md, "Source delivery"); this is how it leaves the
host. :mod:`.tarball` makes the tar inside the app's sandbox, as the app's uid, with the
workspace read-only at ``/source`` (as :mod:`.build`'s copy reads a source): root reads none
of it. Its first line says the tar's exact size, so a workspace over the limit is refused
before a byte is sent, and the stream is checked against that size to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final

from appdeck.common.errors import InvalidArgument, QuotaExceeded, Unavailable
from appdeck.common.spawn import spawn
from appdeck.runtime import tarball
from appdeck.runtime.core import DriverCore
from appdeck.runtime.model import check_release_id
from appdeck.runtime.procs import kill_tree
from appdeck.runtime.sandbox import root_env
from appdeck.runtime.workspace import open_dir_nofollow, remove_tree

MAX_ENTRIES: Final = 200_000
"""Files, directories and links in one workspace's tar (a ``.venv`` holds thousands)."""
HEAD_TIMEOUT_S: Final = 120.0
"""How long the scan may take before the first byte (a big ``node_modules`` is a long walk)."""
READ_TIMEOUT_S: Final = 60.0
"""How long the stream may stall between two chunks."""
CHUNK: Final = 256 * 1024
_TAR_CODE: Final = (
    Path(tarball.__file__).read_text() + "\nimport sys\nraise SystemExit(main(sys.argv[1:]))\n"
)


class WorkspaceTar:
    """One tar being made: its exact ``size``, then :meth:`chunks`; :meth:`aclose` always
    (it ends the process and removes its scratch directory)."""

    def __init__(
        self, process: asyncio.subprocess.Process, size: int, entries: int, scratch: Path | None
    ) -> None:
        self.process = process
        self.size = size
        self.entries = entries
        self._scratch = scratch
        self.on_close: Callable[[], None] | None = None
        """Called once, by the first :meth:`aclose` (the server's count of open tars)."""

    async def chunks(self) -> AsyncIterator[bytes]:
        """The tar, exactly :attr:`size` bytes; :class:`Unavailable` when it ends otherwise
        (a file changed while read): the reader must then drop what it got."""
        assert self.process.stdout is not None
        sent = 0
        while sent < self.size:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    chunk = await self.process.stdout.read(min(CHUNK, self.size - sent))
            except TimeoutError:
                raise Unavailable("the workspace's tar stalled") from None
            if not chunk:
                raise Unavailable("the workspace changed while its tar was made")
            sent += len(chunk)
            yield chunk
        async with asyncio.timeout(READ_TIMEOUT_S):
            code = await self.process.wait()
        if code != 0:
            raise Unavailable("the workspace's tar ended with an error")

    async def aclose(self) -> None:
        """End the process and remove the scratch directory, both before the first await: a
        client that hangs up cancels the response, and a cancelled task may get no further
        (the scratch directory is empty: removing it is quick)."""
        if self.process.returncode is None:
            kill_tree(self.process.pid)
        if self._scratch is not None:
            remove_tree(self._scratch)
            self._scratch = None
        done, self.on_close = self.on_close, None
        if done is not None:
            done()
        # wait() also waits for the stdout pipe to be seen closed, which a reader paused by a
        # full buffer (a reader that stopped reading) never sees: what the killed process left
        # in it (its buffer and the pipe's, at most) is read and dropped first
        stdout = self.process.stdout
        with contextlib.suppress(Exception):
            async with asyncio.timeout(READ_TIMEOUT_S):
                while stdout is not None and await stdout.read(CHUNK):
                    pass
        with contextlib.suppress(ProcessLookupError, TimeoutError):
            async with asyncio.timeout(READ_TIMEOUT_S):
                await self.process.wait()


class ExportMixin(DriverCore):
    """``workspace_tar``: a built release's workspace, tarred in its sandbox."""

    async def workspace_tar(self, release_id: str, max_bytes: int) -> WorkspaceTar | None:
        """The tar of ``release_id``'s built workspace; None when this driver has no built
        workspace of it (unknown, never built, or its build failed). Over ``max_bytes``:
        :class:`QuotaExceeded`, before any byte."""
        check_release_id(release_id)
        state = self._existing(release_id)
        if state is None or not (state.directory / "built.json").is_file():
            return None
        workspace = state.workspace
        if not workspace.is_dir():
            return None
        app_id = int(state.directory.parent.parent.name)
        limits = [str(max_bytes), str(MAX_ENTRIES)]
        scratch: Path | None = None
        source_fd: int | None = None
        if self.sandbox is None:  # one-tenant development: the server's user reads it
            argv = [sys.executable, "-I", "-S", "-c", _TAR_CODE, str(workspace), *limits]
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
        else:
            uid = self.sandbox.uid_for(app_id)
            scratch = state.directory / f"export.{secrets.token_hex(6)}"
            os.mkdir(scratch, mode=0o700)  # the sandbox's /app: empty, the app's own
            os.chown(scratch, uid, uid)
            source_fd = open_dir_nofollow(workspace)
            argv = self.sandbox.wrap(
                ["python3", "-I", "-S", "-c", _TAR_CODE, "/source", *limits],
                app_id=app_id,
                own_network=True,
                workspace=scratch,
                source_fd=source_fd,
            )
            env = root_env()
        try:
            process = await spawn(
                *argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,  # it quotes tenant file names: never logged
                pass_fds=() if source_fd is None else (source_fd,),
            )
        except BaseException:
            if scratch is not None:
                await asyncio.to_thread(remove_tree, scratch)
            raise
        finally:
            if source_fd is not None:
                os.close(source_fd)
        tar = WorkspaceTar(process, 0, 0, scratch)
        try:
            assert process.stdout is not None
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                line = await process.stdout.readline()
            head = json.loads(line)
            if "error" in head:
                refused = QuotaExceeded if head["error"] == "quota" else InvalidArgument
                raise refused(f"release {release_id}: {head.get('message')}")
            tar.size, tar.entries = int(head["size"]), int(head["entries"])
        except (TimeoutError, ValueError, KeyError, TypeError):
            await tar.aclose()
            raise Unavailable(f"the workspace of release {release_id} could not be read") from None
        except BaseException:
            await tar.aclose()
            raise
        return tar
