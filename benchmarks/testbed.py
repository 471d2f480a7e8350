"""Test bed figures: build, up, down and memory, for the default fleet and a 100 x 8 fleet.

    python benchmarks/testbed.py            # warm figures (binaries already built)
    python benchmarks/testbed.py --cold     # also a cold build: empty Go build cache, fresh
                                            # bin dir (takes ~15 min on 2 cores)

Prints one line per figure; nothing is asserted (tests assert behaviour, this measures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from draconf.kube import connect  # noqa: E402
from draconf.testbed import build, inventory, pins  # noqa: E402
from draconf.testbed.cluster import Testbed  # noqa: E402


def rss_mib(bed: Testbed) -> dict[str, float]:
    """Resident memory of each process the bed started, in MiB."""
    out = {}
    for name, proc in (bed.state() or {}).get("processes", {}).items():
        try:
            status = Path(f"/proc/{proc['pid']}/status").read_text()
        except OSError:
            continue
        kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        out[name] = kb / 1024
    return out


def measure(label: str, inv) -> None:
    bed = Testbed.named(f"bench-{label}")
    bed.down(log=lambda *_: None)
    started = time.monotonic()
    bed.up(inv, faults=[], log=lambda *_: None, timeout=600)
    up = time.monotonic() - started
    api = connect(bed.kubeconfig)
    slices = len(api.resource.list_resource_slice().items)
    time.sleep(5)  # let the controllers settle before reading memory
    memory = rss_mib(bed)
    started = time.monotonic()
    bed.down(log=lambda *_: None)
    down = time.monotonic() - started
    print(f"[{label}] {len(inv.nodes)} nodes, {inv.gpu_count} GPUs, {slices} ResourceSlices")
    print(f"[{label}] up   {up:6.1f} s   (target < 30 s for the default fleet)")
    print(f"[{label}] down {down:6.1f} s")
    print(f"[{label}] memory {sum(memory.values()):7.0f} MiB  ("
          + ", ".join(f"{k} {v:.0f}" for k, v in sorted(memory.items(), key=lambda kv: -kv[1])) + ")")


def cold_build() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GOCACHE=f"{tmp}/gocache", DRACONF_CACHE_DIR=f"{tmp}/draconf")
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "draconf.testbed.build"], env=env, check=True,
                       cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.DEVNULL)
        print(f"[build] cold (empty Go build cache, modules cached) {time.monotonic() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--skip-large", action="store_true", help="skip the 100 x 8 fleet")
    args = parser.parse_args()
    print(f"Kubernetes {pins.KUBERNETES_VERSION}, etcd {pins.ETCD_VERSION}, kwok {pins.KWOK_VERSION}")
    if args.cold:
        cold_build()
    started = time.monotonic()
    build.ensure_built(log=lambda *_: None)
    print(f"[build] warm (binaries cached) {time.monotonic() - started:.2f} s")
    measure("mixed", inventory.load())
    if not args.skip_large:
        measure("100x8", inventory.uniform(100, 8))


if __name__ == "__main__":
    main()
