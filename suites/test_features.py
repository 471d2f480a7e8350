"""DRA features a GPU cluster on Kubernetes 1.36 uses beyond the walkthrough, as three more workloads.

Each is applied from ``manifests/features/`` and gets the same three checks as the six
walkthrough workloads (``draconf/scenarios/walkthrough.py``: allocation, cdi-injection, cleanup), plus
what the feature itself promises:

* **extended-resource** (``40-extended-resource.yaml``) - a pod asking for ``nvidia.com/gpu: 1``
  in its limits, no claim, on a cluster whose DeviceClass carries ``extendedResourceName``:
  the scheduler creates its claim (annotation ``resource.kubernetes.io/extended-resource-claim``,
  named in ``pod.status.extendedResourceClaimStatus``, owned by the pod, one request per
  container mapping with the container's count), the driver prepares it, ``nvidia-smi -L``
  lists the allocated GPU, and the claim is deleted with the pod;
* **prioritized-list** (``41-prioritized-list.yaml``) - ``firstAvailable``: "a B200, else the
  model this cluster publishes most of"; no published device satisfies the first subrequest,
  so the result names ``gpu/<second>`` and its device satisfies that subrequest's selectors;
* **admin-access** (``42-gpu-in-use.yaml``, ``43-admin-access-monitor.yaml``) - in a namespace
  labelled ``resource.kubernetes.io/admin-access: "true"``, a claim with ``adminAccess: true``
  is allocated the GPU another claim holds, and its container sees that GPU; the same claim in
  an unlabelled namespace is refused by the API server, whose message the report shows;
* **device-taints** (``45-device-taint-tolerated.yaml``, ``46-device-taint-untolerated.yaml``) -
  a GPU the driver tainted NoSchedule/NoExecute (an unhealthy GPU: ``gpu.nvidia.com/xid=79``)
  is allocated to a claim whose request tolerates the taint and selects it; the same device
  asked for without a toleration is never allocated (the scheduler leaves the pod Pending).
* **device-taint-rule** (``49-device-taint-rule.yaml``, ``50-device-taint-rule-evict.yaml``,
  ``51-gpu-drained.yaml``; checks, not a workload with the three) - an administrator's
  DeviceTaintRule (resource.k8s.io/v1beta2, beta and off by default in 1.36) tainting one free
  GPU NoSchedule keeps a claim without a toleration off it, until the rule is deleted; one
  tainting the GPUs of two running pods NoExecute gets the pod whose claim does not tolerate it
  evicted by kube-controller-manager and its claim released, while the tolerating pod runs on.

Each is capability-gated (draconf/capabilities.py): where the cluster does not serve the field
(a server-side dry-run create drops it) or the DeviceClass maps no extended resource, the
workload's tests are skipped with that reason; device-taints is also skipped where no
published device carries a NoSchedule/NoExecute taint (nothing to check).
"""

from __future__ import annotations

import json
import logging

import pytest
from kubernetes.client.exceptions import ApiException

from draconf import capabilities, manifests, startup, taints, waits
from draconf.admission import AdmissionDenied
from draconf.breaker import trip_breaker
from draconf.claims import Claim, device_holders
from draconf.errors import CheckFailed, NoVerdict, server_message
from draconf.expectations import FeatureMissing
from draconf.pods import Pod
from draconf.reporting import note, record_diagnosis
from draconf.scenarios.admin_access import start_admin_access
from draconf.scenarios.device_taint_rules import (
    DRAIN_MANIFEST,
    DRAIN_TOLERANT,
    DRAINED,
    EVICTION_EVENT,
    EVICTION_EVENT_TIMEOUT,
    EVICTION_TIMEOUT,
    RULE_MANIFEST,
    create_rule,
    free_gpu,
    pod_uid,
    read_rule,
    rule_capability,
    wait_rule_status,
)
from draconf.scenarios.device_taints import (
    TOLERATING_CLAIM,
    UNTOLERATED_CLAIM,
    UNTOLERATED_VERDICT_TIMEOUT,
    start_device_taints,
    taint_workload,
    tainted_target,
    tolerations_for,
    untolerated_answer,
)
from draconf.scenarios.extended_resource import (
    ExtendedResourceWorkload,
    start_extended_resource,
)
from draconf.scenarios.features import FEATURES, feature_allocation
from draconf.scenarios.gpu_sharing import (
    INVALID_CONFIGS,
    INVALID_VERDICT_TIMEOUT,
    SHARING_WORKLOAD,
    SharingWorkload,
    sharing_evidence,
    sharing_target,
)
from draconf.scenarios.prioritized_list import start_prioritized_list
from draconf.scenarios.walkthrough import (
    attach_evidence,
    check_allocation,
    check_cdi_injection,
    check_cleanup,
)
from draconf.startup import allocated_once_freed, wait_scheduler_answer
from draconf.workload import DeployedWorkload, Start, Workload

