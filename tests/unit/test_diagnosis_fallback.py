"""The diagnosis rules: what is left when no rule's evidence is there."""

from __future__ import annotations

import dataclasses

import pytest

from draconf.diagnosis import (
    EventFacts,
    NodeFacts,
    QuotaFacts,
    classify,
)
from tests.unit.diagnosis_facts import (
    H100,
    TAINT,
    WAITED_FOR_RELEASE,
    bound_not_running,
    changed,
    competing,
    fake_pod,
    healthy,
    model,
    pending,
    running,
    saw,
    with_workload,
)


def test_taint_on_nodes_without_candidates_does_not_exclude():
    # Only the H200 node is tainted, the pod wants an H100: not node-excluded (the H100 node is free).
    facts = healthy(nodes=[NodeFacts("gpu-h100-0"), NodeFacts("gpu-a100-0"),
                           NodeFacts("gpu-h200-0", taints=[TAINT]), NodeFacts("cpu-0")])
    pod, claim = pending([model(H100)], message=None)
    pod = changed(pod, unschedulable="0/4 nodes are available: waiting for something.")
    assert classify(with_workload(facts, pod, claim))[0] == "timeout"


@pytest.mark.parametrize("selector", ["device.attributes['gpu.nvidia.com'].productName.size() > 3",
                                      "device.attributes['gpu.nvidia.com'].productName > 5"])
def test_selector_without_cannot_allocate_is_no_verdict(selector):
    pod, claim = pending([selector], message="0/4 nodes are available: 4 Insufficient cpu.")
    assert classify(with_workload(healthy(), pod, claim))[0] == "timeout"


def test_bound_pod_not_running_with_healthy_plugin_is_no_verdict():
    pod, claim = bound_not_running()
    assert classify(with_workload(healthy(), pod, claim))[0] == "timeout"


def test_an_exec_without_an_answer_is_no_cdi_evidence():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(answered=False, how="nvidia-smi -L: exit None; no exit status received")]
    assert classify(facts)[0] == "timeout"


def test_finished_job_whose_claim_is_gone_needs_the_checks_record_for_a_wrong_device():
    # The deleted claim's allocation survives only in the check's record, handed over as data
    # (WrongInjection.allocated); the message's wording is never read back.
    pod = fake_pod("gpu-pod", "ns", uid="p1", phase="Succeeded", node="gpu-h100-0", claims={"gpu": "gone"})
    facts = dataclasses.replace(healthy(), pods=[pod], containers=[saw(["GPU-b"], expected=None)])
    # (the check said: "CDI injection is wrong: gpu-pod/workload sees ['GPU-b'], allocated ['GPU-a']")
    assert classify(facts)[0] == "timeout"
    facts.recorded_allocations = {"gpu-pod/workload": ["GPU-a"]}
    assert classify(facts)[0] == "cdi-wrong-device"


def test_claim_of_a_pod_stuck_terminating_is_not_a_claim_problem():
    pod, claim = running()
    facts = with_workload(healthy(), changed(pod, deleting=True), claim)
    facts.failure = WAITED_FOR_RELEASE  # the cleanup check waited the release out
    code, reason = classify(facts)
    assert code == "timeout" and "being deleted" in reason


def test_a_quota_check_that_failed_without_excess_is_not_a_quota_code():
    # The message naming a quota is no evidence: nothing in the namespace exceeds it.
    key = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
    quota = QuotaFacts("gpus", "ns", hard={key: "1"}, used={key: "1"}, counted={key: 1})
    assert classify(healthy(quotas=[quota]))[0] == "timeout"


def test_a_clusterpolicy_that_does_not_compete_explains_nothing():
    pod, claim = running()
    # Present, but no node offers nvidia.com/gpu: the failure is something else.
    facts = with_workload(healthy(cluster_policy=True, cluster_policy_device_plugin=True), pod, claim)
    assert classify(facts)[0] == "timeout"
    # Its device plugin disabled: whatever the nodes say, it is not the ClusterPolicy's.
    facts = with_workload(dataclasses.replace(competing(), cluster_policy_device_plugin=False), pod, claim)
    assert classify(facts)[0] == "timeout"
    # Nothing of the namespace wants GPUs.
    assert classify(competing())[0] == "timeout"


def test_nothing_definitive_is_a_timeout_with_the_last_state():
    pod, claim = bound_not_running()
    code, reason = classify(with_workload(healthy(), pod, claim))
    assert code == "timeout" and "gpu-pod" in reason and "gpu-pod-gpu-x" in reason


def test_quota_rejection_is_named_in_the_timeout():
    pod = fake_pod("gpu-pod", "ns", uid="p1", ungenerated_claims=["gpu"])
    facts = healthy(pods=[pod], events=[EventFacts(
        "FailedResourceClaimCreation", "PodResourceClaim gpu: resourceclaims.resource.k8s.io is "
        "forbidden: exceeded quota: gpus, requested: count/resourceclaims.resource.k8s.io=1")])
    code, reason = classify(facts)
    assert code == "timeout" and "exceeded quota" in reason
