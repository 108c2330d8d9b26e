"""What a release's pods say, in the platform's words: ready or not and why, restarts, the last
exit, a crash loop. Pure: it reads pod objects as the API server returns them (plain dicts).

The words of :func:`why_not_ready` end up in a RolloutFailed ("instance 0 of the new release did
not pass its health check (/healthz): <why>"), so they name what the kubelet saw and nothing
the app wrote: a waiting reason, an exit code, a scheduler message (the scheduler's, about
nodes; never the app's output).
"""

from __future__ import annotations

import signal
from typing import Final

from appdeck.common.types import JsonObject
from appdeck.runtime.driver import InstanceCondition, InstanceStatus

APP: Final = "app"
"""The app's container (the init container is ``source``: :mod:`.pods`)."""
SOURCE: Final = "source"
GIVE_UP_RESTARTS: Final = 5
"""Restarts in CrashLoopBackOff after which the driver reports the release as given up. The
kubelet itself never gives up (it backs off to 5 minutes and retries forever): this is the
platform's line, as the local driver's supervisor has one."""
_PULL: Final = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})
_CONFIG: Final = frozenset({"CreateContainerConfigError", "CreateContainerError"})


def _statuses(pod: JsonObject, key: str) -> list[JsonObject]:
    return list((pod.get("status") or {}).get(key) or [])


def container(pod: JsonObject, name: str = APP) -> JsonObject:
    """The status of container ``name`` (``{}`` before the kubelet reports one)."""
    key = "initContainerStatuses" if name == SOURCE else "containerStatuses"
    return next((c for c in _statuses(pod, key) if c.get("name") == name), {})


def condition(pod: JsonObject, kind: str) -> JsonObject:
    return next((c for c in _statuses(pod, "conditions") if c.get("type") == kind), {})


def terminating(pod: JsonObject) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def ready(pod: JsonObject) -> bool:
    """The pod passes its readiness probe (the app's health check) and is not going away."""
    return condition(pod, "Ready").get("status") == "True" and not terminating(pod)


def restarts(pod: JsonObject) -> int:
    return int(container(pod).get("restartCount") or 0)


def crash_looping(pod: JsonObject) -> bool:
    waiting = (container(pod).get("state") or {}).get("waiting") or {}
    return waiting.get("reason") == "CrashLoopBackOff"


def gave_up(pod: JsonObject, after: int = GIVE_UP_RESTARTS) -> bool:
    """In CrashLoopBackOff with at least ``after`` restarts."""
    return crash_looping(pod) and restarts(pod) >= after


def oom_killed(pod: JsonObject) -> bool:
    """The app container's last run ended by the OOM killer."""
    last = (container(pod).get("lastState") or {}).get("terminated") or {}
    return last.get("reason") == "OOMKilled"


def exit_words(terminated: JsonObject) -> str | None:
    """``status N`` or ``signal NAME`` (as :attr:`InstanceStatus.last_exit`), from a
    ``terminated`` state; a code over 128 is the runtime's 128 + signal."""
    if not terminated:
        return None
    code = terminated.get("exitCode")
    sig = terminated.get("signal")
    if isinstance(sig, int) and sig > 0:
        return f"signal {_signal_name(sig)}"
    if isinstance(code, int) and code > 128:
        return f"signal {_signal_name(code - 128)}"
    return f"status {code}" if isinstance(code, int) else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


def last_exit(pod: JsonObject) -> str | None:
    app = container(pod)
    state = app.get("state") or {}
    last = (app.get("lastState") or {}).get("terminated")
    return exit_words(state.get("terminated") or last or {})


def state(pod: JsonObject) -> InstanceCondition:
    """The pod as :meth:`inspect` reports an instance."""
    app = container(pod)
    now = app.get("state") or {}
    if terminating(pod) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return "stopped"
    if crash_looping(pod):
        return "crash_loop"
    if "running" in now:
        return "running"
    return "restarting" if restarts(pod) else "running"


def instance_status(index: int, pod: JsonObject) -> InstanceStatus:
    return InstanceStatus(
        index=index,
        state=state(pod),
        restarts=restarts(pod),
        last_exit=last_exit(pod),
        oom_kills=1 if oom_killed(pod) else 0,
        started_at=None,
    )


def why_not_ready(pods: list[JsonObject], health_path: str) -> str:
    """Why the release has no ready pod, in words, from its pods' status (the worst first)."""
    if not pods:
        return "no pod of the release exists (the Deployment made none yet)"
    reasons = [_why(pod, health_path) for pod in pods]
    return "; ".join(dict.fromkeys(reasons))


def _why(pod: JsonObject, health_path: str) -> str:
    scheduled = condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        message = str(scheduled.get("message") or scheduled.get("reason") or "")
        return f"unschedulable: {message[:300]}"
    source = container(pod, SOURCE)
    source_state = source.get("state") or {}
    fetched = (source_state.get("terminated") or {}).get("exitCode")
    if fetched not in (None, 0) or (source_state.get("waiting") or {}).get("reason") == (
        "CrashLoopBackOff"
    ):
        last = source_state.get("terminated") or (source.get("lastState") or {}).get("terminated")
        return f"the source fetch (init container) failed: {exit_words(last or {}) or 'no exit'}"
    app = container(pod)
    now = app.get("state") or {}
    waiting = now.get("waiting") or {}
    reason = str(waiting.get("reason") or "")
    if reason == "CrashLoopBackOff":
        last = (app.get("lastState") or {}).get("terminated") or {}
        exited = exit_words(last) or "no exit"
        why = f" ({last['reason']})" if last.get("reason") else ""
        return f"CrashLoopBackOff: restarted {restarts(pod)} times, last exit {exited}{why}"
    if reason in _PULL:
        return f"the base image cannot be pulled ({reason})"
    if reason in _CONFIG:
        return f"the container cannot be created ({reason})"
    if reason:
        return f"waiting: {reason}"
    if "terminated" in now:
        return f"exited: {exit_words(now['terminated']) or 'no exit'}"
    if "running" in now and not ready(pod):
        return f"running, readiness probe failing (GET {health_path})"
    if terminating(pod):
        return "terminating"
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return f"not ready yet (pod {str(phase).lower()})"
