"""The authorization endpoint: ``GET /authorize`` checks the request and shows the sign-in +
consent page; ``POST /authorize`` signs the user in and sends the code to the client.

Until the client and its redirect URI are known good, errors are shown as a page and never
redirected (RFC 6749 §4.1.2.1: an open redirector otherwise); after that they go back to the
client as ``error=…&state=…&iss=…`` (RFC 9207). Required: ``response_type=code``,
``redirect_uri`` (OAuth 2.1 lets the server insist; every MCP client sends it), PKCE with
``S256``. ``resource`` (RFC 8707), when sent, must name our MCP endpoint. Scopes AppDeck does
not know are ignored (RFC 6749 §3.3); with none known, the client's registered scope or every
scope is asked for, and the user may untick any.

The code's answer is a ``303 See Other`` (RFC 9700 §4.12: after a form post, never 307).

The page asks for the tenant as text (anonymous visitors are shown no list of tenants) and
remembers the last one in a cookie. A browser that signed in here before is remembered (by its
random browser cookie, server-side, for a day): when it comes back for a client its user has
already granted, the page is the step-up page, showing what was granted and what is new.
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from appdeck.auth import scopes as scope_names
from appdeck.auth.admin import SLUG
from appdeck.auth.audit import AuditEvent
from appdeck.auth.hashing import new_secret, same, token_hash
from appdeck.auth.server import redirects
from appdeck.auth.server.clients import ClientLookupError, Clients
from appdeck.auth.server.consent_page import consent_page, error_page
from appdeck.auth.server.context import ServerContext
from appdeck.auth.server.http import NO_STORE, Form, OAuthError, read_form
from appdeck.auth.server.pending import MAX_ATTEMPTS, PendingRequest, PendingRequests
from appdeck.auth.server.signin import Refused, check_credentials
from appdeck.common.identity import app_audience
from appdeck.storage.identity import UserRecord
from appdeck.storage.oauth import AuthCodeRow, ClientRow

COOKIE: Final = "appdeck_authz"
TENANT_COOKIE: Final = "appdeck_tenant"
COOKIE_SECONDS: Final = 86_400
TENANT_COOKIE_SECONDS: Final = 180 * 86_400
MAX_QUERY: Final = 8192
MAX_REMEMBERED: Final = 10_000
_CHALLENGE = re.compile(r"[A-Za-z0-9_\-]{43}")
_TOKEN = re.compile(r"[A-Za-z0-9_\-]{16,128}")
BAD_LOGIN: Final = "Incorrect tenant, username or password."
GONE: Final = "This sign-in request has expired or was already answered."


@dataclass(frozen=True, slots=True)
class SignedIn:
    """Who last signed in from a browser (its random cookie), and until when it counts."""

    tenant_id: str
    user_id: str
    username: str
    until: float


class Authorize:
    def __init__(self, ctx: ServerContext, clients: Clients, pending: PendingRequests) -> None:
        self._ctx = ctx
        self._clients = clients
        self._pending = pending
        self.action = f"{ctx.issuer}/authorize"
        self._path = urlsplit(self.action).path
        self._signed_in: OrderedDict[str, SignedIn] = OrderedDict()

    def _action(self, request: Request) -> str:
        """This endpoint as the browser spelled it (a loopback name), so the form posts back to
        the same origin and its cookies."""
        return f"{self._ctx.issuer_for(request.headers.get('host'))}/authorize"

    def _back(
        self,
        request: Request,
        redirect_uri: str,
        state: str | None,
        *,
        status: int = 302,
        **params: str,
    ) -> Response:
        issuer = self._ctx.issuer_for(request.headers.get("host"))
        target = redirects.with_params(redirect_uri, {**params, "state": state, "iss": issuer})
        return RedirectResponse(target, status_code=status, headers=NO_STORE)

    def _remember(self, browser: str, user: UserRecord) -> None:
        self._signed_in.pop(browser, None)
        until = self._ctx.clock() + COOKIE_SECONDS
        self._signed_in[browser] = SignedIn(user.tenant_id, user.id, user.name, until)
        while len(self._signed_in) > MAX_REMEMBERED:
            self._signed_in.popitem(last=False)

    async def _granted(
        self, browser: str, client: ClientRow
    ) -> tuple[SignedIn | None, frozenset[str]]:
        """Who signed in from this browser before, and what they granted ``client``."""
        known = self._signed_in.get(browser)
        if known is None or known.until <= self._ctx.clock():
            return None, frozenset()
        grants = await self._ctx.oauth.list_grants(known.tenant_id, known.user_id)
        scopes = set[str]()
        for grant in grants:
            if grant.client_id == client.client_id:  # an app's client: the app's own scopes
                scopes |= (
                    set(grant.scope.split())
                    if client.app_id is not None
                    else (scope_names.parse(grant.scope, allow_unknown=True))
                )
        return known, frozenset(scopes)

    # -- GET ------------------------------------------------------------------------------

    async def get(self, request: Request) -> Response:
        if len(request.url.query) > MAX_QUERY:
            return error_page("The authorization request is too long.")
        try:
            query = Form.of(list(request.query_params.multi_items()), frozenset({"resource"}))
            client_id = query.get("client_id", max_len=1024)
            redirect_uri = query.get("redirect_uri", max_len=redirects.MAX_URI_LENGTH)
        except OAuthError as exc:
            return error_page(exc.description)
        if client_id is None:
            return error_page("The request names no application (client_id is missing).")
        try:
            client = await self._clients.for_authorize(client_id)
        except ClientLookupError as exc:
            return error_page(str(exc))
        if redirect_uri is None:
            return error_page("The request has no redirect_uri.")
        if not redirects.matches(redirect_uri, client.redirect_uris):
            self._ctx.refuse(
                "redirect_uri_mismatch", method="GET /authorize", client_id=client.client_id
            )
            return error_page("The redirect_uri is not registered for this application.")
        # From here on, errors go back to the client.
        try:
            state = query.get("state", max_len=2048)
        except OAuthError as exc:
            return self._back(
                request,
                redirect_uri,
                None,
                error="invalid_request",
                error_description=exc.description,
            )
        try:
            challenge, scopes, resource = self._check(query, client)
        except OAuthError as exc:
            return self._back(
                request, redirect_uri, state, error=exc.error, error_description=exc.description
            )
        browser = request.cookies.get(COOKIE) or ""
        fresh = not _TOKEN.fullmatch(browser)
        if fresh:
            browser = secrets.token_urlsafe(24)
        known, granted = await self._granted(browser, client)
        pending = await self._pending.add(
            browser=browser,
            client=client,
            redirect_uri=redirect_uri,
            state=state,
            scopes=scopes,
            resource=resource,
            code_challenge=challenge,
            granted=granted,
        )
        remembered = request.cookies.get(TENANT_COOKIE) or ""
        response = consent_page(
            pending,
            action=self._action(request),
            tenant=remembered if SLUG.fullmatch(remembered) else None,
            username=known.username if pending.granted and known is not None else None,
        )
        if fresh:
            response.set_cookie(
                COOKIE,
                browser,
                max_age=COOKIE_SECONDS,
                path="/",
                httponly=True,
                samesite="strict",
                secure=self._ctx.issuer.startswith("https://"),
            )
        return response

    def _check(self, query: Form, client: ClientRow) -> tuple[str, frozenset[str], str]:
        """(code_challenge, scopes to ask for, resource) or OAuthError."""
        if query.get("response_type", max_len=64) != "code":
            raise OAuthError("unsupported_response_type", "response_type must be 'code'")
        if "authorization_code" not in client.grant_types:
            raise OAuthError("unauthorized_client", "this client may not use authorization codes")
        challenge = query.get("code_challenge", max_len=128)
        if challenge is None:
            raise OAuthError("invalid_request", "PKCE is required: send code_challenge (S256)")
        if (query.get("code_challenge_method", max_len=16) or "plain") != "S256":
            raise OAuthError("invalid_request", "code_challenge_method must be S256")
        if not _CHALLENGE.fullmatch(challenge):
            raise OAuthError("invalid_request", "code_challenge must be 43 base64url characters")
        resources = query.all("resource")
        asked = set((query.get("scope", max_len=2000) or "").split())
        if client.app_id is not None:  # an app's client: the app's own scopes and audience
            mine = app_audience(client.app_id)
            if len(resources) > 1 or (resources and resources[0] != mine):
                raise OAuthError("invalid_target", f"this client's only resource is {mine}")
            offered = set((client.scope or "").split())
            return challenge, frozenset((asked & offered) or offered), mine
        if len(resources) > 1 or (resources and not self._ctx.is_resource(resources[0])):
            raise OAuthError("invalid_target", f"the only resource here is {self._ctx.resource}")
        requested = asked & scope_names.ALL
        if not requested:
            requested = set(scope_names.parse(client.scope, allow_unknown=True))
        return challenge, frozenset(requested or scope_names.ALL), self._ctx.resource

    # -- POST -----------------------------------------------------------------------------

    async def post(self, request: Request) -> Response:
        try:
            form = await read_form(request, repeatable=frozenset({"scope"}))
            pending_id = form.get("pending", max_len=128)
            csrf = form.get("csrf", max_len=128)
            decision = form.get("decision", max_len=16)
            tenant = form.get("tenant", max_len=200) or ""
            username = form.get("username", max_len=200) or ""
            password = form.get("password", max_len=1024) or ""
        except OAuthError as exc:
            return error_page(exc.description, status=exc.status)
        pending = await self._pending.get(pending_id) if pending_id else None
        if pending is None:
            return error_page(GONE)
        cookie = request.cookies.get(COOKIE) or ""
        if not csrf or not same(csrf, pending.csrf) or not same(cookie, pending.browser):
            self._ctx.refuse("csrf", method="POST /authorize", client_id=pending.client.client_id)
            return error_page(
                "The form could not be verified. Start the sign-in again.", status=403
            )
        if decision == "deny":
            return await self._deny(request, pending)
        if decision != "allow":
            return error_page("The form was not answered with Allow or Deny.")
        chosen = frozenset(form.all("scope"))
        if not chosen <= pending.scopes:
            await self._pending.discard(pending.id)
            return error_page("The form asked for permissions the application did not request.")
        user = await self._sign_in(request, pending, tenant, username, password, chosen)
        if isinstance(user, Response):
            return user
        if not chosen:
            return consent_page(
                pending,
                action=self._action(request),
                tenant=tenant,
                username=username,
                checked=chosen,
                error="Choose at least one permission, or Deny.",
            )
        return await self._grant(request, pending, user, chosen, cookie)

    async def _deny(self, request: Request, pending: PendingRequest) -> Response:
        if not await self._pending.take(pending.id):  # answered meanwhile (another replica)
            return error_page(GONE)
        self._ctx.audit.record(
            AuditEvent(
                event="authorization_denied",
                outcome="denied",
                client_id=pending.client.client_id,
                method="POST /authorize",
            )
        )
        return self._back(
            request,
            pending.redirect_uri,
            pending.state,
            status=303,
            error="access_denied",
            error_description="the user denied the request",
        )

    async def _sign_in(
        self,
        request: Request,
        pending: PendingRequest,
        tenant: str,
        username: str,
        password: str,
        chosen: frozenset[str],
    ) -> UserRecord | Response:
        """The user whose password was typed, or the page that refuses: throttled (a growing
        wait per client IP and per account, auth.throttle) or bad credentials."""
        ip = request.client.host if request.client else None  # proxy headers not trusted
        client_id = pending.client.client_id
        checked = await check_credentials(
            self._ctx,
            ip=ip,
            tenant=tenant,
            username=username,
            password=password,
            client=client_id,
            method="POST /authorize",
            only_tenant=pending.client.tenant_id if pending.client.app_id is not None else None,
        )
        if not isinstance(checked, Refused):
            return checked
        if checked.reason == "throttled":
            return error_page(
                f"Too many failed sign-in attempts. Try again in {checked.wait_s} seconds.",
                status=429,
            )
        return await self._bad_login(request, pending, tenant, username, chosen, checked.user)

    async def _grant(
        self,
        request: Request,
        pending: PendingRequest,
        user: UserRecord,
        chosen: frozenset[str],
        browser: str,
    ) -> Response:
        """The user signed in and allowed ``chosen``: the code goes back to the client; the
        browser is remembered (step-up page) and so is the tenant (a cookie). The request is
        taken first: of two posts racing (on any replicas), one gets a code."""
        if not await self._pending.take(pending.id):
            return error_page(GONE)
        code = new_secret("adk_ac_", 32)
        await self._ctx.oauth.insert_code(
            AuthCodeRow(
                code_hash=token_hash(code),
                client_id=pending.client.client_id,
                tenant_id=user.tenant_id,
                user_id=user.id,
                redirect_uri=pending.redirect_uri,
                scope=scope_names.render(chosen),
                resource=pending.resource,
                code_challenge=pending.code_challenge,
                expires_at=self._ctx.clock() + self._ctx.settings.auth_code_ttl_seconds,
            )
        )
        self._ctx.audit.record(
            AuditEvent(
                event="authorization_granted",
                outcome="ok",
                tenant_id=user.tenant_id,
                user_id=user.id,
                client_id=pending.client.client_id,
                method="POST /authorize",
                detail={"scope": scope_names.render(chosen)},
            )
        )
        self._remember(browser, user)
        answer = self._back(request, pending.redirect_uri, pending.state, status=303, code=code)
        answer.set_cookie(
            TENANT_COOKIE,
            user.tenant_id,
            max_age=TENANT_COOKIE_SECONDS,
            path=self._path,
            httponly=True,
            samesite="lax",
            secure=self._ctx.issuer.startswith("https://"),
        )
        return answer

    async def _bad_login(
        self,
        request: Request,
        pending: PendingRequest,
        tenant: str,
        username: str,
        chosen: frozenset[str],
        user: UserRecord | None,
    ) -> Response:
        attempts = await self._pending.failed_attempt(pending)
        if attempts is None:  # answered or expired meanwhile
            return error_page(GONE)
        self._ctx.refuse(
            "invalid_credentials",
            method="POST /authorize",
            client_id=pending.client.client_id,
            tenant_id=user.tenant_id if user is not None else None,
            user_id=user.id if user is not None else None,
            detail={"attempt": pending.attempts},
        )
        if attempts >= MAX_ATTEMPTS:  # the request was deleted
            return error_page("Too many failed sign-in attempts.", status=429)
        return consent_page(
            pending,
            action=self._action(request),
            tenant=tenant,
            username=username,
            checked=chosen or pending.scopes,
            error=BAD_LOGIN,
        )
