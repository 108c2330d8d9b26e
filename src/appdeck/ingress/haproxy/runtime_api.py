"""A client of HAProxy's runtime API (its stats socket, or the master socket): one command per
connection, the answer read to EOF.

    api = RuntimeApi(Path("/run/appdeck/<install>/haproxy.sock"))
    master = RuntimeApi(Path("/run/appdeck/<install>/haproxy-master.sock"), master=True)
    await api.command("set server be_blog--acme/r7-0 weight 90")
    await api.command("set ssl cert /x/a.pem", payload=pem_text)   # ``<<`` payload syntax

HAProxy answers errors in text (there is no status): :meth:`RuntimeApi.command` raises
:class:`RuntimeApiError` on the known error shapes, so a caller never mistakes a refusal for
success. Commands are built by the driver from validated values only: a value from a client
never reaches a command line unchecked (a newline there would be a second command).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

TIMEOUT_S: Final = 20.0
"""A bound on one command: a healthy HAProxy answers in microseconds, but a 2-core machine at
load 14 starved one for over 5 s (issue 20); only a hung one comes near this."""
BATCH: Final = 200
"""Commands :meth:`RuntimeApi.commands` sends on one connection (HAProxy reads a request line
of up to its buffer size, 64 KiB here: 200 ``set server`` lines are ~16 KiB)."""
MAX_ANSWER: Final = 64 * 1024 * 1024
"""``show stat`` of a big config stays far below this."""
_REFUSAL: Final = re.compile(
    r"(unknown command|unknown|no such|can't|cannot|require[sd]?|invalid|failed|unable"
    r"|permission denied|error|missing|this command|not enough|too many|wrong)(?=[\s.:,!']|$)"
    r"|'[a-z -]{1,40}' (expects|only)\b"
    r"|[a-z]{1,20}( [a-z]{1,20}){0,3} not found(?=[\s.:,!]|$)",
    re.IGNORECASE,
)
"""HAProxy's refusals, by how their first line *starts* (``No such server.``, ``Unknown
command``, ``'set map' expects...``, ``Entry not found.``). Never a word anywhere in the line:
answers echo names back (``get map`` says ``key="error-pages.example.com"``), and a tenant's
hostname or route is no refusal."""


class RuntimeApiError(RuntimeError):
    """HAProxy refused a command, or could not be reached."""


def _check_line(line: str) -> None:
    if "\n" in line or "\r" in line or "\x00" in line or ";" in line:
        raise ValueError("a runtime API command is one line without ';' or NUL")


class RuntimeApi:
    def __init__(
        self, socket_path: Path, *, master: bool = False, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.socket_path = socket_path
        self.master = master
        """The master socket (``-S``) keeps a connection open until ``quit``."""
        self.timeout_s = timeout_s

    async def raw(self, line: str, payload: str | None = None, *, checked: bool = False) -> str:
        """Send one command and return HAProxy's answer, whatever it says (``checked``: the
        line is already known safe, several commands joined by :meth:`commands`)."""
        if not checked:
            _check_line(line)
        text = line + "\n"
        if payload is not None:
            if "\n\n" in payload.strip("\n") or "\x00" in payload:
                raise ValueError("a payload has no empty line and no NUL")
            text = f"{line} <<\n{payload.strip(chr(10))}\n\n"
        if self.master:
            text += "quit\n"
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_unix_connection(
                    str(self.socket_path), limit=MAX_ANSWER
                )
                try:
                    writer.write(text.encode())
                    await writer.drain()
                    data = await reader.read(MAX_ANSWER)
                    chunks = [data]
                    while data:
                        data = await reader.read(MAX_ANSWER)
                        chunks.append(data)
                finally:
                    writer.close()
        except (OSError, TimeoutError) as exc:
            raise RuntimeApiError(f"HAProxy's runtime API did not answer: {exc}") from exc
        return b"".join(chunks).decode(errors="replace")

    async def command(self, line: str, payload: str | None = None) -> str:
        """Send one command; :class:`RuntimeApiError` when HAProxy's answer is an error."""
        answer = await self.raw(line, payload)
        if refused(answer):
            raise RuntimeApiError(f"{line.split(' ', 3)[:3]}: {answer.strip()[:300]}")
        return answer

    async def commands(self, lines: Sequence[str]) -> None:
        """Send commands that answer nothing when they succeed (``set server … weight``)
        on one connection, ``;``-separated (at most :data:`BATCH` a time);
        :class:`RuntimeApiError` when HAProxy answered any of them."""
        for start in range(0, len(lines), BATCH):
            batch = lines[start : start + BATCH]
            for line in batch:
                _check_line(line)
            answer = await self.raw("; ".join(batch), checked=True)
            said = [line for line in answer.splitlines() if line.strip()]
            if said:
                raise RuntimeApiError(f"{len(batch)} commands: {said[0].strip()[:300]}")

    async def asked_then(self, first: str, lines: Sequence[str]) -> tuple[str, list[str]]:
        """``first`` (a command answering one block with no empty line inside: ``show
        info``), then silent ``lines`` as :meth:`commands` sends them, on one connection
        (more than :data:`BATCH` go on in further ones): ``first``'s answer, and what the
        silent ones said, line by line (nothing: every one was applied). HAProxy ends each
        command's answer with an empty line, so a silent command that succeeded answers
        ``"\\n"`` alone. The caller judges what they said; a refused ``first`` raises."""
        _check_line(first)
        batch = list(lines[: BATCH - 1])
        for line in batch:
            _check_line(line)
        answer = await self.raw("; ".join([first, *batch]), checked=True)
        head, _, rest = answer.partition("\n\n")
        if refused(head):
            raise RuntimeApiError(f"{first.split(' ', 3)[:3]}: {head.strip()[:300]}")
        said = [line for line in rest.splitlines() if line.strip()]
        answers = rest.count("\n")
        if not said and answers != len(batch):  # a silent command left unanswered
            said = [f"{len(batch)} commands, {answers} answers"]
        if not said and len(lines) > len(batch):
            try:
                await self.commands(lines[len(batch) :])
            except RuntimeApiError as exc:
                said = [str(exc)]
        return head, said


def refused(answer: str) -> bool:
    """Whether HAProxy's ``answer`` is one of its refusals (judged by its first line's start)."""
    head = answer.strip().splitlines()[0] if answer.strip() else ""
    return _REFUSAL.match(head) is not None
