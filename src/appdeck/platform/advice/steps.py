"""What to do next with an app: :func:`advise` is a pure function from a frozen
:class:`~appdeck.platform.advice.state.AppState` to the ordered steps, each an exact tool call.

The rules, in the order their steps come (the first that fires names the ``status``):

    no source (no repo, no source_path) ─▶ connect_repo connect            needs_source
    no run_command (not static)         ─▶ set_app_spec run_command        needs_run_command
        (either of the two: nothing else, a deploy cannot start yet)
    stopped by its operator             ─▶ restart_app start                stopped
    a deployment in progress            ─▶ list_deployments (follow it)     deploying
        (nothing else: a deploy or restart would be refused while it runs)
    the newest deployment failed        ─▶ tail_deploy_logs of it           deploy_failed
    the last CI run is red              ─▶ manage_ci logs of the run        ci_failed
        and the live release runs that commit ─▶ rollback_deploy (when one can come back)
    a CI run is queued or running       ─▶ manage_ci runs (follow it)       testing
    nothing live, nothing failed        ─▶ preflight_check, deploy_app      not_deployed
        (require_green without a green run of the head ─▶ manage_ci trigger instead)
    the branch moved past the live one  ─▶ deploy_app (or manage_ci trigger) behind
    env changed since the live release  ─▶ restart_app (unless a deploy is suggested) needs_restart
    the API catalogue found no API      ─▶ discover_apis (issue 12's port says so)
    nothing of the above                ─▶ get_app_url: nothing urgent      ok
    a repository but no CI              ─▶ manage_ci configure (an improvement, last)
        (improvements only when there is nothing to fix or wait for)

A step the caller's token scopes or role on the app cannot call is never suggested: it is
counted in ``withheld`` instead (a viewer gets read-only steps). Placeholders the caller must
fill in are written ``<like this>`` and named in the step's ``fill_in``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from appdeck.platform.advice.state import AppState, Caller, short
from appdeck.platform.deploy import states

Kind = Literal["fix", "wait", "setup", "ship", "check", "improve"]
KIND_RANK: Final[dict[str, int]] = {
    k: i for i, k in enumerate(("fix", "wait", "setup", "ship", "check", "improve"))
}
MAX_STEPS: Final = 6
DID_NOT_STICK: Final = frozenset({states.FAILED, states.ROLLED_BACK})

NEEDS: Final[dict[tuple[str, str | None], tuple[tuple[str, ...], str | None]]] = {
    # (tool, action): (the token scopes, the role action on the app; None: none)
    ("connect_repo", "connect"): (("repos:write",), "repo.connect"),
    ("set_app_spec", None): (("apps:write",), "spec.write"),
    ("list_deployments", None): (("deploy:read",), "deploy.read"),
    ("tail_deploy_logs", None): (("deploy:read",), "deploy.read"),
    ("preflight_check", None): (("deploy:read",), "deploy.read"),
    ("deploy_app", None): (("deploy:write",), "deploy.write"),
    ("rollback_deploy", None): (("deploy:write",), "deploy.write"),
    ("restart_app", None): (("deploy:write",), "deploy.write"),
    ("restart_app", "start"): (("deploy:write",), "deploy.write"),
    ("get_app_url", None): (("apps:read",), "app.read"),
    ("register_app", None): (("apps:write",), None),
    ("manage_ci", "configure"): (("apps:read", "apps:write"), "ci.manage"),
    ("manage_ci", "trigger"): (("apps:read", "apps:write"), "ci.manage"),
    ("manage_ci", "runs"): (("apps:read",), "app.read"),
    ("manage_ci", "logs"): (("apps:read",), "app.read"),
    ("discover_apis", None): (("apis:write",), "api.test"),
}
"""What calling each suggested tool takes. tests/platform/advice/test_steps.py checks it
against the tools' own scopes in the registry."""


