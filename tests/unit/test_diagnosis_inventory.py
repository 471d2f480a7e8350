"""The diagnosis rules: what the cluster publishes: DeviceClasses, ResourceSlices, attributes,
taints, features, the kubelet plugin."""

from __future__ import annotations

import dataclasses

import pytest

from draconf.diagnosis import (
    EventFacts,
    TemplateFacts,
    classify,
)
from draconf.plugins import PluginPod
from tests.unit.diagnosis_facts import (
    DRIVER,
    H100,
    HOLDER,
    bound_not_running,
    changed,
    fake_pod,
    fleet,
    healthy,
    model,
    pending,
    refused_with_config,
    request,
    with_workload,
)


def test_claim_names_a_missing_deviceclass():
    pod, claim = pending(message="0/4 nodes are available: 4 cannot allocate all claims.")
    facts = with_workload(healthy(device_classes={"mig.nvidia.com": []}), pod, claim)
    code, reason = classify(facts)
    assert code == "missing-deviceclass" and "gpu.nvidia.com" in reason


def test_scheduler_says_the_class_does_not_exist():
    pod, claim = pending(device_class="other.example.com",
                         message="0/4 nodes are available: request gpu: device class gpu.nvidia.com does not exist.")
    facts = with_workload(healthy(device_classes={"other.example.com": []}), pod, claim)
    assert classify(facts)[0] == "missing-deviceclass"


def test_template_names_a_missing_deviceclass_before_any_claim_exists():
    facts = healthy(device_classes={}, templates=[TemplateFacts("single-gpu", "ns", [request()])])
    assert classify(facts)[0] == "missing-deviceclass"


def test_nothing_deployed_and_profile_class_missing():
    assert classify(healthy(device_classes={}, namespace=None))[0] == "missing-deviceclass"


def test_no_devices_published():
    pod, claim = pending()
    facts = with_workload(healthy(devices=[], slice_count=0), pod, claim)
    code, reason = classify(facts)
    assert code == "no-resourceslices" and "No ResourceSlice" in reason


def test_slices_without_devices_count_as_none():
    code, reason = classify(healthy(devices=[], slice_count=3))
    assert code == "no-resourceslices" and "3 ResourceSlice(s)" in reason


def test_scheduler_cel_runtime_error():
    message = ('running "DynamicResources" filter plugin: claim ns/gpu-pod-gpu-x: selector #0: '
               "CEL runtime error: no such key: productName")
    pod, claim = pending([model("h100")], message=message)
    code, reason = classify(with_workload(healthy(devices=fleet(drop=["productName"])), pod, claim))
    assert code == "attribute-missing" and "productName" in reason


def test_selector_reads_an_attribute_some_devices_lack():
    # No scheduler message yet: the evaluator finds the missing key on the devices the class selects.
    devices = fleet()[:4] + fleet(drop=["productName"])[4:]
    pod, claim = pending([model(H100)], message=None)
    pod = changed(pod, unschedulable=None)
    code, reason = classify(with_workload(healthy(devices=devices), pod, claim))
    assert code == "attribute-missing" and "4 of 8" in reason


def test_nothing_deployed_but_devices_lack_required_attributes():
    facts = healthy(namespace=None, devices=fleet(drop=["uuid"]))
    code, reason = classify(facts)
    assert code == "attribute-missing" and "uuid" in reason


def test_prepare_failed_event():
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", "NodePrepareResources failed for "
                               "ResourceClaim gpu-pod-gpu-x: plugin name gpu.nvidia.com not found",
                               name="gpu-pod")]
    code, reason = classify(facts)
    assert code == "plugin-unhealthy" and "FailedPrepareDynamicResources" in reason


