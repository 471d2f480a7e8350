"""Test bed figures: build, up, down, memory and pod start latency, real nodes against KWOK.

    python benchmarks/testbed.py            # warm figures (binaries already built)
    python benchmarks/testbed.py --cold     # also a cold build: empty Go build cache, fresh
                                            # bin dir (takes ~15 min on 2 cores)

Measured in one window, one bed at a time: the default fleet with real GPU nodes, the same
fleet as KWOK nodes (the baseline), and a 100 x 8 KWOK fleet.  Pod start latency is a pod with
one GPU from a claim template, create -> Running, over ``--pods`` pods one after another
(min / median).  Prints one line per figure; nothing is asserted (tests assert behaviour, this
measures).
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

import statistics  # noqa: E402

from draconf import waits  # noqa: E402
from draconf.kube import connect  # noqa: E402
from draconf.pods import Pod, delete_pods  # noqa: E402
from draconf.profile import TESTBED_IMAGE  # noqa: E402
from draconf.testbed import build, inventory, pins  # noqa: E402
from draconf.testbed.cluster import Testbed  # noqa: E402


def _rss_kib(pid: str) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)


def real_node_mib(bed: Testbed) -> dict[str, float]:
    """Per real node: every process in its mount namespace (supervisor, kubelet, containerd,
    shims) and in its cgroups (its pods, the DRA plugin's among them), in MiB.  Pods sit outside
    the memory cgroup of the process that started the bed, so they are counted explicitly."""
    from draconf.testbed import hostsys
    out = {}
    for name, node in (bed.state() or {}).get("real_nodes", {}).items():
        mntns = int((Path(node["dir"]) / "mntns").read_text())
        pids = {str(p) for p in hostsys.pids_in_cgroup(node["cgroup_root"])}
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and os.stat(entry / "ns" / "mnt").st_ino == mntns:
                    pids.add(entry.name)
            except OSError:
                continue
        out[name] = sum(_rss_kib(p) for p in pids) / 1024
    return out


def pod_start_seconds(api, count: int) -> list[float]:
    """create -> Running of ``count`` single-GPU pods, one after another."""
    ns = "bench-latency"
    api.core.create_namespace({"metadata": {"name": ns}})
    api.resource.create_namespaced_resource_claim_template(ns, {
        "metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})
    # the namespace's default ServiceAccount must exist before a pod can be created
    waits.wait_until(f"namespace {ns}'s default ServiceAccount",
                     lambda: api.core.list_namespaced_service_account(ns).items, bool,
                     timeout=60, interval=0.05, describe=lambda items: f"{len(items)} ServiceAccounts")
    seconds = []
    for i in range(count):
        name = f"latency-{i}"
        started = time.monotonic()
        api.core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
            "restartPolicy": "Never", "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [{"name": "c", "image": TESTBED_IMAGE, "command": ["sleep", "1d"],
                            "resources": {"claims": [{"name": "gpu"}]}}]}})
        waits.wait_until(f"pod {name} to run", lambda: Pod.read(api, ns, name), lambda pod: pod.is_running,
                         timeout=120, interval=0.05, describe=lambda pod: pod.summary())
        seconds.append(time.monotonic() - started)
        delete_pods(api, ns, name)
        waits.wait_until(f"pod {name} to be gone",
                         lambda: [p.metadata.name for p in api.core.list_namespaced_pod(ns).items],
                         lambda names: name not in names, timeout=120, interval=0.1,
                         describe=lambda names: f"pods: {', '.join(names)}")
    return seconds


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


def measure(label: str, inv, pods: int = 0) -> float | None:
    bed = Testbed.named(f"bench-{label}")
    bed.down(log=lambda *_: None)
    started = time.monotonic()
    bed.up(inv, faults=[], log=lambda *_: None, timeout=600)
    up = time.monotonic() - started
    api = connect(bed.kubeconfig)
    slices = len(api.resource.list_resource_slice().items)
    time.sleep(5)  # let the controllers settle before reading memory
    memory = rss_mib(bed)
    per_node = real_node_mib(bed)
    latency = pod_start_seconds(api, pods) if pods else []
    started = time.monotonic()
    bed.down(log=lambda *_: None)
    down = time.monotonic() - started
    print(f"[{label}] {len(inv.nodes)} nodes, {inv.gpu_count} GPUs, {slices} ResourceSlices")
    print(f"[{label}] up   {up:6.1f} s   (target < 30 s for the default fleet)")
    print(f"[{label}] down {down:6.1f} s")
    print(f"[{label}] memory {sum(memory.values()):7.0f} MiB of the bed's own processes  ("
          + ", ".join(f"{k} {v:.0f}" for k, v in sorted(memory.items(), key=lambda kv: -kv[1])) + ")")
    if per_node:
        print(f"[{label}] memory per real node (kubelet, containerd, shims, pods): "
              + ", ".join(f"{k} {v:.0f} MiB" for k, v in sorted(per_node.items())))
    if latency:
        print(f"[{label}] GPU pod create -> Running over {len(latency)} pods: "
              f"min {min(latency):.2f} s, median {statistics.median(latency):.2f} s")
    return statistics.median(latency) if latency else None


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
    parser.add_argument("--pods", type=int, default=5, help="pods per latency measurement")
    args = parser.parse_args()
    print(f"Kubernetes {pins.KUBERNETES_VERSION}, etcd {pins.ETCD_VERSION}, kwok {pins.KWOK_VERSION}")
    if args.cold:
        cold_build()
    started = time.monotonic()
    build.ensure_built(log=lambda *_: None)
    print(f"[build] warm (binaries cached) {time.monotonic() - started:.2f} s")
    real = measure("mixed-real", inventory.load(inventory.GUIDE_INVENTORY), args.pods)
    kwok = measure("mixed-kwok", inventory.with_node_kind(inventory.load(inventory.GUIDE_INVENTORY), "kwok"), args.pods)
    if real and kwok:
        print(f"[ratio] GPU pod start, real / KWOK nodes (median): {real / kwok:.1f}x")
    if not args.skip_large:
        measure("100x8", inventory.uniform(100, 8))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
