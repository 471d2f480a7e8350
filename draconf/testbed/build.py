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
from draconf.testbed import pins

STAMP = ".pins-digest"
#: CRDs shipped inside the kwok module that the bed installs (kwok reads Exec rules from the API).
KWOK_CRDS = ["kwok.x-k8s.io_execs.yaml"]


def is_built(bindir: Path | None = None) -> bool:
    bindir = bindir or pins.bin_dir()
    stamp = bindir / STAMP
    return stamp.is_file() and stamp.read_text().strip() == pins.pins_digest() and all(
        (bindir / name).is_file() for _, _, name in pins.TARGETS)


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
        f"{pins.KWOK_VERSION} -> {bindir} (first build takes several minutes)")
    modules: dict[str, list[tuple[str, str]]] = {}
    for module, package, name in pins.TARGETS:
        modules.setdefault(module, []).append((package, name))
    for module, targets in modules.items():
        _go_build(pins.GOMOD_DIR / module, targets, bindir, log)
    _copy_kwok_crds(bindir, log)
    (bindir / STAMP).write_text(pins.pins_digest() + "\n")
    log(f"[build] done in {time.monotonic() - started:.0f}s")
    return bindir


def _go_build(moddir: Path, targets: list[tuple[str, str]], bindir: Path, log) -> None:
    names = ", ".join(name for _, name in targets)
    env = dict(os.environ)
    if len(targets) == 1:
        out = str(bindir / targets[0][1])
    else:
        out = str(bindir) + os.sep
    cmd = ["go", "build", "-v", "-trimpath", "-buildvcs=false", "-ldflags", pins.version_ldflags(), "-o", out,
           *[package for package, _ in targets]]
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


if __name__ == "__main__":  # python -m draconf.testbed.build
    try:
        print(ensure_built(force="--force" in sys.argv))
    except DraconfError as err:
        sys.exit(f"error: {err}")
