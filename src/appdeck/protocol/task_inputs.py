"""Input during a stateless task (the tasks extension of MCP 2026-07-28).

A 2026-07-28 server sends the client no requests. When a task's handler needs the client
(an elicitation, a sampling), the task moves to ``input_required`` and ``tasks/get`` shows the
requests as ``inputRequests``; the client answers with ``tasks/update`` on any replica.

Both sides meet in the shared :class:`~appdeck.protocol.ports.TaskStore` (one row per
request, the first answer stands), so the replica that runs the task and the one that hears
the answer need not be the same. The answering replica rings the task's doorbell
(:meth:`TaskManager.ring`, a broadcast); the worker also re-reads the store every
:data:`POLL_SECONDS`, as the broadcast is at most once.

Keys are minted here (``<caller's key>-<random>``): unique over the task's life, whatever
the handler calls its questions, so an answer to an earlier question can never be mistaken
for one to a later question with the same name.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from typing import Any, Final

import orjson

from appdeck.common.errors import Unavailable
from appdeck.common.identity import Principal
from appdeck.protocol.errors import InvalidParams
from appdeck.protocol.task_model import INPUT_REQUIRED, WORKING, Task
from appdeck.protocol.tasks import TaskManager

JsonObject = dict[str, Any]

POLL_SECONDS: Final = 1.0
"""The worker's backstop re-read of the store while it waits for answers."""
INPUT_TIMEOUT: Final = 3600.0
"""How long a task waits for its client's answers before it gives up (the tool sees
:class:`Unavailable`)."""
MAX_RESPONSES: Final = 64
"""Answers one ``tasks/update`` may carry."""
MAX_KEY: Final = 128
MAX_RESPONSE_BYTES: Final = 65_536
"""One answer's size as compact JSON."""
ELICIT_ACTIONS: Final = frozenset({"accept", "decline", "cancel"})


def _mint(key: str) -> str:
    stem = "".join(c for c in key[:40] if c.isalnum() or c in "_.") or "input"
    return f"{stem}-{secrets.token_urlsafe(6)}"


async def ask_through_task(
    manager: TaskManager,
    task: Task,
    requests: dict[str, JsonObject],
    *,
    patience: float = INPUT_TIMEOUT,
) -> dict[str, JsonObject]:
    """Ask the client of a stateless ``task`` (``requests``: ``key -> {method, params}``) and
    wait for every answer; returns ``key -> the client's result``.

    The requests are stored before the task says ``input_required`` (a ``tasks/get`` that
    sees the status sees them); the task goes back to ``working`` once none of its requests
    is pending (several handlers' questions may be open at once)."""
    if not requests:
        return {}
    names = {_mint(key): key for key in requests}
    await manager.store.ask(
        task.task_id, {wire: requests[key] for wire, key in names.items()}, time.time()
    )
    if task.status == WORKING:
        await manager.transition(task, INPUT_REQUIRED, "Waiting for the client's input")
    try:
        async with asyncio.timeout(patience), manager.doorbell(task.task_id) as rung:
            while True:
                pending, answers = await manager.store.inputs(task.task_id)
                if all(wire in answers for wire in names):
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(POLL_SECONDS):
                        await rung.wait()
                rung.clear()
    except TimeoutError:
        raise Unavailable("the client did not answer the task's input requests in time") from None
    if not pending and task.status == INPUT_REQUIRED:
        await manager.transition(task, WORKING)
    return {key: answers[wire] for wire, key in names.items()}


async def answer_task(
    manager: TaskManager, principal: Principal, task_id: object, responses: object
) -> None:
    """``tasks/update``: store the caller's answers to its task's pending requests, then wake
    the worker wherever it runs. Unknown and already answered keys are ignored, a subset is
    fine; an answer to a pending request must be shaped like that request's result."""
    if not isinstance(responses, dict):
        raise InvalidParams("tasks/update: params.inputResponses must be an object")
    if len(responses) > MAX_RESPONSES:
        raise InvalidParams(f"tasks/update: at most {MAX_RESPONSES} inputResponses at once")
    task = await manager.get(principal, task_id)  # the caller's task, else -32602
    if task.terminal:
        return
    pending, _ = await manager.store.inputs(task.task_id)
    fresh: dict[str, JsonObject] = {}
    for key, response in responses.items():
        request = pending.get(key) if isinstance(key, str) and len(key) <= MAX_KEY else None
        if request is None:
            continue  # not asked, or answered already: ignored
        _check(key, request, response)
        fresh[key] = response
    if fresh and await manager.store.answer(task.task_id, fresh, time.time()):
        await manager.ring(task.task_id)


def _check(key: str, request: JsonObject, response: object) -> None:
    """Refuse an answer that cannot be the result of ``request`` (-32602)."""
    if not isinstance(response, dict):
        raise InvalidParams(f"tasks/update: inputResponses.{key} must be an object")
    try:
        size = len(orjson.dumps(response))
    except TypeError:  # nested past orjson's limit (the stdlib's dump would recurse to a 500)
        raise InvalidParams(f"tasks/update: inputResponses.{key} nests too deeply") from None
    if size > MAX_RESPONSE_BYTES:
        raise InvalidParams(f"tasks/update: inputResponses.{key} is too large")
    if request.get("method") == "elicitation/create":
        if response.get("action") not in ELICIT_ACTIONS:
            raise InvalidParams(
                f"tasks/update: inputResponses.{key}.action must be accept, decline or cancel"
            )
        content = response.get("content")
        if content is not None and not isinstance(content, dict):
            raise InvalidParams(f"tasks/update: inputResponses.{key}.content must be an object")


def pending_requests(pending: dict[str, JsonObject]) -> dict[str, JsonObject]:
    """The ``inputRequests`` of a DetailedTask: each pending request as the client reads it."""
    return {
        key: {"method": request.get("method"), "params": request.get("params") or {}}
        for key, request in pending.items()
    }
