"""ResourceQuota and DRA: what caps GPUs handed out through ResourceClaims, and what does not.

Each test runs in its own namespace with the quota from ``manifests/2*.yaml``:

* **deviceclass-quota** - ``<class>.deviceclass.resource.k8s.io/devices: 1``: the first
  ResourceClaim is admitted, a second one is rejected by the API server (403 ``exceeded
  quota``);
* **generated-claim** - under the same quota a pod whose ResourceClaimTemplate would generate
  a claim beyond it stays Pending, and the resourceclaim controller says why in a
  ``FailedResourceClaimCreation`` event on the pod; deleting the first claim makes room and the
  pod then gets its claim and runs;
* **claim-count** - ``count/resourceclaims.resource.k8s.io: 1`` rejects a second claim;
* **extended-resource-trap** - ``requests.nvidia.com/gpu: 0``: when the DeviceClass maps the
  extended resource (``extendedResourceName``), the quota must stop the claim; when it does
  not, it does *not* stop a DRA GPU, and the test passes when the GPU is granted: it documents
  a property of Kubernetes that breaks device-plugin-era quotas (fix: a DeviceClass quota).

When quota admission is off (bed fault ``quota-not-enforced``) the quota tests fail with the
diagnosis ``quota-not-enforced``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import NoReturn

import pytest
from kubernetes.client.exceptions import ApiException

from draconf import manifests, refusals, waits
from draconf.admission import AdmissionDenied, denial_in_text, is_refusal
from draconf.audit import deviceclass_key
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.pods import Pod
from draconf.reporting import note, record_diagnosis
from draconf.workload import DeployedWorkload, Workload
from draconf.errors import CheckFailed, server_message

# Quota and failure behaviour only means something on a cluster that passes preflight.
pytestmark = pytest.mark.usefixtures("preflight_gate")

log = logging.getLogger("draconf")

CLAIM_COUNT_KEY = "count/resourceclaims.resource.k8s.io"
#: The reason the resourceclaim controller (kube-controller-manager) gives its event when it
#: cannot create a pod's claim, e.g. because of quota (pkg/controller/resourceclaim/controller.go).
CLAIM_CREATION_FAILED = "FailedResourceClaimCreation"
QUOTA_STATUS_TIMEOUT = 30
#: The device plugin's extended resource 22-extended-resource-quota.yaml caps; renamed to the
#: profile's (capabilities.extendedResource).
MANIFEST_EXTENDED_RESOURCE = "nvidia.com/gpu"


# --- helpers -----------------------------------------------------------------------------------

def quota_document(manifest: str, profile) -> dict:
    """The ResourceQuota of ``manifest`` with DeviceClass keys renamed to the profile's class."""
    doc = manifests.find(manifests.load(manifest), "ResourceQuota")
    hard = doc["spec"]["hard"]
    resource = profile.capabilities.extended_resource
    for key in list(hard):
        if key.endswith(".deviceclass.resource.k8s.io/devices"):
            hard[deviceclass_key(profile.device_class)] = hard.pop(key)
        elif key == f"requests.{MANIFEST_EXTENDED_RESOURCE}" and resource:
            hard[f"requests.{resource}"] = hard.pop(key)
    return doc


def create_quota(api, namespace: str, manifest: str, profile, labels) -> dict:
    """Create the quota and wait until the quota controller has filled in ``status.hard``.

    Until then admission cannot evaluate it, so a test relying on it earlier would race.
    """
    doc = quota_document(manifest, profile)
    manifests.create(api, namespace, [doc], labels)
    name = doc["metadata"]["name"]
    want = set(doc["spec"]["hard"])

    def observe():
        return api.api_client.sanitize_for_serialization(
            api.core.read_namespaced_resource_quota(name, namespace))

    waits.wait_until(f"the quota controller to fill in status.hard of ResourceQuota {name}",
                     observe, lambda q: want <= set((q.get("status") or {}).get("hard") or {}),
                     timeout=QUOTA_STATUS_TIMEOUT, describe=lambda q: json.dumps(q.get("status")))
    return doc


def read_quota_status(api, namespace: str, name: str) -> dict:
    quota = api.core.read_namespaced_resource_quota(name, namespace)
    return api.api_client.sanitize_for_serialization(quota).get("status") or {}


def claim_documents(profile) -> dict[str, dict]:
    """The two stand-alone claims of 23-quota-claims.yaml, for the profile's class."""
    docs = Workload("quota-claims", ["23-quota-claims.yaml"], 0).documents(profile)
    return {d["metadata"]["name"]: d for d in docs}


