"""The diagnosis rules: what the node did with an allocated pod: images, prepare refused, CDI
injection, intermittent results."""

from __future__ import annotations

import dataclasses

import pytest

from draconf.diagnosis import (
    EventFacts,
    Failure,
    classify,
)
from tests.unit.diagnosis_facts import (
    COMPARED_INJECTION,
    HELD_BY_ANOTHER_CLAIM,
    bound_not_running,
    changed,
    fake_pod,
    healthy,
    refused_with_config,
    running,
    saw,
    with_workload,
)


@pytest.mark.parametrize("driver", sorted(HELD_BY_ANOTHER_CLAIM))
def test_a_driver_refusing_an_admin_access_device_is_admin_access_unsupported(driver):
    # Recorded on the bed under the admin-access-exclusive fault.
    pod, claim = bound_not_running()
    claim = changed(claim, admin_devices=list(claim.device_keys))
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", HELD_BY_ANOTHER_CLAIM[driver], name="gpu-pod")]
    code, reason = classify(facts)
    assert code == "admin-access-unsupported" and "adminAccess" in reason


def test_a_driver_refusing_a_claims_sharing_config_is_config_rejected():
    # The NVIDIA driver's words (v0.4.1) for manifests/features/48-gpu-sharing-invalid.yaml, and
    # for gpu-test5 with the chart's default featureGates.
    pod, claim, facts = refused_with_config(
        "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for "
        "ResourceClaim bad-field: error preparing devices for claim ns/bad-field:u1: prepare devices failed: "
        "error getting opaque device configs: error decoding config parameters: strict decoding error: "
        "unknown field \"sharing.timeSlicingConfig.quantum\"")
    code, reason = classify(facts)
    assert code == "config-rejected" and "sharing.timeSlicingConfig.quantum" in reason
    gate = ('error validating GPU config: "TimeSlicing" is selected as the GPU sharing strategy, but '
            'the "TimeSlicingSettings" feature gate is not enabled')
    facts.events = [dataclasses.replace(facts.events[0], message=gate)]
    assert classify(facts)[0] == "config-rejected"
    # A claim without opaque config for the driver: the same refusal is not about config.
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", gate, name="gpu-pod")]
    assert classify(facts)[0] != "config-rejected"


def test_the_simulated_drivers_sharing_refusals_are_config_rejected():
    # The bed's simulated driver in its own words (gomod/gpu-driver/internal/plugin/sharing.go),
    # for the same three configs: each names the config kind, the first in apimachinery's words.
    prefix = ("Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim bad: claim "
              "ns/bad:u1 not prepared: ")
    for refusal, shown in [
            ('opaque config #0 for gpu.nvidia.com is not a valid GpuConfig: strict decoding error: unknown '
             'field "sharing.timeSlicingConfig.quantum"', "sharing.timeSlicingConfig.quantum"),
            ('GpuConfig for requests [gpu] refused: sharing strategy "Exclusive" is unknown (this driver '
             'knows TimeSlicing and MPS)', 'sharing strategy "Exclusive"'),
            ('GpuConfig for requests [ts-gpu] refused: sharing strategy "TimeSlicing" needs the '
             'TimeSlicingSettings feature gate, which this driver runs without', "TimeSlicingSettings feature gate")]:
        _, _, facts = refused_with_config(prefix + refusal)
        code, reason = classify(facts)
        assert code == "config-rejected" and shown in reason, (refusal, code, reason)


def test_container_sees_no_gpu():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(no_tool=True, how="nvidia-smi -L: exit 127; exec: \"nvidia-smi\": "
                            "executable file not found in $PATH")]
    code, reason = classify(facts)
    assert code == "cdi-not-injected" and "gpu-h100-0/gpu-0" in reason and "executable file" in reason


def test_container_sees_fewer_gpus_than_allocated():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(["GPU-a"], ["GPU-a", "GPU-b"])]
    assert classify(facts)[0] == "cdi-not-injected"


def test_container_sees_another_gpu():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(["GPU-gpu-h100-0-1"])]
    code, reason = classify(facts)
    assert code == "cdi-wrong-device" and "GPU-gpu-h100-0-1" in reason


def test_container_without_claim_sees_a_gpu():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(["GPU-gpu-h100-0-0"]), saw(["GPU-x"], [], container="sidecar", claims=())]
    assert classify(facts)[0] == "cdi-wrong-device"


def test_cdi_codes_come_from_what_the_container_saw_not_from_the_message():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(["GPU-gpu-h100-0-0"])]
    # The check's message claims a wrong device, the container shows the right one: no CDI
    # code; what the check saw did not persist.
    # (the check said: "CDI injection is wrong: gpu-pod/workload sees ['GPU-b'], allocated ['GPU-a']")
    facts.failure = COMPARED_INJECTION  # the injection check's WrongInjection
    assert classify(facts)[0] == "intermittent"
    # ...and a container that saw another GPU is caught whatever the check was.
    facts.containers = [saw(["GPU-gpu-h100-0-1"])]
    assert classify(facts)[0] == "cdi-wrong-device"


def test_a_failure_that_a_second_reading_does_not_show_is_intermittent_only_for_injection():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(["GPU-gpu-h100-0-0"])]
    facts.failure = COMPARED_INJECTION
    code, sentence = classify(facts)
    assert code == "intermittent" and "--reruns" in sentence and "GPU-gpu-h100-0-0" in sentence
    # Other checks do not repeat what the containers show: nothing definitive there.
    facts.failure = Failure()
    assert classify(facts)[0] == "timeout"
    # A container still without its GPU is a lasting failure, not a flake.
    facts.containers = [saw([])]
    assert classify(facts)[0] == "cdi-not-injected"


def test_finished_job_without_nvidia_smi_is_not_injected_even_after_its_claim_is_gone():
    pod = fake_pod("gpu-pod", "ns", uid="p1", phase="Failed", node="gpu-h100-0", claims={"gpu": "gone"})
    facts = dataclasses.replace(healthy(), pods=[pod], containers=[saw(
        expected=None, no_tool=True, how="log: ''; ended: exit 128 StartError exec: \"nvidia-smi\": "
        "executable file not found in $PATH")])
    assert classify(facts)[0] == "cdi-not-injected"


#: The kubelet's event on NVIDIA's release bed under the external fault cdi-spec-dirs-wrong
#: (containerd reading CDI specs from /etc/cdi only).
CDI_UNRESOLVED_EVENT = ("Error: failed to create containerd container: CDI device injection failed: "
                        "unresolvable CDI devices k8s.gpu.nvidia.com/claim=9f029d0e-71b8-42d3-aa12-471ff2f49581-gpu-0")


def test_a_runtime_that_cannot_resolve_the_cdi_devices_is_cdi_not_injected():
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("Failed", CDI_UNRESOLVED_EVENT, name="gpu-pod")]
    code, reason = classify(facts)[:2]
    assert code == "cdi-not-injected", reason
    assert "cdi_spec_dirs" in reason and "unresolvable CDI devices" in reason


def test_another_failed_event_is_no_cdi_finding():
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("Failed", "Error: failed to create containerd container: no such image", name="gpu-pod")]
    assert classify(facts)[0] != "cdi-not-injected"
