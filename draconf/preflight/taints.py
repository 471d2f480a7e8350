"""Taints that keep the suite's pods or claims off GPUs: ``gpu-node-taints`` (blocking: the GPU
nodes an admin closed to pods that do not tolerate a taint) and the informational
``device-taints`` (which devices the driver tainted, and why; the taints themselves are read by
:mod:`draconf.taints`).  They run last."""

from __future__ import annotations

from typing import Iterable, Mapping

from draconf.preflight.reading import Access, read
from draconf.preflight.result import INFO, CheckResult, check_result
from draconf.preflight.runner import check
from draconf.preflight.slices import driver_slices
from draconf.tables import kubectl_table
from draconf.taints import TaintedDevice, describe, tainted_devices, tolerates

#: Taints the node lifecycle controller and cloud providers set for a node's state (NotReady,
#: cordoned, under pressure, not initialised): other checks and the sweep name those states;
#: this check is about the taints an admin puts on GPU nodes.
NODE_STATE_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")


def closing_taints(taints: Iterable[dict] | None, tolerations: Iterable[Mapping]) -> list[dict]:
    """The taints of a node that keep the suite's pods (with ``tolerations``, the profile's)
    off it: NoSchedule or NoExecute, not tolerated, not a node-state taint.

    >>> closing_taints([{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
    ...                 {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    ...                 {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ...                 {"key": "spot", "effect": "PreferNoSchedule"}],
    ...                [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    [{'key': 'dedicated', 'value': 'ml', 'effect': 'NoSchedule'}]
    """
    tolerating = [dict(t) for t in tolerations]
    return [t for t in taints or [] if t.get("effect") in ("NoSchedule", "NoExecute")
            and not str(t.get("key", "")).startswith(NODE_STATE_TAINTS) and not tolerates(tolerating, t)]


def evaluate_gpu_node_taints(gpu_nodes: Mapping[str, list[dict]], tolerations: Iterable[Mapping]) -> CheckResult:
    """``gpu_nodes``: each node that publishes the driver's devices, with its taints.  Fails
    (``node-excluded``) only when every one is closed to the suite's pods by a taint they do
    not tolerate: then no GPU workload can be placed at all, and the run says so once, here,
    instead of once per workload.  Some GPU nodes closed: passes, naming them (the scheduler
    places the workloads on the others).

    >>> taint = {"key": "dedicated", "value": "gpu-reserved", "effect": "NoSchedule"}
    >>> r = evaluate_gpu_node_taints({"a": [taint], "b": [taint]}, [])
    >>> r.ok, r.diagnosis, r.nodes
    (False, 'node-excluded', ('a', 'b'))
    >>> r.summary
    "every GPU node (2) carries a taint the suite's pods do not tolerate: a: untolerated taint dedicated=gpu-reserved:NoSchedule; b: untolerated taint dedicated=gpu-reserved:NoSchedule. No GPU workload can be placed: remove the taint, or give the profile a toleration for it (profile `tolerations:`, draconf run --profile FILE)"
    >>> r = evaluate_gpu_node_taints({"a": [taint], "b": []}, [])
    >>> r.ok, r.summary
    (True, "1 of 2 GPU node(s) closed to the suite's pods by a taint they do not tolerate (a: untolerated taint dedicated=gpu-reserved:NoSchedule); the workloads run on the others")
    >>> evaluate_gpu_node_taints({}, []).applicable
    False
    """
    if not gpu_nodes:
        return check_result(True, "no node publishes the driver's devices (resource-slices says why)",
                            applicable=False)
    closed = {node: closing_taints(taints, tolerations) for node, taints in sorted(gpu_nodes.items())}
    closed = {node: taints for node, taints in closed.items() if taints}
    named = "; ".join(f"{node}: " + ", ".join(f"untolerated taint {describe(t)}" for t in taints)
                      for node, taints in closed.items())
    evidence = {"GPU node taints": kubectl_table(
        [(node, ", ".join(describe(t) for t in taints) or "<none>", "yes" if node in closed else "no")
         for node, taints in sorted(gpu_nodes.items())], ("NODE", "TAINTS", "CLOSED TO THE SUITE"))}
    if closed and len(closed) == len(gpu_nodes):
        return check_result(False, f"every GPU node ({len(gpu_nodes)}) carries a taint the suite's pods do not "
                                   f"tolerate: {named}. No GPU workload can be placed: remove the taint, or "
                                   "give the profile a toleration for it (profile `tolerations:`, draconf run "
                                   "--profile FILE)", "node-excluded", evidence, nodes=closed)
    if closed:
        return check_result(True, f"{len(closed)} of {len(gpu_nodes)} GPU node(s) closed to the suite's pods by a "
                                  f"taint they do not tolerate ({named}); the workloads run on the others",
                            evidence=evidence)
    return check_result(True, f"no taint keeps the suite's pods off the {len(gpu_nodes)} GPU node(s)",
                        evidence=evidence)


@check("gpu-node-taints")
def check_gpu_node_taints(api, profile) -> CheckResult:
    published = {s.spec.node_name for s in driver_slices(api, profile.driver) if s.spec.node_name}
    nodes = read(Access("list", "nodes"), api.core.list_node).items
    taints = {n.metadata.name: [api.api_client.sanitize_for_serialization(t) for t in n.spec.taints or []]
              for n in nodes if n.metadata.name in published}
    return evaluate_gpu_node_taints(taints, profile.tolerations)


def evaluate_device_taints(tainted: list[TaintedDevice], driver: str) -> CheckResult:
    """Passes either way: a tainted device is the driver reporting an unhealthy GPU, which the
    report names (node/device, key=value:effect) so an operator sees why capacity is missing.

    >>> r = evaluate_device_taints([TaintedDevice("d", "gpu-h100-0", "gpu-4", "gpu-h100-0",
    ...     ({"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"},), {})], "d")
    >>> r.ok, r.summary
    (True, '1 device(s) of driver d tainted: gpu-h100-0/gpu-4 (gpu.nvidia.com/xid=79:NoSchedule); 1 kept from claims that do not tolerate it')
    >>> print(r.evidence["tainted devices"])
    NODE         DEVICE   TAINTS
    gpu-h100-0   gpu-4    gpu.nvidia.com/xid=79:NoSchedule
    >>> evaluate_device_taints([], "d").summary
    'no device of driver d carries a taint'
    """
    if not tainted:
        return check_result(True, f"no device of driver {driver} carries a taint")
    blocked = [d for d in tainted if d.blocking]
    evidence = {"tainted devices": kubectl_table(
        [(d.node or "-", d.name, ", ".join(describe(t) for t in d.taints)) for d in tainted],
        ("NODE", "DEVICE", "TAINTS"))}
    return check_result(True, f"{len(tainted)} device(s) of driver {driver} tainted: "
                              f"{'; '.join(d.summary() for d in tainted)}; {len(blocked)} kept from "
                              "claims that do not tolerate it", evidence=evidence)


@check("device-taints", INFO)
def check_device_taints(api, profile) -> CheckResult:
    slices = [api.api_client.sanitize_for_serialization(s) for s in driver_slices(api, profile.driver)]
    return evaluate_device_taints(tainted_devices(slices), profile.driver)
