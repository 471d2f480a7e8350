"""The diagnosis rules: what happens after a pod: claims released, quota enforced, policies in
conflict."""

from __future__ import annotations

import dataclasses

import pytest

from draconf.diagnosis import (
    EventFacts,
    QuotaFacts,
    classify,
)
from tests.unit.diagnosis_facts import (
    DRIVER,
    HELD_BY_ANOTHER_CLAIM,
    HOLDER,
    WAITED_FOR_RELEASE,
    bound_not_running,
    changed,
    competing,
    fake_claim,
    healthy,
    pending,
    request,
    running,
    with_workload,
)


@pytest.mark.parametrize("driver", sorted(HELD_BY_ANOTHER_CLAIM))
def test_a_device_still_prepared_for_an_unreleased_claim_is_claim_not_released(driver):
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", HELD_BY_ANOTHER_CLAIM[driver], name="gpu-pod")]
    code, reason = classify(facts)
    assert code == "claim-not-released" and "never unprepared" in reason and HOLDER in reason


def test_generated_claim_outlives_its_pod():
    _, claim = running()
    claim = changed(claim, allocated=False, devices=[], reserved_for=[], reserved_for_uids=[],
                                deleting=True, finalizers=["gpu.nvidia.com/unprepare-pending"])
    facts = dataclasses.replace(healthy(), claims=[claim])
    facts.failure = WAITED_FOR_RELEASE  # the cleanup check waited the release out
    code, reason = classify(facts)
    assert code == "claim-not-released" and "gpu.nvidia.com/unprepare-pending" in reason


def test_named_claim_still_allocated_after_its_consumers():
    claim = fake_claim("shared-gpu", "ns", allocated=True, devices=[f"{DRIVER}/gpu-h100-0/gpu-0"],
                       reserved_for=["gone-pod"], reserved_for_uids=["p9"], requests=[request()])
    facts = dataclasses.replace(healthy(), claims=[claim])
    facts.failure = WAITED_FOR_RELEASE  # the cleanup check waited the release out
    assert classify(facts)[0] == "claim-not-released"


def test_claim_of_a_deleted_pod_whose_containers_stopped_is_not_released():
    # What a real kubelet shows when NodeUnprepareResources fails: containers gone, pod stays.
    pod, claim = running()
    facts = with_workload(healthy(), changed(pod, deleting=True, stopped=True), claim)
    facts.failure = WAITED_FOR_RELEASE  # the cleanup check waited the release out
    code, reason = classify(facts)
    assert code == "claim-not-released" and "still reserved" in reason


def test_quota_used_beyond_hard():
    quota = QuotaFacts("gpus", "ns", hard={"count/resourceclaims.resource.k8s.io": "1"},
                       used={"count/resourceclaims.resource.k8s.io": "2"})
    code, reason = classify(healthy(quotas=[quota]))
    assert code == "quota-not-enforced" and "used 2 > hard 1" in reason


def test_quota_counted_from_the_namespaces_claims_before_its_status_catches_up():
    key = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
    quota = QuotaFacts("gpus", "ns", hard={key: "1"}, counted={key: 2})
    code, reason = classify(healthy(quotas=[quota]))
    assert code == "quota-not-enforced" and "holds 2 > hard 1" in reason


def test_policy_conflict():
    pod, claim = running()
    code, reason = classify(with_workload(competing(), pod, claim))
    assert code == "policy-conflict" and "gpu-h100-0" in reason and "4 nvidia.com/gpu" in reason


def test_policy_conflict_for_a_pending_pod_whose_candidate_nodes_offer_nvidia_gpu():
    pod, claim = pending()
    pod = changed(pod, unschedulable="0/4 nodes are available: 4 Insufficient cpu.")
    assert classify(with_workload(competing(), pod, claim))[0] == "policy-conflict"
