"""draconf.cel: DRA selectors evaluated by a CEL engine with Kubernetes' functions (no cluster).

Parity with the real scheduler is shown on a bed (tests/testbed/test_cel_parity.py); these pin
the semantics that parity rests on.
"""

from __future__ import annotations

import pytest

from draconf import cel
from draconf import selectors as sel
from draconf.devices import Device, Version

DRIVER = "gpu.nvidia.com"
GI = 2**30


def gpu(node="n", product="NVIDIA H100 80GB HBM3", memory=81559 * 2**20, arch="Hopper",
        capability="9.0.0", drop=()) -> Device:
    attrs = {f"{DRIVER}/type": "gpu", f"{DRIVER}/uuid": f"GPU-{node}", f"{DRIVER}/productName": product,
             f"{DRIVER}/architecture": arch, f"{DRIVER}/index": 0,
             f"{DRIVER}/cudaComputeCapability": Version(capability),
             f"{DRIVER}/driverVersion": Version("580.95.5"),
             "resource.kubernetes.io/pcieRoot": "pci0000:17"}
    for name in drop:
        attrs.pop(f"{DRIVER}/{name}")
    return Device(DRIVER, node, "gpu-0", node, attrs, {f"{DRIVER}/memory": memory})


H100, A100 = gpu("h100"), gpu("a100", "NVIDIA A100-SXM4-40GB", 40 * GI, "Ampere", "8.0.0")


def outcome(expression: str, device: Device = H100) -> str:
    return cel.evaluate(expression, device).outcome


@pytest.mark.parametrize("expression, h100, a100", [
    # the manifests' selectors
    ("device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')", "match", "no match"),
    ('device.capacity[\'gpu.nvidia.com\'].memory.isGreaterThan(quantity("40Gi"))', "match", "no match"),
    ("device.attributes['gpu.nvidia.com'].architecture == 'Hopper'\n&&\n"
     'device.capacity[\'gpu.nvidia.com\'].memory.isGreaterThan(quantity("80Gi"))', "no match", "no match"),
    ('device.capacity[\'gpu.nvidia.com\'].memory == quantity("40960Mi")', "no match", "match"),
    # quantities: 81559Mi is below 80Gi
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) < 0", "match", "match"),
    ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('41Gi'))", "no match", "match"),
    ("device.capacity['gpu.nvidia.com'].memory.isInteger()", "match", "match"),
    ("device.capacity['gpu.nvidia.com'].memory.add(quantity('1Gi')).isGreaterThan(quantity('41Gi'))",
     "match", "no match"),
    # versions are semvers, not strings: 10.0.0 > 9.0.0 although '10' < '9' as text
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.5.0'))", "match", "no match"),
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.isLessThan(semver('10.0.0'))", "match", "match"),
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability == semver('9.0.0')", "match", "no match"),
    ("device.attributes['gpu.nvidia.com'].driverVersion.major() >= 580", "match", "match"),
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.0.0')) == 0", "no match", "match"),
    # strings, qualified names, ints
    ("device.attributes['gpu.nvidia.com'].productName.upperAscii().contains('A100')", "no match", "match"),
    ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:17'", "match", "match"),
    ("device.attributes[\"gpu.nvidia.com\"][\"productName\"] in ['x', 'NVIDIA H100 80GB HBM3']", "match", "no match"),
    ("device.attributes['gpu.nvidia.com'].index == 0 && device.driver == 'gpu.nvidia.com'", "match", "match"),
    ("!(device.attributes['gpu.nvidia.com'].architecture == 'Ampere')", "match", "no match"),
    ("device.attributes['gpu.nvidia.com'].productName.split(' ')[1] == 'H100'", "match", "no match"),
])
def test_selectors_on_two_gpus(expression, h100, a100):
    assert (outcome(expression, H100), outcome(expression, A100)) == (h100, a100)


