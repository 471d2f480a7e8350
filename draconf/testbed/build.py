"""Build the test bed's control plane from Go modules into the user cache.

Nothing is downloaded except through the Go module proxy; nothing is written into the repo.
A stamp file records the digest of the pins, so a warm cache costs one file read.

Example::

    from draconf.testbed import build
    bindir = build.ensure_built()          # builds once, then returns at once
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from draconf.errors import DraconfError
from draconf.testbed import debs, images, pins

STAMP = ".pins-digest"
#: CRDs shipped inside the kwok module that the bed installs (kwok reads Exec rules from the API).
KWOK_CRDS = ["kwok.x-k8s.io_execs.yaml"]


def is_built(bindir: Path | None = None) -> bool:
    bindir = bindir or pins.bin_dir()
    stamp = bindir / STAMP
    return stamp.is_file() and stamp.read_text().strip() == pins.pins_digest() and all(
        (bindir / target.output).is_file() for target in pins.TARGETS)


def ensure_built(log=print, force: bool = False) -> Path:
    """Return the directory holding the pinned binaries, building them first if needed."""
    bindir = pins.bin_dir()
    if not force and is_built(bindir):
        return bindir
    if shutil.which("go") is None:
        raise DraconfError(
            "the test bed is built from Go modules, but `go` is not on PATH. "
            "Install Go 1.26 or later, or point --target at an existing cluster.")
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / STAMP).unlink(missing_ok=True)
    started = time.monotonic()
    log(f"[build] Kubernetes {pins.KUBERNETES_VERSION}, etcd {pins.ETCD_VERSION}, kwok "
        f"{pins.KWOK_VERSION}, containerd {pins.CONTAINERD_VERSION}, CNI plugins "
        f"{pins.CNI_PLUGINS_VERSION} -> {bindir} (first build takes several minutes)")
    # One `go build` per module and kind of binary: packages of one build share compilation.
    groups: dict[tuple, list[pins.Target]] = {}
    for target in pins.TARGETS:
        key = (target.module, target.static, target.tags, os.path.dirname(target.output))
        groups.setdefault(key, []).append(target)
    for (module, static, tags, subdir), targets in groups.items():
        (bindir / subdir).mkdir(parents=True, exist_ok=True)
        _go_build(pins.GOMOD_DIR / module, targets, bindir / subdir, log, static=static, tags=tags,
                  ldflags=pins.version_ldflags())
    _copy_kwok_crds(bindir, log)
    versions = debs.fetch(pins.DEBIAN_PACKAGES, bindir, log=log)
    log("[build] from Debian: " + ", ".join(f"{p} {v}" for p, v in versions.items()))
    build_images(bindir, log)
    (bindir / STAMP).write_text(pins.pins_digest() + "\n")
    log(f"[build] done in {time.monotonic() - started:.0f}s")
    return bindir


def ensure_example_built(log=print) -> Path:
    """Build dra-example-driver (kubelet plugin, webhook), helm and the plugin's image, once;
    return the directory holding them (``bin/example``).  Only beds with ``--driver example``
    need them, so a plain ``draconf testbed build`` does not spend the time."""
    bindir = ensure_built(log=log)
    outdir = bindir / "example"
    stamp = outdir / STAMP
    digest = pins.pins_digest(pins.EXAMPLE_TARGETS)
    if stamp.is_file() and stamp.read_text().strip() == digest and \
            all((bindir / t.output).is_file() for t in pins.EXAMPLE_TARGETS):
        return outdir
    outdir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    started = time.monotonic()
    log(f"[build] dra-example-driver {pins.EXAMPLE_DRIVER_VERSION} and helm {pins.HELM_VERSION} "
        f"-> {outdir} (first build takes a few minutes)")
    for module in dict.fromkeys(t.module for t in pins.EXAMPLE_TARGETS):
        targets = [t for t in pins.EXAMPLE_TARGETS if t.module == module]
        # Their own version flags: these are not Kubernetes components.
        _go_build(pins.GOMOD_DIR / module, targets, outdir, log, static=True, tags="", ldflags="-s -w")
    archive = images.example_plugin_image(outdir / "dra-example-kubeletplugin", images_dir())
    log(f"[build] image: {archive.ref}")
    stamp.write_text(digest + "\n")
    log(f"[build] done in {time.monotonic() - started:.0f}s")
    return outdir


def ensure_helm_built(log=print) -> Path:
    """Build only helm (into ``bin/example``, where :func:`ensure_example_built` puts it), for
    beds that render another chart than dra-example-driver's and for a kind cluster; return its
    path.  Nothing else is built: a kind target needs helm, not the bed's binaries."""
    target = next(t for t in pins.EXAMPLE_TARGETS if t.module == "helm")
    helm = pins.bin_dir() / target.output
    stamp = helm.with_name(".helm-" + STAMP.lstrip("."))
    digest = pins.pins_digest([target])
    if helm.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return helm
    if shutil.which("go") is None:
        raise DraconfError(f"helm {pins.HELM_VERSION} is built from its Go module, but `go` is not on PATH: "
                           "install Go 1.26 or later")
    helm.parent.mkdir(parents=True, exist_ok=True)
    log(f"[build] helm {pins.HELM_VERSION} -> {helm.parent}")
    _go_build(pins.GOMOD_DIR / target.module, [target], helm.parent, log, static=True, tags="", ldflags="-s -w")
    stamp.write_text(digest + "\n")
    return helm