def create_claim(api, namespace: str, doc: dict, labels) -> None:
    """Create a claim through the typed client, so a rejection is a plain ApiException (a
    policy that refused the run's claims throughout: not tried, draconf.refusals)."""
    refusals.check([doc])
    body = json.loads(json.dumps(doc))
    body.setdefault("metadata", {}).setdefault("labels", {}).update(labels or {})
    api.resource.create_namespaced_resource_claim(namespace, body)


def raise_if_admission_denied(err: ApiException, doc: dict, own_quota: str) -> None:
    """A refusal by anything but the suite's own quota (a policy, webhook, LimitRange or an
    admin's quota) is the cluster's admission control: that verdict, at once, not this check's."""
    message = server_message(err)
    if is_refusal(err) and f"exceeded quota: {own_quota}," not in message:
        refusals.book().record(doc.get("kind", "ResourceClaim"), denial_in_text(message), message)
        raise AdmissionDenied(doc.get("kind", "ResourceClaim"), doc["metadata"]["name"], err.status,
                              message) from None


def exceeded_text(quota: str, key: str) -> str:
    """The admission error's fixed part (dra-facts §2): ``exceeded quota: <quota>, requested: <key>=1``."""
    return f"exceeded quota: {quota}, requested: {key}=1"


def quota_not_enforced(request, what: str, evidence: dict) -> NoReturn:
    record_diagnosis(request.node, "quota-not-enforced",
                     {k: v if isinstance(v, str) else json.dumps(v, indent=2, default=str)
                      for k, v in evidence.items()})
    raise CheckFailed(what, code="quota-not-enforced")


def expect_rejected(request, api, namespace: str, profile, quota: dict, key: str, labels) -> str:
    """First claim admitted, second rejected with 403 ``exceeded quota``; returns the error text."""
    claims = claim_documents(profile)
    name = quota["metadata"]["name"]
    try:
        create_claim(api, namespace, claims["gpu-claim-a"], labels)
    except ApiException as err:
        raise_if_admission_denied(err, claims["gpu-claim-a"], name)
        pytest.fail(f"the first ResourceClaim was rejected although {key} allows 1: "
                    f"HTTP {err.status} {server_message(err)}", pytrace=False)
    started = time.monotonic()
    try:
        create_claim(api, namespace, claims["gpu-claim-b"], labels)
    except ApiException as err:
        raise_if_admission_denied(err, claims["gpu-claim-b"], name)
        message = server_message(err)
        log.info("quota %s rejected the second claim in %.2fs: %s", name,
                 time.monotonic() - started, message)
        assert err.status == 403, f"expected HTTP 403 for the second claim, got {err.status}: {message}"
        assert exceeded_text(name, key) in message and f"limited: {key}=1" in message, (
            f"the second claim was rejected, but not by quota {name} on {key}: {message}")
        return message
    status = read_quota_status(api, namespace, name)
    quota_not_enforced(
        request,
        f"ResourceQuota {name} ({key}: 1) did not stop a second ResourceClaim: both gpu-claim-a and "
        f"gpu-claim-b were admitted (quota status.used right after: {status.get('used')}). The API server "
        "does not run ResourceQuota admission, so this quota caps nothing.",
        {"ResourceQuota status": status,
         "claims": [c.summary() for c in Claim.list(api, namespace)]})


def expect_claim_creation_blocked(request, api, namespace: str, deployed, pod_name: str, quota_name: str,
                                  key: str, profile, quota_text: str) -> str:
    """The resourceclaim controller cannot create ``pod_name``'s claim: quota ``quota_name``
    rejects it on ``key`` (a ``FailedResourceClaimCreation`` event); returns the event message.
    A pod that gets its claim instead is diagnosed ``quota-not-enforced``."""
    started = time.monotonic()

    def observe():
        pod = Pod.read(api, namespace, pod_name)
        failed = [e for e in pod_events(api, namespace, pod_name) if e.reason == CLAIM_CREATION_FAILED]
        blocked = [e for e in failed if "exceeded quota" in (e.message or "")]
        # A policy or webhook refusing the claim is a verdict too, not a wait for the quota.
        denied = [e for e in failed if (by := denial_in_text(e.message or ""))
                  and not by.startswith("ResourceQuota ")]
        return pod, blocked or denied

    def verdict(state):
        pod, _ = state
        if pod.claim_names() or pod.node:
            where = f" and was scheduled to {pod.node}" if pod.node else ""
            return f"pod {pod_name} got its claim {pod.claim_names()}{where} beyond the quota"
        return None

    def describe(state):
        pod, _ = state
        return "; ".join([pod.summary()] + deployed.events()[-3:])

    try:
        pod, blocked = waits.wait_until(
            f"the resourceclaim controller to report {CLAIM_CREATION_FAILED} (exceeded quota) "
            f"for pod {pod_name}", observe, lambda s: bool(s[1]),
            timeout=profile.timeouts.schedule, describe=describe, verdict=verdict)
        escaped = None
    except waits.TerminalState as err:
        escaped = verdict(observe()) or str(err)
    if escaped:
        quota_not_enforced(
            request,
            f"{quota_text} did not stop the claim generated from a template: {escaped}. The API "
            "server does not run ResourceQuota admission.",
            {"ResourceQuota status": read_quota_status(api, namespace, quota_name),
             "state": deployed.describe(), "events": "\n".join(deployed.events())})
    message = blocked[-1].message
    if "exceeded quota" not in message:
        pytest.fail(f"admission refused the claim of pod {pod_name} ({CLAIM_CREATION_FAILED}): "
                    f"{message}", pytrace=False)
    log.info("pod %s blocked by quota after %.2fs: %s %s", pod_name, time.monotonic() - started,
             CLAIM_CREATION_FAILED, message)
    assert exceeded_text(quota_name, key) in message, (
        f"{CLAIM_CREATION_FAILED} on pod {pod_name} does not name quota {quota_name} and {key}: "
        f"{message}")
    return message


