"""Running Kubernetes objects under podman on this host: issue 25's third test layer.

``podman kube play`` takes a Deployment (and the ConfigMaps it mounts) and runs its pod
template as a podman pod, so a pod spec AppDeck renders can be run, hardened as a cluster would
run it, without a cluster. Everything here is this host's podman under a home of its own
(:data:`HOME`, a stable path so the base image is built once): its own storage, run state,
network configs and ``containers.conf``, passed in the environment and on the command line;
nothing global (``/etc/containers``, ``/var/lib/containers``) is read for storage or changed.

The settings that work on a host like ours (root in a container, PID 1 not systemd, cgroups v1
with a v2 ``unified`` hierarchy beside it, no ``CAP_SYS_RESOURCE``, no container registry), and
why (docs/kubernetes.md, "Running a rendered pod under podman"):

- runtime **runc**: crun 1.8 refuses a hybrid host whose v2 hierarchy holds a controller
  ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2"; ours holds
  ``hugetlb``); runc 1.1 runs there, and on v1 and v2 hosts alike;
- cgroup manager **cgroupfs** (there is no systemd to ask), events to a **file** (no journald);
- ``default_ulimits`` at most this process's own limits: podman as root otherwise raises
  ``RLIMIT_NOFILE`` and ``RLIMIT_NPROC`` to 1048576, which needs ``CAP_SYS_RESOURCE``;
- storage **overlay** (the kernel's, as root; ``APPDECK_PODMAN_STORAGE=vfs`` where the home is
  itself on overlayfs); network **netavark** bridges (the pod gets an address the host routes
  to; aardvark-dns, iptables).

The base image is made from Debian's packages, never pulled: the closure of Debian's
``python3.X-minimal`` and ``libpython3.X-stdlib``, and of the init container's ``dash``,
``coreutils``, ``curl`` and ``tar`` (:data:`TOOLS`; ``apt-get download``, unpacked with
``dpkg-deb -x``, no maintainer script run; about 47 MB), imported with ``podman import``, and
tagged by the hash of the package files it was made of: a Debian update makes a new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

HOME: Final = Path(os.environ.get("APPDECK_PODMAN_HOME", "/var/tmp/appdeck-podman"))
"""Where podman keeps this project's images, containers and configs (stable across runs)."""
STORAGE_DRIVER: Final = os.environ.get("APPDECK_PODMAN_STORAGE", "overlay")
IMAGE_NAME: Final = "localhost/appdeck-base"
RECIPE: Final = "3"
"""Bumped when the way the image is made changes (it is part of the image's tag)."""
TOOLS: Final = ("dash", "coreutils", "curl", "tar")
"""What a rendered pod's init container runs besides Python: ``/bin/sh``, ``rm``, ``curl``
and ``tar`` (it fetches and unpacks the release's workspace.tar)."""
EXCLUDED: Final = frozenset(
    {"dpkg", "install-info", "perl-base", "perl", "debconf", "mailcap", "mime-support"}
)
"""Dependencies the image does without: the package manager's own (no maintainer script runs
in it, nothing is installed into it afterwards) and what only they need."""
TRIMMED: Final = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
NPROC_CAP: Final = 4096
"""``RLIMIT_NPROC`` of a container, at most: a pod's own processes, not the host's."""
COMMAND_TIMEOUT_S: Final = 120.0
STOP_S: Final = 5
"""How long a pod's containers have between SIGTERM and SIGKILL when it is torn down."""
STALE_S: Final = 3600.0
"""A play this old (its YAML's age) belongs to a run that died without tearing it down."""


class PodmanUnavailable(RuntimeError):
    """podman cannot run a pod on this host; the message says what failed and what to do."""


@dataclass(frozen=True, slots=True)
class Image:
    ref: str
    built: bool
    """False: it was there already (made by an earlier run)."""
    seconds: float


@dataclass(frozen=True, slots=True)
class Played:
    """What one ``kube play`` started: its YAML (``kube down`` takes it) and the pods."""

    yaml: Path
    pods: tuple[str, ...]
    volumes: tuple[str, ...]
    """The ConfigMaps' and emptyDirs' volumes: podman 4.3's ``kube down`` leaves them behind."""
    secrets: tuple[str, ...] = ()
    """The Secrets, made with ``podman secret create`` before the play (:meth:`Podman.played`)."""