def _go_build(moddir: Path, targets: list[pins.Target], outdir: Path, log, static: bool, tags: str,
              ldflags: str) -> None:
    names = ", ".join(os.path.basename(t.output) for t in targets)
    env = dict(os.environ)
    if static:
        env["CGO_ENABLED"] = "0"
    if len(targets) == 1:
        out = str(outdir / os.path.basename(targets[0].output))
    else:
        out = str(outdir) + os.sep
    cmd = ["go", "build", "-v", "-trimpath", "-buildvcs=false", "-ldflags", ldflags,
           *(["-tags", tags] if tags else []), "-o", out, *[t.package for t in targets]]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=moddir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    count = [0]

    def progress() -> None:
        while proc.poll() is None:
            time.sleep(15)
            if proc.poll() is None:
                log(f"[build] {names}: {count[0]} packages compiled, "
                    f"{time.monotonic() - started:.0f}s")

    ticker = threading.Thread(target=progress, daemon=True)
    ticker.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        count[0] += 1
        tail = (tail + [line.rstrip()])[-30:]
    if proc.wait() != 0:
        raise DraconfError(
            f"building {names} failed (go build in {moddir}, exit {proc.returncode}); "
            "last output:\n  " + "\n  ".join(tail))
    log(f"[build] {names} built in {time.monotonic() - started:.0f}s")


def _copy_kwok_crds(bindir: Path, log) -> None:
    moddir = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"], cwd=pins.GOMOD_DIR / "kwok",
        capture_output=True, text=True, check=True).stdout.strip()
    crddir = bindir.parent / "crds"
    crddir.mkdir(exist_ok=True)
    for name in KWOK_CRDS:
        shutil.copyfile(Path(moddir) / "kustomize" / "crd" / "bases" / name, crddir / name)


def crd_dir() -> Path:
    return pins.bin_dir().parent / "crds"


def images_dir() -> Path:
    return pins.bin_dir().parent / "images"


def build_images(bindir: Path, log=print) -> list[images.ImageArchive]:
    """The images real nodes import (there is no registry): sandbox, workload, GPU plugin."""
    out = images_dir()
    out.mkdir(parents=True, exist_ok=True)
    built = [images.pause_image(bindir / "pause", out),
             images.workload_image(bindir / "busybox", out),
             images.gpu_plugin_image(bindir / "gpu-kubelet-plugin", out)]
    log("[build] images: " + ", ".join(a.ref for a in built))
    return built


def image_archives(driver: str = "nvidia") -> list[Path]:
    """The archives each real node imports: the bed's own, and the plugin image of ``driver``."""
    plugin = images.GPU_PLUGIN_REF if driver == "nvidia" else images.EXAMPLE_PLUGIN_REF
    return [images_dir() / images.archive_name(ref) for ref in (images.PAUSE_REF, images.WORKLOAD_REF, plugin)]


def example_chart_dir() -> Path:
    """dra-example-driver's own Helm chart, as its module ships it (never a copy of ours)."""
    moddir = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/dra-example-driver"],
        cwd=pins.GOMOD_DIR / "example-driver", capture_output=True, text=True, check=True).stdout.strip()
    return Path(moddir) / "deployments" / "helm" / "dra-example-driver"


if __name__ == "__main__":  # python -m draconf.testbed.build
    try:
        print(ensure_built(force="--force" in sys.argv))
    except DraconfError as err:
        sys.exit(f"error: {err}")