@dataclass(frozen=True, slots=True)
class Step:
    tool: str
    arguments: Mapping[str, Any]
    why: str
    kind: Kind
    fill_in: tuple[str, ...] = ()
    """Arguments holding a ``<placeholder>`` (or an example) the caller replaces first."""

    @property
    def key(self) -> tuple[str, str | None]:
        action = self.arguments.get("action")
        return (self.tool, action if isinstance(action, str) else None)


@dataclass(frozen=True, slots=True)
class Advice:
    status: str
    summary: str
    steps: tuple[Step, ...]
    withheld: int = 0
    """Steps left out because the caller's token or role cannot call them."""

    @property
    def urgent(self) -> bool:
        return any(s.kind == "fix" for s in self.steps)


@dataclass
class _Plan:
    state: AppState
    steps: list[Step] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    shipping: bool = False
    """A deploy (or the run that leads to one) is among the steps."""

    @property
    def calm(self) -> bool:
        """Nothing to fix or wait for: room for improvements."""
        return not any(x.kind in ("fix", "wait") for x in self.steps)

    def add(self, status: str | None, *steps: Step) -> None:
        if status is not None and steps:
            self.statuses.append(status)
        self.steps.extend(steps)


def advise(state: AppState) -> Advice:
    """The ordered next steps for one app (see the module docstring for the rules)."""
    plan = _Plan(state)
    for rule in _RULES:
        if rule(plan):
            break
    status = plan.statuses[0] if plan.statuses else "ok"
    return _finish(state.caller, status, plan.steps)


def advise_account(caller: Caller, apps: Iterable[tuple[int, Advice]], *, empty: bool) -> Advice:
    """The first step of each app that needs one (status not ok), the urgent ones first (then
    by app id); an account without apps is told to register one. The apps' steps were
    filtered by the caller's role on each app already."""
    found = list(apps)
    firsts = [(app_id, a.steps[0]) for app_id, a in found if a.steps and a.status != "ok"]
    firsts.sort(key=lambda pair: (KIND_RANK[pair[1].kind], pair[0]))
    steps = [step for _, step in firsts]
    withheld = sum(a.withheld for _, a in found if a.status != "ok" and not a.steps)
    if empty:
        register = Step(
            "register_app",
            {"name": "my-app"},
            "You have no app yet: register one (then connect_repo to deploy from git).",
            "setup",
            fill_in=("name",),
        )
        if caller.may(*NEEDS[register.key]):
            steps.append(register)
        else:
            withheld += 1
    status = "no_apps" if empty else ("needs_attention" if firsts else "ok")
    return Advice(status, _summary(status, withheld), tuple(steps), withheld)


def _finish(caller: Caller, status: str, steps: list[Step]) -> Advice:
    allowed = [s for s in steps if caller.may(*NEEDS[s.key])]
    withheld = len(steps) - len(allowed)
    return Advice(status, _summary(status, withheld), tuple(allowed[:MAX_STEPS]), withheld)


SUMMARIES: Final[dict[str, str]] = {
    "needs_source": "The app has no source yet: connect a repository.",
    "needs_run_command": "The app's spec does not say how to run it.",
    "deploying": "A deployment is in progress.",
    "stopped": "The app is stopped: no instance runs, its URL answers 503.",
    "deploy_failed": "The newest deployment did not go live.",
    "ci_failed": "The last CI run is red.",
    "testing": "A CI run is under way.",
    "not_deployed": "The app is ready and has never been deployed.",
    "behind": "The live release is behind the repository's branch.",
    "needs_restart": "Env vars changed since the live release started.",
    "ok": "Nothing urgent.",
    "no_apps": "You have no app yet.",
    "needs_attention": "Some apps have steps to take.",
}


def _summary(status: str, withheld: int) -> str:
    text = SUMMARIES[status]
    if withheld:
        text += (
            f" {withheld} step(s) need a role or token scope you lack: ask an owner or admin "
            "of the app."
        )
    return text


# -- the rules (each returns True when nothing after it applies) ---------------------------


