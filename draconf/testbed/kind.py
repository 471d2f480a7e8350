"""``draconf run --target kind``: a DRA-ready kind cluster with dra-example-driver, for users
who have Docker.

The cluster is made through pytest-kind's ``KindCluster`` (the maintained fork pytest-kind-ng
keeps the ``pytest_kind`` import path), from a config that turns DRA on (the feature gate) and
CDI on in containerd (``enable_cdi``: the example driver injects through CDI).  The example
driver is installed from its own chart exactly as on the embedded bed (``example_driver.render``
and ``install``), but with the chart's own image, which kind's nodes pull from registry.k8s.io.
The suite then runs with ``--profile example`` against the cluster's kubeconfig, and the
cluster is deleted afterwards unless ``--keep-cluster``.

On GPU hosts NVIDIA's chart is installed instead, by hand (docs/real-cluster.md, "On a kind cluster").  A missing ``kind`` or ``docker``
binary, or a Docker daemon that does not answer, is one line and exit 12 (the target cannot
be used), before anything is created.

>>> config = cluster_config(workers=1)
>>> config["featureGates"], [n["role"] for n in config["nodes"]]
({'DynamicResourceAllocation': True}, ['control-plane', 'worker'])
>>> "enable_cdi = true" in config["containerdConfigPatches"][0]
True
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

import yaml

from draconf.errors import DraconfError, TargetUnusable

#: The node image: the Kubernetes release dra-example-driver v0.2.1's own kind demo pins
#: (demo/scripts/common.sh, KIND_K8S_TAG), with resource.k8s.io/v1 served by default.
DEFAULT_IMAGE = "kindest/node:v1.34.0"
DEFAULT_NAME = "draconf"
#: containerd's CRI plugin section differs between containerd 1.x and 2.x; kind node images
#: from v1.34 ship containerd 2.x, whose CRI runtime section is this one.
CDI_PATCH = '[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true'


def cluster_config(workers: int = 1) -> dict:
    """The kind cluster config: DRA and CDI on, one control plane, ``workers`` worker nodes
    (where the example driver's kubelet plugin runs: the control plane's NoSchedule taint keeps
    it, and the suite's pods, off that node)."""
    if workers < 1:
        raise DraconfError(f"a kind cluster for the suite needs at least one worker node, not {workers}")
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        # GA and on by default since 1.34; stated for clarity (an image without resource.k8s.io/v1
        # is caught by preflight resource-api).
        "featureGates": {"DynamicResourceAllocation": True},
        "containerdConfigPatches": [CDI_PATCH],
        "nodes": [{"role": "control-plane"}] + [{"role": "worker"} for _ in range(workers)],
    }


