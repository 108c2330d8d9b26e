"""The Kubernetes API as the driver and the router use it: JSON in, JSON out, by path.

A thin layer over ``kubernetes_asyncio``'s :class:`ApiClient` (which knows the kubeconfig, the
in-cluster service account, TLS and token refresh), not its generated typed APIs: the manifests
are plain dicts already (:mod:`.manifests`), an HTTPRoute has no typed API anyway, and the typed
models validate required fields on *responses*, which would make a partial object from a mock
server or an older API server an exception far from its cause.

Every call has a deadline (:data:`CALL_TIMEOUT_S`, the whole exchange, body included) and is
one HTTP request: the retries (a 409 on an update) are the callers', who know what to re-read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio.client import ApiClient

from appdeck.common.types import JsonObject

CALL_TIMEOUT_S: Final = 10.0
"""One API call, connect to last byte (a ``pods/log`` read included)."""
MERGE_PATCH: Final = "application/merge-patch+json"
Method = Literal["GET", "POST", "PATCH", "DELETE"]

# kind -> (API prefix, plural, namespaced): the kinds AppDeck renders and reads
KINDS: Final[Mapping[str, tuple[str, str, bool]]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "Pod": ("/api/v1", "pods", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "HTTPRoute": ("/apis/gateway.networking.k8s.io/v1", "httproutes", True),
}


class KubeError(Exception):
    """The API server answered with an error status (or not at all: ``status`` 0)."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


def collection(kind: str, namespace: str | None = None) -> str:
    """The path of ``kind``'s objects in ``namespace`` (None: all namespaces)."""
    prefix, plural, namespaced = KINDS[kind]
    if namespaced and namespace is not None:
        return f"{prefix}/namespaces/{quote(namespace, safe='')}/{plural}"
    return f"{prefix}/{plural}"


def named(kind: str, namespace: str | None, name: str) -> str:
    """The path of one object."""
    return f"{collection(kind, namespace)}/{quote(name, safe='')}"


def path_of(obj: JsonObject) -> str:
    """The path of a rendered object."""
    meta = obj["metadata"]
    return named(str(obj["kind"]), meta.get("namespace"), str(meta["name"]))


def selector(labels: Mapping[str, str]) -> str:
    """A ``labelSelector`` of equalities."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def matches(obj: JsonObject, labels: Mapping[str, str]) -> bool:
    """Whether ``obj`` carries every one of ``labels``. A list is filtered again with it: a
    selector the server ignored (kmock does) must not make AppDeck act on another release."""
    own = (obj.get("metadata") or {}).get("labels") or {}
    return all(own.get(key) == value for key, value in labels.items())


class KubeApi:
    """JSON calls to one API server."""

    def __init__(self, client: ApiClient, *, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.client = client
        self.timeout_s = timeout_s

    async def call(
        self,
        method: Method,
        path: str,
        *,
        body: JsonObject | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One call; the decoded JSON answer. Raises :class:`KubeError` on any error status."""
        raw = await self._call(method, path, body=body, query=query, content_type=content_type)
        return json.loads(raw) if raw else None

    async def text(self, path: str, query: Mapping[str, str] | None = None) -> str:
        """A GET whose answer is text (``pods/log``)."""
        raw = await self._call("GET", path, query=query)
        return raw.decode("utf-8", errors="replace")

    async def list(
        self, kind: str, namespace: str | None, labels: Mapping[str, str]
    ) -> list[JsonObject]:
        """The objects of ``kind`` carrying ``labels`` (``namespace`` None: all namespaces);
        none when the kind is not served (a cluster without the Gateway API's CRDs)."""
        try:
            answer = await self.call(
                "GET", collection(kind, namespace), query={"labelSelector": selector(labels)}
            )
        except KubeError as exc:
            if exc.status == 404:
                return []
            raise
        items = (answer or {}).get("items") or []
        return [item for item in items if isinstance(item, dict) and matches(item, labels)]

    async def delete(self, obj: JsonObject) -> bool:
        """Delete ``obj`` (its dependents in the background: a Deployment's ReplicaSets, pods
        and the Secrets it owns); False when it was gone already."""
        try:
            await self.call("DELETE", path_of(obj), body={"propagationPolicy": "Background"})
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def _call(
        self,
        method: Method,
        path: str,
        *,
        body: JsonObject | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        headers = {"Accept": "application/json, */*", "Content-Type": content_type}
        try:
            response = await self.client.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout_s,
            )
            async with response:
                raw: bytes = await response.read()
                status = int(response.status)
                reason = str(response.reason or "")
        except TimeoutError:
            message = f"{method} {path}: no answer in {self.timeout_s:g}s"
            raise KubeError(0, "Timeout", message) from None
        except (OSError, aiohttp.ClientError) as exc:
            raise KubeError(0, "Unreachable", f"{method} {path}: {exc}") from exc
        if not 200 <= status <= 299:
            raise KubeError(status, reason, _message(raw))
        return raw


def _message(raw: bytes) -> str:
    """The ``message`` of a ``Status`` answer, else the first bytes of the body."""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", errors="replace")
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])[:500]
    return raw[:200].decode("utf-8", errors="replace")
