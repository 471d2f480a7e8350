"""How long the control plane takes to act on a new pod: the measurement behind
``draconf.workload.stall_after`` (docs/hostile-clusters.md, "A stalled control plane").

    python benchmarks/first_scheduling.py KUBECONFIG [SECONDS]    # while `draconf run` runs

Watches every pod outside kube-system for SECONDS (default 300) and prints, over the pods it
saw created: seconds from the pod's ADDED event to the first scheduler action (a binding or a
PodScheduled condition) and to its template claims being named in
``status.resourceClaimStatuses`` (the resourceclaim controller), max and median.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
import time

from kubernetes import client, config, watch


def main(kubeconfig: str, seconds: float = 300) -> None:
    config.load_kube_config(kubeconfig)
    v1 = client.CoreV1Api()
    added: dict[str, float] = {}
    scheduled: list[float] = []
    claimed: list[float] = []
    done: set[tuple[str, str]] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stream = watch.Watch().stream(v1.list_pod_for_all_namespaces,
                                      timeout_seconds=max(1, int(end - time.monotonic())))
        for event in stream:
            pod, now = event["object"], time.monotonic()
            if pod.metadata.namespace == "kube-system":
                continue
            uid = pod.metadata.uid
            if event["type"] == "ADDED" and uid not in added:
                # Pods that existed before the watch started are not new: skip them.
                if pod.spec.node_name or pod.status.conditions:
                    done.update({(uid, "s"), (uid, "c")})
                added[uid] = now
            start = added.setdefault(uid, now)
            acted = pod.spec.node_name or any(c.type == "PodScheduled" for c in pod.status.conditions or [])
            if acted and (uid, "s") not in done:
                done.add((uid, "s"))
                scheduled.append(now - start)
            templated = [r for r in pod.spec.resource_claims or [] if r.resource_claim_template_name]
            if templated and (uid, "c") not in done and \
                    len(pod.status.resource_claim_statuses or []) >= len(templated):
                done.add((uid, "c"))
                claimed.append(now - start)
    for what, values in (("first scheduler action", scheduled), ("template claims generated", claimed)):
        if values:
            print(f"{what}: {len(values)} pods, max {max(values):.2f}s, median {statistics.median(values):.2f}s")
        else:
            print(f"{what}: no pods seen")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 300)))
