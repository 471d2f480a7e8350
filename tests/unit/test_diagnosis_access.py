"""The diagnosis rules: the API server and the control plane refused or did not act: unavailable,
throttled, forbidden, denied by admission, a stalled scheduler or controller manager."""

from __future__ import annotations

import dataclasses

from draconf.diagnosis import (
    EventFacts,
    Snapshot,
    TemplateFacts,
    build_facts,
    classify,
)
from draconf.profile import builtin
from tests.unit.diagnosis_facts import (
    BED_SCHEDULER,
    PROFILE_TOLERATION,
    fake_pod,
    healthy,
    request,
    unscheduled,
    with_workload,
)


def test_api_unreachable():
    code, reason = classify(healthy(api_error="MaxRetryError: connection refused"))
    assert code == "api-unavailable" and "connection refused" in reason


def test_resource_api_v1_not_served():
    facts = healthy(resource_api=False, resource_versions=["v1beta1"])
    code, reason = classify(facts)
    assert code == "api-unavailable" and "v1beta1" in reason


def test_no_scheduler_acted_on_the_pods():
    pod, claim = unscheduled()
    facts = with_workload(healthy(control_plane={"kube-scheduler": BED_SCHEDULER}), pod, claim)
    code, reason = classify(facts)
    assert code == "scheduler-unavailable"
    assert "gpu-pod" in reason and "no binding" in reason and "no Lease kube-system/kube-scheduler" in reason


def test_a_stale_lease_is_named():
    pod, claim = unscheduled()
    lease = ("its Lease kube-system/kube-scheduler (holder cp-1_x) was last renewed 95s ago, past "
             "its 15s duration: no instance is leading")
    facts = with_workload(healthy(control_plane={"kube-scheduler": lease}), pod, claim)
    assert "no instance is leading" in classify(facts)[1]


def test_a_young_unscheduled_pod_is_not_a_stalled_scheduler():
    pod, claim = unscheduled(age=3.0)
    facts = with_workload(healthy(), pod, claim)
    assert classify(facts)[0] != "scheduler-unavailable"


def test_a_scheduling_event_means_the_scheduler_acted():
    pod, claim = unscheduled()
    facts = with_workload(healthy(events=[EventFacts("FailedScheduling", "0/4 nodes", "Warning", "Pod",
                                                     "gpu-pod")]), pod, claim)
    assert classify(facts)[0] != "scheduler-unavailable"


def test_a_stopped_scheduler_is_not_a_missing_class():
    # The misdiagnosis: with no scheduler, a claim naming a class is not judged by it.
    pod, claim = unscheduled()
    facts = with_workload(healthy(device_classes={"mig.nvidia.com": []}), pod, claim)
    assert classify(facts)[0] == "scheduler-unavailable"


def test_no_claim_generated_for_the_template():
    pod = fake_pod("gpu-pod", "ns", uid="p1", unseen_by_scheduler=True, ungenerated_claims=["gpu"],
                   age=30.0, tolerations=[PROFILE_TOLERATION])
    facts = healthy(pods=[pod], templates=[TemplateFacts("single-gpu", "ns", [request()])])
    code, reason = classify(facts)
    assert code == "controller-manager-unavailable" and "gpu-pod (gpu)" in reason


def test_a_namespace_without_its_default_service_account():
    facts = healthy(namespace="draconf-x-single-gpu", namespace_without_sa_for=16.0,
                    control_plane={"kube-controller-manager": "no Lease kube-system/kube-controller-manager"})
    code, reason = classify(facts)
    assert code == "controller-manager-unavailable"
    assert "draconf-x-single-gpu" in reason and "no Lease" in reason
    assert classify(dataclasses.replace(facts, namespace_without_sa_for=2.0))[0] == "timeout"


def test_a_refused_claim_creation_is_not_a_stalled_controller():
    pod = fake_pod("gpu-pod", "ns", uid="p1", unseen_by_scheduler=True, ungenerated_claims=["gpu"],
                   age=30.0)
    facts = healthy(pods=[pod], events=[EventFacts("FailedResourceClaimCreation", "exceeded quota",
                                                   "Warning", "Pod", "gpu-pod")])
    assert classify(facts)[0] != "controller-manager-unavailable"


def test_stall_facts_from_a_recorded_pod():
    raw = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "creationTimestamp": "2000-01-01T00:00:00Z"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
           "status": {"phase": "Pending"}}
    facts = build_facts(Snapshot(namespace="ns", pods=[raw], control_plane={"kube-scheduler": "x"}),
                        builtin("nvidia"))
    pod = facts.pods[0]
    assert pod.unseen_by_scheduler and pod.template_claims_not_generated == ["gpu"] and pod.age > 1000
    assert facts.stall_after == 15.0 and facts.control_plane == {"kube-scheduler": "x"}
