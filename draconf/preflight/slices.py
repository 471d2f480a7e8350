"""Checks of what the driver publishes: ``resource-slices`` (every GPU node has devices),
``device-attributes`` (the attributes the profile relies on) and ``device-class-selectors``
(the DeviceClass's own CEL selects some published device)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from draconf.devices import Device, devices_from_slices
from draconf.preflight.nodes import read_gpu_nodes, read_plugin_pods
from draconf.preflight.reading import Access, Inconclusive, read
from draconf.preflight.result import CheckResult, check_result, name_list
from draconf.preflight.runner import check
from draconf.tables import kubectl_table


@dataclass(frozen=True)
class SliceInfo:
    name: str
    driver: str
    node: str | None
    pool: str
    devices: int


def slice_info(s) -> SliceInfo:
    """A :class:`SliceInfo` from a V1ResourceSlice of the Python client."""
    return SliceInfo(s.metadata.name, s.spec.driver, s.spec.node_name,
                     s.spec.pool.name if s.spec.pool else "", len(s.spec.devices or []))


def evaluate_resource_slices(gpu_nodes: Iterable[str], slices: Iterable[SliceInfo],
                             driver: str) -> CheckResult:
    """Every GPU node publishes a pool of ``driver`` with at least one device.

    Slices without devices (the shared-counter slice of 1.35+, or an empty pool) are skipped.
    """
    gpu_nodes = sorted(set(gpu_nodes))
    slices = [s for s in slices if s.driver == driver]
    devices_by_node: dict[str, int] = {}
    for s in slices:
        if s.node and s.devices:
            devices_by_node[s.node] = devices_by_node.get(s.node, 0) + s.devices
    total = sum(s.devices for s in slices)
    evidence = {"kubectl get resourceslice": kubectl_table(
        [(s.name, s.node or "-", s.driver, s.pool, s.devices) for s in slices],
        ("NAME", "NODE", "DRIVER", "POOL", "DEVICES")) if slices else "(no ResourceSlices of "
        f"driver {driver})", "GPU nodes": ", ".join(gpu_nodes) or "(none)"}
    without = [n for n in gpu_nodes if not devices_by_node.get(n)]
    if total == 0:
        where = (f"; GPU nodes without devices: {name_list(without)}" if gpu_nodes else
                 "; no node is labelled as a GPU node or runs the kubelet plugin either")
        return check_result(False, f"no ResourceSlice of driver {driver} has any device, so the "
                                   f"scheduler sees no GPUs{where}. Creating claims will not fix "
                                   "this: check that the kubelet plugin runs on each GPU node and "
                                   "can discover its GPUs (its logs), then `kubectl get resourceslice`",
                            "no-resourceslices", evidence)
    if without:
        return check_result(False, f"{len(without)} of {len(gpu_nodes)} GPU node(s) publish no "
                                   f"devices of driver {driver}: {name_list(without)}; check the kubelet "
                                   "plugin pod and GPU driver on those nodes", "no-resourceslices",
                            evidence, nodes=without)
    nodes = sorted(devices_by_node)
    return check_result(True, f"{total} device(s) of driver {driver} published by {len(nodes)} "
                              f"node(s); every GPU node has a pool", evidence=evidence)


def driver_slices(api, driver: str) -> list:
    """The driver's ResourceSlices (client objects); a refused or failed list is inconclusive."""
    return read(Access("list", "resourceslices", "resource.k8s.io"),
                api.resource.list_resource_slice, field_selector=f"spec.driver={driver}").items


@check("resource-slices")
def check_resource_slices(api, profile) -> CheckResult:
    note = None
    try:
        _, pods = read_plugin_pods(api, profile.plugin)
    except Inconclusive as err:
        if err.unreachable:
            raise
        # Plugin pods only widen the set of GPU nodes; the node labels still answer.
        pods, note = [], err.summary
    gpu_nodes, _ = read_gpu_nodes(api, pods, dict(profile.plugin.gpu_node_labels))
    result = evaluate_resource_slices(gpu_nodes, [slice_info(s) for s in driver_slices(api, profile.driver)],
                                      profile.driver)
    if note:
        result.evidence["GPU nodes found by label only"] = f"kubelet-plugin pods not read: {note}"
    return result