log = logging.getLogger("draconf")


# --- the workloads: the walkthrough's three checks, and each feature's own --------------------

@pytest.fixture(scope="class", params=FEATURES)
def started(request, cluster, profile, run_id, published_devices, validated_nodes) -> Start:
    """The feature workload started on the GPU nodes the run validates (kept off the others)."""
    avoid, published = validated_nodes.avoid, validated_nodes.devices(published_devices)
    try:
        if request.param == "extended-resource":
            start = start_extended_resource(request, cluster, profile, run_id, avoid)
        elif request.param == "prioritized-list":
            start = start_prioritized_list(request, cluster, profile, run_id, published, avoid)
        elif request.param == "device-taints":
            start = start_device_taints(request, cluster, profile, run_id, avoid)
        else:
            start = start_admin_access(request, cluster, profile, run_id, published, avoid)
    except FeatureMissing as missing:
        # An expected feature is not there: the workload's allocation fails with it (nothing
        # was deployed, so injection and cleanup give no verdict).
        return Start(None, missing.reason, cause=startup.FEATURE_MISSING, code=missing.code)
    if start.stalled:
        trip_breaker(request.config, start.stalled, start.failure)
    return start


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
class TestFeatureWorkload:
    """The walkthrough's allocation, cdi-injection and cleanup; allocation also judges what the
    feature itself promises about the claim the scheduler allocated."""

    def test_allocation(self, request, started, published_devices, cluster, profile):
        check_allocation(request, started, published_devices)
        feature_allocation(request, started.deployed, published_devices, cluster, profile)

    def test_cdi_injection(self, started, published_devices):
        # A feature's claim the node's driver refuses to prepare fails here, as any workload's
        # does (e.g. a driver without admin-access support).
        check_cdi_injection(started, published_devices)

    @pytest.mark.flaky(reruns=0)  # it deletes the consumers: a rerun would find nothing to release
    def test_cleanup(self, started, published_devices, cluster, profile, run_id):
        check_cleanup(started, published_devices, cluster, profile, run_id)


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="admin-access", check="unlabelled-namespace")
def test_admin_access_refused_without_namespace_label(request, cluster, profile, run_id):
    """The same monitoring claim in a namespace without the label: the API server refuses it."""
    from draconf.pytest_plugin import make_namespace
    ns = make_namespace(request, cluster, run_id, "admin-unlabelled")
    doc = manifests.find(Workload("admin-access", ["features/43-admin-access-monitor.yaml"], 1)
                         .documents(profile), "ResourceClaim")
    doc["spec"]["devices"]["requests"][0]["exactly"].pop("selectors", None)
    body = json.loads(json.dumps(doc))
    body["metadata"]["labels"] = dict(run_id.labels)
    try:
        cluster.resource.create_namespaced_resource_claim(ns, body)
    except ApiException as err:
        message = server_message(err)
        assert err.status in (403, 422), f"expected the API server to refuse the claim, got {err.status}: {message}"
        assert capabilities.ADMIN_ACCESS_LABEL in message, (
            f"the claim was refused, but not for the missing {capabilities.ADMIN_ACCESS_LABEL} label: {message}")
        note(request.node, f"an adminAccess claim in unlabelled namespace {ns} is refused: HTTP {err.status}: {message}")
        return
    kept = Claim.read(cluster, ns, doc["metadata"]["name"])
    admin = [r.get("exactly", {}).get("adminAccess") for r in kept.requests]
    if not any(admin):
        # GA in 1.36: a feature the cluster must have fails feature-disabled, else a skip
        request.getfixturevalue("expected_features").require("admin-access", capabilities.Capability(
            "admin access (adminAccess)", False, "the API server dropped `adminAccess` from the claim "
                                                 "(its feature gate is off)"))
    labels = cluster.core.read_namespace(ns).metadata.labels or {}
    record_diagnosis(request.node, "admin-access-unrestricted",
                     {"namespace labels": json.dumps(labels, indent=2), "claim": json.dumps(kept.raw, indent=2,
                                                                                             default=str)})
    how = (f"the namespace carries {capabilities.ADMIN_ACCESS_LABEL}="
           f"{labels[capabilities.ADMIN_ACCESS_LABEL]!r}, which the suite did not set"
           if capabilities.ADMIN_ACCESS_LABEL in labels else "the namespace does not carry the label")
    raise CheckFailed(f"the API server admitted an adminAccess claim in namespace {ns} ({how}): any user who may "
                      "create claims there can reach GPUs other workloads hold", code="admin-access-unrestricted")


