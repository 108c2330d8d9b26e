"""Operator ceilings and tenant quotas: how much an app and a tenant may ask for.

Two kinds of limit, two error codes:

- a **ceiling** bounds one app's spec (memory, CPUs and processes per instance, instances per
  app, disk per app). A spec beyond one is ``invalid_argument``: no spec that asks for it
  can ever be accepted here, whatever else the tenant runs.
- a **quota** bounds the sum over a tenant's apps (memory, instances, disk; the number of apps
  is ``max_apps_per_tenant``, checked where an app is inserted). A spec beyond one is
  ``quota_exceeded`` with what the tenant holds: it may pass once other apps shrink or go.

What counts against a quota: for each of the tenant's apps, the larger of its spec and the
frozen specs of its live and in-progress deployments (a spec lowered after a deploy does not
free what the running release still holds, until it is replaced). Memory counts
``instances x memory_mb``; disk counts ``disk_mb`` once per app. The check runs in the same
database transaction as the write of the spec, serialized per tenant
(:meth:`appdeck.storage.apps.AppStore.update_spec`): of two concurrent calls that together
go beyond a quota, exactly one passes. Each error names the ``APPDECK_*`` setting that raises
the limit. The policy is written down for operators in ``docs/sandbox.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from appdeck.common.errors import InvalidArgument, QuotaExceeded
from appdeck.model import specs

HINT_OPERATOR: Final = "ask the operator to raise {setting}"


@dataclass(frozen=True, slots=True)
class Limits:
    """The operator's ceilings per app and quotas per tenant (the ``APPDECK_*`` settings of
    the same names; defaults fit a shared 2-core, 24 GiB host)."""

    max_instance_memory_mb: int = 2048
    max_instance_cpus: float = 2.0
    max_instance_pids: int = 512
    max_instances_per_app: int = 4
    max_app_disk_mb: int = 1024
    tenant_memory_mb: int = 8192
    tenant_instances: int = 16
    tenant_disk_mb: int = 8192
    app_disk_mb: int = specs.DEFAULT_DISK_MB
    """``APPDECK_APP_DISK_MB``: an app's disk when its spec does not say."""

    @property
    def default_disk_mb(self) -> int:
        """``resources.disk_mb`` when a spec does not say: ``APPDECK_APP_DISK_MB`` (1 GiB),
        at most the ceiling."""
        return min(self.app_disk_mb, self.max_app_disk_mb)


@dataclass(frozen=True, slots=True)
class Usage:
    """What one app (or a tenant, summed) holds against the quotas."""

    memory_mb: int = 0
    instances: int = 0
    disk_mb: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.memory_mb + other.memory_mb,
            self.instances + other.instances,
            self.disk_mb + other.disk_mb,
        )

    @classmethod
    def larger(cls, usages: Iterable[Usage]) -> Usage:
        """Field by field, the largest (an app's spec against its running releases)."""
        found = list(usages) or [cls()]
        return cls(
            max(u.memory_mb for u in found),
            max(u.instances for u in found),
            max(u.disk_mb for u in found),
        )


def usage(spec: Mapping[str, Any], *, disk_default: int = specs.DEFAULT_DISK_MB) -> Usage:
    """What a spec (stored, perhaps before a field existed) holds against the quotas."""
    # read with the defaults, not through specs.complete: this runs for every app of the
    # tenant inside the write transaction (a deep copy each was 0.6 ms per app)
    defaults = specs.DEFAULTS["resources"]
    resources = spec.get("resources")
    resources = resources if isinstance(resources, Mapping) else {}
    instances = int(spec.get("instances") or specs.DEFAULTS["instances"])
    memory = int(resources.get("memory_mb") or defaults["memory_mb"])
    return Usage(instances * memory, instances, int(resources.get("disk_mb") or disk_default))