@dataclass(frozen=True, slots=True)
class Podman:
    home: Path = HOME
    storage_driver: str = STORAGE_DRIVER
    runtime: str = "runc"

    # -- configuration ---------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """podman's environment: the configs of :attr:`home`, never the host's."""
        env = {
            name: value for name, value in os.environ.items() if not name.startswith("CONTAINERS_")
        }
        env["CONTAINERS_CONF"] = str(self.home / "containers.conf")
        env["CONTAINERS_STORAGE_CONF"] = str(self.home / "storage.conf")
        env["CONTAINERS_REGISTRIES_CONF"] = str(self.home / "registries.conf")
        return env

    def configure(self) -> None:
        """Write the configs (each run: they follow this process's limits)."""
        for name in ("storage", "run", "tmp", "networks", "plays"):
            (self.home / name).mkdir(parents=True, exist_ok=True)
        nofile = _limit(resource.RLIMIT_NOFILE, None)
        nproc = _limit(resource.RLIMIT_NPROC, NPROC_CAP)
        _write(
            self.home / "containers.conf",
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            "[engine]\n"
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'runtime = "{self.runtime}"\n'
            f'tmp_dir = "{self.home / "tmp"}"\n'
            "[network]\n"
            'network_backend = "netavark"\n'
            f'network_config_dir = "{self.home / "networks"}"\n',
        )
        _write(
            self.home / "storage.conf",
            "[storage]\n"
            f'driver = "{self.storage_driver}"\n'
            f'graphroot = "{self.home / "storage"}"\n'
            f'runroot = "{self.home / "run"}"\n',
        )
        # no registry: an image that is not local fails at once instead of being looked up
        _write(self.home / "registries.conf", "unqualified-search-registries = []\n")

    def problem(self) -> str | None:
        """Why podman cannot run a pod here, or None: what is missing and how to get it."""
        missing = [tool for tool in ("podman", self.runtime, "conmon") if not shutil.which(tool)]
        if missing:
            return f"not installed: {', '.join(missing)} (`make k8s-deps` installs them)"
        if os.geteuid() != 0:
            return "podman runs pods here as root only (rootless needs subuids and a user bus)"
        self.configure()
        info = self._podman("info", "--format", "json", check=False)
        if info.returncode != 0:
            return f"`podman info` failed: {_tail(info.stderr)}"
        return None

    # -- the base image --------------------------------------------------------------------

    def ensure_image(self) -> Image:
        """The base image (Debian's python3), made once per set of Debian package files:
        resolving that set asks apt (~4 s), so it is remembered per state of apt's lists."""
        started = time.monotonic()
        self.configure()
        remembered = self.home / "image.json"
        lists = f"{RECIPE}:{_apt_lists_state()}"  # a new recipe is a new image too
        with _locked(self.home / "image.lock"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                known = json.loads(remembered.read_text())
                if known["lists"] == lists and self._has_image(known["ref"]):
                    return Image(known["ref"], built=False, seconds=time.monotonic() - started)
            packages = _closure([*_python_roots(), *TOOLS])
            files = _download_names(packages)
            digest = hashlib.sha256("\n".join([RECIPE, *sorted(files)]).encode()).hexdigest()
            ref = f"{IMAGE_NAME}:{digest[:16]}"
            built = not self._has_image(ref)
            if built:
                self._build(ref, packages)
            _write(remembered, json.dumps({"lists": lists, "ref": ref}))
        return Image(ref, built=built, seconds=time.monotonic() - started)

    def _has_image(self, ref: str) -> bool:
        return self._podman("image", "exists", ref, check=False).returncode == 0

    def _build(self, ref: str, packages: Sequence[str]) -> None:
        with tempfile.TemporaryDirectory(dir=self.home / "tmp") as scratch:
            rootfs = _rootfs(Path(scratch), packages)
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            try:
                self._podman(
                    "import", "--change", 'CMD ["/usr/bin/python3"]', "-", ref, stdin=tar.stdout
                )
            finally:
                if tar.stdout is not None:
                    tar.stdout.close()
                tar.wait(timeout=COMMAND_TIMEOUT_S)

    # -- pods ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def played(self, objects: Sequence[Mapping[str, Any]]) -> Iterator[Played]:
        """``kube play`` of ``objects`` (Secrets, ConfigMaps, a Deployment, a Service), torn
        down on the way out whatever happened in between.

        Each Secret becomes a podman secret holding its ``data`` before the play: podman
        4.3's play of a ``Secret`` stores the whole object, which its own ``secretKeyRef``
        and ``envFrom`` then fail to read ("secret ... is not valid JSON": they want the
        ``data`` map alone)."""
        self.configure()
        self.sweep()
        stem = uuid.uuid4().hex
        yaml = self.home / "plays" / f"{stem}.yaml"
        secrets = {
            str(item["metadata"]["name"]): dict(item.get("data") or {})
            for item in objects
            if item.get("kind") == "Secret"
        }
        played_objects = [item for item in objects if item.get("kind") != "Secret"]
        # what a killed run leaves is found by this file (:meth:`sweep`): written first
        yaml.with_suffix(".secrets").write_text("".join(f"{name}\n" for name in secrets))
        # JSON is YAML: no YAML writer needed
        yaml.write_text("\n---\n".join(json.dumps(item) for item in played_objects) + "\n")
        volumes = _volumes_of(played_objects)
        played = Played(yaml, pods=(), volumes=volumes, secrets=tuple(secrets))
        try:
            for name, data in secrets.items():
                self._podman("secret", "create", name, "-", input=json.dumps(data))
            report = self._podman("kube", "play", "--quiet", str(yaml), check=False)
            pods = tuple(self._pods_of(yaml))
            played = Played(yaml, pods=pods, volumes=volumes, secrets=tuple(secrets))
            if report.returncode != 0:
                logs = "\n".join(self.logs(pod) for pod in pods)
                raise RuntimeError(f"podman kube play failed: {_tail(report.stderr)}\n{logs}")
            yield played
        finally:
            self.down(played)

    def down(self, played: Played) -> None:
        """Stop and remove the pods, their containers, volumes and secrets. Pod by pod rather
        than ``kube down``, which takes ~3.5 s more here for the same work."""
        if played.pods:
            self._podman("pod", "stop", "--time", str(STOP_S), *played.pods, check=False)
            self._podman("pod", "rm", "--force", "--ignore", *played.pods, check=False)
        else:  # the play failed before its pods could be listed
            self._podman("kube", "down", str(played.yaml), check=False)
        for volume in played.volumes:
            self._podman("volume", "rm", "--force", volume, check=False)
        for secret in played.secrets:
            self._podman("secret", "rm", secret, check=False)
        played.yaml.unlink(missing_ok=True)
        played.yaml.with_suffix(".secrets").unlink(missing_ok=True)

    def sweep(self) -> None:
        """Tear down what a killed run left: plays older than :data:`STALE_S`."""
        for yaml in (self.home / "plays").glob("*.yaml"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                if time.time() - yaml.stat().st_mtime > STALE_S:
                    objects = [json.loads(text) for text in yaml.read_text().split("\n---\n")]
                    secrets = yaml.with_suffix(".secrets")
                    names = secrets.read_text().split() if secrets.exists() else []
                    pods = tuple(self._pods_of(yaml))
                    self.down(Played(yaml, pods, _volumes_of(objects), tuple(names)))

    def pod_ip(self, pod: str) -> str:
        """The address of ``pod`` on its network: what a Service's endpoint would hold."""
        infra = self._podman("pod", "inspect", pod, "--format", "{{.InfraContainerID}}")
        found = json.loads(self._podman("inspect", infra.stdout.strip()).stdout)
        for network in found[0]["NetworkSettings"]["Networks"].values():
            if network.get("IPAddress"):
                return str(network["IPAddress"])
        raise RuntimeError(f"pod {pod} has no address")

    def exec(self, container: str, *argv: str) -> str:
        """The output of ``argv`` run in ``container`` (as its own user, with its limits)."""
        return self._podman("exec", container, *argv).stdout

    def logs(self, pod: str) -> str:
        """Every container's output in ``pod`` (for a failure's message)."""
        said = []
        for container in self._containers_of(pod):
            found = self._podman("logs", container, check=False)
            said.append(f"-- {container}:\n{_tail(found.stdout + found.stderr, 2000)}")
        return "\n".join(said)

    def _containers_of(self, pod: str) -> list[str]:
        """Every container of ``pod``, the exited init containers too."""
        listed = self._podman(
            "ps", "--all", "--filter", f"pod={pod}", "--format", "{{.Names}}", check=False
        )
        return [name for name in listed.stdout.split() if not name.endswith("-infra")]

    def _pods_of(self, yaml: Path) -> Iterator[str]:
        """The pods a play of ``yaml`` made: ``<deployment>-pod-<n>``, as podman names them."""
        names = {
            item["metadata"]["name"]
            for text in yaml.read_text().split("\n---\n")
            if (item := json.loads(text)).get("kind") in {"Deployment", "Pod"}
        }
        listed = self._podman("pod", "ps", "--format", "{{.Name}}", check=False).stdout.split()
        for pod in listed:
            if pod in names or pod.rsplit("-pod-", 1)[0] in names:
                yield pod

    def _podman(
        self, *args: str, check: bool = True, stdin: Any = None, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", "--log-level=error", *args],
            env=self.env(),
            input=input,
            stdin=None if input is not None else stdin if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} failed: {_tail(done.stderr)}")
        return done


NOT_PLAYED: Final = {
    "Namespace": "podman has no namespaces: every pod is in one, whatever its tenant",
    "NetworkPolicy": "podman enforces none (netavark has no policy engine)",
    "HTTPRoute": "no gateway under podman: AppDeck's HAProxy data plane takes the route's "
    "weights instead",
}
"""The kinds a rendered release holds that podman 4.3 does not play, and why."""


def for_podman(
    objects: Sequence[Mapping[str, Any]], host_ports: Mapping[str, int]
) -> list[dict[str, Any]]:
    """``render()``'s objects as podman 4.3 can play them beside other releases, changed only
    where it cannot take them as they are (docs/kubernetes.md says why, case by case):

    - the kinds of :data:`NOT_PLAYED` are left out;
    - each Deployment's emptyDirs are named after it (``<deployment>-source``, ``-tmp``):
      podman 4.3 shares an emptyDir by name between pods, so every release would unpack its
      workspace into one ``source`` volume, and share one ``/tmp`` with every other app;
    - the ``http`` port of the Deployment named ``d`` gets ``hostIP: 127.0.0.1`` and
      ``hostPort: host_ports[d]``: podman 4.3 publishes every containerPort on the host, at
      the same number on 0.0.0.0 unless told, so two releases on 8080 would collide, and the
      app would be open on every interface. Published on loopback, it is also what AppDeck's
      data plane can reach (it forwards to 127.0.0.1 only), as a gateway reaches endpoints;
    - a pod with init containers restarts ``OnFailure``, not ``Always``: podman 4.3 applies
      the pod's policy to its init containers too, restarts the one that finished, and the
      play then fails removing it ("cannot remove container ... as it is running").

    Secrets and everything else go as rendered (:meth:`Podman.played` makes the Secrets)."""
    adapted: list[dict[str, Any]] = []
    for item in objects:
        if item.get("kind") in NOT_PLAYED:
            continue
        copied: dict[str, Any] = json.loads(json.dumps(item))
        if copied.get("kind") == "Deployment":
            name = copied["metadata"]["name"]
            pod = copied["spec"]["template"]["spec"]
            renamed = {
                volume["name"]: f"{name}-{volume['name']}"
                for volume in pod.get("volumes", ())
                if "emptyDir" in volume
            }
            for volume in pod.get("volumes", ()):
                volume["name"] = renamed.get(volume["name"], volume["name"])
            if pod.get("initContainers") and pod.get("restartPolicy") == "Always":
                pod["restartPolicy"] = "OnFailure"
            for container in [*pod.get("initContainers", ()), *pod["containers"]]:
                for mount in container.get("volumeMounts", ()):
                    mount["name"] = renamed.get(mount["name"], mount["name"])
                for port in container.get("ports", ()):
                    if port.get("name") == "http":
                        port["hostIP"] = "127.0.0.1"
                        port["hostPort"] = host_ports[name]
        adapted.append(copied)
    return adapted


def wait_http(host: str, port: int, path: str, *, deadline_s: float = 30.0) -> tuple[int, bytes]:
    """The first HTTP answer of ``host:port`` to ``GET path`` within ``deadline_s`` (refused
    and reset connections are retried: the pod may not listen yet)."""
    deadline = time.monotonic() + deadline_s
    while True:
        connection = http.client.HTTPConnection(host, port, timeout=2.0)
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            return answer.status, answer.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
        finally:
            connection.close()
        time.sleep(0.1)


def _volumes_of(objects: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The volumes a play of ``objects`` makes: one per ConfigMap and one per emptyDir, by
    its name."""
    maps = (item["metadata"]["name"] for item in objects if item.get("kind") == "ConfigMap")
    return (*maps, *_empty_dirs(objects))


def _empty_dirs(objects: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The ``emptyDir`` volumes of the Deployments and Pods in ``objects``, by name (podman
    4.3 makes each a named volume, shared by every pod naming one alike)."""
    found: list[str] = []
    for item in objects:
        if item.get("kind") not in ("Deployment", "Pod"):
            continue
        spec = item.get("spec") or {}
        pod = (
            (spec.get("template") or {}).get("spec") or {} if item["kind"] == "Deployment" else spec
        )
        for volume in pod.get("volumes") or ():
            if "emptyDir" in volume and volume["name"] not in found:
                found.append(str(volume["name"]))
    return tuple(found)


def _python_roots() -> list[str]:
    """The packages of Debian's ``python3`` (the sandbox's interpreter): its
    ``python3.X-minimal`` and that version's standard library."""
    depends = _run(["apt-cache", "depends", "--important", "python3"])
    for line in depends.splitlines():
        name = line.split(":", 1)[-1].strip()
        if line.strip().startswith(("Depends:", "PreDepends:")) and name.startswith("python3."):
            version = name.split("-")[0].removeprefix("python")
            return [f"python{version}-minimal", f"libpython{version}-stdlib"]
    raise PodmanUnavailable("apt knows no python3 package: run `apt-get update`")


def _closure(roots: Sequence[str]) -> list[str]:
    """``roots`` and what they depend on (Depends and Pre-Depends; of alternatives, the first
    not :data:`EXCLUDED`), without :data:`EXCLUDED`."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        seen.update(todo)
        listing = _run(["apt-cache", "depends", "--important", *todo])
        todo = []
        alternatives: list[str] = []
        lines = listing.splitlines()
        for index, line in enumerate(lines):
            stripped = line.strip()
            if not line.startswith(" ") or ":" not in stripped:
                continue
            kind, name = (part.strip() for part in stripped.lstrip("|").split(":", 1))
            if kind not in {"Depends", "PreDepends"}:
                continue
            if name.startswith("<"):  # a virtual package: its first provider, listed below
                following = lines[index + 1] if index + 1 < len(lines) else ""
                name = following.strip() if following.startswith("    ") else ""
            alternatives.append(name.split(":")[0])
            if stripped.startswith("|"):
                continue  # another alternative follows
            chosen = next((a for a in alternatives if a and a not in EXCLUDED), None)
            alternatives = []
            if chosen is not None and chosen not in seen and chosen not in todo:
                todo.append(chosen)
    return sorted(seen - EXCLUDED)


def _apt_lists_state() -> str:
    """A digest of apt's package lists (names, sizes, times): it changes when they do."""
    lists = Path("/var/lib/apt/lists")
    entries = sorted(
        f"{entry.name} {entry.stat().st_size} {entry.stat().st_mtime_ns}"
        for entry in (lists.iterdir() if lists.is_dir() else ())
        if entry.is_file()
    )
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def _download_names(packages: Sequence[str]) -> list[str]:
    """The file names (with versions) ``apt-get download`` would fetch for ``packages``."""
    uris = _run(["apt-get", "download", "--print-uris", *packages])
    return [line.split()[1] for line in uris.splitlines() if line.startswith("'")]


def _rootfs(scratch: Path, packages: Sequence[str]) -> Path:
    debs = scratch / "debs"
    rootfs = scratch / "rootfs"
    debs.mkdir()
    rootfs.mkdir()
    _run(["apt-get", "download", "-q", *packages], cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(rootfs)])
    for trimmed in TRIMMED:
        shutil.rmtree(rootfs / trimmed, ignore_errors=True)
    python = next((rootfs / "usr" / "bin").glob("python3.*"))
    (rootfs / "usr" / "bin" / "python3").symlink_to(python.name)
    for directory in ("app", "tmp", "proc", "sys", "dev", "etc", "run"):
        (rootfs / directory).mkdir(exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    # podman 4.3 gives an empty volume the mode of the directory it is mounted on: /app is
    # where the init container unpacks the workspace into an emptyDir, 0777 as the kubelet
    # makes one (a mounted volume always hides it: it is never where anything is written)
    (rootfs / "app").chmod(0o777)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/nonexistent\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
    return rootfs


def _limit(which: int, cap: int | None) -> int:
    """This process's limit ``which`` (the lower of soft and hard), at most ``cap``."""
    bounds = [value for value in resource.getrlimit(which) if value != resource.RLIM_INFINITY]
    if cap is not None:
        bounds.append(cap)
    return min(bounds) if bounds else 1_048_576


def _run(argv: Sequence[str], *, cwd: Path | None = None) -> str:
    done = subprocess.run(
        list(argv), cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise PodmanUnavailable(f"{' '.join(argv[:3])} failed: {_tail(done.stderr)}")
    return done.stdout


def _write(path: Path, text: str) -> None:
    """Write ``path`` unless it holds ``text`` already (workers share the home)."""
    if not path.exists() or path.read_text() != text:
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(text: str, limit: int = 1000) -> str:
    lines = [
        line for line in text.strip().splitlines() if "failed to connect to syslog" not in line
    ]
    return "\n".join(lines)[-limit:]