def lacking_attributes(devices: Iterable[Device], names: Iterable[str]) -> dict[str, list[Device]]:
    """``{attribute: devices lacking it}`` for each of ``names`` some device lacks, in the order
    of ``names`` (the preflight check and the attribute-missing diagnosis both ask this).

    >>> a = Device("gpu.example.com", "node-a", "gpu-0", "node-a", {"gpu.example.com/uuid": "GPU-0"})
    >>> b = Device("gpu.example.com", "node-a", "gpu-1", "node-a")
    >>> {name: [str(d) for d in devs] for name, devs in lacking_attributes([a, b], ["type", "uuid"]).items()}
    {'type': ['node-a/gpu-0', 'node-a/gpu-1'], 'uuid': ['node-a/gpu-1']}
    """
    devices = list(devices)
    lacking = {name: [d for d in devices if not d.has_attribute(name)] for name in names}
    return {name: devs for name, devs in lacking.items() if devs}


def evaluate_attributes(devices: Iterable[Device], required: Iterable[str],
                        memory_capacity: str | None) -> CheckResult:
    """Every device publishes the minimum attribute set (extras are fine) and its memory."""
    devices = list(devices)
    required = list(required)
    if not devices:
        return check_result(True, "no devices are published, so there are no attributes to check "
                                  "(see resource-slices)", applicable=False)
    lacking = {f"attribute {name}": missing for name, missing in lacking_attributes(devices, required).items()}
    if memory_capacity:
        missing = [d for d in devices if d.memory(memory_capacity) is None]
        if missing:
            lacking[f"capacity {memory_capacity}"] = missing
    evidence = {f"devices without {what}": "\n".join(str(d) for d in devs[:50])
                + (f"\n... and {len(devs) - 50} more" if len(devs) > 50 else "")
                for what, devs in lacking.items()}
    wanted = ", ".join(required + ([f"capacity {memory_capacity}"] if memory_capacity else []))
    if lacking:
        parts = [f"{what} is missing on {len(devs)} of {len(devices)} device(s) "
                 f"({name_list(sorted({str(d) for d in devs}), limit=3)})"
                 for what, devs in lacking.items()]
        lacking_devices = [d for devs in lacking.values() for d in devs]
        # Confined to the nodes of those devices, unless one of them belongs to no node.
        nodes = () if any(d.node is None for d in lacking_devices) else {d.node for d in lacking_devices if d.node}
        return check_result(False, "; ".join(parts) + ". Selectors using it will leave pods Pending "
                                   "(CEL runtime error: no such key); check the driver version and "
                                   "the attribute names in `kubectl get resourceslice -o yaml`",
                            "attribute-missing", evidence, nodes=nodes)
    return check_result(True, f"all {len(devices)} device(s) publish {wanted}")


def of_profile_type(devices: Iterable[Device], profile) -> list[Device]:
    """The devices the profile's attributes describe: all but those publishing another `type`
    than the profile's ``deviceType`` (an NVIDIA driver's MIG devices, ``type: mig``, have no
    ``uuid``: they are the optional class mig.nvidia.com's, not full GPUs).

    >>> from draconf.profile import builtin
    >>> gpu = Device("gpu.nvidia.com", "n", "gpu-0", "n", {"gpu.nvidia.com/type": "gpu"})
    >>> part = Device("gpu.nvidia.com", "n", "gpu-0-mig-1g10gb-19-0", "n", {"gpu.nvidia.com/type": "mig"})
    >>> [d.name for d in of_profile_type([gpu, part, Device("gpu.nvidia.com", "n", "x", "n")], builtin("nvidia"))]
    ['gpu-0', 'x']
    """
    role = (profile.attributes or {}).get("type")
    if not role or not profile.device_type:
        return list(devices)
    return [d for d in devices if not d.has_attribute(role) or d.attribute(role) == profile.device_type]


