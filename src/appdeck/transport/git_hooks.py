"""``POST /hooks/git/{app_id}``: GitHub's push webhook (``X-Hub-Signature-256``).

No bearer token: the signature is the credential. The body is read up to
:data:`~appdeck.platform.repos.webhook.MAX_BODY` bytes (413 beyond, before anything is looked
up). An unsigned or wrongly signed delivery, an app that does not exist or has no repository,
or an app id that is not a number: all get the same 401, so the endpoint tells a stranger
nothing about which apps exist. A good delivery: 202 when it starts a deploy or a CI run,
else 200, with what was done; a delivery taken before (by ``X-GitHub-Delivery`` or byte for
byte) is 200 ``duplicate`` and does nothing (:class:`RepoService` remembers them).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from appdeck.platform.repos.service import RepoService, WebhookRefused
from appdeck.platform.repos.webhook import MAX_BODY

PATH = "/hooks/git/{app_id}"
_REFUSED = {"error": "the delivery is not signed with this webhook's secret (X-Hub-Signature-256)"}


def git_hook_route(repos: RepoService) -> Route:
    async def endpoint(request: Request) -> Response:
        length = request.headers.get("content-length", "")
        if length and (not length.isdigit() or int(length) > MAX_BODY):
            return _too_large()
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return _too_large()
        raw = str(request.path_params.get("app_id", ""))
        if not raw.isdigit() or len(raw) > 18:
            return JSONResponse(_REFUSED, status_code=401)
        headers = request.headers
        try:
            outcome = await repos.push(
                int(raw),
                bytes(body),
                headers.get("x-hub-signature-256"),
                headers.get("x-github-event"),
                delivery=headers.get("x-github-delivery"),
            )
        except WebhookRefused:
            return JSONResponse(_REFUSED, status_code=401)
        answer: dict[str, object] = {"status": outcome.status}
        if outcome.commit:
            answer["commit"] = outcome.commit
        if outcome.reason:
            answer["reason"] = outcome.reason
        return JSONResponse(
            answer, status_code=202 if outcome.status in ("deploying", "testing") else 200
        )

    return Route(PATH, endpoint, methods=["POST"])


def _too_large() -> Response:
    return JSONResponse({"error": f"the body is larger than {MAX_BODY} bytes"}, status_code=413)