def check_ceilings(spec: Mapping[str, Any], limits: Limits) -> None:
    """Raise :class:`InvalidArgument` naming the first ceiling ``spec`` (complete) is beyond."""
    resources = spec["resources"]
    ceilings: Sequence[tuple[str, float, float, str, str]] = (
        (
            "resources/memory_mb",
            resources["memory_mb"],
            limits.max_instance_memory_mb,
            "MiB of memory per instance",
            "APPDECK_MAX_INSTANCE_MEMORY_MB",
        ),
        (
            "resources/cpus",
            resources["cpus"],
            limits.max_instance_cpus,
            "CPUs per instance",
            "APPDECK_MAX_INSTANCE_CPUS",
        ),
        (
            "resources/pids",
            resources["pids"],
            limits.max_instance_pids,
            "processes per instance",
            "APPDECK_MAX_INSTANCE_PIDS",
        ),
        (
            "instances",
            spec["instances"],
            limits.max_instances_per_app,
            "instances per app",
            "APPDECK_MAX_INSTANCES_PER_APP",
        ),
        (
            "resources/disk_mb",
            resources["disk_mb"],
            limits.max_app_disk_mb,
            "MiB of disk per app",
            "APPDECK_MAX_APP_DISK_MB",
        ),
    )
    for where, asked, ceiling, what, setting in ceilings:
        if asked > ceiling:
            raise InvalidArgument(
                f"invalid spec at {where}: {asked:g} is beyond this platform's ceiling of "
                f"{ceiling:g} {what} ({setting})",
                hint=f"ask for at most {ceiling:g}, or {HINT_OPERATOR.format(setting=setting)}",
                field=f"spec/{where}",
                limit=ceiling,
                setting=setting,
            )


def check_quota(limits: Limits, others: Usage, proposed: Usage, before: Usage) -> None:
    """Raise :class:`QuotaExceeded` when the tenant's other apps (``others``) and this one
    (``proposed``) together go beyond a tenant quota; the error says what is held. A change
    that does not grow what the app held (``before``) always passes: a tenant over a quota
    the operator lowered can still shrink."""
    quotas = (
        ("memory", "MiB of memory", others.memory_mb, proposed.memory_mb,
         limits.tenant_memory_mb, "APPDECK_TENANT_MEMORY_MB"),
        ("instances", "instances", others.instances, proposed.instances,
         limits.tenant_instances, "APPDECK_TENANT_INSTANCES"),
        ("disk", "MiB of disk", others.disk_mb, proposed.disk_mb,
         limits.tenant_disk_mb, "APPDECK_TENANT_DISK_MB"),
    )  # fmt: skip
    grown = _grown(proposed, before)
    for (name, unit, held, asked, quota, setting), grows in zip(quotas, grown, strict=True):
        if grows and held + asked > quota:
            raise QuotaExceeded(
                f"the tenant's {name} quota is {quota} {unit} ({setting}): its other apps "
                f"hold {held} and this app would hold {asked}, {held + asked} in all",
                hint=f"ask for at most {max(quota - held, 0)} {unit} here, shrink or delete "
                f"another app, or {HINT_OPERATOR.format(setting=setting)}",
                quota=name,
                limit=quota,
                used=held,
                requested=asked,
                setting=setting,
            )


def _grown(proposed: Usage, before: Usage) -> tuple[bool, bool, bool]:
    """Which of memory, instances and disk ``proposed`` holds more of than ``before``."""
    return (
        proposed.memory_mb > before.memory_mb,
        proposed.instances > before.instances,
        proposed.disk_mb > before.disk_mb,
    )


def grows(proposed: Usage, before: Usage) -> bool:
    """Whether ``proposed`` holds more of anything than ``before``: when it does not (and
    ``before`` is at most what the app holds), :func:`check_quota` passes whatever the
    tenant's other apps hold, so the read of what they hold can be skipped."""
    return any(_grown(proposed, before))


Held = Mapping[int, Sequence[Mapping[str, Any]]]
"""Per app of a tenant, the specs it holds: its own and its live and in-progress releases'."""


def guard(
    limits: Limits, app_id: int | None, proposed: Mapping[str, Any]
) -> Callable[[Held], None]:
    """The check the store runs inside the transaction that writes ``proposed`` as the spec
    of ``app_id`` (None: a new app), given what each app of the tenant holds."""
    mine = usage(proposed, disk_default=limits.default_disk_mb)

    def check(held: Held) -> None:
        others = Usage()
        before = Usage()
        for held_by, app_specs in held.items():
            used = Usage.larger(usage(s, disk_default=limits.default_disk_mb) for s in app_specs)
            if held_by == app_id:
                before = used
            else:
                others += used
        # a field that grows is held at ``mine`` after (beyond what the app's own releases
        # hold); one that does not grow is not checked
        check_quota(limits, others, mine, before)

    return check
