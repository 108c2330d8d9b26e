"""The Kubernetes objects of a release (issue 25 §2, first layer), checked without a cluster:
every object against the OpenAPI schemas of one pinned Kubernetes version with
``kubernetes-validate --strict`` (an unknown field fails, as ``kubectl apply
--validate=strict`` would), and the HTTPRoute against the Gateway API's CRD schema, vendored
beside this file and made strict the same way.

What this does not prove: that an API server admits them (admission, Pod Security, the CRD's
CEL rules: ``jsonschema`` skips them, and only the few that bear on a rendered route are
restated here), that a gateway routes by the weights, that the
NetworkPolicy is enforced (a CNI plugin does that), or that the base image runs the app.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator

from appdeck.common.errors import InvalidArgument
from appdeck.model import hostnames
from appdeck.model.release import AppSpec, Canary, Release, Resources
from appdeck.model.release import HealthCheck as AppHealthCheck
from appdeck.runtime.kubernetes import manifests, names, pods
from appdeck.runtime.kubernetes.limits import ClusterLimits

KUBERNETES = "1.34"
"""The Kubernetes version the objects must be valid for (kubernetes-validate 1.37.0 bundles
the schemas of 1.34; pinned in pyproject.toml)."""
HERE = Path(__file__).parent
HTTPROUTE_SCHEMA = HERE / "gateway-api-v1.6.1-httproute-v1.schema.json"
"""Gateway API v1.6.1, standard channel: ``spec.versions[v1].schema.openAPIV3Schema`` of
``config/crd/standard/gateway.networking.k8s.io_httproutes.yaml`` in
github.com/kubernetes-sigs/gateway-api at tag v1.6.1 (commit 8bb74df0), as it is."""
LIMITS = ClusterLimits(
    image="registry.local/appdeck-base:2026.11",
    source_url="http://appdeck.appdeck-system.svc:8080",
)
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: an API server prunes them silently, which
    would hide a misspelt field; where the schema keeps unknown fields, so does this."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


ROUTE = Draft7Validator(_strict(json.loads(HTTPROUTE_SCHEMA.read_text())))


def validate(obj: dict[str, Any]) -> None:
    """Raise unless ``obj`` is valid for the pinned Kubernetes (HTTPRoute: for the CRD)."""
    if obj["kind"] == "HTTPRoute":
        ROUTE.validate(obj)
        _route_cel_rules(obj)
        assert DNS_1035.fullmatch(obj["metadata"]["name"])
        assert len(obj["metadata"]["name"]) <= 63
    else:
        assert kubernetes_validate.validate(obj, KUBERNETES, strict=True) == KUBERNETES


_CRD_PATH = re.compile(r"(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+")


def _route_cel_rules(route: dict[str, Any]) -> None:
    """The CRD's CEL rules (``x-kubernetes-validations``, which ``jsonschema`` skips) that
    bear on what AppDeck renders, restated: a Service backend names its port, parent refs are
    unique, a PathPrefix is a clean absolute path."""
    spec = route["spec"]
    parents = [json.dumps(p, sort_keys=True) for p in spec["parentRefs"]]
    assert len(parents) == len(set(parents))
    for rule in spec["rules"]:
        for ref in rule["backendRefs"]:
            if ref.get("group", "") == "" and ref.get("kind", "Service") == "Service":
                assert "port" in ref
        for match in rule.get("matches", []):
            value = match["path"]["value"]
            assert value.startswith("/")
            assert _CRD_PATH.fullmatch(value)
            for bad in ("//", "/./", "/../", "%2f", "%2F", "#"):
                assert bad not in value
            assert not value.endswith(("/..", "/."))


def release(
    number: int = 1,
    *,
    app: str = "hello",
    tenant: str = "acme",
    app_id: int = 7,
    env: dict[str, str] | None = None,
    **spec: Any,
) -> Release:
    return Release(
        app_id=app_id,
        app_name=app,
        number=number,
        spec=AppSpec(**spec),
        env={"GREETING": "hi"} if env is None else env,
        route=hostnames.route_label(app, tenant),
    )


def render(r: Release, tenant: str = "acme", **kwargs: Any) -> list[dict[str, Any]]:
    return manifests.render(
        r, tenant, kwargs.pop("limits", LIMITS), source_token="t" * 32, **kwargs
    )


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [
        o for o in objects if o["kind"] == kind and not o["metadata"]["name"].endswith("-source")
    ]
    return found


LONG_TENANT = "t" + "x" * 38
LONG_APP = "a" * hostnames.max_app_name_length(LONG_TENANT)
SCENARIOS: dict[str, tuple[Release, str, dict[str, Any]]] = {
    "defaults": (release(), "acme", {}),
    "canary": (
        release(2, default_strategy="canary", canary=Canary(percent=10)),
        "acme",
        {"backends": [(release(1), 90), (release(2, default_strategy="canary"), 10)]},
    ),
    "outbound": (release(outbound=True, run_command="python3 app.py"), "acme", {}),
    "big limits clamped": (
        release(resources=Resources(memory_mb=65536, cpus=64, pids=32768, disk_mb=1048576)),
        "acme",
        {},
    ),
    "long tenant and app name": (
        release(123456, app=LONG_APP, tenant=LONG_TENANT, app_id=987654321),
        LONG_TENANT,
        {},
    ),
    "static, shared namespace, no env": (
        release(runtime="static", env={}, port=3000),
        "acme",
        {
            "limits": ClusterLimits(
                image=LIMITS.image, source_url=LIMITS.source_url, namespace_mode="shared"
            )
        },
    ),
    "slow health check on a deep path": (
        release(health_check=AppHealthCheck(path="/health/ready?full=1&x=%20", timeout_s=0.25)),
        "acme",
        {},
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_object_of_a_release_is_valid_for_the_pinned_kubernetes_and_the_gateway_api(
    scenario: str,
) -> None:
    r, tenant, kwargs = SCENARIOS[scenario]
    objects = render(r, tenant, **kwargs)
    kinds = sorted(o["kind"] for o in objects)
    expected = ["Deployment", "HTTPRoute", "NetworkPolicy", "Secret", "Secret", "Service"]
    if kwargs.get("limits", LIMITS).namespace_mode == "tenant":
        expected = sorted([*expected, "Namespace"])
    assert kinds == expected
    for obj in objects:
        validate(obj)


def test_the_validators_refuse_an_unknown_field_so_the_checks_above_bite() -> None:
    objects = render(release())
    deployment = by_kind(objects, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = (
        True
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    route = by_kind(objects, "HTTPRoute")
    route["spec"]["rules"][0]["backendRefs"][0]["wieght"] = 5
    with pytest.raises(jsonschema.ValidationError, match="wieght"):
        validate(route)


def test_the_canary_route_sends_each_share_to_its_release_service() -> None:
    old, new = release(1), release(2)
    route = manifests.http_route("hello", "acme", LIMITS, [(old, 90), (new, 10)])
    refs = route["spec"]["rules"][0]["backendRefs"]
    assert [(ref["name"], ref["weight"], ref["port"]) for ref in refs] == [
        ("app-hello--acme-r1", 90, 80),
        ("app-hello--acme-r2", 10, 80),
    ]
    assert route["spec"]["hostnames"] == ["hello--acme.localhost"]
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "appdeck",
            "namespace": "appdeck-gateway",
        }
    ]
    assert manifests.service(old, "acme", LIMITS)["metadata"]["name"] == refs[0]["name"]


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.integers(0, manifests.MAX_WEIGHT), min_size=1, max_size=16).filter(any))
def test_route_weights_are_kept_as_given_and_sum_as_given(weights: list[int]) -> None:
    backends = [(release(n + 1), w) for n, w in enumerate(weights)]
    route = manifests.http_route("hello", "acme", LIMITS, backends)
    refs = route["spec"]["rules"][0]["backendRefs"]
    assert [ref["weight"] for ref in refs] == weights
    assert sum(ref["weight"] for ref in refs) == sum(weights)
    validate(route)


@pytest.mark.parametrize(
    ("backends", "why"),
    [
        ([], "at least one"),
        ([(release(1), 0)], "every weight is 0"),
        ([(release(1), -1)], "not an integer"),
        ([(release(1), True)], "not an integer"),
        ([(release(1), 2.5)], "not an integer"),
        ([(release(1), manifests.MAX_WEIGHT + 1)], "not an integer"),
        ([(release(1), 50), (release(1), 50)], "not one backend"),
        ([(release(1, app="other"), 100)], "not one backend"),
    ],
)
def test_a_route_refuses_weights_a_gateway_would_not_take(backends: Any, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        manifests.http_route("hello", "acme", LIMITS, backends)


def test_resources_above_the_operator_ceilings_are_clamped_to_them() -> None:
    big = release(resources=Resources(memory_mb=65536, cpus=64, pids=32768, disk_mb=1048576))
    container = by_kind(render(big), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    amounts = {"cpu": "2000m", "memory": "2048Mi", "ephemeral-storage": "4096Mi"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}
    small = release(resources=Resources(memory_mb=64, cpus=0.05, disk_mb=128))
    container = by_kind(render(small), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {
        "cpu": "50m",
        "memory": "64Mi",
        "ephemeral-storage": "128Mi",
    }


def test_the_pod_is_hardened_in_every_container() -> None:
    deployment = by_kind(render(release(instances=3)), "Deployment")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod
    assert "hostPID" not in pod
    assert "serviceAccountName" not in pod
    for container in [*pod["initContainers"], *pod["containers"]]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    (app,) = pod["containers"]
    assert {"name": "source", "mountPath": "/app", "readOnly": True} in app["volumeMounts"]
    volumes = {v["name"]: v["emptyDir"] for v in pod["volumes"]}
    assert volumes == {"source": {"sizeLimit": "512Mi"}, "tmp": {"sizeLimit": "256Mi"}}


def test_the_readiness_probe_is_the_apps_health_check_and_liveness_only_a_connection() -> None:
    r = release(health_check=AppHealthCheck(path="/healthz", timeout_s=2.5), port=9000)
    app = by_kind(render(r), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert app["ports"] == [{"name": "http", "containerPort": 9000, "protocol": "TCP"}]
    assert app["readinessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "http",
        "scheme": "HTTP",
    }
    assert app["readinessProbe"]["timeoutSeconds"] == 3
    assert app["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert app["startupProbe"]["tcpSocket"] == {"port": "http"}
    assert {"name": "PORT", "value": "9000"} in app["env"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    env=st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True).filter(
            lambda n: n not in names.RESERVED_ENV
        ),
        st.text(
            st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),
            min_size=1,
            max_size=40,
        ).map(lambda v: "sEcReT:" + v),
        max_size=8,
    )
)
def test_env_values_are_only_in_the_secret_never_in_the_pod_spec(env: dict[str, str]) -> None:
    objects = render(release(env=env))
    secret = by_kind(objects, "Secret")
    assert secret["immutable"] is True
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == env
    deployment = by_kind(objects, "Deployment")
    text = json.dumps(deployment, ensure_ascii=False)
    assert "sEcReT:" not in text
    for value in secret["data"].values():
        assert value not in text
    pod = deployment["spec"]["template"]["spec"]
    (app,) = pod["containers"]
    assert {e["name"] for e in app["env"]} == {"PORT", "HOST", "HOME", "PATH", "PYTHONUNBUFFERED"}
    assert app["envFrom"] == [
        {"secretRef": {"name": secret["metadata"]["name"], "optional": False}}
    ]
    (fetch,) = pod["initContainers"]
    assert "envFrom" not in fetch  # the source token is not the app's, nor the env the fetch's


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"A=B": "x"}, "not a valid env var name"),
        ({"1ABC": "x"}, "not a valid env var name"),
        ({"A\nB": "x"}, "not a valid env var name"),
        ({"ABC\n": "x"}, "not a valid env var name"),
        ({"A-B": "x"}, "not a valid env var name"),
        ({"": "x"}, "not a valid env var name"),
        ({"PORT": "1"}, "set by the platform"),
        ({"DATABASE_URL": "x"}, "set by the platform"),
        ({"OK": "a\x00b"}, "NUL"),
        ({"OK": "a\ud800b"}, "not valid UTF-8"),
        ({"BIG": "x" * (1024 * 1024)}, "larger than a Kubernetes Secret"),
    ],
)
def test_an_env_a_secret_cannot_hold_safely_never_reaches_a_manifest(
    env: dict[str, str], why: str
) -> None:
    with pytest.raises(InvalidArgument, match=why):
        render(release(env=env))


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: render(release(health_check=AppHealthCheck(path="/a\nb"))), "health check path"),
        (lambda: render(release(health_check=AppHealthCheck(path="/a b"))), "health check path"),
        (lambda: render(release(health_check=AppHealthCheck(path="health"))), "health check path"),
        (lambda: render(release(health_check=AppHealthCheck(path="/é"))), "health check path"),
        (lambda: render(release(run_command="python3\x00 app.py")), "NUL"),
        (lambda: render(release(run_command="python3 \udc80")), "UTF-8"),
        (lambda: render(release(app="Hello")), "app name"),
        (lambda: render(release(app="-hello")), "app name"),
        (lambda: render(release(app="hello\n")), "app name"),
        (lambda: render(release(app="a" * 64)), "app name"),
        (lambda: render(release(tenant="ac--me"), "ac--me"), "tenant id"),
        (lambda: render(release(tenant="Acme"), "Acme"), "tenant id"),
        (lambda: render(release(), "other"), "routed as"),
        (lambda: render(release(0)), "no valid number"),
        (lambda: manifests.source_secret(release(), "acme", LIMITS, "short"), "source token"),
        (
            lambda: manifests.source_secret(release(), "acme", LIMITS, "t" * 30 + "\n"),
            "source token",
        ),
    ],
)
def test_a_client_value_invalid_where_it_goes_is_refused(make: Any, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        make()


TENANTS = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,58}[a-z0-9])?", fullmatch=True).filter(
    hostnames.routable_tenant
)


@st.composite
def apps(draw: st.DrawFn) -> tuple[str, str, int, int]:
    tenant = draw(TENANTS)
    longest = min(40, hostnames.max_app_name_length(tenant))
    app = draw(
        st.from_regex(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", fullmatch=True).filter(
            lambda a: len(a) <= longest
        )
    )
    return tenant, app, draw(st.integers(1, 2**63 - 1)), draw(st.integers(1, 2**31 - 1))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(apps())
def test_names_and_labels_are_valid_for_any_tenant_and_app(case: tuple[str, str, int, int]) -> None:
    tenant, app, app_id, number = case
    objects = render(release(number, app=app, tenant=tenant, app_id=app_id), tenant)
    for obj in objects:
        name = obj["metadata"]["name"]
        assert DNS_1035.fullmatch(name), name
        assert len(name) <= 63, name
        for key, value in obj["metadata"].get("labels", {}).items():
            assert LABEL_VALUE.fullmatch(value), (key, value)
            assert len(value) <= 63, (key, value)
        validate(obj)
    route = by_kind(objects, "HTTPRoute")
    assert route["spec"]["hostnames"] == [hostnames.hostname(app, tenant)]
    deployment = by_kind(objects, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    policy = by_kind(objects, "NetworkPolicy")
    assert (
        policy["spec"]["podSelector"]["matchLabels"].items()
        <= deployment["metadata"]["labels"].items()
    )


def test_a_long_name_is_cut_with_a_hash_so_it_stays_unique_and_the_same_each_time() -> None:
    first = names.object_name("app", "a" * 40 + "--" + "t" * 20, "r1")
    second = names.object_name("app", "a" * 40 + "--" + "t" * 20, "r2")
    assert len(first) == len(second) == 63
    assert first != second
    assert first == names.object_name("app", "a" * 40 + "--" + "t" * 20, "r1")
    assert names.object_name("app", "hello--acme", "r3") == "app-hello--acme-r3"


def test_without_outbound_an_app_reaches_only_dns_and_appdeck() -> None:
    policy = by_kind(render(release()), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["from"] == [
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": "appdeck-gateway"}
            },
            "podSelector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "appdeck"}},
        }
    ]
    assert ingress["ports"] == [{"protocol": "TCP", "port": "http"}]
    egress = policy["spec"]["egress"]
    assert [rule["ports"] for rule in egress] == [
        [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        [{"protocol": "TCP", "port": 8080}],
    ]
    assert not any("ipBlock" in peer for rule in egress for peer in rule["to"])


def test_with_outbound_an_app_reaches_public_addresses_on_443_but_no_private_range() -> None:
    policy = by_kind(render(release(outbound=True)), "NetworkPolicy")
    public = policy["spec"]["egress"][-1]
    assert public["ports"] == [{"protocol": "TCP", "port": 443}]
    v4, v6 = (peer["ipBlock"] for peer in public["to"])
    assert v4["cidr"] == "0.0.0.0/0"
    assert v6["cidr"] == "::/0"
    for blocked in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "127.0.0.0/8",
        "100.64.0.0/10",
    ):
        assert blocked in v4["except"]
    for blocked in ("fc00::/7", "fe80::/10", "::1/128", "::ffff:0:0/96"):
        assert blocked in v6["except"]


def test_the_source_comes_from_appdeck_through_the_init_container_with_its_own_token() -> None:
    objects = render(release(3, app_id=12))
    pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    (fetch,) = pod["initContainers"]
    assert fetch["command"][:2] == ["/bin/sh", "-c"]
    assert fetch["command"][3:] == [
        "appdeck-fetch",
        "http://appdeck.appdeck-system.svc:8080/internal/releases/12-3/workspace.tar",
        str(256 * 1024 * 1024),
    ]
    token = fetch["env"][0]["valueFrom"]["secretKeyRef"]
    (source,) = [
        o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == token["name"]
    ]
    assert base64.b64decode(source["data"]["token"]).decode() == "t" * 32
    assert source["immutable"] is True


def test_a_secret_owned_by_its_applied_deployment_is_still_valid() -> None:
    objects = render(release())
    deployment = by_kind(objects, "Deployment")
    secret = by_kind(objects, "Secret")
    secret["metadata"]["ownerReferences"] = [
        manifests.owner_reference(deployment, "6f1c2b7e-0d4a-4c1e-9a55-3d2f0e9b8a71")
    ]
    validate(secret)
    assert secret["metadata"]["ownerReferences"][0]["name"] == deployment["metadata"]["name"]


def test_a_tenant_gets_its_own_namespace_under_pod_security_restricted() -> None:
    objects = render(release())
    namespace = by_kind(objects, "Namespace")
    assert namespace["metadata"]["name"] == "appdeck-t-acme"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == {
        "appdeck-t-acme"
    }
    shared = ClusterLimits(
        image=LIMITS.image, source_url=LIMITS.source_url, namespace_mode="shared"
    )
    assert {o["metadata"]["namespace"] for o in render(release(), limits=shared)} == {"appdeck"}


@pytest.mark.parametrize(
    "changes",
    [
        {"image": "Bad Image"},
        {"source_url": "ftp://appdeck"},
        {"source_url": "http://appdeck/\n"},
        {"source_url": "http://appdeck/?q=1"},
        {"gateway_namespace": "Gateway"},
        {"private_v4": ("fc00::/7",)},
        {"max_source_mb": 4096},
        {"appdeck_pod_port": 70000},
        {"gateway_namespace": "appdeck-t-gw"},
        {"gateway_pod_labels": (("app", "bad value"),)},
    ],
)
def test_operator_limits_that_would_render_invalid_objects_are_refused(
    changes: dict[str, Any],
) -> None:
    settings_ = {"image": LIMITS.image, "source_url": LIMITS.source_url, **changes}
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        ClusterLimits(**settings_)


def test_the_gateways_proxies_may_run_outside_its_namespace_and_only_they_are_admitted() -> None:
    apart = ClusterLimits(
        image=LIMITS.image,
        source_url=LIMITS.source_url,
        gateway_namespace="appdeck-gateway",
        gateway_pods_namespace="envoy-gateway-system",
    )
    objects = render(release(), limits=apart)
    for obj in objects:
        validate(obj)
    [parent] = by_kind(objects, "HTTPRoute")["spec"]["parentRefs"]
    assert parent["namespace"] == "appdeck-gateway"  # the route attaches to the Gateway
    [rule] = by_kind(objects, "NetworkPolicy")["spec"]["ingress"]
    [peer] = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "envoy-gateway-system"  # traffic comes from its proxies
    }
    assert LIMITS.gateway_proxies_namespace == LIMITS.gateway_namespace
    with pytest.raises(ValueError, match="is not a Kubernetes name"):
        ClusterLimits(image=LIMITS.image, source_url=LIMITS.source_url, gateway_pods_namespace="X")


def test_the_pod_default_port_and_run_command_need_no_client_text() -> None:
    r = release(runtime="node")
    assert pods.port(r) == pods.DEFAULT_PORT
    assert pods.run_argv(r)[:2] == ["/bin/sh", "-c"]
    assert "node" in pods.run_argv(r)[2]


def test_a_tenant_named_like_a_platform_namespace_stays_out_of_it() -> None:
    for tenant in ("system", "gateway", "kube-system", "default"):
        namespace = by_kind(render(release(tenant=tenant), tenant), "Namespace")
        assert namespace["metadata"]["name"] == f"appdeck-t-{tenant}"


def test_the_policy_lets_apps_reach_appdeck_on_its_pods_port_not_its_services() -> None:
    limits = ClusterLimits(
        image=LIMITS.image, source_url="http://appdeck.appdeck-system.svc", appdeck_pod_port=8080
    )
    policy = by_kind(render(release(), limits=limits), "NetworkPolicy")
    assert policy["spec"]["egress"][1]["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert (
        ClusterLimits(image=LIMITS.image, source_url="https://appdeck.example").source_port == 443
    )