@pytest.mark.conformance
@pytest.mark.quota
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="extended-resource", check="quota")
def test_extended_resource_pod_is_charged_once_and_capped(request, cluster, profile, run_id, validated_nodes):
    """44-extended-resource-quota.yaml (one GPU, both keys) then 40-extended-resource.yaml twice:
    the first pod runs and is charged one GPU under each key, not two; the second is refused."""
    from draconf.audit import deviceclass_key
    from draconf.pytest_plugin import make_namespace
    capability = capabilities.extended_resource(cluster, profile.device_class,
                                                profile.capabilities.extended_resource)
    request.getfixturevalue("expected_features").require("extended-resource", capability)
    resource = profile.capabilities.extended_resource
    legacy, dra = f"requests.{resource}", deviceclass_key(profile.device_class)
    ns = make_namespace(request, cluster, run_id, "extended-resource-quota")
    quota = manifests.find(manifests.load("features/44-extended-resource-quota.yaml"), "ResourceQuota")
    quota["spec"]["hard"] = {legacy: "1", dra: "1"}
    manifests.create(cluster, ns, [quota], run_id.labels)
    name = quota["metadata"]["name"]

    def status():
        return cluster.api_client.sanitize_for_serialization(
            cluster.core.read_namespaced_resource_quota(name, ns)).get("status") or {}

    waits.wait_until(f"the quota controller to fill in status.hard of {name}", status,
                     lambda st: {legacy, dra} <= set(st.get("hard") or {}), timeout=30,
                     describe=lambda st: json.dumps(st))
    workload = Workload("extended-resource", ["features/40-extended-resource.yaml"], expected_pods=1,
                        extended_resources=True, avoid_nodes=validated_nodes.avoid)
    start = ExtendedResourceWorkload.start(cluster, ns, workload, profile, run_id.labels)
    if start.never_started:
        raise start.failed(f"a {resource}: 1 pod did not run under a quota of one GPU "
                           f"({legacy}: 1, {dra}: 1): {start.failure}")
    want = {legacy: "1", dra: "1"}
    try:
        used = waits.wait_until(f"quota {name} to charge the pod and its claim one GPU under each key",
                                lambda: status().get("used") or {},
                                lambda u: all(u.get(k) == v for k, v in want.items()), timeout=30,
                                describe=lambda u: json.dumps(u))
    except waits.WaitFailed as err:
        used = status().get("used") or {}
        if not any(used.get(k) not in (None, "0") for k in want):
            # ResourceQuota admission charges status.used before it admits the pod (and the
            # scheduler's claim), so a running pod charged nothing was admitted without it.
            # Only the quota controller's periodic resync would charge it later.
            pod = start.deployed.pods()[0]
            record_diagnosis(request.node, "quota-not-enforced",
                             {"ResourceQuota status": json.dumps(status(), indent=2), "pod": pod.summary()})
            raise CheckFailed(f"pod {pod.name} ({resource}: 1) runs, yet ResourceQuota {name} "
                              f"has charged nothing for it after 30 s (status.used {json.dumps(used)}). Quota "
                              "admission charges a pod as it admits it, so the API server does not run "
                              "ResourceQuota admission: this quota caps nothing.", code="quota-not-enforced") from None
        raise AssertionError(f"quota {name} does not charge one {resource} pod as one GPU: {err}") from None
    # A second pod like it: the same quota must refuse it at admission.
    second = manifests.find(workload.documents(profile), "Pod")
    second["metadata"]["name"] += "-2"
    try:
        manifests.create(cluster, ns, [second], run_id.labels)
    except AdmissionDenied as err:
        assert "exceeded quota" in err.msg and legacy in err.msg, (
            f"the second {resource} pod was refused, but not by quota {name} on {legacy}: {err.msg}")
        note(request.node, f"Kubernetes {cluster_version(cluster)}: a {resource}: 1 pod served through DRA is "
                      f"charged {json.dumps({k: used.get(k) for k in want})} (pod and scheduler-made claim "
                      f"counted once); a second is refused: {err.msg}")
        return
    record_diagnosis(request.node, "quota-not-enforced", {"ResourceQuota status": json.dumps(status(), indent=2)})
    raise CheckFailed(f"ResourceQuota {name} ({legacy}: 1, already used "
                      f"by {start.deployed.pods()[0].name}) admitted a second {resource}: 1 pod: the API server "
                      "does not run ResourceQuota admission", code="quota-not-enforced")


