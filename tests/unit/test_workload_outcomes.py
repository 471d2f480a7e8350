"""The pure parts of the workload outcome model: Start, NoVerdict, and what the memory-selected
workload does when the cluster publishes no memory capacity."""


import pytest

from draconf.scenarios import walkthrough
from draconf.devices import Device, PublishedDevices
from draconf.errors import NoVerdict
from draconf.profile import resolve
from draconf.workload import Start

DRIVER = "gpu.nvidia.com"


def gpu(minor: int, memory: int | None, arch: str = "Hopper") -> Device:
    attrs = {f"{DRIVER}/type": "gpu", f"{DRIVER}/uuid": f"GPU-{minor}",
             f"{DRIVER}/productName": "NVIDIA H100 80GB HBM3", f"{DRIVER}/architecture": arch}
    caps = {f"{DRIVER}/memory": memory} if memory is not None else {}
    return Device(DRIVER, "node-a", f"gpu-{minor}", "node-a", attrs, caps)


def test_no_verdict_is_a_skip_that_carries_its_cause():
    err = NoVerdict("workload never started: 0/4 nodes are available")
    assert isinstance(err, pytest.skip.Exception)
    assert err.cause == str(err) == "workload never started: 0/4 nodes are available"


def test_start_outcome():
    assert not Start(deployed=None).never_started
    failed = Start(deployed=None, failure="pod p cannot pull its image")
    assert failed.never_started
    assert failed.no_verdict_cause == "workload never started: pod p cannot pull its image"


def test_memory_selected_keeps_its_memory_selector():
    suite, profile = walkthrough, resolve("nvidia")
    published = PublishedDevices(DRIVER, [gpu(0, 80 * 2**30), gpu(1, 140 * 2**30)])
    workload = suite.build_workload("memory-selected", published, profile)
    assert [len(v) for v in workload.selectors.values()] == [1, 1]
    assert "isGreaterThan" in workload.selectors["large-memory-gpu"][0].cel


def test_memory_selected_without_published_memory_is_a_finding_not_a_single_gpu_workload():
    suite, profile = walkthrough, resolve("nvidia")
    published = PublishedDevices(DRIVER, [gpu(0, None), gpu(1, None)])
    with pytest.raises(suite.NotBuildable, match=r"^\[attribute-missing\] no published device has "
                                                 r"the capacity 'memory'"):
        suite.build_workload("memory-selected", published, profile)
