"""One GPU node broken, the others healthy: preflight fails for that node only, and the
workloads still run, and must pass, on the rest (per-node gating).

The break is an admin's, from outside the driver: the node's ``nvidia.com/gpu.present`` label
turned to ``false``, so the plugin's DaemonSet leaves it while Node Feature Discovery's PCI label
still marks it a GPU node.  Its plugin pod goes, and about 30 s later the kubelet withdraws its
ResourceSlices: the same picture as a plugin crashing on one node.  The label is restored
afterwards and the test waits for the node's slices to be back, so the shared bed stays healthy.

A bed test on the shared healthy bed, not a fault-matrix row: it runs the preflight, the six
workloads and the capacity scenario (the one that counts devices per model) once, about 90 s.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager

from kubernetes import watch

from draconf import waits
from draconf.devices import PublishedDevices

from .test_cli import draconf

DRIVER = "gpu.nvidia.com"
PLUGIN_LABEL = "nvidia.com/gpu.present"
#: The bed's own pods (the plugin, the control plane's) are not the run's.
NOT_OURS = {"gpu-operator", "kube-system"}
SELECTED = "test_preflight or TestWorkload or exhausted_capacity"


def _plugin_ready_on(api, node: str) -> bool:
    pods = api.core.list_namespaced_pod("gpu-operator", field_selector=f"spec.nodeName={node}").items
    return any(c.type == "Ready" and c.status == "True"
               for p in pods for c in (p.status.conditions or []))


@contextmanager
def plugin_taken_off(api, node: str):
    """``node``'s kubelet plugin gone (its DaemonSet no longer selects the node) until the end."""
    api.core.patch_node(node, {"metadata": {"labels": {PLUGIN_LABEL: "false"}}})
    try:
        waits.wait_until(f"the kubelet-plugin pod on {node} to go", lambda: _plugin_ready_on(api, node),
                         lambda ready: not ready, timeout=60)
        yield
    finally:
        api.core.patch_node(node, {"metadata": {"labels": {PLUGIN_LABEL: "true"}}})
        waits.wait_until(f"{node} to publish its GPUs again",
                         lambda: PublishedDevices.read(api, DRIVER).devices_per_node().get(node, 0),
                         lambda count: count > 0, timeout=120)


@contextmanager
def placements(api):
    """Every (namespace/pod, node) the scheduler bound while the block ran, outside the bed's
    own namespaces: where the run's pods went."""
    seen: dict[str, str] = {}
    stop = threading.Event()
    resource_version = api.core.list_pod_for_all_namespaces().metadata.resource_version

    def follow():
        nonlocal resource_version
        while not stop.is_set():
            stream = watch.Watch()
            for event in stream.stream(api.core.list_pod_for_all_namespaces, timeout_seconds=2,
                                       resource_version=resource_version):
                pod = event["object"]
                resource_version = pod.metadata.resource_version
                if pod.metadata.namespace not in NOT_OURS and pod.spec.node_name:
                    seen[f"{pod.metadata.namespace}/{pod.metadata.name}"] = pod.spec.node_name

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(timeout=10)


def test_one_broken_gpu_node_leaves_the_others_validated(healthy_bed, api, tmp_path):
    per_node = PublishedDevices.read(api, DRIVER).devices_per_node()
    # The node with the fewest GPUs, so a node with three (shared-claim's) stays in the run.
    broken = min(per_node, key=lambda n: (per_node[n], n))
    healthy = sorted(set(per_node) - {broken})
    reports = tmp_path / "reports"
    with plugin_taken_off(api, broken), placements(api) as placed:
        started = time.monotonic()
        result = draconf("run", "--testbed-name", healthy_bed.name, "--reports", str(reports),
                         "-k", SELECTED, timeout=600)
        took = time.monotonic() - started
    out = result.stdout + result.stderr
    sys.stderr.write(f"{broken} broken: draconf run took {took:.0f}s, exit {result.returncode}\n")
    summary = json.loads((reports / "summary.json").read_text())
    rows = {t["id"].split("::", 1)[1]: t for t in summary["tests"]}

    # Preflight fails, for that node, by name.
    plugin = rows["test_preflight[kubelet-plugin]"]
    assert plugin["outcome"] == "failed" and plugin["diagnosis"] == "plugin-unhealthy", plugin
    assert broken in plugin["message"]
    assert result.returncode == 1
    # Every workload check still got its verdict on the healthy nodes, and passed.
    workload_rows = {k: v for k, v in rows.items() if not k.startswith("test_preflight")}
    assert len(workload_rows) == 19, sorted(workload_rows)
    assert all(r["outcome"] == "passed" for r in workload_rows.values()), {
        k: (r["outcome"], r.get("message")) for k, r in workload_rows.items() if r["outcome"] != "passed"}
    # ... and none of them ran on the broken node.
    assert placed, "no pod of the run was seen scheduled"
    assert broken not in placed.values(), {p: n for p, n in placed.items() if n == broken}
    assert set(placed.values()) <= set(healthy)
    # Which nodes were validated is in every channel.
    nodes = summary["run"]["nodes"]
    assert nodes["validated"] == healthy and broken in nodes["not_validated"], nodes
    assert f"NOT validated: {broken}" in out
    junit = (reports / "junit.xml").read_text()
    assert 'name="draconf.nodes"' in junit and broken in junit
    assert "Traceback" not in out