def cluster_version(api) -> str:
    return api.version.get_code().git_version


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="device-taints", check="untolerated")
def test_tainted_device_is_not_allocated_without_toleration(request, cluster, profile, run_id, namespace,
                                                            validated_nodes):
    """46-device-taint-untolerated.yaml: a claim selecting only the tainted device, without a
    toleration, stays unallocated; the scheduler says it cannot allocate the pod's claims; then
    45-device-taint-tolerated.yaml, the same request tolerating the taint, gets that device.
    (The ``namespace`` fixture: the diagnosis of a failure reads that namespace.)"""
    ns = namespace
    device = tainted_target(request, cluster, profile, ns, validated_nodes.avoid)
    workload = taint_workload("device-taints", "features/46-device-taint-untolerated.yaml", UNTOLERATED_CLAIM,
                              device, profile, validated_nodes.avoid)
    manifests.create(cluster, ns, workload.documents(profile), run_id.labels)
    claim, pod = untolerated_answer(cluster, ns, f"tainted device {device.summary()}")
    slices = taints.read_slices(cluster, profile.driver)
    problems = taints.untolerated(claim.raw, slices)
    holders = holders_of(cluster, device)
    assert not claim.is_allocated, (
        f"claim {UNTOLERATED_CLAIM} tolerates no taint but was allocated {[str(r) for r in claim.results]}"
        + (f": {'; '.join(problems)}" if problems else ""))
    if holders:
        # Pending only because another claim holds the device proves nothing about taints.
        raise NoVerdict(f"{device.summary()} is held by {holders}, so {UNTOLERATED_CLAIM} could not have it "
                        "anyway: that says nothing about its taints")
    # The taint is the reason only if the same request tolerating it gets the device (a node
    # taint or a cordoned node, say, would keep both Pending).
    twin = taint_workload("device-taints", "features/45-device-taint-tolerated.yaml", TOLERATING_CLAIM, device,
                          profile, validated_nodes.avoid, tolerations_for(device))
    manifests.create(cluster, ns, twin.documents(profile), run_id.labels)
    try:
        tolerated, _ = wait_scheduler_answer(cluster, ns, TOLERATING_CLAIM, TOLERATING_CLAIM,
                                             UNTOLERATED_VERDICT_TIMEOUT)
    except waits.WaitFailed as err:
        raise NoVerdict(f"{TOLERATING_CLAIM}, the same request tolerating the taints of {device.summary()}, got "
                        f"no answer from the scheduler either: {err}") from None
    got = [r.key for r in tolerated.results]
    if got != [device.key]:
        said = Pod.read(cluster, ns, TOLERATING_CLAIM).unschedulable_message
        raise NoVerdict(f"{TOLERATING_CLAIM}, the same request tolerating the taints of {device.summary()}, was "
                        f"not allocated it either ({got or f'the scheduler: {said}'}): something else than "
                        f"the taint keeps {UNTOLERATED_CLAIM} Pending")
    note(request.node, f"{device.summary()} is free and not allocated to {UNTOLERATED_CLAIM} (no toleration); "
                       f"the scheduler: {pod.unschedulable_message}; {TOLERATING_CLAIM}, the same request "
                       f"tolerating the taint, got it: {tolerated.summary()}")


