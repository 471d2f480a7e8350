"""What `draconf compare` calls a regression, over recorded baselines."""

from __future__ import annotations

import copy

import pytest

from draconf import baseline
from draconf.errors import EXIT_BAD_INPUT, DraconfError

BEFORE = {
    "version": 1, "server": "v1.36.3",
    "driver": {"name": "gpu.nvidia.com", "versions": ["580.95.5"],
               "plugin": {"gpu-operator/nvidia-dra-driver-kubelet-plugin": {
                   "images": ["nvcr.io/driver:v0.4.1"], "desired": 3, "ready": 3}}},
    "device_classes": {"gpu.nvidia.com": {"selectors": ["device.driver == 'gpu.nvidia.com'"],
                                          "extendedResourceName": "nvidia.com/gpu"}},
    "nodes": {"n1": {"gpus": 4, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559Mi"],
                     "attributes": {"gpu.nvidia.com/productName": "string",
                                    "gpu.nvidia.com/driverVersion": "version"}}},
    "tests": {"t::alloc": {"outcome": "passed", "diagnosis": None, "duration": 2.0},
              "t::cdi": {"outcome": "failed", "diagnosis": "cdi-wrong-device", "duration": 3.0}},
}


def changed(mutate) -> list[baseline.Change]:
    after = copy.deepcopy(BEFORE)
    mutate(after)
    return baseline.compare(BEFORE, after)


def test_the_same_state_compares_clean():
    assert baseline.compare(BEFORE, copy.deepcopy(BEFORE)) == []


@pytest.mark.parametrize("mutate, expected", [
    (lambda a: a["tests"]["t::alloc"].update(outcome="failed", diagnosis="node-excluded"),
     "REGRESSION t::alloc: passed -> failed [node-excluded]"),
    (lambda a: a["nodes"]["n1"].update(gpus=3), "REGRESSION node n1: GPUs 4 -> 3"),
    (lambda a: a["nodes"].pop("n1"), "REGRESSION node n1: gone (had 4 GPUs)"),
    (lambda a: a["nodes"]["n1"]["attributes"].pop("gpu.nvidia.com/productName"),
     "REGRESSION node n1: attribute gpu.nvidia.com/productName removed"),
    (lambda a: a["nodes"]["n1"]["attributes"].update({"gpu.nvidia.com/driverVersion": "string"}),
     "REGRESSION node n1: attribute gpu.nvidia.com/driverVersion type version -> string"),
    (lambda a: a["nodes"]["n1"].update(models=["NVIDIA H100 PCIe"]),
     "REGRESSION node n1: models ['NVIDIA H100 80GB HBM3'] -> ['NVIDIA H100 PCIe']"),
    (lambda a: a["device_classes"]["gpu.nvidia.com"].update(extendedResourceName=None),
     "REGRESSION DeviceClass gpu.nvidia.com: extendedResourceName 'nvidia.com/gpu' -> None"),
    (lambda a: a["device_classes"].pop("gpu.nvidia.com"), "REGRESSION DeviceClass gpu.nvidia.com: removed"),
    (lambda a: a["tests"]["t::alloc"].update(duration=9.0), "REGRESSION t::alloc: 2.0s -> 9.0s"),
])
def test_each_kind_of_regression_is_named_exactly(mutate, expected):
    assert [str(c) for c in changed(mutate)] == [expected]


@pytest.mark.parametrize("mutate, expected", [
    (lambda a: a["tests"]["t::cdi"].update(outcome="passed", diagnosis=None), "change t::cdi: failed -> passed"),
    (lambda a: a["nodes"]["n1"].update(gpus=8), "change node n1: GPUs 4 -> 8"),
    (lambda a: a.update(server="v1.36.4"), "change server: v1.36.3 -> v1.36.4"),
    (lambda a: a["driver"].update(versions=["580.105.8"]), "change driver: versions ['580.95.5'] -> ['580.105.8']"),
    (lambda a: a["nodes"]["n1"]["attributes"].update({"resource.kubernetes.io/pcieRoot": "string"}),
     "change node n1: attribute resource.kubernetes.io/pcieRoot added (string)"),
    (lambda a: a["driver"]["plugin"].update({"gpu-operator/dra-driver-nvidia-gpu-kubelet-plugin": {
        "images": ["nvcr.io/driver:v0.4.1"], "desired": 3, "ready": 3}}),
     "change daemonset gpu-operator/dra-driver-nvidia-gpu-kubelet-plugin: new, images ['nvcr.io/driver:v0.4.1']"),
    (lambda a: a["driver"]["plugin"].update({"gpu-operator/dra-driver-nvidia-gpu-kubelet-plugin": a["driver"][
        "plugin"].pop("gpu-operator/nvidia-dra-driver-kubelet-plugin") | {"images": ["nvcr.io/driver:v0.5.0"]}}),
     "change daemonset gpu-operator/nvidia-dra-driver-kubelet-plugin: renamed to "
     "dra-driver-nvidia-gpu-kubelet-plugin (images ['nvcr.io/driver:v0.4.1'] -> ['nvcr.io/driver:v0.5.0']): "
     "whatever refers to the old name (monitoring, runbooks, `kubectl rollout status`) must follow"),
    # What the plugin DaemonSets do is judged by the checks and the nodes' GPUs, not by their names.
    (lambda a: a["driver"]["plugin"].pop("gpu-operator/nvidia-dra-driver-kubelet-plugin"),
     "change daemonset gpu-operator/nvidia-dra-driver-kubelet-plugin: gone"),
])
def test_improvements_and_upgrades_themselves_are_changes_not_regressions(mutate, expected):
    assert [str(c) for c in changed(mutate)] == [expected]


def test_a_verdict_slower_by_under_a_second_is_noise():
    assert changed(lambda a: a["tests"]["t::alloc"].update(duration=2.9)) == []


def test_a_file_that_is_not_a_baseline_is_a_clear_error(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('{"tests": []}')
    with pytest.raises(DraconfError, match="not a draconf baseline"):
        baseline.load(path)
    path.write_text("{")
    with pytest.raises(DraconfError, match="not JSON"):
        baseline.load(path)


def _compare_cli(tmp_path, after, *options):
    import json
    import subprocess
    import sys
    (tmp_path / "before.json").write_text(json.dumps(BEFORE))
    (tmp_path / "after.json").write_text(json.dumps(after))
    return subprocess.run([sys.executable, "-m", "draconf.cli", "compare", str(tmp_path / "before.json"),
                           str(tmp_path / "after.json"), *options], capture_output=True, text=True)


def test_which_kinds_count_is_the_users_choice(tmp_path):
    after = copy.deepcopy(BEFORE)
    after["driver"]["versions"] = ["580.105.8"]
    after["tests"]["t::alloc"]["duration"] = 5.0
    assert _compare_cli(tmp_path, after).returncode == 1  # 2.5x slower: counted by default
    assert _compare_cli(tmp_path, after, "--tolerate", "slower").returncode == 0
    assert _compare_cli(tmp_path, after, "--slower-factor", "3").returncode == 0
    counted = _compare_cli(tmp_path, after, "--tolerate", "slower", "--count", "driver")
    assert counted.returncode == 1 and "REGRESSION driver: versions" in counted.stdout
    bad = _compare_cli(tmp_path, after, "--tolerate", "speed")
    assert bad.returncode == EXIT_BAD_INPUT and "unknown kind of change speed" in bad.stderr
