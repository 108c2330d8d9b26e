"""The conversation with the CA (RFC 8555), on the ``acme`` package certbot publishes.

That library is synchronous (``requests``): every function here blocks and is run in a
worker thread by :mod:`appdeck.platform.tls.service`, a bounded number at a time. An order
is two calls with the publication of its HTTP-01 answers between them:

    account = connect(directory, key_pem, uri, email, verify)   # registers once
    order = begin(account, hostnames, csr_pem)                   # → order.answers
    ... publish every (token, key authorization) where the CA can reach it ...
    chain_pem = finish(account, order, deadline)                 # validate, finalize

Failures become :class:`CaError` with a short text fit for ``status_of`` (the CA's problem
detail, or what could not be reached), never a library's exception name.

The library (with ``requests`` and ``josepy``) is imported by the functions that talk to the
CA, at the first order: a server without ACME never loads it (~0.1 s of every start's CPU).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

if TYPE_CHECKING:
    import requests
    from acme import client, messages

USER_AGENT: Final = "appdeck-acme"
NETWORK_TIMEOUT: Final = 15
"""Seconds for one HTTP exchange with the CA."""
POLL_SECONDS: Final = 0.25
"""Between two looks at a pending authorization (the library's own loop waits 1 s)."""
MAX_ERROR: Final = 300


class CaError(Exception):
    """The CA refused, failed or could not be reached; ``str()`` is short and safe to show."""


@dataclass
class Account:
    """A registered account: the library's client, signing with the account key."""

    acme: client.ClientV2
    uri: str


@dataclass(frozen=True, slots=True)
class Answer:
    token: str
    key_authorization: str
    hostname: str


@dataclass
class Order:
    resource: messages.OrderResource
    answers: list[Answer]
    _pending: list[tuple[messages.ChallengeBody, Any, messages.AuthorizationResource]]


def new_account_key() -> bytes:
    """A P-256 account key, PKCS#8 PEM (generated once per CA, sealed in the database)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_ERROR else line[: MAX_ERROR - 1] + "…"


def describe(exc: BaseException) -> str:
    """A short, safe text for a failure of the conversation."""
    if isinstance(exc, CaError):
        return str(exc)
    import requests
    from acme import errors, messages

    if isinstance(exc, messages.Error):
        return _short(f"the CA refused: {exc.detail or exc.code or 'no detail'}")
    if isinstance(exc, errors.ValidationError):
        details = []
        for authzr in exc.failed_authzrs:
            for chall in authzr.body.challenges:
                if chall.error is not None:
                    name = authzr.body.identifier.value
                    details.append(f"{name}: {chall.error.detail or chall.error.code}")
        return _short("validation failed: " + ("; ".join(details) or "no detail"))
    if isinstance(exc, errors.IssuanceError):
        return _short(f"the CA did not issue: {exc.error.detail or exc.error.code}")
    if isinstance(exc, errors.TimeoutError | TimeoutError):
        return "the CA did not finish in time"
    if isinstance(exc, requests.exceptions.SSLError):
        return "the CA's TLS certificate is not trusted (APPDECK_ACME_CA_BUNDLE)"
    if isinstance(exc, requests.exceptions.RequestException):
        return "the CA could not be reached"
    return "the ACME conversation failed"


def connect(
    directory_url: str, key_pem: bytes, uri: str | None, email: str | None, verify: str | bool
) -> Account:
    """The account, registered now when ``uri`` is None (terms agreed: the operator chose
    the CA by setting its directory)."""
    try:
        from acme import client, errors, messages
        from josepy.jwa import ES256
        from josepy.jwk import JWKEC

        key = serialization.load_pem_private_key(key_pem, password=None)
        jwk = JWKEC(key=key)
        net = client.ClientNetwork(jwk, alg=ES256, user_agent=USER_AGENT, timeout=NETWORK_TIMEOUT)
        net.verify_ssl = cast(bool, verify)  # requests takes a CA bundle's path here too
        directory = client.ClientV2.get_directory(directory_url, net)
        acme = client.ClientV2(directory, net)
        if uri is not None:
            net.account = messages.RegistrationResource(uri=uri, body=messages.Registration())
            return Account(acme, uri)
        contact = (f"mailto:{email}",) if email else ()
        registration = messages.NewRegistration(contact=contact, terms_of_service_agreed=True)
        try:
            regr = acme.new_account(registration)
        except errors.ConflictError as known:  # this key has an account already
            regr = messages.RegistrationResource(uri=known.location, body=messages.Registration())
            net.account = regr
        return Account(acme, str(regr.uri))
    except Exception as exc:  # noqa: BLE001 - the library's many failures end here, as text
        raise CaError(describe(exc)) from None


def begin(account: Account, csr_pem: bytes) -> Order:
    """A new order for the CSR's names, with the HTTP-01 answer of every pending
    authorization (one the CA holds valid already needs none)."""
    try:
        from acme import challenges, messages

        order = account.acme.new_order(csr_pem)
        net = account.acme.net
        answers: list[Answer] = []
        pending = []
        for authzr in order.authorizations:
            if authzr.body.status == messages.STATUS_VALID:
                continue
            challb = next(
                (c for c in authzr.body.challenges if isinstance(c.chall, challenges.HTTP01)),
                None,
            )
            if challb is None:
                raise CaError(f"the CA offers no HTTP-01 for {authzr.body.identifier.value}")
            response, validation = challb.response_and_validation(net.key)
            token = challb.chall.encode("token")
            answers.append(Answer(token, str(validation), str(authzr.body.identifier.value)))
            pending.append((challb, response, authzr))
        return Order(order, answers, pending)
    except Exception as exc:  # noqa: BLE001 - the library's many failures end here, as text
        raise CaError(describe(exc)) from None


def finish(account: Account, order: Order, deadline: float) -> str:
    """Tell the CA to validate (every answer is published by now), wait for it, finalize:
    the full chain, PEM. ``deadline`` is ``time.monotonic()`` based."""
    acme = account.acme
    try:
        from acme import errors, messages

        for challb, response, _ in order._pending:
            acme.answer_challenge(challb, response)
        for _, _, authzr in order._pending:
            while True:
                authzr, _answer = acme.poll(authzr)
                if authzr.body.status != messages.STATUS_PENDING:
                    break
                if time.monotonic() > deadline:
                    raise CaError("the CA did not validate in time")
                time.sleep(POLL_SECONDS)
            if authzr.body.status != messages.STATUS_VALID:
                raise errors.ValidationError([authzr])
        return _finalize(acme, order.resource, deadline)
    except Exception as exc:  # noqa: BLE001 - the library's many failures end here, as text
        raise CaError(describe(exc)) from None


def _post_as_get(acme: client.ClientV2, url: str) -> requests.Response:
    """RFC 8555 §6.3 POST-as-GET, through the library's signing network client."""
    return acme.net.post(url, None, new_nonce_url=acme.directory["newNonce"])


def _finalize(acme: client.ClientV2, order: messages.OrderResource, deadline: float) -> str:
    """Send the CSR, then look at the order every ``POLL_SECONDS`` until the certificate is
    there (the library's own loop waits a whole second before its first look, which is most
    of an issuance against a fast CA)."""
    from acme import errors, messages

    try:
        acme.begin_finalization(order)
    except messages.Error as exc:
        if exc.code != "orderNotReady":
            raise
    while True:
        body = messages.Order.from_json(_post_as_get(acme, str(order.uri)).json())
        if body.status == messages.STATUS_INVALID:
            if body.error is not None:
                raise errors.IssuanceError(body.error)
            raise CaError("the CA did not issue (no reason given)")
        if body.status == messages.STATUS_VALID and body.certificate is not None:
            return str(_post_as_get(acme, body.certificate).text)
        if body.status == messages.STATUS_READY:
            acme.begin_finalization(order)
        if time.monotonic() > deadline:
            raise CaError("the CA did not finish in time")
        time.sleep(POLL_SECONDS)