@pytest.mark.parametrize("message", [
    # another device of the node than the claim's, held by another claim
    f"NodePrepareResources failed for ResourceClaim gpu-pod-gpu-x: device gpu-1 is held by claim {HOLDER}",
    # the claim's device, but no other claim named (its own UID only, or a GPU's UUID)
    "NodePrepareResources failed for ResourceClaim gpu-pod-gpu-x: claim ns/gpu-pod-gpu-x:"
    "0e1b2c3d-0000-4000-8000-000000000001 not prepared: device gpu-0: NVML: Unknown Error",
    f"NodePrepareResources failed for ResourceClaim gpu-pod-gpu-x: device gpu-0 (GPU-{HOLDER}) is lost",
])
def test_a_refusal_naming_no_other_claim_holding_the_device_is_not_claim_not_released(message):
    pod, claim = bound_not_running()
    claim = changed(claim, uid="0e1b2c3d-0000-4000-8000-000000000001")
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", message, name="gpu-pod")]
    code, _ = classify(facts)
    assert code == "plugin-unhealthy"


def test_an_mps_daemon_that_never_gets_ready_is_plugin_unhealthy_not_config_rejected():
    # The driver's words under the mps-daemon-fails fault (upstream applySharingConfig): the
    # message passes through "error applying config", but the config is fine; the daemon is not.
    _, _, facts = refused_with_config(
        "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim shared-gpus: error "
        "preparing devices for claim ns/shared-gpus:u1: prepare devices failed: error applying config: MPS "
        "control daemon is not yet ready: waiting for MPS control daemon to come online")
    code, reason = classify(facts)
    assert code == "plugin-unhealthy" and "mps-control-daemon-" in reason and "come online" in reason
    # The bed's simulated driver names the daemon, and says what its pod shows.
    _, _, facts = refused_with_config(
        "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim shared-gpus: claim "
        "ns/shared-gpus:u1 not prepared: GpuConfig for requests "
        "[mps-gpu] not applied: MPS control daemon mps-control-daemon-u1-3f2a9 is not ready after 4 checks: "
        "pod mps-control-daemon-u1-3f2a9-7d9c-x: container mps-control-daemon waiting (CrashLoopBackOff)")
    code, reason = classify(facts)
    assert code == "plugin-unhealthy" and "CrashLoopBackOff" in reason, reason


def test_a_scheduler_with_the_prioritized_list_off_is_feature_disabled():
    # Recorded on the bed under the prioritized-list-off fault.
    pod, claim = pending(message="0/4 nodes are available: resource claim ns/gpu-pod-gpu-x, request gpu: "
                                 "has subrequests, but the DRAPrioritizedList feature is disabled. no new "
                                 "claims to deallocate")
    code, reason = classify(with_workload(healthy(), pod, claim))
    assert code == "feature-disabled" and "DRAPrioritizedList feature is disabled" in reason


def test_insufficient_extended_resource_a_class_maps_is_feature_disabled():
    # Recorded on the bed under the extended-resource-off fault: the pod has no claim at all.
    pod = fake_pod("gpu-pod-extres", "ns", uid="p1", unschedulable="0/4 nodes are available: 4 "
                   "Insufficient nvidia.com/gpu. no new claims to deallocate")
    facts = dataclasses.replace(healthy(extended_resources={"nvidia.com/gpu": DRIVER}), pods=[pod])
    code, reason = classify(facts)
    assert code == "feature-disabled" and "DRAExtendedResource" in reason
    # Without a class mapping it, it is a plain device-plugin shortage: not this code.
    code, _ = classify(dataclasses.replace(healthy(), pods=[pod]))
    assert code != "feature-disabled"


def test_plugin_pod_crash_looping_on_the_node():
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.plugin_pods[0] = PluginPod("gpu-operator", "plugin-gpu-h100-0", node="gpu-h100-0",
                                     phase="Running", ready=False, reasons=("CrashLoopBackOff",),
                                     restarts=7)
    code, reason = classify(facts)
    assert code == "plugin-unhealthy" and "CrashLoopBackOff" in reason


def test_plugin_absent_from_the_node():
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.plugin_pods = facts.plugin_pods[1:]
    code, reason = classify(facts)
    assert code == "plugin-unhealthy" and "no kubelet-plugin pod runs on gpu-h100-0" in reason
