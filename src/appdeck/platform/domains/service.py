"""Custom domains: who holds a hostname, how its owner proves control, and the data plane's
host map kept in step with the database.

The life of a hostname an app's spec lists (``domains``)::

    spec saved / deploy ──▶ claimed: pending ──TXT proof or ACME order──▶ verified ──▶ served
           │                   │                                              │
           │ held by another app (its owner proved it by TXT): Conflict       │ removed from the
           │ held by another app otherwise: refused, until a TXT proof        │ spec, app deleted
           ▼                     by this app's owner takes it over            ▼
       nothing changes                                                     released

- A hostname has one holder platform-wide: the claims table's primary key (the database
  decides a race). Only verified hostnames reach the data plane
  (:class:`~appdeck.ingress.hosts.HostMap` → route key).
- Proof by DNS: a TXT record ``_appdeck-challenge.<domain>`` whose value is the claim's token,
  an HMAC of (hostname, app id) under the server's secret key: the same on every replica,
  never stored, unguessable for anyone else, and stable if the domain is removed and re-added.
- Proof by ACME (:meth:`DomainService.mark_verified`): an HTTP-01 order for the hostname
  succeeded, so its DNS points here. That proves the *server* answers for it, not which tenant
  should: a tenant could claim a domain pointing here before its real owner (say, one moving in
  from another app of the platform). So a TXT proof by another app's owner takes over a
  hostname held by a pending claim or an ACME-only proof; only a TXT-proved hold is final (the
  DNS owner can still move it by changing the record to the other app's token).
- A pending claim expires after ``claim_ttl`` (``APPDECK_DOMAIN_CLAIM_TTL_SECONDS``, 7 days):
  nobody squats a name by claiming it and never proving it. Another app's claim takes an
  expired one's place at once; the periodic round drops the rest.
- A domain proved by TXT is looked up again every :data:`VERIFIED_EVERY`; once its record has
  been missing longer than ``txt_grace`` (``APPDECK_DOMAIN_TXT_GRACE_SECONDS``, 3 days) it is
  pending again, no longer served, the reason shown to the agent. (A domain proved by ACME is
  proved again by every renewal's HTTP-01 challenge.)
- Every replica follows the database: the composition root calls :meth:`resync` on its deploy
  watch loop, and every change here resyncs this replica at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Final

from appdeck.common.errors import Conflict, InvalidArgument
from appdeck.ingress.hosts import HostMap, normalize
from appdeck.model import hostnames
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.domains import names as domain_names
from appdeck.platform.domains.proof import (
    LookupFailed,
    TxtResolver,
    challenge_name,
    mismatch,
)
from appdeck.platform.domains.urls import AppUrls
from appdeck.storage.apps import AppRecord, AppStore
from appdeck.storage.domains import VERIFIED, DomainRecord, DomainStore, Method

log = logging.getLogger("appdeck.domains")

VERIFY_EVERY: Final = 2.0
"""On-demand proofs of one app: at most one round of lookups per this many seconds."""
RECHECK_BATCH: Final = 10
"""Pending claims looked up again per periodic round."""
TAKEN: Final = "taken by another app"
VERIFIED_EVERY: Final = 3600.0
"""How often a domain proved by TXT is looked up again (a bounded batch per round)."""
CLAIM_TTL: Final = 7 * 86_400.0
TXT_GRACE: Final = 3 * 86_400.0


def _spec_domains(app: AppRecord) -> list[str]:
    listed = app.spec.get("domains")
    return [d for d in listed if isinstance(d, str)] if isinstance(listed, list) else []


class DomainService:
    def __init__(
        self,
        store: DomainStore,
        hosts: HostMap,
        *,
        apps: AppStore,
        sealer: Sealer,
        resolver: TxtResolver,
        urls: AppUrls,
        reserved: Iterable[str] = (),
        recheck_seconds: float = 60.0,
        claim_ttl: float = CLAIM_TTL,
        txt_grace: float = TXT_GRACE,
        clock: Callable[[], float] = time.time,
        served: bool = True,
        published: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self._published = published
        """Waits (bounded) until this host's data plane serves the host map as it is now: a
        change of what is served is reported done only once it is (the router's
        :meth:`edge_published`)."""
        self._served = served
        """False: nothing here serves a custom domain (a cluster's gateway carries the apps'
        traffic, its HTTPRoutes the apps-domain host only): a spec listing one is refused."""
        self.hosts = hosts
        self._apps = apps
        self._sealer = sealer
        self._resolver = resolver
        self.urls = urls
        self._reserved = frozenset(reserved)
        self._recheck_seconds = recheck_seconds
        self._claim_ttl = claim_ttl
        self._txt_grace = txt_grace
        self._clock = clock
        self._verified_at: dict[int, float] = {}

    # -- the spec's side (AppService calls these) ---------------------------------------------

    def check(self, names: Iterable[str]) -> list[str]:
        """The spec's ``domains`` normalized; :class:`InvalidArgument` for one refused."""
        checked = domain_names.check(
            names, apps_domain=self.urls.apps_domain, reserved=self._reserved
        )
        if checked and not self._served:
            raise InvalidArgument(
                "custom domains are not served with APPDECK_RUNTIME=kubernetes (an app's "
                "HTTPRoute carries its apps-domain hostname only)",
                hint="leave domains empty; the app answers at its get_app_url",
                field="spec/domains",
            )
        return checked

    def _refusal(self, host: str) -> str | None:
        return domain_names.refusal(
            host, apps_domain=self.urls.apps_domain, reserved=self._reserved
        )

    async def guard(self, app_id: int | None, names: Iterable[str]) -> None:
        """Before a spec listing ``names`` is saved: :class:`Conflict` for a hostname another
        app holds by a TXT proof (nothing this app's owner can do changes that)."""
        for host, held in sorted((await self.store.get_many(names)).items()):
            if held.app_id != app_id and held.method == "txt":
                raise Conflict(
                    f"domain {host} is {TAKEN}",
                    hint="its holder proved control of it by DNS; remove it from domains",
                    field="spec/domains",
                )

    async def claim(self, app: AppRecord) -> None:
        """Make the app's claims what its spec lists: claim the free hostnames (pending),
        release the ones no longer listed; then this replica's host map follows."""
        listed = [h for h in _spec_domains(app) if self._refusal(h) is None]
        if not listed and not await self.store.holds_any(app.id):
            # most apps: no domain listed, none held; nothing to claim, release or serve
            # (a deploy's every update comes here: one read, not two writes and the host map)
            return
        await self.store.claim(app.id, listed, stale_before=self._clock() - self._claim_ttl)
        released = await self.store.release(app.id, keep=listed)
        if released:
            log.info("app %s released %s", app.id, ", ".join(released))
        await self._serve_now()

    async def release_all(self, app: AppRecord) -> None:
        """The app is deleted: every hostname it held is free."""
        self._verified_at.pop(app.id, None)
        await self.store.release(app.id)
        await self._serve_now()

    def moved(self, old: AppRecord, new: AppRecord) -> None:
        """A renamed app keeps its domains: they route to its new key."""
        before = hostnames.route_label(old.name, old.tenant_id)
        after = hostnames.route_label(new.name, new.tenant_id)
        for host, route in self.hosts.items().items():
            if route == before:
                self.hosts.set(host, after)

    async def follow(self, change: Change) -> None:
        """A deploy (re)claims what the app's spec lists."""
        if change.kind == "deployment.updated":
            app = await self._apps.get(change.app_id)
            if app is not None:
                await self.claim(app)

    def attach(self, feed: ChangeFeed) -> None:
        feed.subscribe(self.follow)

    # -- the data plane ---------------------------------------------------------------------

    async def resync(self) -> int:
        """Make the host map exactly the verified hostnames; how many there are."""
        return len(await self._resync())

    async def _resync(self) -> dict[str, str]:
        wanted: dict[str, str] = {}
        for served in await self.store.served():
            if hostnames.unroutable_reason(served.app_name, served.tenant_id) is None:
                wanted[served.host] = hostnames.route_label(served.app_name, served.tenant_id)
        self.hosts.replace(wanted)
        return wanted

    async def _serve_now(self) -> None:
        """Resync, and when that changed what is served, wait until the data plane serves it:
        a hostname released is no longer served (nor one proved not yet served) once the call
        that changed it answers."""
        before = self.hosts.items()
        wanted = await self._resync()
        if wanted != before and self._published is not None:
            await self._published()

    # -- proofs -----------------------------------------------------------------------------

    def token(self, host: str, app_id: int) -> str:
        """The TXT value that proves ``app_id``'s owner controls ``host``."""
        return "appdeck-" + self._sealer.mac(f"custom-domain\0{host}\0{app_id}")[:32]

    async def claimed(self) -> list[tuple[int, str, str]]:
        """(app id, tenant id, domain) of every claimed domain, proved or not: the names TLS
        orders certificates for (an issued one proves its domain: :meth:`mark_verified`)."""
        return [
            (s.app_id, s.tenant_id, s.host) for s in await self.store.served(verified_only=False)
        ]

    async def mark_verified(self, domain: str, method: Method = "acme") -> bool:
        """The ACME part's call once an HTTP-01 order for ``domain`` succeeded: its holder's
        claim is verified (False when nobody claims it)."""
        host = normalize(domain)
        if host is None:
            return False
        held = (await self.store.get_many([host])).get(host)
        if held is None:
            return False
        done = await self.store.verify(host, held.app_id, method)
        await self._serve_now()
        return done

    async def prove(self, host: str, app_id: int) -> str | None:
        """Look the TXT proof of ``host`` for ``app_id`` up; on a match the app holds it,
        verified (taking it over if it must). None when proved, else why not."""
        name = challenge_name(host)
        try:
            found = await self._resolver.txt(name)
        except LookupFailed as exc:
            reason: str | None = f"the TXT lookup of {name} failed: {exc}"
        else:
            if self.token(host, app_id) in found:
                if await self.store.take_over(host, app_id):
                    log.info("app %s proved %s by DNS", app_id, host)
                    return None
                return f"{TAKEN} (its owner proved control of it by DNS)"
            reason = mismatch(name, found)
        await self.store.checked(host, app_id, reason)
        return reason

    async def recheck(self, limit: int = RECHECK_BATCH) -> int:
        """The periodic round, each step a bounded batch: drop pending claims older than the
        claim TTL, look pending claims up again, and re-check domains proved by TXT (one gone
        longer than the grace period stops being served). How many got verified."""
        now = self._clock()
        expired = await self.store.expire(now - self._claim_ttl, limit)
        if expired:
            log.info("unproved claims expired: %s", ", ".join(expired))
        due = await self.store.due(now - self._recheck_seconds, limit)
        proved = 0
        for claim in due:
            if await self.prove(claim.host, claim.app_id) is None:
                proved += 1
        lost = 0
        for claim in await self.store.due(now - VERIFIED_EVERY, limit, state=VERIFIED):
            lost += await self._still_proved(claim, now)
        if proved or lost or expired:
            await self._serve_now()
        return proved

    async def _still_proved(self, claim: DomainRecord, now: float) -> int:
        """Look a TXT-verified claim's record up again; 1 when it stopped being served."""
        name = challenge_name(claim.host)
        try:
            found = await self._resolver.txt(name)
        except LookupFailed as exc:
            reason = f"the TXT lookup of {name} failed: {exc}"
        else:
            if self.token(claim.host, claim.app_id) in found:
                await self.store.still_proved(claim.host, claim.app_id, None, now)
                return 0
            reason = mismatch(name, found)
        since = claim.failing_since
        if since is None or now - since < self._txt_grace:
            await self.store.still_proved(claim.host, claim.app_id, reason, now)
            return 0
        began = datetime.fromtimestamp(since, UTC).isoformat(timespec="seconds")
        why = f"no longer served: its TXT proof has failed since {began} ({reason})"
        if await self.store.unverify(claim.host, claim.app_id, why):
            log.warning("domain %s of app %s: %s", claim.host, claim.app_id, why)
            return 1
        return 0

    # -- what the agent sees ----------------------------------------------------------------

    async def describe(self, app: AppRecord, *, verify: bool = False) -> list[dict[str, Any]]:
        """Each hostname the app's spec lists with its state: ``verified`` (served),
        ``pending`` (the TXT record to create) or ``refused`` (why). ``verify``: claim and
        look the proofs up now (at most once per :data:`VERIFY_EVERY` per app)."""
        listed = _spec_domains(app)
        found: dict[str, str | None] = {}
        if verify and listed:
            await self.claim(app)
            now = time.monotonic()
            if now - self._verified_at.get(app.id, -VERIFY_EVERY) >= VERIFY_EVERY:
                self._verified_at[app.id] = now
                found = await self._prove_all(app, listed)
        held = await self.store.get_many(listed)
        return [self._state(app, host, held.get(host), found.get(host)) for host in listed]

    async def _prove_all(self, app: AppRecord, listed: list[str]) -> dict[str, str | None]:
        held = await self.store.get_many(listed)
        todo = [
            h
            for h in listed
            if self._refusal(h) is None
            and not (h in held and held[h].app_id == app.id and held[h].method == "txt")
        ]
        reasons = await asyncio.gather(*(self.prove(h, app.id) for h in todo))
        if any(r is None for r in reasons):
            await self._serve_now()
        return dict(zip(todo, reasons, strict=True))

    def _state(
        self, app: AppRecord, host: str, held: DomainRecord | None, tried: str | None
    ) -> dict[str, Any]:
        refused = self._refusal(host)
        if refused is not None:
            return {"host": host, "state": "refused", "reason": f"{host} is {refused}"}
        txt = {"name": challenge_name(host), "value": self.token(host, app.id)}
        if held is not None and held.app_id == app.id and held.state == VERIFIED:
            verified: dict[str, Any] = {
                "host": host,
                "state": "verified",
                "method": held.method,
                "url": self.urls.of_host(host),
                "tls": self.urls.tls.status_of(host),
            }
            if held.failing_since is not None and held.last_error:  # served until the grace ends
                verified["last_check"] = held.last_error
            return verified
        if held is not None and held.app_id != app.id:
            if held.method == "txt":
                return {"host": host, "state": "refused", "reason": f"{TAKEN} (proved by DNS)"}
            return {
                "host": host,
                "state": "refused",
                "reason": f"{TAKEN}, which has not proved control by DNS: this TXT record "
                "takes it over",
                "txt": txt,
            }
        state: dict[str, Any] = {"host": host, "state": "pending", "txt": txt}
        last = tried or (held.last_error if held is not None else None)
        if last:
            state["last_check"] = last
        return state