def check_tools(which=shutil.which, run=subprocess.run) -> Path:
    """The ``kind`` binary's path, once kind and a Docker that answers are there; else one
    line (TargetUnusable, exit 12)."""
    missing = [tool for tool in ("kind", "docker") if not which(tool)]
    if missing:
        raise TargetUnusable(
            f"--target kind needs {' and '.join(missing)} on PATH, and this machine has "
            f"{'neither' if len(missing) == 2 else 'no ' + missing[0]}; install kind "
            "(https://kind.sigs.k8s.io) and Docker, or use --target testbed (no Docker needed)")
    if not which("go"):
        # Before the cluster is made: the driver's chart comes from its Go module, and helm
        # is built from Go, once the cluster is up.
        raise TargetUnusable("--target kind installs dra-example-driver from its own chart, which comes from "
                             "its Go module, with helm built from Go; this machine has no `go` on PATH: "
                             "install Go 1.26 or later, or use --target testbed")
    proc = run([which("docker"), "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        raise TargetUnusable(f"--target kind: Docker does not answer ({last}); start the Docker "
                             "daemon, or use --target testbed (no Docker needed)")
    return Path(which("kind"))


def kind_cluster_class():
    """pytest-kind's KindCluster; without the package, one line saying how to get it."""
    try:
        from pytest_kind import KindCluster
    except ImportError:
        raise DraconfError("--target kind needs pytest-kind-ng: pip install 'draconf[kind]'") from None
    return KindCluster


@dataclass
class KindTarget:
    """One kind cluster for one ``draconf run``: ``start`` makes (or reuses) it and installs the
    driver, ``stop`` deletes it unless kept."""
    name: str
    workdir: Path
    image: str = DEFAULT_IMAGE
    keep: bool = False
    workers: int = 1
    log: Callable[[str], None] = print

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def config_file(self) -> Path:
        return self.workdir / "kind-config.yaml"

    def start(self, which=shutil.which, run=subprocess.run) -> Path:
        """Make (or, kept, reuse) the cluster, install the driver; return the kubeconfig."""
        self.create_cluster(which, run)
        self.install_driver()
        return self.kubeconfig

    def create_cluster(self, which=shutil.which, run=subprocess.run) -> None:
        kind = check_tools(which, run)
        KindCluster = kind_cluster_class()
        self.workdir.mkdir(parents=True, exist_ok=True)
        existing = run([str(kind), "get", "clusters"], capture_output=True, text=True).stdout.split()
        if self.name in existing and not self.keep:
            raise DraconfError(f"a kind cluster named {self.name!r} already exists; pass --keep-cluster "
                               f"to reuse it (it is then kept), or delete it: kind delete cluster --name {self.name}")
        self.config_file.write_text(yaml.safe_dump(cluster_config(self.workers), sort_keys=False))
        if self.name in existing:
            # KindCluster reuses the cluster but reads the kubeconfig from its file: refresh it.
            proc = run([str(kind), "get", "kubeconfig", "--name", self.name], capture_output=True, text=True)
            if proc.returncode != 0:
                raise TargetUnusable(f"kind cluster {self.name!r} exists but its kubeconfig cannot be "
                                     f"read: {proc.stderr.strip().splitlines()[-1:]}")
            self.kubeconfig.write_text(proc.stdout)
            self.kubeconfig.chmod(0o600)
        # KindCluster keeps its files under ./.pytest-kind/<name>: keep them in our own directory.
        with contextlib.chdir(self.workdir):
            self.cluster = KindCluster(self.name, kubeconfig=self.kubeconfig, image=self.image,
                                       kind_path=kind, kubectl_path=Path(which("kubectl") or "kubectl"))
            self.log(f"{'reusing' if self.name in existing else 'creating'} kind cluster {self.name!r} "
                     f"({self.image})")
            try:
                self.cluster.create(self.config_file)
            except subprocess.CalledProcessError as err:
                raise TargetUnusable(f"`kind {' '.join(err.cmd[1:3])}` failed (exit {err.returncode}); "
                                     "its output is above") from None

    def install_driver(self, timeout: float = 300) -> None:
        from draconf.kube import connect
        from draconf.testbed import build, example_driver
        api = connect(self.kubeconfig)
        helm = build.ensure_helm_built(log=self.log)  # helm only: not the embedded bed's binaries
        self.log("installing dra-example-driver from its chart (helm template, the chart's own image)")
        docs = example_driver.render(helm, build.example_chart_dir(), None, *example_driver.cluster_facts(api))
        example_driver.install(api, docs)
        wait_driver_ready(api, timeout)

    def stop(self) -> None:
        if self.keep or not hasattr(self, "cluster"):
            return
        self.log(f"deleting kind cluster {self.name!r} (--keep-cluster keeps it)")
        try:
            self.cluster.delete()
        except subprocess.CalledProcessError as err:
            self.log(f"`kind delete cluster --name {self.name}` failed (exit {err.returncode}); "
                     "delete it by hand")


def driver_problems(api) -> list[str]:
    """What keeps the example driver from being ready on the cluster (empty when it is)."""
    from draconf.testbed import example_driver
    found = []
    if example_driver.DEVICE_CLASS not in {c.metadata.name for c in api.resource.list_device_class().items}:
        found.append(f"no DeviceClass {example_driver.DEVICE_CLASS}")
    pods = api.core.list_namespaced_pod(example_driver.NAMESPACE, label_selector=example_driver.PLUGIN_SELECTOR).items
    ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    if not pods or len(ready) < len(pods):
        found.append(f"{len(ready)}/{len(pods)} kubelet plugin pod(s) ready")
    published = {s.spec.node_name for s in api.resource.list_resource_slice().items
                 if s.spec.driver == example_driver.DRIVER and s.spec.devices}
    if missing := sorted({p.spec.node_name for p in pods} - published):
        found.append(f"no devices published on {', '.join(missing)}")
    return found


def wait_driver_ready(api, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    found = driver_problems(api)
    while found and time.monotonic() < deadline:
        time.sleep(2)
        found = driver_problems(api)
    if found:
        raise DraconfError(f"dra-example-driver did not become ready on the kind cluster within "
                           f"{timeout:.0f}s: {'; '.join(found)}")
