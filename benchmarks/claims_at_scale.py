"""800 single-GPU claims on a 100 x 8 KWOK fleet: create -> all Running, delete -> all released
(issue 13's targets: ≥ 40 claims/s and ≥ 80 claims/s on this 2-core machine).

    python benchmarks/claims_at_scale.py [--times 3] [--nodes 100] [--gpus 8]

Brings up its own bed (``bench-scale``: NODES KWOK nodes of GPUS GPUs each, the simulated
driver preparing what the scheduler allocates), then per round, in a fresh namespace: a
ResourceClaimTemplate of one GPU and NODES x GPUS pods using it, sent by a thread pool as
``kubectl apply`` sends them; the time until every pod is Running; then every pod deleted (grace
period 0) and the time until no claim is left.  Pods and claims are followed by watch, so
that counting them does not load the API server the benchmark measures.  Prints each round (pods/s sent, claims/s
Running, claims/s released, kube-apiserver's CPU seconds to Running, the load), then min/median
of each figure.  The bed is stopped at
the end unless ``--keep``.  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from draconf import namespaces  # noqa: E402
from draconf.kube import connect, unread  # noqa: E402
from draconf.profile import TESTBED_IMAGE  # noqa: E402
from draconf.reflector import Reflector  # noqa: E402
from draconf.testbed import inventory  # noqa: E402
from draconf.testbed.cluster import Testbed  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apiserver_pid(bed: Testbed) -> int:
    return bed.state()["processes"]["kube-apiserver"]["pid"]


def one_round(api, count: int, index: int, apiserver: int) -> tuple[float, float, float, float]:
    """(seconds to send, seconds to all Running, seconds to all claims gone, kube-apiserver's
    CPU seconds from the first create to all Running).  ``apiserver``: its pid.  It serves the
    same requests every round, so its CPU time gauges the machine's speed in that window."""
    ns = namespaces.create(api, namespaces.RunId("bench"), f"scale-{index}")
    api.resource.create_namespaced_resource_claim_template(ns, {
        "metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})

    def create(i: int) -> None:  # as kubectl sends them: no client model of each reply
        unread(api.core.create_namespaced_pod(ns, {"metadata": {"name": f"gpu-{i}"}, "spec": {
            "restartPolicy": "Never", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [{"name": "c", "image": TESTBED_IMAGE, "command": ["sleep", "1d"],
                            "resources": {"claims": [{"name": "gpu"}]}}]}}, _preload_content=False))

    pods = Reflector(api.core.list_namespaced_pod, "pods", namespace=ns).start()
    claims = Reflector(api.resource.list_namespaced_resource_claim, "claims", namespace=ns).start()
    pods.wait_synced(30), claims.wait_synced(30)

    started, cpu_before = time.monotonic(), cpu_seconds(apiserver)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))
    sent = time.monotonic() - started
    if pods.wait_until(lambda items: sum(1 for p in items if p["status"].get("phase") == "Running") == count,
                       timeout=600) is None:
        raise SystemExit(f"gave up after 600 s waiting for {count} pods to run")
    up, apiserver_cpu = time.monotonic() - started, cpu_seconds(apiserver) - cpu_before

    started = time.monotonic()
    api.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    if claims.wait_until(lambda items: not items, timeout=600) is None:
        raise SystemExit(f"gave up after 600 s waiting for {count} claims to be released")
    down = time.monotonic() - started
    pods.stop(), claims.stop()
    namespaces.delete(api, ns, wait=120)
    return sent, up, down, apiserver_cpu


def scale_bed(nodes: int, gpus: int) -> Testbed:
    """A fresh ``bench-scale`` bed: ``nodes`` KWOK nodes of ``gpus`` GPUs each."""
    bed = Testbed.named("bench-scale")
    bed.down(log=lambda *_: None)
    bed.up(inventory.uniform(nodes, gpus), faults=[], log=lambda *_: None, timeout=600)
    return bed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--keep", action="store_true",
                        help="leave the bed up to read its logs (`draconf testbed down --name bench-scale`)")
    args = parser.parse_args(argv)
    count = args.nodes * args.gpus
    bed = scale_bed(args.nodes, args.gpus)
    try:
        api = connect(bed.kubeconfig)
        print(f"{count} claims on {args.nodes} x {args.gpus} KWOK nodes, {os.cpu_count()} CPUs")
        rates = {"sent": [], "running": [], "released": []}
        gauge = []
        for i in range(args.times):
            sent, up, down, apiserver_cpu = one_round(api, count, i, apiserver_pid(bed))
            gauge.append(apiserver_cpu)
            rates["sent"].append(count / sent)
            rates["running"].append(count / up)
            rates["released"].append(count / down)
            print(f"  round {i}: sent in {sent:.1f} s ({count / sent:.0f} pods/s), all Running in {up:.1f} s "
                  f"({count / up:.1f} claims/s), all released in {down:.1f} s ({count / down:.1f} claims/s), "
                  f"kube-apiserver {apiserver_cpu:.1f} CPU-s to Running, load {os.getloadavg()[0]:.2f}")
        for what, values in rates.items():
            print(f"{what}: min {min(values):.1f}/s, median {statistics.median(values):.1f}/s")
        print(f"kube-apiserver CPU-s to Running (the same requests each round: more CPU-s, a slower "
              f"machine): min {min(gauge):.1f}, median {statistics.median(gauge):.1f}")
    finally:
        if not args.keep:
            bed.down(log=lambda *_: None)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
