"""The informational check ``device-taints``: which devices the driver tainted, and why (the
taints themselves are read by :mod:`draconf.taints`).  It runs last."""

from __future__ import annotations

from draconf.preflight.result import INFO, CheckResult, check_result
from draconf.preflight.runner import check
from draconf.preflight.slices import driver_slices
from draconf.tables import kubectl_table
from draconf.taints import TaintedDevice, describe, tainted_devices


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