def pod_events(api, namespace: str, pod: str) -> list:
    items = api.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}").items
    return sorted(items, key=lambda e: str(e.last_timestamp or e.event_time
                                           or e.metadata.creation_timestamp))


# --- tests -------------------------------------------------------------------------------------

@pytest.mark.quota
@pytest.mark.draconf(workload="quota", check="deviceclass-quota")
def test_deviceclass_quota_rejects_claim_beyond_limit(request, cluster, namespace, profile, run_id):
    """``<class>.deviceclass.resource.k8s.io/devices: 1``: claim one admitted, claim two 403."""
    quota = create_quota(cluster, namespace, "20-deviceclass-quota.yaml", profile, run_id.labels)
    key = deviceclass_key(profile.device_class)
    expect_rejected(request, cluster, namespace, profile, quota, key, run_id.labels)
    used = (read_quota_status(cluster, namespace, quota["metadata"]["name"]).get("used") or {})
    assert used.get(key) == "1", f"quota status.used should charge the admitted claim: {used}"


@pytest.mark.quota
@pytest.mark.draconf(workload="quota", check="generated-claim")
def test_deviceclass_quota_holds_generated_claim_until_room(request, cluster, namespace, profile,
                                                            run_id, validated_nodes):
    """A templated claim beyond the quota keeps its pod Pending with the controller's event;
    deleting the claim that uses the quota lets the pod get its claim and run."""
    api = cluster
    quota = create_quota(api, namespace, "20-deviceclass-quota.yaml", profile, run_id.labels)
    quota_name, key = quota["metadata"]["name"], deviceclass_key(profile.device_class)
    first = claim_documents(profile)["gpu-claim-a"]
    try:
        create_claim(api, namespace, first, run_id.labels)
    except ApiException as err:
        raise_if_admission_denied(err, first, quota_name)
        pytest.fail(f"the first ResourceClaim was rejected although {key} allows 1: "
                    f"HTTP {err.status} {server_message(err)}", pytrace=False)

    workload = Workload("quota-templated-pod", ["24-quota-templated-pod.yaml"], expected_pods=1,
                        avoid_nodes=validated_nodes.avoid)
    deployed = DeployedWorkload.deploy(api, namespace, workload, profile, run_id.labels)
    pod_name = manifests.find(deployed.documents, "Pod")["metadata"]["name"]
    expect_claim_creation_blocked(request, api, namespace, deployed, pod_name, quota_name, key, profile,
                                  f"ResourceQuota {quota_name} ({key}: 1, already used by gpu-claim-a)")
    # The controller creates nothing, so the pod has no claim, no node, and (gated by the
    # scheduler until its claim exists) no PodScheduled verdict either.
    pod = Pod.read(api, namespace, pod_name)
    generated = [c for c in Claim.list(api, namespace) if c.is_generated]
    assert pod.phase == "Pending" and not pod.node and not pod.claim_names() and not generated, (
        f"pod {pod_name} should wait without a claim while the quota is full: {pod.summary()}; "
        f"generated claims: {[c.name for c in generated]}")

    # Make room: the quota controller releases gpu-claim-a's charge, and the resourceclaim
    # controller's next retry (exponential back-off; deleting an unrelated claim does not
    # requeue the pod) creates the claim.
    api.resource.delete_namespaced_resource_claim(first["metadata"]["name"], namespace)
    released = time.monotonic()
    deployed.wait_running(timeout=profile.timeouts.running)
    log.info("pod %s ran %.2fs after gpu-claim-a was deleted", pod_name, time.monotonic() - released)
    deployed.check_allocation(PublishedDevices.read(api, profile.driver))
    used = (read_quota_status(api, namespace, quota_name).get("used") or {})
    assert used.get(key) == "1", f"quota status.used should charge the generated claim: {used}"


