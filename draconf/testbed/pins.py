"""The versions the embedded test bed is built from, and where the built binaries are cached.

The Go modules under ``gomod/`` carry the same pins in their ``go.mod``; the cache key below
hashes those files, so editing a pin there is what triggers a rebuild.

>>> KUBERNETES_VERSION
'v1.36.3'
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"

GOMOD_DIR = Path(__file__).parent / "gomod"

#: Binaries built from each Go module under gomod/, as (module dir, package, output name).
TARGETS = [
    ("kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
    ("kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager", "kube-controller-manager"),
    ("kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler", "kube-scheduler"),
    ("kubernetes", "k8s.io/kubernetes/cmd/kubectl", "kubectl"),
    ("etcd", ".", "etcd"),
    ("kwok", "sigs.k8s.io/kwok/cmd/kwok", "kwok"),
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


def pins_digest() -> str:
    """A short hash of every file that decides what gets built (go.mod, go.sum, main.go, flags)."""
    h = hashlib.sha256(version_ldflags().encode())
    for path in sorted(GOMOD_DIR.rglob("*")):
        if path.is_file() and path.suffix in {".mod", ".sum", ".go"}:
            h.update(str(path.relative_to(GOMOD_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def cache_root() -> Path:
    base = os.environ.get("DRACONF_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "draconf")
    return Path(base)


def bin_dir() -> Path:
    """``~/.cache/draconf/<k8s-version>/bin``: one directory per Kubernetes pin."""
    return cache_root() / KUBERNETES_VERSION / "bin"