def holders_of(api, device: taints.TaintedDevice) -> list[str]:
    """The claims (namespace/name), cluster-wide, allocated ``device``."""
    return device_holders(api).get(device.key, [])


# --- DeviceTaintRule -------------------------------------------------------------------------


@pytest.mark.conformance
@pytest.mark.exclusive_capacity  # it takes a GPU out of service while it runs
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="device-taint-rule", check="no-schedule")
def test_device_taint_rule_keeps_untolerated_claim_off(request, cluster, profile, run_id, namespace,
                                                       validated_nodes, published_devices):
    """49-device-taint-rule.yaml taints one free GPU ``example.com/gpu-maintenance=planned:NoSchedule``
    by driver, pool and device; 46-device-taint-untolerated.yaml then asks for exactly that GPU
    (by uuid) without a toleration: the claim stays unallocated while the scheduler reports the
    pod unschedulable.  The rule's status (written by kube-controller-manager) is the evidence the
    control plane took the rule in."""
    ns = namespace
    rule_capability(request, cluster, profile)
    if not profile.has("uuid"):
        pytest.skip(f"device-taint-rule selects the ruled device by uuid: {profile.lacks('uuid')}")
    device = free_gpu(cluster, profile, validated_nodes.devices(published_devices), validated_nodes.avoid)
    name = create_rule(request, cluster, ns, run_id, RULE_MANIFEST, device.key)
    # A claim created at once could be allocated before kube-scheduler's watch delivers the
    # rule.  kube-controller-manager's status shows a watch delivered it; waiting for it (at
    # most RULE_STATUS_TIMEOUT: a cluster whose controller-manager ignores rules writes none)
    # gives kube-scheduler's the same time.
    wait_rule_status(cluster, name)
    workload = taint_workload("device-taint-rule", "features/46-device-taint-untolerated.yaml", UNTOLERATED_CLAIM,
                              device, profile, validated_nodes.avoid)
    manifests.create(cluster, ns, workload.documents(profile), run_id.labels)
    claim, pod = untolerated_answer(cluster, ns, f"{device.pool}/{device.name}, tainted by rule")
    rule = read_rule(cluster, name)
    if claim.is_allocated:
        # The diagnosis reads the rule and the claim from the cluster (device-tainted).
        pytest.fail(f"claim {UNTOLERATED_CLAIM} tolerates no taint but was allocated "
                    f"{[str(r) for r in claim.results]}, tainted by {taints.describe_rule(rule)}",
                    pytrace=False)
    holders = device_holders(cluster).get(device.key, [])
    if holders:
        raise NoVerdict(f"{device.pool}/{device.name} is held by {holders}, so {UNTOLERATED_CLAIM} could not "
                        "have it anyway: that says nothing about the rule")
    # The rule is the reason only if the same claim gets the device once the rule is gone (a
    # node taint, say, would keep it Pending either way).
    said = pod.unschedulable_message
    cluster.resource_beta.delete_device_taint_rule(name)
    claim = allocated_once_freed(cluster, ns, UNTOLERATED_CLAIM, UNTOLERATED_CLAIM,
                                 f"the rule tainting {device.pool}/{device.name} deleted", UNTOLERATED_VERDICT_TIMEOUT)
    note(request.node, f"{taints.describe_rule(rule)}; {device.pool}/{device.name} was free and not allocated "
                       f"to {UNTOLERATED_CLAIM} (no toleration), the scheduler: {said}; with the rule deleted "
                       f"the claim got it: {claim.summary()}")


