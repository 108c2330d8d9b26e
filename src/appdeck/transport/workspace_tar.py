"""``GET /internal/releases/{release_id}/workspace.tar``: a release's prepared workspace, for
the init container of its Kubernetes pods (docs/kubernetes.md, "Source delivery").

The credential is the release's own bearer token (:mod:`appdeck.platform.workspace_tars`).
No token, a garbled one, or one of another release: 401, the same body whatever the release,
decided before anything is looked up (so it says nothing of which releases exist). The right
token for a release with no built workspace here: 404. A workspace over the size limit: 413,
before a byte of it. Otherwise 200, ``application/x-tar`` with its exact ``Content-Length``,
streamed as it is made; a stream that cannot finish (a file changed under it) is cut short,
so the reader, who knows the length, fails instead of unpacking half a workspace.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from appdeck.common.errors import AppDeckError, NotFound, QuotaExceeded
from appdeck.platform.workspace_tars import Unauthenticated, WorkspaceTars
from appdeck.runtime.export import WorkspaceTar

PATH = "/internal/releases/{release_id}/workspace.tar"
_REFUSED = {"error": "this token opens no workspace here"}
log = logging.getLogger("appdeck.transport")


def workspace_tar_route(tars: WorkspaceTars) -> Route:
    async def endpoint(request: Request) -> Response:
        release_id = str(request.path_params.get("release_id", ""))
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        presented = credentials.strip() if scheme.lower() == "bearer" else None
        try:
            tar = await tars.open(release_id, presented)
        except Unauthenticated:
            return JSONResponse(
                _REFUSED, status_code=401, headers={"www-authenticate": 'Bearer realm="workspace"'}
            )
        except NotFound:
            return JSONResponse({"error": "no built workspace for this release"}, status_code=404)
        except QuotaExceeded as exc:
            return JSONResponse({"error": exc.message}, status_code=413)
        except AppDeckError as exc:  # unreadable (the app's own doing) or unavailable
            return JSONResponse(
                {"error": exc.message}, status_code=503, headers={"retry-after": "1"}
            )
        headers = {"content-length": str(tar.size), "cache-control": "no-store"}
        if request.method == "HEAD":
            await tar.aclose()
            return Response(media_type="application/x-tar", headers=headers)
        return StreamingResponse(
            _body(tar, release_id), media_type="application/x-tar", headers=headers
        )

    return Route(PATH, endpoint, methods=["GET"])


async def _body(tar: WorkspaceTar, release_id: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in tar.chunks():
            yield chunk
    except AppDeckError as exc:
        log.warning("workspace tar of release %s cut short: %s", release_id, exc.message)
        raise  # the server drops the connection: short of its Content-Length, it is refused
    finally:
        await tar.aclose()