@check("device-attributes")
def check_device_attributes(api, profile) -> CheckResult:
    devices = of_profile_type(devices_from_slices(driver_slices(api, profile.driver)), profile)
    return evaluate_attributes(devices, profile.required_attributes(), profile.memory_capacity)


def evaluate_class_selectors(device_class: str, selectors: list[str] | None,
                             devices: Iterable[Device]) -> CheckResult:
    """The class's own CEL selectors, evaluated by :mod:`draconf.cel` on every published
    device: a class that selects none of them leaves every claim of it unallocatable.

    >>> d = Device("gpu.nvidia.com", "n", "gpu-0", "n", {"gpu.nvidia.com/type": "gpu"})
    >>> r = evaluate_class_selectors("gpu.nvidia.com", ["device.attributes['gpu.nvidia.com'].type == 'tpu'"], [d])
    >>> r.ok, r.diagnosis
    (False, 'selector-unmatched')
    >>> print(r.summary.split(":")[0])
    gpu.nvidia.com selects 0 of 1 published devices
    >>> evaluate_class_selectors("gpu.nvidia.com", [], [d]).summary
    'gpu.nvidia.com has no selector: all 1 published devices are eligible'
    """
    from draconf import cel

    devices = list(devices)
    if selectors is None:
        return check_result(True, f"DeviceClass {device_class} does not exist (see device-class)",
                            applicable=False)
    if not devices:
        return check_result(True, "no devices are published, so no selector to check (see resource-slices)",
                            applicable=False)
    expression = " && ".join(" ".join(s.split()) for s in selectors)
    if not selectors:
        return check_result(True, f"{device_class} has no selector: all {len(devices)} published devices "
                                  "are eligible")
    verdicts = {str(d): cel.evaluate_all(selectors, d) for d in devices}
    chosen = [k for k, v in verdicts.items() if v.matched]
    failed = {k: v for k, v in verdicts.items() if v.failed}
    evidence = {"DeviceClass selectors": "\n".join(selectors),
                "per published device": "\n".join(f"{k}: {v}" for k, v in list(verdicts.items())[:50])}
    if chosen:
        extra = f" ({len(failed)} fail with a CEL error)" if failed else ""
        return check_result(True, f"{device_class} selects {len(chosen)} of {len(devices)} published "
                                  f"devices{extra}: {expression}", evidence=evidence)
    summary = f"{device_class} selects 0 of {len(devices)} published devices: {expression}"
    if failed:
        first = next(iter(failed.values()))
        missing = next((v.missing for v in failed.values() if v.missing), None)
        return check_result(False, f"{summary} ({len(failed)} fail with {first}). Every claim of this "
                                   "class stays Pending: fix the class's selector or the published "
                                   "attributes (`kubectl get deviceclass -o yaml`)",
                            "attribute-missing" if missing else "selector-unmatched", evidence)
    return check_result(False, f"{summary}. Every claim of this class stays Pending ('cannot allocate "
                               "all claims'): fix the DeviceClass's selector (the driver's Helm values) to "
                               "match the published attributes (`kubectl get resourceslice -o yaml`)",
                        "selector-unmatched", evidence)


@check("device-class-selectors")
def check_class_selectors(api, profile) -> CheckResult:
    item = read(Access("get", "deviceclasses", "resource.k8s.io"), api.resource.read_device_class,
                profile.device_class, not_found_ok=True)
    selectors = None if item is None else [
        s.cel.expression for s in item.spec.selectors or [] if s.cel and s.cel.expression]
    devices = devices_from_slices(driver_slices(api, profile.driver))
    return evaluate_class_selectors(profile.device_class, selectors, devices)
