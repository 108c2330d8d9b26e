"""The resource server: ``Authorization: Bearer …`` to a :class:`Principal`.

Two kinds of token are accepted:

- OAuth access tokens (JWTs) from the embedded authorization server or an external IdP:
  signature (algorithm allow-list), issuer, audience (RFC 8707), expiry; kind ``oauth``.
- Personal access tokens ``adk_pat_…`` (stored hashed, with scopes and expiry); kind ``pat``.

Verified tokens are cached by value until they expire (bounded), so the check on the hot path
is a dict lookup; revoking a token evicts it. Tokens are never read from the query string.

Several replicas (issue 13): given a :class:`~appdeck.protocol.ports.Broadcast`, a revocation
made here (an access token's ``jti``, a PAT, a disabled tenant or user) is published on the
``revoked`` channel and every replica applies it at once. Pub/sub is at most once, so the
store stays the truth: the revoked ``jti`` are read again every trust window and at the next
request after the broadcast's connection came back (:meth:`BearerAuthenticator.start`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appdeck.auth import AuthError
from appdeck.auth import scopes as scope_names
from appdeck.auth.hashing import token_hash
from appdeck.auth.tokens import InvalidToken
from appdeck.common.identity import Principal
from appdeck.protocol.ports import Broadcast, Subscription
from appdeck.storage.identity import IdentityStore, PersonalTokenRecord

log = logging.getLogger("appdeck.auth")

PAT_PREFIX: Final = "adk_pat_"
CACHE_SIZE: Final = 10_000
TRUST_SECONDS: Final = 10.0
"""How long what the store said is trusted before it is asked again: a PAT lookup, whether a
(tenant, user) is disabled, the list of revoked ``jti``. It is how long a revocation or a
``disable`` made by another process (the CLI, another replica) takes to be noticed here; one
made through this authenticator (:meth:`BearerAuthenticator.forget_principal`,
:meth:`~BearerAuthenticator.revoke_jti`, :meth:`~BearerAuthenticator.forget_pat`) is at once."""
PAT_CACHE_SECONDS: Final = TRUST_SECONDS
REVOKED_CHANNEL: Final = "revoked"
"""The broadcast channel of revocations: JSON ``{"jti", "exp"}``, ``{"pat"}`` or
``{"tenant", "user"}`` (``user`` null: every user of the tenant)."""
MAX_MESSAGE: Final = 2048
MAX_ID: Final = 512
MAX_REVOKED: Final = 200_000
"""Revoked ``jti`` held in memory; past it the set is read again from the store (which only
keeps those not expired yet)."""
MAX_PUBLISHING: Final = 1000


class JwtVerifier(Protocol):
    async def verify(self, token: str) -> dict[str, Any]: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ClaimNames:
    tenant: str = "tid"
    user: str = "sub"


@dataclass(slots=True)
class _Entry:
    principal: Principal
    expires_at: float
    jti: str | None


class BearerAuthenticator:
    def __init__(
        self,
        *,
        verifier: JwtVerifier,
        identities: IdentityStore,
        resource_metadata_url: str,
        claims: ClaimNames | None = None,
        clock: Callable[[], float] = time.time,
        trust_seconds: float = TRUST_SECONDS,
        broadcast: Broadcast | None = None,
    ) -> None:
        self._verifier = verifier
        self._identities = identities
        self._metadata_url = resource_metadata_url
        self._claims = claims or ClaimNames()
        self._clock = clock
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._revoked: set[str] = set()
        self._pat_used: dict[str, float] = {}
        self._trust = trust_seconds
        self._access: dict[tuple[str, str], tuple[float, str | None]] = {}
        self._revocations_until = 0.0
        self._broadcast = broadcast
        self._subscription: Subscription | None = None
        self._publishing: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Read the revoked ``jti``; with a broadcast, listen to the other replicas'
        revocations and read the store again after a lost connection (messages were lost)."""
        await self.load_revocations()
        if self._broadcast is not None and self._subscription is None:
            self._subscription = await self._broadcast.subscribe(REVOKED_CHANNEL, self._heard)
            self._broadcast.on_reconnect(self.reload_soon)

    def reload_soon(self) -> None:
        """Read the revoked ``jti`` from the store again at the next request."""
        self._revocations_until = 0.0

    async def load_revocations(self) -> None:
        now = self._clock()
        stored = await self._identities.revoked_jtis(now)
        if len(self._revoked) + len(stored) > MAX_REVOKED:
            self._revoked = set(stored)  # what expired is dropped; the store has the rest
        else:
            self._revoked |= stored
        self._revocations_until = now + self._trust

    async def _admitted(self, principal: Principal, now: float) -> Principal:
        """Refuse a principal whose user or tenant an operator disabled (asked of the store
        at most once per trust window per (tenant, user))."""
        key = (principal.tenant, principal.user)
        seen = self._access.get(key)
        if seen is None or seen[0] <= now:
            if len(self._access) >= CACHE_SIZE:
                self._access.clear()
            seen = (now + self._trust, await self._identities.refused_access(*key))
            self._access[key] = seen
        if seen[1] is not None:
            raise AuthError(f"Access refused: {seen[1]}")
        return principal

    # -- Authenticator --------------------------------------------------------------------

    async def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise AuthError("Authorization required: send a bearer token", error="")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError("Authorization must be 'Bearer <token>'", error="invalid_request")
        now = self._clock()
        if now >= self._revocations_until:
            await self.load_revocations()
        entry = self._cache.get(token)
        if entry is not None and entry.expires_at > now:
            if entry.jti is None or entry.jti not in self._revoked:
                principal = entry.principal
                if principal.kind == "pat":
                    self._pat_used[principal.client_id or ""] = now
                seen = self._access.get((principal.tenant, principal.user))
                if seen is not None and seen[0] > now and seen[1] is None:
                    return principal  # the hot path: two dict lookups
                return await self._admitted(principal, now)
            self._cache.pop(token, None)
            raise AuthError("The access token was revoked")
        entry = await (self._pat(token, now) if token.startswith(PAT_PREFIX) else self._jwt(token))
        self._cache[token] = entry
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return await self._admitted(entry.principal, now)

    def challenge(self, error: AuthError | None = None) -> str:
        parts = [
            f'Bearer resource_metadata="{self._metadata_url}"',
            f'scope="{scope_names.render(set(scope_names.ALL))}"',
        ]
        if error is not None and error.error:
            parts.append(f'error="{error.error}"')
            parts.append(f'error_description="{error.message}"')
        return ", ".join(parts)

    # -- the two kinds --------------------------------------------------------------------

    async def _jwt(self, token: str) -> _Entry:
        try:
            claims = await self._verifier.verify(token)
        except InvalidToken as exc:
            raise AuthError(f"The access token is invalid ({exc})") from None
        jti = claims.get("jti")
        if isinstance(jti, str) and jti in self._revoked:
            raise AuthError("The access token was revoked")
        tenant = claims.get(self._claims.tenant)
        user = claims.get(self._claims.user)
        if not isinstance(tenant, str) or not isinstance(user, str) or not tenant or not user:
            raise AuthError("The access token names no tenant or user")
        raw_scope = claims.get("scope")
        if isinstance(raw_scope, list):
            raw_scope = " ".join(str(s) for s in raw_scope)
        scopes = scope_names.parse(
            raw_scope if isinstance(raw_scope, str) else "", allow_unknown=True
        )
        client = claims.get("client_id") or claims.get("azp")
        principal = Principal(
            tenant=tenant,
            user=user,
            scopes=scopes,
            kind="oauth",
            client_id=client if isinstance(client, str) else None,
            # an IdP's token without a jti is named by its hash
            token_id=jti if isinstance(jti, str) and jti else "sha256:" + token_hash(token)[:32],
        )
        return _Entry(principal, float(claims["exp"]), jti if isinstance(jti, str) else None)

    async def _pat(self, token: str, now: float) -> _Entry:
        record = await self._identities.pat_by_hash(token_hash(token))
        if record is None or record.revoked_at is not None:
            raise AuthError("The personal access token is unknown or revoked")
        if record.expires_at is not None and record.expires_at <= now:
            raise AuthError("The personal access token has expired")
        self._pat_used[record.id] = now
        principal = Principal(
            tenant=record.tenant_id,
            user=record.user_id,
            scopes=frozenset(record.scopes),
            kind="pat",
            client_id=record.id,
            token_id=record.id,
        )
        until = now + self._trust
        if record.expires_at is not None:
            until = min(until, record.expires_at)
        return _Entry(principal, until, None)

    # -- revocation and bookkeeping -------------------------------------------------------

    async def revoke_jti(self, jti: str, expires_at: float) -> None:
        """Refuse the access token ``jti`` from now on, here at once, on the other replicas
        when they hear it (the store first: a replica that reads it after the message, or
        instead of it, finds it there)."""
        self._revoked.add(jti)
        await self._identities.revoke_jti(jti, expires_at)
        await self._publish({"jti": jti, "exp": expires_at})

    def forget_pat(self, record: PersonalTokenRecord) -> None:
        self._forget_pat(record.id)
        self._publish_soon({"pat": record.id})

    def forget_principal(self, tenant: str, user: str | None = None) -> None:
        """Ask the store again, at the next request, whether ``user`` of ``tenant`` (every user
        of it when None) may still get in: an operator just disabled or enabled them."""
        self._forget_principal(tenant, user)
        self._publish_soon({"tenant": tenant, "user": user})

    def _forget_pat(self, pat_id: str) -> None:
        for token, entry in list(self._cache.items()):
            if entry.principal.kind == "pat" and entry.principal.client_id == pat_id:
                del self._cache[token]

    def _forget_principal(self, tenant: str, user: str | None) -> None:
        for key in [k for k in self._access if k[0] == tenant and user in (None, k[1])]:
            del self._access[key]

    # -- between replicas -----------------------------------------------------------------

    async def _publish(self, message: dict[str, Any]) -> None:
        if self._broadcast is None:
            return
        try:
            await self._broadcast.publish(REVOKED_CHANNEL, json.dumps(message).encode())
        except Exception as exc:  # noqa: BLE001 - the store has it; others read it in time
            log.warning("revocation not broadcast (%s); replicas read it from the store", exc)

    def _publish_soon(self, message: dict[str, Any]) -> None:
        """From a synchronous caller: publish in a task of its own (bounded)."""
        if self._broadcast is None:
            return
        if len(self._publishing) >= MAX_PUBLISHING:
            log.warning("revocation broadcasts backed up; replicas read them from the store")
            return
        try:
            task = asyncio.get_running_loop().create_task(self._publish(message))
        except RuntimeError:  # no loop (a synchronous caller outside the server)
            return
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    def _heard(self, payload: bytes) -> None:
        """A revocation another replica made (or this one: applying it twice is harmless).
        Anything malformed is dropped and logged."""
        message = _message(payload)
        if message is None:
            log.warning("malformed revocation message dropped (%d bytes)", len(payload))
            return
        jti, pat, tenant = _an_id(message, "jti"), _an_id(message, "pat"), _an_id(message, "tenant")
        user = _an_id(message, "user")
        if jti is not None:
            if len(self._revoked) >= MAX_REVOKED:
                self.reload_soon()
            else:
                self._revoked.add(jti)
        elif pat is not None:
            self._forget_pat(pat)
        elif tenant is not None and (user is not None or message.get("user") is None):
            self._forget_principal(tenant, user)
        else:
            log.warning("revocation message of no known kind dropped")

    async def close(self) -> None:
        if self._broadcast is not None and self._subscription is not None:
            subscription, self._subscription = self._subscription, None
            try:
                await self._broadcast.unsubscribe(subscription)
            except Exception as exc:  # noqa: BLE001 - closing: nothing more to do
                log.warning("revocation unsubscribe failed (%s)", exc)
        for task in list(self._publishing):
            try:
                async with asyncio.timeout(5):
                    await task
            except TimeoutError:
                task.cancel()
        await self._verifier.close()

    async def flush_usage(self) -> None:
        used, self._pat_used = self._pat_used, {}
        await self._identities.touch_pats(used)


