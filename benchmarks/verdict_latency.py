"""Seconds from the scheduler's first "cannot allocate all claims" to the suite's verdict (issue
13's "unschedulable verdict after first FailedScheduling ≤ 1 s").

    python benchmarks/verdict_latency.py [--testbed-name default] [--times 5]

Each round, in a fresh namespace: a claim whose selector no published device passes and a pod
using it (the selector-unmatched failure mode), waited on by ``DeployedWorkload.wait_running``
as every workload is.  A watch on the namespace's pods notes when the pod's ``PodScheduled``
condition first says ``Unschedulable`` (the scheduler's first answer, written with its
FailedScheduling event); the round's figure is the time from then to the verdict.  Then the
same with two holders of both A100s running (capacity-exhausted).  Prints each round, then
min/median per scenario and the machine load.  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
import threading
import time

from kubernetes import watch


def first_unschedulable(api, namespace: str, seen: dict, stop: threading.Event) -> None:
    """Note (monotonic) when a pod of ``namespace`` is first reported Unschedulable."""
    stream = watch.Watch()
    for event in stream.stream(api.core.list_namespaced_pod, namespace, timeout_seconds=120):
        pod = event["object"]
        if any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or []):
            seen.setdefault(pod.metadata.name, time.monotonic())
        if stop.is_set():
            stream.stop()


def one_round(api, profile, scenario: str) -> float:
    from draconf import manifests, namespaces, waits
    from draconf.workload import DeployedWorkload, Workload
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from tests.testbed.test_allocation_branches import claim_doc, pod_doc

    ns = namespaces.create(api, namespaces.RunId("bench"), f"verdict-{scenario}")
    seen: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=first_unschedulable, args=(api, ns, seen, stop), daemon=True)
    watcher.start()
    try:
        a100 = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100')"
        if scenario == "capacity-exhausted":
            held = [claim_doc("both-a100s", count=2, selectors=[a100]), pod_doc("holder", "both-a100s")]
            manifests.create(api, ns, held)
            DeployedWorkload(api, ns, Workload("holder", [], 1), profile, held).wait_running(timeout=60)
            wanted = a100
        else:
            wanted = "device.attributes['gpu.nvidia.com'].productName == 'no such GPU'"
        docs = [claim_doc("wanted", selectors=[wanted]), pod_doc("unplaceable", "wanted")]
        time.sleep(0.5)  # the watch is open
        manifests.create(api, ns, docs)
        try:
            DeployedWorkload(api, ns, Workload("unplaceable", [], 1), profile, docs).wait_running(timeout=60)
        except waits.TerminalState:
            verdict = time.monotonic()
        else:
            raise SystemExit(f"{scenario}: the pod ran; nothing to measure")
        deadline = time.monotonic() + 5
        while "unplaceable" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        if "unplaceable" not in seen:
            raise SystemExit(f"{scenario}: the watch never saw the pod Unschedulable")
        return verdict - seen["unplaceable"]
    finally:
        stop.set()
        namespaces.delete(api, ns, wait=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testbed-name", default="default")
    parser.add_argument("--times", type=int, default=5)
    args = parser.parse_args(argv)
    from draconf.kube import connect
    from draconf.profile import builtin, for_target
    from _bed import running_bed

    bed = running_bed(args.testbed_name)
    if bed is None:
        return 2
    api, profile = connect(bed.kubeconfig), for_target(builtin("nvidia"), "testbed")
    print(f"verdict latency on bed {args.testbed_name!r}, {os.cpu_count()} CPUs, {args.times} rounds each")
    for scenario in ("selector-unmatched", "capacity-exhausted"):
        figures = []
        for _ in range(args.times):
            figures.append(one_round(api, profile, scenario))
            print(f"  {scenario:20} {figures[-1]:5.2f} s  load {os.getloadavg()[0]:.2f}")
        print(f"{scenario}: min {min(figures):.2f} s, median {statistics.median(figures):.2f} s "
              "after the first Unschedulable")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
