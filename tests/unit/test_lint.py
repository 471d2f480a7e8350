"""draconf.lint's pure part: finding selectors in manifests and judging them over devices."""

from __future__ import annotations

import pytest

from draconf import lint
from draconf.devices import Device
from draconf.errors import DraconfError

D = "device.attributes['gpu.nvidia.com']"
CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def gpu(node, product, kind="gpu"):
    return Device("gpu.nvidia.com", node, "gpu-0", node,
                  {"gpu.nvidia.com/type": kind, "gpu.nvidia.com/productName": product})


DEVICES = [gpu("h100", "NVIDIA H100"), gpu("a100", "NVIDIA A100"), gpu("mig", "NVIDIA H100", "mig")]
DOCS = [
    {"kind": "DeviceClass", "metadata": {"name": "mine"}, "spec": {"selectors": [{"cel": {"expression": CLASS}}]}},
    {"kind": "ResourceClaimTemplate", "metadata": {"name": "t"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "mine", "selectors": [
            {"cel": {"expression": f"{D}.productName.contains('H100')"}},
            {"cel": {"expression": f"{D}.serial == 'x'"}}]}},
        {"name": "alt", "firstAvailable": [{"name": "a", "deviceClassName": "absent"}]}]}}}},
    {"kind": "Pod", "metadata": {"name": "ignored"}, "spec": {}},
]


def test_selectors_are_found_in_classes_templates_and_alternatives():
    found = lint.find_selectors(DOCS, "f.yaml")
    assert [str(f) for f in found] == [
        "f.yaml: DeviceClass mine, selector #0",
        "f.yaml: ResourceClaimTemplate t, request gpu, selector #0",
        "f.yaml: ResourceClaimTemplate t, request gpu, selector #1",
        "f.yaml: ResourceClaimTemplate t, request alt/a, selector #-1"]
    assert found[2].earlier == (f"{D}.productName.contains('H100')",)
    assert lint.classes_in(found) == {"mine": [CLASS]}


def test_each_selector_is_judged_where_the_allocator_evaluates_it():
    found = lint.find_selectors(DOCS, "f.yaml")
    klass, model, serial, alt = lint.judge(found, DEVICES, {**lint.classes_in(found), "absent": None})
    assert klass.summary() == "matches 2 of 3: h100/gpu-0, a100/gpu-0" and klass.ok
    assert model.summary() == "matches 1 of 2: h100/gpu-0" and model.ok  # the MIG device is not in the class
    # only the device the class and the earlier selector pass is evaluated: one error, not three
    assert serial.summary() == "matches 0 of 1; CEL runtime error: no such key: serial on 1: h100/gpu-0"
    assert alt.problem == "device class absent does not exist" and not alt.ok
    table = lint.format_table([klass, model, serial, alt])
    assert table.splitlines()[0].split() == ["SELECTOR", "CEL", "VERDICT"]
    assert table.endswith("lint: 4 selector(s), 2 match no device or fail")


def test_a_compile_error_is_reported_without_evaluating():
    (f,) = lint.find_selectors([{"kind": "DeviceClass", "metadata": {"name": "c"},
                                 "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]}}], "f")
    (j,) = lint.judge([f], DEVICES, {})
    assert j.problem.startswith("CEL compile error: syntax error") and not j.verdicts


def test_bad_files_are_one_clear_error(tmp_path):
    with pytest.raises(DraconfError, match="cannot read"):
        lint.load_files([str(tmp_path / "absent.yaml")])
    (tmp_path / "bad.yaml").write_text("a: [\n")
    with pytest.raises(DraconfError, match="is not valid YAML"):
        lint.load_files([str(tmp_path / "bad.yaml")])
    assert lint.format_table([]).startswith("lint: no CEL selector found")
