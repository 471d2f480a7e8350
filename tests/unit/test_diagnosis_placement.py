"""The diagnosis rules: why the scheduler did not place a pod or allocated wrongly: selectors,
capacity, node exclusions, partitions."""

from __future__ import annotations

import dataclasses

import pytest

from draconf import selectors as sel
from draconf.diagnosis import (
    classify,
)
from tests.unit.diagnosis_facts import (
    CLASS_CEL,
    DRIVER,
    GI,
    H200,
    TAINT,
    changed,
    fake_pod,
    fleet,
    healthy,
    model,
    nodes,
    pending,
    with_workload,
)


def test_gpu_nodes_tainted():
    message = ("0/4 nodes are available: 1 cannot allocate all claims, 3 node(s) had untolerated "
               "taint {dedicated: gpu-reserved}.")
    pod, claim = pending(message=message)
    code, reason = classify(with_workload(healthy(nodes=nodes(TAINT)), pod, claim))
    assert code == "node-excluded" and "dedicated=gpu-reserved:NoSchedule" in reason


def test_gpu_nodes_tainted_keep_an_extended_resource_pod_off_too():
    """A ``nvidia.com/gpu: 1`` pod has no claim until the scheduler places it: its request is the
    DeviceClass mapping the resource (it was a timeout)."""
    message = ("0/4 nodes are available: 1 cannot allocate all claims, 3 node(s) had untolerated "
               "taint {dedicated: gpu-reserved}.")
    pod = fake_pod("gpu-pod-extres", "ns", uid="p1", unschedulable=message)
    pod.spec["containers"] = [{"name": "workload", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    facts = dataclasses.replace(healthy(nodes=nodes(TAINT)), pods=[pod],
                                extended_resources={"nvidia.com/gpu": DRIVER})
    code, reason = classify(facts)
    assert code == "node-excluded" and "dedicated=gpu-reserved:NoSchedule" in reason and "gpu-pod-extres" in reason


def test_node_selector_excludes_the_gpu_nodes():
    pod, claim = pending()
    pod = changed(pod, node_selector={"pool": "cpu"})
    assert classify(with_workload(healthy(), pod, claim))[0] == "node-excluded"


def test_every_matching_device_is_allocated():
    pod, claim = pending([model(H200)])
    facts = healthy(allocated={f"{DRIVER}/gpu-h200-0/gpu-0": "other/a", f"{DRIVER}/gpu-h200-0/gpu-1": "other/b"})
    code, reason = classify(with_workload(facts, pod, claim))
    assert code == "capacity-exhausted" and "other/a" in reason


def test_two_gpus_needed_but_only_one_free_per_node():
    pod, claim = pending(count=2)
    taken = {f"{DRIVER}/gpu-h100-0/gpu-{i}": "other/x" for i in range(3)}
    taken |= {f"{DRIVER}/gpu-a100-0/gpu-0": "other/y", f"{DRIVER}/gpu-h200-0/gpu-1": "other/z"}
    code, _ = classify(with_workload(healthy(allocated=taken), pod, claim))
    assert code == "capacity-exhausted"


def test_selector_matches_no_published_device():
    pod, claim = pending([model("NVIDIA B200")])
    code, reason = classify(with_workload(healthy(), pod, claim))
    assert code == "selector-unmatched" and "0 of 8" in reason


def test_more_devices_per_node_than_any_node_has():
    pod, claim = pending(count=5)
    assert classify(with_workload(healthy(), pod, claim))[0] == "selector-unmatched"


def test_memory_selector_above_every_gpu():
    pod, claim = pending([sel.memory_above(DRIVER, "memory", 200 * GI).cel])
    assert classify(with_workload(healthy(), pod, claim))[0] == "selector-unmatched"


def test_any_cel_selector_is_evaluated_exactly():
    # size() is no form a hand-written evaluator knew; the CEL engine counts the matches exactly
    pod, claim = pending(["device.attributes['gpu.nvidia.com'].productName.size() > 100"])
    code, reason = classify(with_workload(healthy(), pod, claim))
    assert code == "selector-unmatched" and (
        "0 of 8 device(s) eligible after the class selector (8 published) match" in reason)


def test_a_class_selecting_nothing_is_named_with_published_count_not_zero_of_zero():
    # The class's own selector excludes all 8 published devices: the message names the class and
    # its expression, and says "0 of 8 published", never "0 of 0 published".
    pod, claim = pending(["device.attributes['gpu.nvidia.com'].productName == 'x'"])
    wrong = CLASS_CEL.replace("'gpu'", "'tpu'")
    facts = with_workload(healthy(device_classes={DRIVER: [wrong]}), pod, claim)
    code, reason = classify(facts)
    assert code == "selector-unmatched"
    assert f"DeviceClass {DRIVER} selects 0 of 8 published devices: {wrong}" in reason
    assert "0 of 0" not in reason


def test_selector_failing_with_a_type_error_and_free_devices_is_unmatched():
    # a runtime error that is not a missing key: the rule falls back to the DeviceClass alone
    pod, claim = pending(["device.attributes['gpu.nvidia.com'].productName > 5"])
    code, reason = classify(with_workload(healthy(), pod, claim))
    assert code == "selector-unmatched" and "free devices" in reason


@pytest.mark.parametrize("selector", ["device.attributes['gpu.nvidia.com'].productName.size() > 3",
                                      "device.attributes['gpu.nvidia.com'].productName > 5"])
def test_selector_with_all_class_devices_taken_is_exhausted(selector):
    pod, claim = pending([selector])
    taken = {d.key: "other/x" for d in fleet()}
    code, _ = classify(with_workload(healthy(allocated=taken), pod, claim))
    assert code == "capacity-exhausted"
