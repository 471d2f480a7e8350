"""The diagnosis rules: priority conflicts: when several rules' evidence is present, the more basic
cause wins."""

from __future__ import annotations

import dataclasses

import pytest

from draconf.diagnosis import (
    Diagnosis,
    EventFacts,
    QuotaFacts,
    classify,
)
from draconf.reporting import DIAGNOSES
from tests.unit.diagnosis_facts import (
    H100,
    TAINT,
    WAITED_FOR_RELEASE,
    bound_not_running,
    changed,
    competing,
    fake_pod,
    fleet,
    healthy,
    model,
    nodes,
    pending,
    running,
    saw,
    with_workload,
)


def test_api_beats_everything():
    facts = healthy(api_error="connection refused", devices=[], device_classes={}, cluster_policy=True)
    assert classify(facts)[0] == "api-unavailable"


def test_missing_class_beats_no_slices():
    pod, claim = pending()
    facts = with_workload(healthy(device_classes={}, devices=[]), pod, claim)
    assert classify(facts)[0] == "missing-deviceclass"


def test_no_slices_beats_attribute_and_selector_rules():
    pod, claim = pending([model(H100)], message="CEL runtime error: no such key: productName")
    facts = with_workload(healthy(devices=[]), pod, claim)
    assert classify(facts)[0] == "no-resourceslices"


def test_attribute_missing_beats_node_excluded():
    pod, claim = pending([model(H100)], message="CEL runtime error: no such key: productName")
    facts = with_workload(healthy(devices=fleet(drop=["productName"]), nodes=nodes(TAINT)), pod, claim)
    assert classify(facts)[0] == "attribute-missing"


def test_node_excluded_beats_cannot_allocate():
    pod, claim = pending()
    facts = with_workload(healthy(nodes=nodes(TAINT)), pod, claim)
    assert classify(facts)[0] == "node-excluded"


def test_unmatched_selector_is_not_node_excluded_even_on_tainted_nodes():
    pod, claim = pending([model("NVIDIA B200")])
    facts = with_workload(healthy(nodes=nodes(TAINT)), pod, claim)
    assert classify(facts)[0] == "selector-unmatched"


def test_plugin_unhealthy_beats_cdi_when_the_pod_never_ran():
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", "prepare failed", name="gpu-pod")]
    # (the check said: "injection cannot be checked: timed out waiting for 1 pod(s) of single-gpu to run")
    assert classify(facts)[0] == "plugin-unhealthy"


def test_cdi_rule_needs_the_injection_check():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    assert classify(facts)[0] == "timeout"


def test_cdi_beats_policy_conflict():
    pod, claim = running()
    facts = with_workload(competing(), pod, claim)
    facts.containers = [saw(["GPU-b"])]
    assert classify(facts)[0] == "cdi-wrong-device"


def test_cleanup_rule_ignores_claims_of_live_pods_and_other_checks():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.failure = WAITED_FOR_RELEASE  # the cleanup check waited the release out
    assert classify(facts)[0] == "timeout"
    _, orphan = running()
    orphan = changed(orphan, deleting=True, finalizers=["x/y"])
    assert classify(dataclasses.replace(healthy(), claims=[orphan]))[0] == "timeout"


def test_an_overdue_claim_is_not_released_whatever_the_check():
    _, orphan = running()
    orphan = changed(orphan, deleting=True, deleting_for=60, finalizers=["x/y"])
    assert classify(dataclasses.replace(healthy(), claims=[orphan]))[0] == \
        "claim-not-released"
    # A job's pod done for a minute whose generated claim is still allocated.
    pod, claim = running()
    done = changed(pod, phase="Succeeded", ready=False, done_for=60)
    assert classify(with_workload(healthy(), done, claim))[0] == "claim-not-released"
    # Moments after it ended, the same claim is still in flight.
    done = changed(done, done_for=2)
    assert classify(with_workload(healthy(), done, claim))[0] == "timeout"


def test_claim_not_released_beats_quota_and_policy():
    _, claim = running()
    quota = QuotaFacts("q", "ns", hard={"count/resourceclaims.resource.k8s.io": "1"},
                       used={"count/resourceclaims.resource.k8s.io": "3"})
    facts = dataclasses.replace(healthy(cluster_policy=True, quotas=[quota]), claims=[claim])
    facts.failure = WAITED_FOR_RELEASE  # the cleanup check waited the release out
    assert classify(facts)[0] == "claim-not-released"


def test_an_image_the_node_cannot_pull_is_named():
    pod = fake_pod("gpu-pod", node="gpu-h100-0", claims={"gpu": "gpu-pod-gpu-x"},
                   image_pull=["workload: ubuntu:24.04 (ErrImagePull: failed to resolve reference)"])
    facts = dataclasses.replace(healthy(), pods=[pod])
    code, text = classify(facts)
    assert code == "image-pull-failed" and "ubuntu:24.04" in text and "gpu-h100-0" in text


def test_every_code_is_reachable_and_known():
    assert {"api-unavailable", "missing-deviceclass", "no-resourceslices", "attribute-missing",
            "node-excluded", "capacity-exhausted", "selector-unmatched", "plugin-unhealthy",
            "cdi-not-injected", "cdi-wrong-device", "claim-not-released", "quota-not-enforced",
            "policy-conflict", "image-pull-failed", "permission-denied", "admission-denied",
            "scheduler-unavailable", "controller-manager-unavailable", "timeout", "intermittent",
            "admin-access-unsupported", "admin-access-unrestricted", "feature-disabled",
            "scheduler-without-dra", "device-tainted", "gpu-operator-not-ready",
            "allocation-invalid", "config-rejected", "config-ignored",
            "partition-overlap", "inventory-mismatch", "spec-altered", "diagnosis-error", "api-throttled"} == set(DIAGNOSES)
    with pytest.raises(ValueError):
        Diagnosis("no-such-code", "x")