def _message(payload: bytes) -> dict[str, Any] | None:
    if not isinstance(payload, bytes) or len(payload) > MAX_MESSAGE:
        return None
    try:
        message = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) else None


def _an_id(message: dict[str, Any], name: str) -> str | None:
    value = message.get(name)
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID else None


def header_kid(token: str) -> str | None:
    """The ``kid`` of a JWT's header, read without trusting it (None when there is none)."""
    head = token.split(".", 1)[0]
    if len(head) > MAX_MESSAGE:
        return None
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, binascii.Error):
        return None
    kid = header.get("kid") if isinstance(header, dict) else None
    return kid if isinstance(kid, str) and 0 < len(kid) <= MAX_ID else None


class LocalJwtVerifier:
    """Adapts the embedded server's synchronous :class:`~appdeck.auth.tokens.TokenVerifier`.

    With ``refresh_for`` (shared keys: :meth:`~appdeck.auth.keys.SigningKeys.refresh_for`), a
    token refused while naming a key id not known here is verified again once the keys were
    read again: another replica may sign with a key it made since this one read them."""

    def __init__(
        self,
        verify: Callable[[str], dict[str, Any]],
        refresh_for: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self._verify = verify
        self._refresh_for = refresh_for

    async def verify(self, token: str) -> dict[str, Any]:
        try:
            return self._verify(token)
        except InvalidToken:
            kid = header_kid(token) if self._refresh_for is not None else None
            if kid is None or self._refresh_for is None or not await self._refresh_for(kid):
                raise
        return self._verify(token)

    async def close(self) -> None:
        return None


Verify = Callable[[str], Awaitable[dict[str, Any]]]