def _setup(plan: _Plan) -> bool:
    s = plan.state
    if s.repo is None and not s.has_source_path:
        plan.add(
            "needs_source",
            Step(
                "connect_repo",
                {"action": "connect", "app_id": s.app_id, "url": "<your repo URL>"},
                "The app has no source: connect its git repository (or set_app_spec "
                "spec.source_path to a folder under your source roots).",
                "setup",
                fill_in=("url",),
            ),
        )
    if s.runtime != "static" and not s.has_run_command:
        plan.add(
            "needs_run_command",
            Step(
                "set_app_spec",
                {"app_id": s.app_id, "spec": {"run_command": "<the command serving $PORT>"}},
                "The spec has no run_command: say how the app serves HTTP on $PORT.",
                "setup",
                fill_in=("spec.run_command",),
            ),
        )
    return bool(plan.steps)


def _stopped(plan: _Plan) -> bool:
    s = plan.state
    if not s.stopped:
        return False
    plan.add(
        "stopped",
        Step(
            "restart_app",
            {"app_id": s.app_id, "action": "start"},
            "The app was stopped on purpose (its data is kept); deploys, rollbacks and "
            "restarts are refused until it is started again.",
            "check",
        ),
    )
    return True


def _deploying(plan: _Plan) -> bool:
    s = plan.state
    if s.newest is None or s.newest.state not in states.IN_PROGRESS:
        return False
    plan.add(
        "deploying",
        Step(
            "list_deployments",
            {"app_id": s.app_id},
            f"Deployment #{s.newest.number} is {s.newest.state}: follow it until it is live "
            "or failed before changing anything.",
            "wait",
        ),
    )
    return True


def _failed(plan: _Plan) -> bool:
    s, newest = plan.state, plan.state.newest
    if newest is None or newest.state not in DID_NOT_STICK:
        return False
    if newest.state == states.ROLLED_BACK and newest.went_live:
        return False  # a rollback past a release that ran: someone's choice, not a failure
    kind = "runtime" if newest.started else "build"
    serving = f"release #{s.live.number} keeps serving" if s.live else "nothing is live"
    plan.add(
        "deploy_failed",
        Step(
            "tail_deploy_logs",
            {"app_id": s.app_id, "number": newest.number, "kind": kind},
            f"Deployment #{newest.number} ended {newest.state} ({serving}): its {kind} log "
            "says why; fix it, then deploy again.",
            "fix",
        ),
    )
    return False


def _ci_red(plan: _Plan) -> bool:
    s, ci = plan.state, plan.state.ci
    if ci is None or not ci.red or ci.last_run_number is None:
        return False
    commit = short(ci.last_run_commit)
    gate = " require_green blocks deploying it." if ci.require_green else ""
    plan.add(
        "ci_failed",
        Step(
            "manage_ci",
            {"action": "logs", "app_id": s.app_id, "number": ci.last_run_number},
            f"CI run #{ci.last_run_number} of {commit} ended {ci.last_run_state}: its log "
            f"shows which test failed.{gate}",
            "fix",
        ),
    )
    live = s.live
    if live is not None and live.commit == ci.last_run_commit and s.can_roll_back:
        plan.add(
            None,
            Step(
                "rollback_deploy",
                {"app_id": s.app_id},
                f"The live release #{live.number} runs {commit}, whose tests failed: roll "
                "back to the release before it.",
                "fix",
            ),
        )
    return False


def _testing(plan: _Plan) -> bool:
    s, ci = plan.state, plan.state.ci
    if ci is None or not ci.running:
        return False
    plan.shipping = True  # the run decides what ships next
    plan.add(
        "testing",
        Step(
            "manage_ci",
            {"action": "runs", "app_id": s.app_id},
            f"CI run #{ci.last_run_number} of {short(ci.last_run_commit)} is "
            f"{ci.last_run_state}: follow it"
            + (" (a green run deploys itself)." if ci.auto_deploy else "."),
            "wait",
        ),
    )
    return False