def test_a_missing_attribute_is_the_schedulers_runtime_error():
    v = cel.evaluate("device.attributes['gpu.nvidia.com'].serial == 'x'", H100)
    assert v.failed and not v.matched and not v.unmatched
    assert (v.error, v.missing, v.compile_error) == ("no such key: serial", "gpu.nvidia.com/serial", False)
    assert str(v) == "CEL runtime error: no such key: serial"
    # same through index syntax, in an unknown domain (an empty map), and for capacity
    assert cel.evaluate("device.attributes['gpu.nvidia.com']['serial'] == 'x'", H100).missing == "gpu.nvidia.com/serial"
    assert cel.evaluate("device.attributes['example.com'].x == 1", H100).missing == "example.com/x"
    assert cel.evaluate("device.capacity['gpu.nvidia.com'].cores.isGreaterThan(quantity('1'))",
                        H100).missing == "gpu.nvidia.com/cores"
    # an attribute one device lacks fails on that device only
    no_name = gpu(drop=["productName"])
    rule = sel.model(DRIVER, "productName", "h100").cel
    assert (outcome(rule, H100), outcome(rule, no_name)) == ("match", "error")


def test_logic_is_cels_commutative_short_circuit():
    missing = "device.attributes['gpu.nvidia.com'].serial == 'x'"
    assert outcome(f"device.driver == 'other' && {missing}") == "no match"
    assert outcome(f"{missing} && device.driver == 'other'") == "no match"
    assert outcome(f"device.driver == '{DRIVER}' || {missing}") == "match"
    assert outcome(f"{missing} || device.driver == '{DRIVER}'") == "match"
    assert outcome(f"device.driver == '{DRIVER}' && {missing}") == "error"
    assert outcome(f"has(device.attributes['gpu.nvidia.com'].serial) && {missing}") == "no match"


def test_type_errors_and_non_boolean_results_fail():
    assert outcome("device.attributes['gpu.nvidia.com'].productName == 5") == "no match"  # heterogeneous ==
    v = cel.evaluate("device.attributes['gpu.nvidia.com'].productName > 5", H100)
    assert v.failed and "no matching overload" in v.error and "(string, int)" in v.error
    # a Quantity is ordered only through its methods, as in Kubernetes
    assert outcome("device.capacity['gpu.nvidia.com'].memory > quantity('1Gi')") == "error"
    assert "could not be converted to bool" in cel.evaluate("device.driver", H100).error
    assert "semver" in cel.evaluate("semver('1.0').major() == 1", H100).error
    assert outcome("semver('v1.0', true).major() == 1") == "match"
    assert outcome("isQuantity('abc') || isSemver('1.2.3')") == "match"


def test_syntax_errors_and_unknown_functions_are_compile_errors():
    for expression in ("device.driver ==", "nosuchfunction(device.driver)"):
        v = cel.evaluate(expression, H100)
        assert v.failed and v.compile_error and str(v).startswith("CEL compile error"), expression
    assert cel.check("device.driver ==").compile_error and cel.check("device.driver == 'x'") is None


def test_selectors_apply_in_order_like_the_allocator():
    class_cel = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'"
    missing = "device.attributes['gpu.nvidia.com'].serial == 'x'"
    assert cel.evaluate_all([class_cel, missing], H100).outcome == "no match"
    assert cel.evaluate_all([missing, class_cel], H100).outcome == "error"
    assert cel.evaluate_all([], H100).matched


@pytest.mark.parametrize("selector", [
    sel.model(DRIVER, "productName", "NVIDIA H100 80GB HBM3"),
    sel.model(DRIVER, "productName", "a100-sxm4"),
    sel.memory_above(DRIVER, "memory", 40 * GI),
    sel.architecture_and_memory_above(DRIVER, "architecture", "Hopper", "memory", 80 * GI),
    sel.uuid_in(DRIVER, "uuid", ["GPU-h100"]),
    sel.device_class(DRIVER, "type", "gpu"),
], ids=str)
def test_the_suites_selectors_judge_by_their_cel(selector):
    for device in (H100, A100, gpu(drop=["productName", "architecture", "uuid"])):
        verdict = cel.evaluate(selector.cel, device)
        assert selector.matches(device) is verdict.matched, device