@pytest.mark.conformance
@pytest.mark.exclusive_capacity  # it drains two GPUs while it runs
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="device-taint-rule", check="no-execute")
def test_device_taint_rule_no_execute_evicts_untolerated_pods(request, cluster, profile, run_id, namespace,
                                                             validated_nodes, published_devices):
    """51-gpu-drained.yaml: two pods each holding a GPU, one claim tolerating
    ``example.com/gpu-maintenance:NoExecute``; then 50-device-taint-rule-evict.yaml drains both
    GPUs (one rule per GPU, by driver, pool and device).  kube-controller-manager's
    device-taint-eviction controller must delete the untolerating pod, its claim must be
    released, the tolerating pod must keep running, and the drained GPU's rule reports the
    eviction in its status."""
    ns = namespace
    rule_capability(request, cluster, profile)
    workload = Workload("device-taint-rule", ["features/51-gpu-drained.yaml"], expected_pods=2,
                        avoid_nodes=validated_nodes.avoid)
    start = DeployedWorkload.start(cluster, ns, workload, profile, run_id.labels)
    if start.never_started:
        raise NoVerdict(start.no_verdict_cause)
    claims = start.deployed.claims()
    held = {name: [r for r in claims[name].results] for name in (DRAINED, DRAIN_TOLERANT)}
    assert all(held.values()), f"the running pods' claims hold no device: {held}"
    uids = {name: pod_uid(cluster, ns, name) for name in held}
    rules = {name: create_rule(request, cluster, ns, run_id, DRAIN_MANIFEST, held[name][0].key, f"-{name}")
             for name in held}

    def still_there():
        """The names of the two pods whose first incarnation is still there."""
        return {name for name in held if pod_uid(cluster, ns, name) == uids[name]}

    def tolerant_evicted(present):
        # The tolerating pod evicted is the failure at once, whatever happens to the other.
        return None if DRAIN_TOLERANT in present else (
            f"pod {DRAIN_TOLERANT}, whose claim tolerates the NoExecute taint, was deleted")
    try:
        waits.wait_until(f"pod {DRAINED} to be evicted", still_there, lambda present: DRAINED not in present,
                         timeout=EVICTION_TIMEOUT, verdict=tolerant_evicted,
                         describe=lambda present: f"still running: {sorted(present) or 'neither pod'}")
    except waits.TerminalState as err:
        pytest.fail(f"{err}; its GPU's rule: {taints.describe_rule(read_rule(cluster, rules[DRAIN_TOLERANT]))}",
                    pytrace=False)
    except waits.WaitTimeout:
        # The diagnosis reads the rule, the claim and the running pod from the cluster.
        rule = read_rule(cluster, rules[DRAINED])
        pytest.fail(f"pod {DRAINED} was not evicted within {EVICTION_TIMEOUT} s of {taints.describe_rule(rule)}",
                    pytrace=False)
    # Released: the pod is gone, so the claim has no consumer and no allocation.
    claim = waits.wait_until(f"claim {DRAINED} to be released", lambda: Claim.read(cluster, ns, DRAINED),
                             lambda c: not c.is_allocated and not c.reserved_for_uids, timeout=60,
                             describe=lambda c: c.summary())
    tolerant = Pod.read(cluster, ns, DRAIN_TOLERANT)
    assert tolerant.uid == uids[DRAIN_TOLERANT] and tolerant.is_running and not tolerant.is_deleting, (
        f"pod {DRAIN_TOLERANT}, whose claim tolerates the NoExecute taint, was not left running: "
        f"phase {tolerant.phase}, deleting {tolerant.is_deleting}")
    # Who deleted it: the eviction controller's event on the pod.  (The rule's status says
    # "Completed" too, but the controller writes it at most every 10 s, ruleStatusPeriod.)
    def eviction_events():
        return [e for e in cluster.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={DRAINED}").items
                if e.reason == EVICTION_EVENT]
    try:
        event = waits.wait_until(f"the {EVICTION_EVENT} event of pod {DRAINED}", eviction_events, bool,
                                 timeout=EVICTION_EVENT_TIMEOUT, describe=lambda found: "no such event")[0]
    except waits.WaitTimeout:
        raise AssertionError(f"pod {DRAINED} is gone, but no {EVICTION_EVENT} event says the device taint "
                             "eviction controller deleted it") from None
    drained_rule = read_rule(cluster, rules[DRAINED])
    note(request.node, f"{EVICTION_EVENT} on {DRAINED}: {event.message}; {taints.describe_rule(drained_rule)}; "
                       f"claim {DRAINED} released ({claim.summary()}); "
                       f"{DRAIN_TOLERANT} still runs on {held[DRAIN_TOLERANT][0]}: "
                       f"{taints.describe_rule(read_rule(cluster, rules[DRAIN_TOLERANT]))}")

