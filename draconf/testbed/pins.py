"""The versions the embedded test bed is built from, and where the built binaries are cached.

The Go modules under ``gomod/`` carry the same pins in their ``go.mod``; the cache key below
hashes those files, so editing a pin there is what triggers a rebuild.

>>> KUBERNETES_VERSION
'v1.36.3'
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from draconf.cachedir import cache_root  # noqa: F401  (the bed's callers find it here)

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
CONTAINERD_VERSION = "v2.4.2"
CNI_PLUGINS_VERSION = "v1.10.0"
#: A driver this project did not write (``draconf testbed up --driver example``), and the helm
#: that renders its chart; built only for such beds.
EXAMPLE_DRIVER_VERSION = "v0.2.1"
HELM_VERSION = "v3.22.0"
#: Debian packages whose binaries the bed takes as they are (extracted, never installed).
DEBIAN_PACKAGES = {"runc": ["usr/sbin/runc"], "busybox-static": ["bin/busybox"]}

GOMOD_DIR = Path(__file__).parent / "gomod"


@dataclass(frozen=True)
class Target:
    """One binary built from a Go module under gomod/."""
    module: str
    package: str
    output: str
    #: Static (no cgo) binaries: they run inside the bed's own images, or must not depend on
    #: the host's C libraries.
    static: bool = False
    tags: str = ""


_CONTAINERD_TAGS = "no_btrfs no_zfs no_devmapper"
TARGETS = [
    Target("kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
    Target("kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager", "kube-controller-manager"),
    Target("kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler", "kube-scheduler"),
    Target("kubernetes", "k8s.io/kubernetes/cmd/kubectl", "kubectl"),
    Target("kubernetes", "k8s.io/kubernetes/cmd/kubelet", "kubelet"),
    Target("etcd", ".", "etcd"),
    # Static: kwok runs in a sandbox root that holds none of the host's libraries.
    Target("kwok", "sigs.k8s.io/kwok/cmd/kwok", "kwok", static=True),
    Target("containerd", "github.com/containerd/containerd/v2/cmd/containerd", "containerd",
           static=True, tags=_CONTAINERD_TAGS),
    Target("containerd", "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
           "containerd-shim-runc-v2", static=True, tags=_CONTAINERD_TAGS),
    Target("containerd", "github.com/containerd/containerd/v2/cmd/ctr", "ctr", static=True,
           tags=_CONTAINERD_TAGS),
    Target("cni", "github.com/containernetworking/plugins/plugins/main/bridge", "cni/bridge", static=True),
    Target("cni", "github.com/containernetworking/plugins/plugins/main/loopback", "cni/loopback", static=True),
    Target("cni", "github.com/containernetworking/plugins/plugins/ipam/host-local", "cni/host-local",
           static=True),
    Target("gpu-driver", "./cmd/gpu-kubelet-plugin", "gpu-kubelet-plugin", static=True),
    Target("gpu-driver", "./cmd/nvidia-smi", "nvidia-smi", static=True),
    # The MPS control daemon stand-in, copied into each real node's driver root.
    Target("gpu-driver", "./cmd/nvidia-cuda-mps-control", "nvidia-cuda-mps-control", static=True),
    Target("pause", ".", "pause", static=True),
]

#: Built on demand by :func:`draconf.testbed.build.ensure_example_built` into ``bin/example``.
EXAMPLE_TARGETS = [
    Target("example-driver", "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin",
           "example/dra-example-kubeletplugin", static=True),
    Target("example-driver", "sigs.k8s.io/dra-example-driver/cmd/dra-example-webhook",
           "example/dra-example-webhook", static=True),
    Target("helm", "helm.sh/helm/v3/cmd/helm", "example/helm", static=True),
]


def version_ldflags() -> str:
    """Linker flags that make ``/version`` and ``kubectl version`` report the real release."""
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return " ".join([
        "-s -w",
        f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
    ])


def pins_digest(targets: list[Target] | None = None) -> str:
    """A short hash of every file that decides what gets built (go.mod, go.sum, main.go, flags)
    for ``targets`` (default: the bed's own :data:`TARGETS`), reading only their modules."""
    targets = TARGETS if targets is None else targets
    modules = {t.module for t in targets}
    h = hashlib.sha256(version_ldflags().encode())
    h.update(repr(targets).encode())
    if targets is TARGETS:
        h.update(repr(DEBIAN_PACKAGES).encode())
    for path in sorted(GOMOD_DIR.rglob("*")):
        relative = path.relative_to(GOMOD_DIR)
        if relative.parts[0] in modules and path.is_file() and path.suffix in {".mod", ".sum", ".go"}:
            h.update(str(relative).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def bin_dir() -> Path:
    """``~/.cache/draconf/<k8s-version>/bin``: one directory per Kubernetes pin."""
    return cache_root() / KUBERNETES_VERSION / "bin"