@pytest.mark.quota
@pytest.mark.draconf(workload="quota", check="claim-count")
def test_claim_count_quota_rejects_second_claim(request, cluster, namespace, profile, run_id):
    """``count/resourceclaims.resource.k8s.io: 1``: claim one admitted, claim two 403."""
    quota = create_quota(cluster, namespace, "21-claim-count-quota.yaml", profile, run_id.labels)
    expect_rejected(request, cluster, namespace, profile, quota, CLAIM_COUNT_KEY, run_id.labels)


@pytest.mark.quota
@pytest.mark.draconf(workload="quota", check="extended-resource-trap")
def test_extended_resource_quota_and_dra_claims(request, cluster, namespace, profile, run_id,
                                                validated_nodes):
    """What ``requests.nvidia.com/gpu: 0`` does to a pod that gets its GPU through a claim.

    It depends on the DeviceClass.  When the class maps the extended resource
    (``extendedResourceName: nvidia.com/gpu``, as recent NVIDIA charts render it; Kubernetes
    1.36 with DRAExtendedResource), the quota charges the class's claims too and must stop the
    claim (measured on v1.36.3: ``403 exceeded quota: ..., requested: requests.nvidia.com/gpu=1``
    for a claim, ``FailedResourceClaimCreation`` for a templated pod; docs/features/index.md,
    "Extended resources and ResourceQuota").  Otherwise the quota counts only ``resources.requests`` and a claim-based pod gets its
    GPU: the migration trap, reported as the Kubernetes property it is, with the fix.
    """
    api = cluster
    resource = profile.capabilities.extended_resource
    if resource is None:
        pytest.skip(f"profile {profile.name}: driver {profile.driver} has no device-plugin extended "
                    "resource (capabilities.extendedResource), so there is no device-plugin-era "
                    "quota whose effect on claims could be checked")
    quota = create_quota(api, namespace, "22-extended-resource-quota.yaml", profile, run_id.labels)
    quota_name = quota["metadata"]["name"]
    (cap_key, cap_value), = quota["spec"]["hard"].items()
    mapped = api.resource.read_device_class(profile.device_class).spec.extended_resource_name
    workload = Workload("quota-templated-pod", ["24-quota-templated-pod.yaml"], expected_pods=1,
                        avoid_nodes=validated_nodes.avoid)
    deployed = DeployedWorkload.deploy(api, namespace, workload, profile, run_id.labels)
    if mapped and cap_key == f"requests.{mapped}":
        pod_name = manifests.find(deployed.documents, "Pod")["metadata"]["name"]
        expect_claim_creation_blocked(
            request, api, namespace, deployed, pod_name, quota_name, cap_key, profile,
            f"ResourceQuota {quota_name} ({cap_key}: {cap_value}, with DeviceClass "
            f"{profile.device_class} mapping {mapped})")
        version = api.version.get_code().git_version
        note(request.node, f"Kubernetes {version}: DeviceClass {profile.device_class} maps the extended resource "
                      f"{mapped}, so ResourceQuota {quota_name} ({cap_key}: {cap_value}) caps its DRA claims "
                      "too (the claim evaluator charges requests.<extendedResourceName> for every claim of "
                      "that class): device-plugin-era GPU quotas keep working on this cluster.")
        return
    started = time.monotonic()
    try:
        deployed.wait_running()
    except waits.WaitFailed as err:
        raise AssertionError(
            f"a pod with a DRA claim did not run in a namespace capped only by {cap_key}: "
            f"{cap_value}, and DeviceClass {profile.device_class} maps no extended resource: {err}. "
            f"The GPU path is broken; events: {deployed.events()[-3:]}") from None
    deployed.check_allocation(PublishedDevices.read(api, profile.driver))
    used = read_quota_status(api, namespace, quota_name).get("used") or {}
    claims = [c.summary() for c in Claim.list(api, namespace) if c.is_allocated]
    note(request.node,
         f"Kubernetes property (expected, test passes): ResourceQuota {quota_name} with "
         f"{cap_key}: {cap_value} did NOT stop a DRA GPU; the pod ran after "
         f"{time.monotonic() - started:.1f}s with {'; '.join(claims)} while the quota shows used "
         f"{cap_key}={used.get(cap_key, '0')}. Device-plugin-era GPU quotas do not cap claims: "
         f"add `{deviceclass_key(profile.device_class)}: \"{cap_value}\"` to the namespace's "
         "ResourceQuota (run the quota audit, suites/test_audit.py, to find such namespaces), or "
         f"map the extended resource in DeviceClass {profile.device_class} (extendedResourceName).")