def _ship(plan: _Plan) -> bool:
    if plan.shipping:
        return False
    s = plan.state
    if s.live is None:
        return _first_deploy(plan)
    if s.repo is None:
        return False
    head = s.repo.last_commit
    if (head is None and s.live.commit is not None) or (head is not None and s.live.commit == head):
        return False  # nothing newer known, or the head is live
    if _blocked(plan, head) or _failed_at(s, head):
        return False
    plan.shipping = True
    moved = f"The branch is at {short(head)}" if head else "The app now deploys from its repo"
    plan.add(
        "behind",
        _ship_step(
            plan,
            head,
            f"{moved}; the live release #{s.live.number} runs "
            f"{short(s.live.commit) if s.live.commit else 'a folder on the server'}: deploy it.",
        ),
    )
    return False


def _first_deploy(plan: _Plan) -> bool:
    s = plan.state
    head = s.repo.last_commit if s.repo is not None else None
    if (s.newest is not None and s.newest.state in DID_NOT_STICK) or _blocked(plan, head):
        return False
    plan.shipping = True
    plan.add(
        "not_deployed",
        Step(
            "preflight_check",
            {"app_id": s.app_id},
            "Nothing is live yet: check the app is ready to deploy.",
            "check",
        ),
        _ship_step(plan, head, "Then deploy it; the ingress serves it once it is live."),
    )
    return False


def _failed_at(s: AppState, head: str | None) -> bool:
    """Whether the newest deployment, of the head itself, did not go live (deploying it again
    would fail again: the failure rule points at its log)."""
    newest = s.newest
    return newest is not None and newest.state in DID_NOT_STICK and newest.commit == head


def _blocked(plan: _Plan, head: str | None) -> bool:
    """Whether CI already said no to the head (a red run of it: the red rule points at it)."""
    ci = plan.state.ci
    return ci is not None and ci.red and head is not None and ci.last_run_commit == head


def _ship_step(plan: _Plan, head: str | None, why: str) -> Step:
    s, ci = plan.state, plan.state.ci
    if ci is not None and ci.require_green and not ci.green_for(head):
        return Step(
            "manage_ci",
            {"action": "trigger", "app_id": s.app_id},
            f"require_green: run the tests of {short(head)} first"
            + ("; a green run deploys it." if ci.auto_deploy else ", then deploy_app."),
            "ship",
        )
    return Step("deploy_app", {"app_id": s.app_id}, why, "ship")


def _restart(plan: _Plan) -> bool:
    s = plan.state
    if s.needs_restart and s.live is not None and not plan.shipping:
        plan.add(
            "needs_restart",
            Step(
                "restart_app",
                {"app_id": s.app_id},
                f"Env vars changed since release #{s.live.number} started: restart it "
                "(instance by instance) to apply them.",
                "ship",
            ),
        )
    return False


def _apis(plan: _Plan) -> bool:
    s = plan.state
    if s.apis == "none" and s.live is not None and plan.calm:
        plan.add(
            None,
            Step(
                "discover_apis",
                {"app_id": s.app_id},
                "No API of the app is catalogued yet: discover its OpenAPI documents.",
                "improve",
            ),
        )
    return False


def _all_good(plan: _Plan) -> bool:
    s = plan.state
    if s.live is not None and plan.calm and not any(x.kind == "ship" for x in plan.steps):
        plan.steps.insert(
            0,
            Step(
                "get_app_url",
                {"app_id": s.app_id},
                f"Nothing urgent: release #{s.live.number} is live; here is where it answers.",
                "check",
            ),
        )
    return False


def _ci_missing(plan: _Plan) -> bool:
    s = plan.state
    if s.repo is not None and s.ci is None and plan.calm:
        plan.add(
            None,
            Step(
                "manage_ci",
                {
                    "action": "configure",
                    "app_id": s.app_id,
                    "test_command": "<your test command>",
                    "auto_deploy": True,
                    "require_green": True,
                },
                "Later: run the tests of every push, deploy green commits, block red ones.",
                "improve",
                fill_in=("test_command",),
            ),
        )
    return False


_RULES: Final[tuple[Callable[[_Plan], bool], ...]] = (
    _setup,
    _stopped,
    _deploying,
    _failed,
    _ci_red,
    _testing,
    _ship,
    _restart,
    _apis,
    _all_good,
    _ci_missing,
)