# --- GPU sharing ------------------------------------------------------------------------------


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
class TestGpuSharing:
    """47-gpu-sharing.yaml (NVIDIA quickstart gpu-test5): the walkthrough's allocation,
    cdi-injection and cleanup, and ``sharing``: each container shows its request's sharing config."""

    @pytest.fixture(scope="class", params=[SHARING_WORKLOAD])
    @classmethod
    def started(cls, request, cluster, profile, run_id, published_devices, validated_nodes) -> Start:
        from draconf.pytest_plugin import make_namespace
        avoid, published = validated_nodes.avoid, validated_nodes.devices(published_devices)
        try:
            nodes = sharing_target(request, cluster, profile, published, avoid, gpus=2)
        except FeatureMissing as missing:
            # As for the other feature workloads: allocation fails with it, the rest have
            # nothing deployed to judge.
            return Start(None, missing.reason, cause=startup.FEATURE_MISSING, code=missing.code)
        ns = make_namespace(request, cluster, run_id, SHARING_WORKLOAD)
        # One pod, two GPUs: on a node that runs containers (a KWOK node would be as good to
        # the scheduler).
        workload = SharingWorkload(SHARING_WORKLOAD, ["features/47-gpu-sharing.yaml"], expected_pods=1,
                                   node=nodes[0], avoid_nodes=avoid)
        start = DeployedWorkload.start(cluster, ns, workload, profile, run_id.labels)
        if start.stalled:
            trip_breaker(request.config, start.stalled, start.failure)
        return start

    def test_allocation(self, request, started, published_devices):
        check_allocation(request, started, published_devices)

    def test_cdi_injection(self, started, published_devices):
        check_cdi_injection(started, published_devices)

    def test_sharing(self, request, started, profile):
        """Both containers of each request see the same GPU, and the request's config reached
        the driver: TimeSlicing GPUs in compute mode Default with the configured time slice, MPS
        GPUs in Exclusive_Process with the control daemon's pipe directory in the containers."""
        if started.cause == startup.FEATURE_MISSING:
            raise NoVerdict(started.no_verdict_cause)
        if started.never_started:
            # The driver refusing the config (or anything else keeping the pod from running) is
            # this check failing; the diagnosis reads the node's FailedPrepareDynamicResources.
            raise started.failed(f"the sharing workload never ran: {started.failure}")
        deployed = started.deployed
        evidence, problems, summary = sharing_evidence(deployed, profile)
        attach_evidence("sharing", evidence)
        if problems:
            record_diagnosis(request.node, "config-ignored", {"containers": "\n".join(evidence)})
            raise CheckFailed("the claim's GpuConfig sharing did not reach "
                              "the containers: " + "; ".join(problems), code="config-ignored")
        note(request.node, "gpu-test5: " + "; ".join(summary))

    @pytest.mark.flaky(reruns=0)  # it deletes the consumers: a rerun would find nothing to release
    def test_cleanup(self, started, published_devices, cluster, profile, run_id):
        check_cleanup(started, published_devices, cluster, profile, run_id)


