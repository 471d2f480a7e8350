"""Checks of the DeviceClasses: ``device-class`` (the profile's class exists) and, as
information, ``optional-device-classes``."""

from __future__ import annotations

from typing import Iterable

from draconf.preflight.reading import Access, read
from draconf.preflight.result import INFO, CheckResult, check_result
from draconf.preflight.runner import check


def evaluate_device_class(existing: Iterable[str], device_class: str) -> CheckResult:
    existing = sorted(existing)
    evidence = {"kubectl get deviceclass": "\n".join(existing) or "(none)"}
    if device_class in existing:
        return check_result(True, f"DeviceClass {device_class} exists", evidence=evidence)
    hint = " (NVIDIA chart: resources.gpus.enabled=true)" if device_class.endswith("nvidia.com") else ""
    return check_result(False, f"DeviceClass {device_class} does not exist, so every claim requesting it "
                               f"stays Pending ('device class {device_class} does not exist'). It is "
                               f"created by the DRA driver's Helm values{hint}, not by the workload: "
                               "fix the driver's Helm values and upgrade the release, then check "
                               "`kubectl get deviceclass`", "missing-deviceclass", evidence)


def evaluate_optional_classes(existing: Iterable[str], optional: Iterable[str]) -> CheckResult:
    """Information: ok when every optional DeviceClass exists, a WARN naming the absent ones
    (workloads of those device types would stay Pending) otherwise; never blocking.

    >>> evaluate_optional_classes(["gpu.nvidia.com"], ["mig.nvidia.com"]).ok
    False
    >>> evaluate_optional_classes(["mig.nvidia.com"], ["mig.nvidia.com"]).ok
    True
    """
    existing = set(existing)
    optional = list(optional)
    present = [c for c in optional if c in existing]
    absent = [c for c in optional if c not in existing]
    if not optional:
        return check_result(True, "the profile names no optional DeviceClasses", applicable=False)
    parts = []
    if present:
        parts.append(f"present: {', '.join(present)}")
    if absent:
        parts.append(f"absent: {', '.join(absent)} (only needed for those device types)")
    return check_result(not absent, "optional DeviceClasses " + "; ".join(parts),
                        evidence={"optional DeviceClasses": "\n".join(
                            f"{c}: {'present' if c in existing else 'absent'}" for c in optional)})


def _device_class_names(api) -> list[str]:
    items = read(Access("list", "deviceclasses", "resource.k8s.io"),
                 api.resource.list_device_class).items
    return [c.metadata.name for c in items]


@check("device-class")
def check_device_class(api, profile) -> CheckResult:
    return evaluate_device_class(_device_class_names(api), profile.device_class)


@check("optional-device-classes", INFO)
def check_optional_device_classes(api, profile) -> CheckResult:
    return evaluate_optional_classes(_device_class_names(api), profile.optional_device_classes)