@pytest.fixture
def one_gpu_sharing_nodes(request, cluster, profile, validated_nodes, published_devices) -> list[str]:
    """The nodes a one-GPU sharing scenario may run on, or a skip with the reason.  Asked for
    before ``namespace``: a test skipped for want of them creates nothing."""
    return sharing_target(request, cluster, profile, validated_nodes.devices(published_devices), validated_nodes.avoid,
                          gpus=1, needs_gates=False)


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload=SHARING_WORKLOAD, check="invalid-config")
def test_invalid_sharing_config_is_refused(request, cluster, profile, run_id, one_gpu_sharing_nodes, namespace,
                                           validated_nodes, published_devices):
    """48-gpu-sharing-invalid.yaml: a GpuConfig with an unknown field and one with an unknown
    strategy.  The driver refuses each when it prepares the claim: the pod never starts, and the
    node's FailedPrepareDynamicResources event carries the driver's message naming what is wrong.
    (The ``namespace`` fixture: the diagnosis of a failure reads that namespace.)"""
    from draconf.pods import Pod
    ns = namespace
    avoid, published = validated_nodes.avoid, validated_nodes.devices(published_devices)
    nodes = one_gpu_sharing_nodes
    kwok_or_left_out = {d.node for d in published if d.node and d.node not in nodes}
    workload = SharingWorkload(SHARING_WORKLOAD, ["features/48-gpu-sharing-invalid.yaml"],
                               expected_pods=len(INVALID_CONFIGS),
                               avoid_nodes=frozenset(avoid) | frozenset(kwok_or_left_out))
    deployed = DeployedWorkload.deploy(cluster, ns, workload, profile, run_id.labels)

    def observe():
        events = cluster.core.list_namespaced_event(
            ns, field_selector="reason=FailedPrepareDynamicResources").items
        refusals = {name: [e.message or "" for e in events if e.involved_object.name == name]
                    for name in INVALID_CONFIGS}
        return {name: Pod.read(cluster, ns, name) for name in INVALID_CONFIGS}, refusals

    def decided(state):
        pods, refusals = state
        return all(pods[n].is_running or any(word in m for m in refusals[n])
                   for n, word in INVALID_CONFIGS.items())

    def never_at_driver(state) -> None:
        """A pod the cluster will not place never reaches the driver: no verdict on the driver
        (a stalled scheduler raises ControlPlaneStalled, which trips the run's breaker)."""
        unplaced = [pod for pod in state[0].values() if not pod.node]
        if unplaced and (reason := deployed.verdict(unplaced)):
            raise NoVerdict(f"the invalid configs never reached the driver: {reason}")

    try:
        pods, refusals = waits.wait_until(
            "the driver's verdict on the invalid sharing configs", observe, decided,
            timeout=INVALID_VERDICT_TIMEOUT, verdict=never_at_driver,
            describe=lambda s: "; ".join(f"{p.summary()}: {s[1][n][-1][:200] if s[1][n] else 'no refusal yet'}"
                                         for n, p in s[0].items()))
    except waits.WaitFailed as err:
        raise AssertionError(f"no verdict from the driver on the invalid sharing configs: {err}") from None
    accepted = [n for n in INVALID_CONFIGS if pods[n].is_running]
    if accepted:
        claims = {n: json.dumps(Claim.read(cluster, ns, n).raw.get("spec", {}).get("devices", {}).get("config"))
                  for n in accepted}
        record_diagnosis(request.node, "config-ignored",
                         {"pods": "\n".join(pods[n].summary() for n in accepted), "configs": json.dumps(claims)})
        raise CheckFailed("the driver prepared claims whose GpuConfig is invalid "
                          f"and their pods run: {', '.join(f'{n} ({claims[n]})' for n in accepted)}", code="config-ignored")
    note(request.node, "the driver refused the invalid configs: " + "; ".join(
        f"{n}: {next(m for m in refusals[n] if w in m)}" for n, w in INVALID_CONFIGS.items()))
