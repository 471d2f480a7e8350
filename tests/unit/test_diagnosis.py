"""The diagnosis rules over hand-built facts: one test per rule, then the priority conflicts.

No cluster: ``classify`` is pure, and so is ``build_facts`` (selectors: tests/unit/test_cel.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from datetime import datetime, timedelta, timezone

import pytest

from draconf import selectors as sel
from draconf.devices import Device
from draconf.claims import Claim, DeviceRequest
from draconf.diagnosis import (ContainerGPUs, Diagnosis, EventFacts, Facts, Failure, NodeFacts,
                               QuotaFacts, Snapshot,
                               TemplateFacts, build_facts, classify, node_exclusions,
                               tolerates)
from draconf.plugins import PluginPod
from draconf.pods import EXTENDED_CLAIM, Pod
from draconf.profile import builtin
from draconf.reporting import DIAGNOSES

pytest_plugins = ["pytester"]

DRIVER = "gpu.nvidia.com"
CLASS_CEL = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
A100 = "NVIDIA A100-SXM4-40GB"
GI = 2**30
TAINT = {"key": "dedicated", "value": "gpu-reserved", "effect": "NoSchedule"}
PROFILE_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
UNSCHEDULABLE = "0/4 nodes are available: 4 cannot allocate all claims. preemption: 0/4 nodes are available."


def gpu(node: str, minor: int, product: str, memory_gi: int, arch: str = "Hopper", drop=()) -> Device:
    attrs = {f"{DRIVER}/type": "gpu", f"{DRIVER}/uuid": f"GPU-{node}-{minor}",
             f"{DRIVER}/productName": product, f"{DRIVER}/architecture": arch,
             f"{DRIVER}/brand": "Nvidia"}
    for name in drop:
        attrs.pop(f"{DRIVER}/{name}")
    return Device(DRIVER, node, f"gpu-{minor}", node, attrs, {f"{DRIVER}/memory": memory_gi * GI})


def fleet(drop=()) -> list[Device]:
    return ([gpu("gpu-h100-0", i, H100, 80, drop=drop) for i in range(4)]
            + [gpu("gpu-a100-0", i, A100, 40, "Ampere", drop=drop) for i in range(2)]
            + [gpu("gpu-h200-0", i, H200, 141, drop=drop) for i in range(2)])


def ago(seconds: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).isoformat()


def fake_pod(name: str, namespace: str = "default", *, uid: str = "", phase: str = "Pending",
             node: str | None = None, ready: bool = False, deleting: bool = False,
             unschedulable: str | None = None, waiting=(), image_pull=(), stopped: bool = False,
             done_for: float | None = None, claims: dict | None = None, ungenerated_claims=(),
             tolerations=(), node_selector: dict | None = None, affinity_terms=(),
             unseen_by_scheduler: bool = False, scheduler_name: str | None = None,
             age: float | None = None) -> Pod:
    """A Pod as the API server returns it, written from what the rules read of it: its claims
    (pod-level name -> ResourceClaim), the PodScheduled message, waiting ("container: Reason")
    and image-pull ("container: image (Reason: message)") containers, how long ago it was
    created or its containers ended.  :func:`changed` makes one with some of these changed."""
    fields = {k: v for k, v in locals().items()}
    meta = {"name": name, "namespace": namespace, "uid": uid}
    if age is not None:
        meta["creationTimestamp"] = ago(age)
    if deleting:
        meta["deletionTimestamp"] = ago(0)
    refs = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items() if k != EXTENDED_CLAIM]
    refs += [{"name": n, "resourceClaimTemplateName": f"{n}-template"} for n in ungenerated_claims]
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": unschedulable})
    elif node:
        conditions.append({"type": "PodScheduled", "status": "True"})
    elif not unseen_by_scheduler:  # seen by a scheduler, which has not placed it yet
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"})
    main = {"name": "workload", "image": "ubuntu:24.04", "state": {"running": {"startedAt": ago(60)}}}
    if stopped or done_for is not None:
        main["state"] = {"terminated": {"exitCode": 0, "finishedAt": ago(done_for or 0)}}
    statuses = [main] + [{"name": w.split(": ", 1)[0], "state": {"waiting": {"reason": w.split(": ", 1)[1]}}}
                         for w in waiting]
    for failure in image_pull:
        c, image, reason, message = re.fullmatch(r"(.*?): (.*?) \((\w+): (.*)\)", failure).groups()
        statuses.append({"name": c, "image": image, "state": {"waiting": {"reason": reason, "message": message}}})
    spec = {"containers": [{"name": st["name"]} for st in statuses], "resourceClaims": refs,
            "tolerations": list(tolerations), "nodeSelector": dict(node_selector or {})}
    if node:
        spec["nodeName"] = node
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if affinity_terms:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": list(affinity_terms)}}}
    status = {"phase": phase, "conditions": conditions, "containerStatuses": statuses}
    if EXTENDED_CLAIM in (claims or {}):
        status["extendedResourceClaimStatus"] = {"resourceClaimName": claims[EXTENDED_CLAIM]}
    return Pod({"metadata": meta, "spec": spec, "status": status, "_written_from": fields})


def fake_claim(name: str, namespace: str = "default", *, uid: str = "", generated: bool = False,
               owner_pod: str | None = None, owner_pod_uid: str | None = None, allocated: bool = False,
               devices=(), reserved_for=(), reserved_for_uids=(), finalizers=(), admin_devices=(),
               deleting: bool = False, deleting_for: float | None = None, requests=(),
               opaque_config_drivers=()) -> Claim:
    """A ResourceClaim as the API server returns it, written from what the rules read of it: the
    allocated devices (driver/pool/device), its consumers by name and uid, its requests (each as
    its alternatives, :class:`DeviceRequest`).  :func:`changed` makes one with some changed."""
    fields = {k: v for k, v in locals().items()}
    meta = {"name": name, "namespace": namespace, "uid": uid, "finalizers": list(finalizers)}
    if generated:
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    if owner_pod or owner_pod_uid:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner_pod, "uid": owner_pod_uid, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = ago(deleting_for or 0)

    def body(r: DeviceRequest) -> dict:
        out = {"deviceClassName": r.device_class, "count": r.count,
               "selectors": [{"cel": {"expression": e}} for e in r.selectors]}
        return out if r.mode == "ExactCount" else {**out, "allocationMode": r.mode}
    spec_requests = []
    for alternatives in requests:
        if len(alternatives) == 1 and "/" not in alternatives[0].name:
            spec_requests.append({"name": alternatives[0].name, "exactly": body(alternatives[0])})
        else:
            spec_requests.append({"name": alternatives[0].name.split("/")[0], "firstAvailable": [
                {"name": r.name.split("/", 1)[1], **body(r)} for r in alternatives]})
    status = {}
    if allocated:
        request = requests[0][0].name if requests else "gpu"
        status["allocation"] = {"devices": {"results": [
            dict(zip(("driver", "pool", "device"), key.split("/", 2)), request=request,
                 **({"adminAccess": True} if key in admin_devices else {})) for key in devices]}}
    consumers = [{"resource": "pods", **({"name": n} if n else {}), **({"uid": u} if u else {})}
                 for n, u in itertools.zip_longest(reserved_for, reserved_for_uids)]
    if consumers:
        status["reservedFor"] = consumers
    config = [{"opaque": {"driver": driver, "parameters": {}}} for driver in opaque_config_drivers]
    return Claim({"metadata": meta, "spec": {"devices": {"requests": spec_requests, "config": config}},
                  "status": status, "_written_from": fields})


def changed(obj, **changes):
    """A pod or claim (made by :func:`fake_pod` / :func:`fake_claim`) written again with ``changes``."""
    make = fake_pod if isinstance(obj, Pod) else fake_claim
    return make(**{**obj.raw["_written_from"], **changes})


def nodes(taint: dict | None = None) -> list[NodeFacts]:
    gpu_nodes = [NodeFacts(n, labels={"nvidia.com/gpu.present": "true"}, taints=[taint] if taint else [])
                 for n in ("gpu-h100-0", "gpu-a100-0", "gpu-h200-0")]
    return gpu_nodes + [NodeFacts("cpu-0")]


#: What the failing check did, as its exception tells the diagnosis (never the check's name).
WAITED_FOR_RELEASE = Failure(waited_for_release=True)
COMPARED_INJECTION = Failure(compared_injection=True)


def healthy(**changes) -> Facts:
    """A healthy cluster with nothing deployed in the namespace yet."""
    facts = Facts(
        driver=DRIVER, device_class=DRIVER, namespace="ns",
        required_attributes=builtin("nvidia").required_attributes(),
        device_classes={DRIVER: [CLASS_CEL], "mig.nvidia.com": [CLASS_CEL.replace("'gpu'", "'mig'")]},
        slice_count=3, devices=fleet(), nodes=nodes(),
        plugin_pods=[PluginPod("gpu-operator", f"plugin-{n}", node=n, phase="Running", ready=True)
                     for n in ("gpu-h100-0", "gpu-a100-0", "gpu-h200-0")],
        gpu_cluster=True, gpu_cluster_state="ready")
    return dataclasses.replace(facts, **changes)


def request(selectors=(), count=1, mode="ExactCount", device_class=DRIVER) -> list[DeviceRequest]:
    return [DeviceRequest("gpu", device_class, list(selectors), mode, count)]


def pending(selectors=(), count=1, message=UNSCHEDULABLE, tolerations=(PROFILE_TOLERATION,),
            device_class=DRIVER) -> tuple[Pod, Claim]:
    pod = fake_pod("gpu-pod", "ns", uid="p1", unschedulable=message, claims={"gpu": "gpu-pod-gpu-x"},
                   tolerations=list(tolerations))
    claim = fake_claim("gpu-pod-gpu-x", "ns", uid="c1", generated=True, owner_pod="gpu-pod",
                       owner_pod_uid="p1", finalizers=["resource.kubernetes.io/delete-protection"],
                       requests=[request(selectors, count, device_class=device_class)])
    return pod, claim


def running(device: str = f"{DRIVER}/gpu-h100-0/gpu-0") -> tuple[Pod, Claim]:
    pod = fake_pod("gpu-pod", "ns", uid="p1", phase="Running", ready=True, node="gpu-h100-0",
                   claims={"gpu": "gpu-pod-gpu-x"}, tolerations=[PROFILE_TOLERATION])
    claim = fake_claim("gpu-pod-gpu-x", "ns", uid="c1", generated=True, owner_pod="gpu-pod",
                       owner_pod_uid="p1", allocated=True, devices=[device], reserved_for=["gpu-pod"],
                       reserved_for_uids=["p1"], finalizers=["resource.kubernetes.io/delete-protection"],
                       requests=[request()])
    return pod, claim


def bound_not_running() -> tuple[Pod, Claim]:
    pod, claim = running()
    return changed(pod, phase="Pending", ready=False), claim


def with_workload(facts: Facts, pod: Pod, claim: Claim) -> Facts:
    allocated = dict(facts.allocated)
    for key in claim.device_keys:
        allocated[key] = claim.key
    return dataclasses.replace(facts, pods=[pod], claims=[claim], allocated=allocated)


def model(product: str) -> str:
    return sel.model(DRIVER, "productName", product).cel


# =============================================================================================
# One test per rule
# =============================================================================================

def test_api_unreachable():
    code, reason = classify(healthy(api_error="MaxRetryError: connection refused"))
    assert code == "api-unavailable" and "connection refused" in reason


def test_resource_api_v1_not_served():
    facts = healthy(resource_api=False, resource_versions=["v1beta1"])
    code, reason = classify(facts)
    assert code == "api-unavailable" and "v1beta1" in reason


# --- a stalled control plane: recorded from a bed whose kube-scheduler / kube-controller-manager
# was SIGSTOPped (tests/testbed/test_stalled_control_plane.py); the bed keeps no Lease.
BED_SCHEDULER = ("no Lease kube-system/kube-scheduler (it may run without leader election); "
                 "no pod labelled component=kube-scheduler in kube-system")


def unscheduled(age: float = 20.0, **changes) -> tuple[Pod, Claim]:
    """A pod of 01-single-gpu whose claim was generated but which nothing scheduled: no
    nodeName, no PodScheduled condition."""
    pod, claim = pending(message=None)
    return changed(pod, unseen_by_scheduler=True, age=age, **changes), claim


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


def test_taint_on_nodes_without_candidates_does_not_exclude():
    # Only the H200 node is tainted, the pod wants an H100: not node-excluded (the H100 node is free).
    facts = healthy(nodes=[NodeFacts("gpu-h100-0"), NodeFacts("gpu-a100-0"),
                           NodeFacts("gpu-h200-0", taints=[TAINT]), NodeFacts("cpu-0")])
    pod, claim = pending([model(H100)], message=None)
    pod = changed(pod, unschedulable="0/4 nodes are available: waiting for something.")
    assert classify(with_workload(facts, pod, claim))[0] == "timeout"


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


@pytest.mark.parametrize("selector", ["device.attributes['gpu.nvidia.com'].productName.size() > 3",
                                      "device.attributes['gpu.nvidia.com'].productName > 5"])
def test_selector_without_cannot_allocate_is_no_verdict(selector):
    pod, claim = pending([selector], message="0/4 nodes are available: 4 Insufficient cpu.")
    assert classify(with_workload(healthy(), pod, claim))[0] == "timeout"


def test_prepare_failed_event():
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", "NodePrepareResources failed for "
                               "ResourceClaim gpu-pod-gpu-x: plugin name gpu.nvidia.com not found",
                               name="gpu-pod")]
    code, reason = classify(facts)
    assert code == "plugin-unhealthy" and "FailedPrepareDynamicResources" in reason


#: The UID of a claim the node still holds a device for: another claim than the pod's (c1).
HOLDER = "7c3e9a10-5b2d-4f6e-9a8b-0d1c2e3f4a5b"

#: The kubelet's FailedPrepareDynamicResources message when the driver refuses gpu-0 of the
#: pod's claim because claim HOLDER holds it: the NVIDIA driver's words (v0.4.1, upstream
#: device_state.go validateNoOverlappingPreparedDevices) and the bed's simulated driver's
#: (gomod/gpu-driver/internal/plugin/preparer.go refuseHeld, wrapped by driver.go).
HELD_BY_ANOTHER_CLAIM = {
    "nvidia": "NodePrepareResources failed for ResourceClaim gpu-pod-gpu-x: error preparing devices for "
              f"claim ns/gpu-pod-gpu-x:c1: unable to prepare claim c1: requested device gpu-0 is already "
              f"allocated to different claim {HOLDER}",
    "simulated": "NodePrepareResources failed for ResourceClaim gpu-pod-gpu-x: claim ns/gpu-pod-gpu-x:c1 not "
                 f"prepared: device gpu-0 is held by claim {HOLDER}, prepared on this node and not "
                 "unprepared since",
}


@pytest.mark.parametrize("driver", sorted(HELD_BY_ANOTHER_CLAIM))
def test_a_device_still_prepared_for_an_unreleased_claim_is_claim_not_released(driver):
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", HELD_BY_ANOTHER_CLAIM[driver], name="gpu-pod")]
    code, reason = classify(facts)
    assert code == "claim-not-released" and "never unprepared" in reason and HOLDER in reason


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


@pytest.mark.parametrize("driver", sorted(HELD_BY_ANOTHER_CLAIM))
def test_a_driver_refusing_an_admin_access_device_is_admin_access_unsupported(driver):
    # Recorded on the bed under the admin-access-exclusive fault.
    pod, claim = bound_not_running()
    claim = changed(claim, admin_devices=list(claim.device_keys))
    facts = with_workload(healthy(), pod, claim)
    facts.events = [EventFacts("FailedPrepareDynamicResources", HELD_BY_ANOTHER_CLAIM[driver], name="gpu-pod")]
    code, reason = classify(facts)
    assert code == "admin-access-unsupported" and "adminAccess" in reason


def refused_with_config(message: str):
    """A pod bound and never started, whose claim carries opaque config for the driver, and the
    kubelet's FailedPrepareDynamicResources event saying ``message``: (pod, claim, facts)."""
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, changed(claim, opaque_config_drivers=[DRIVER]))
    facts.events = [EventFacts("FailedPrepareDynamicResources", message, name="gpu-pod")]
    return pod, claim, facts


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


def test_bound_pod_not_running_with_healthy_plugin_is_no_verdict():
    pod, claim = bound_not_running()
    assert classify(with_workload(healthy(), pod, claim))[0] == "timeout"


def saw(seen=(), expected=("GPU-gpu-h100-0-0",), container="workload", claims=("gpu",), **kw) -> ContainerGPUs:
    """What the diagnosis read in a container (nvidia-smi -L by exec, or a finished one's log)."""
    return ContainerGPUs("gpu-pod", container, list(claims), None if expected is None else list(expected),
                         list(seen), **kw)


#: The failure text is the check's own words: the CDI codes must not depend on them.
UNRELATED = "something went wrong"


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


def test_an_exec_without_an_answer_is_no_cdi_evidence():
    pod, claim = running()
    facts = with_workload(healthy(), pod, claim)
    facts.containers = [saw(answered=False, how="nvidia-smi -L: exit None; no exit status received")]
    assert classify(facts)[0] == "timeout"


def test_finished_job_without_nvidia_smi_is_not_injected_even_after_its_claim_is_gone():
    pod = fake_pod("gpu-pod", "ns", uid="p1", phase="Failed", node="gpu-h100-0", claims={"gpu": "gone"})
    facts = dataclasses.replace(healthy(), pods=[pod], containers=[saw(
        expected=None, no_tool=True, how="log: ''; ended: exit 128 StartError exec: \"nvidia-smi\": "
        "executable file not found in $PATH")])
    assert classify(facts)[0] == "cdi-not-injected"


def test_finished_job_whose_claim_is_gone_needs_the_checks_record_for_a_wrong_device():
    # The deleted claim's allocation survives only in the check's record, handed over as data
    # (WrongInjection.allocated); the message's wording is never read back.
    pod = fake_pod("gpu-pod", "ns", uid="p1", phase="Succeeded", node="gpu-h100-0", claims={"gpu": "gone"})
    facts = dataclasses.replace(healthy(), pods=[pod], containers=[saw(["GPU-b"], expected=None)])
    # (the check said: "CDI injection is wrong: gpu-pod/workload sees ['GPU-b'], allocated ['GPU-a']")
    assert classify(facts)[0] == "timeout"
    facts.recorded_allocations = {"gpu-pod/workload": ["GPU-a"]}
    assert classify(facts)[0] == "cdi-wrong-device"


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


def test_claim_of_a_pod_stuck_terminating_is_not_a_claim_problem():
    pod, claim = running()
    facts = with_workload(healthy(), changed(pod, deleting=True), claim)
    facts.failure = WAITED_FOR_RELEASE  # the cleanup check waited the release out
    code, reason = classify(facts)
    assert code == "timeout" and "being deleted" in reason


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


def test_a_quota_check_that_failed_without_excess_is_not_a_quota_code():
    # The message naming a quota is no evidence: nothing in the namespace exceeds it.
    key = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
    quota = QuotaFacts("gpus", "ns", hard={key: "1"}, used={key: "1"}, counted={key: 1})
    assert classify(healthy(quotas=[quota]))[0] == "timeout"


def competing(**changes) -> Facts:
    """A ClusterPolicy with its device plugin, offering nvidia.com/gpu on the GPU nodes."""
    facts = healthy(cluster_policy=True, cluster_policy_device_plugin=True, **changes)
    facts.nodes = [dataclasses.replace(n, extended_gpus=4) if n.name.startswith("gpu-") else n
                   for n in facts.nodes]
    return facts


def test_policy_conflict():
    pod, claim = running()
    code, reason = classify(with_workload(competing(), pod, claim))
    assert code == "policy-conflict" and "gpu-h100-0" in reason and "4 nvidia.com/gpu" in reason


def test_policy_conflict_for_a_pending_pod_whose_candidate_nodes_offer_nvidia_gpu():
    pod, claim = pending()
    pod = changed(pod, unschedulable="0/4 nodes are available: 4 Insufficient cpu.")
    assert classify(with_workload(competing(), pod, claim))[0] == "policy-conflict"


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


# =============================================================================================
# Priority conflicts: when several rules' evidence is present, the more basic cause wins
# =============================================================================================

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


# =============================================================================================
# The pieces the rules rest on
# =============================================================================================

def test_tolerations():
    assert tolerates([{"operator": "Exists"}], TAINT)
    assert tolerates([{"key": "dedicated", "operator": "Equal", "value": "gpu-reserved"}], TAINT)
    assert not tolerates([{"key": "dedicated", "value": "other"}], TAINT)
    assert not tolerates([PROFILE_TOLERATION], TAINT)
    assert not tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], TAINT)


def test_node_exclusions():
    pod = fake_pod("p", affinity_terms=[{"matchExpressions": [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}])
    assert node_exclusions(pod, NodeFacts("g", labels={"nvidia.com/gpu.present": "true"})) == []
    assert node_exclusions(pod, NodeFacts("c")) == ["required node affinity does not match"]
    assert node_exclusions(fake_pod("p"), NodeFacts("g", taints=[TAINT])) == [
        "untolerated taint dedicated=gpu-reserved:NoSchedule"]
    assert node_exclusions(fake_pod("p"), NodeFacts("g", taints=[dict(TAINT, effect="PreferNoSchedule")])) == []


def test_build_facts_from_raw_objects():
    snap = Snapshot(
        namespace="ns", resource_versions=["v1", "v1beta2"],
        pods=[{"metadata": {"name": "gpu-pod", "namespace": "ns", "uid": "p1"},
               "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                        "tolerations": [PROFILE_TOLERATION]},
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "False", "reason": "SchedulerError",
                    "message": "CEL runtime error: no such key: productName"}],
                   "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "gpu-pod-gpu-x"}]}}],
        claims=[{"metadata": {"name": "gpu-pod-gpu-x", "namespace": "ns",
                              "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                              "ownerReferences": [{"kind": "Pod", "name": "gpu-pod", "uid": "p1",
                                                   "controller": True}]},
                 "spec": {"devices": {"requests": [
                     {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2,
                                                 "selectors": [{"cel": {"expression": "true"}}]}},
                     {"name": "alt", "firstAvailable": [{"name": "big", "deviceClassName": DRIVER},
                                                        {"name": "small", "deviceClassName": "mig.nvidia.com"}]}]}}}],
        device_classes=[{"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": CLASS_CEL}}]}}],
        slices=[{"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "devices": [
            {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "driverVersion": {"version": "1.2.3"}},
             "capacity": {"memory": {"value": "80Gi"}}}]}},
            {"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "sharedCounters": []}}],
        all_claims=[{"metadata": {"name": "other", "namespace": "x"}, "status": {"allocation": {"devices": {
            "results": [{"driver": DRIVER, "pool": "n1", "device": "gpu-0", "request": "gpu"}]}}}}],
        cluster_policies=[{"metadata": {"name": "cluster-policy"}}],
        quotas=[{"metadata": {"name": "q", "namespace": "ns"}, "spec": {"hard": {"requests.cpu": "1"}},
                 "status": {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "2"}}}])
    facts = build_facts(snap, builtin("nvidia"))
    pod = facts.pods[0]
    assert pod.unschedulable_message.startswith("CEL runtime error") and pod.claim_names() == {"gpu": "gpu-pod-gpu-x"}
    claim = facts.claims[0]
    assert claim.is_generated and claim.owner_pod == "gpu-pod" and not claim.is_allocated
    assert [[r.name for r in req] for req in claim.device_requests] == [["gpu"], ["alt/big", "alt/small"]]
    assert claim.device_requests[0][0].count == 2 and claim.device_classes == [DRIVER, "mig.nvidia.com"]
    assert facts.slice_count == 2 and [d.key for d in facts.devices] == [f"{DRIVER}/n1/gpu-0"]
    assert facts.devices[0].memory("memory") == 80 * GI
    assert facts.allocated == {f"{DRIVER}/n1/gpu-0": "x/other"}
    assert facts.device_classes == {DRIVER: [CLASS_CEL]} and facts.cluster_policy and not facts.gpu_cluster
    assert facts.quotas[0].exceeded() == ["requests.cpu used 2 > hard 1"]


def test_an_extended_resource_pod_seeing_another_gpu_is_cdi_wrong_device():
    # As recorded under cdi-wrong-device: a `nvidia.com/gpu: 1` pod lists no claim; its claim is
    # the scheduler's (status.extendedResourceClaimStatus), and the container saw another GPU.
    snap = Snapshot(
        namespace="ns",
        pods=[{"metadata": {"name": "gpu-pod-extres", "namespace": "ns", "uid": "p1"},
               "spec": {"nodeName": "n1", "containers": [{"name": "workload", "resources": {
                   "limits": {"nvidia.com/gpu": "1"}}}]},
               "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                          "extendedResourceClaimStatus": {
                              "resourceClaimName": "gpu-pod-extres-extended-resources-x",
                              "requestMappings": [{"containerName": "workload", "resourceName": "nvidia.com/gpu",
                                                   "requestName": "container-0-request-0"}]}}}],
        claims=[{"metadata": {"name": "gpu-pod-extres-extended-resources-x", "namespace": "ns",
                              "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                              "ownerReferences": [{"kind": "Pod", "name": "gpu-pod-extres", "uid": "p1",
                                                   "controller": True}]},
                 "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                                                    "exactly": {"deviceClassName": DRIVER, "count": 1}}]}},
                 "status": {"allocation": {"devices": {"results": [
                     {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "request": "container-0-request-0"}]}},
                     "reservedFor": [{"resource": "pods", "name": "gpu-pod-extres", "uid": "p1"}]}}],
        device_classes=[{"metadata": {"name": DRIVER}, "spec": {
            "extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression": CLASS_CEL}}]}}],
        slices=[{"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "devices": [
            {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{i}"}}}
            for i in range(2)]}}],
        containers={"gpu-pod-extres/workload": {"stdout": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n",
                                                "stderr": "", "exit_code": 0}})
    facts = build_facts(snap, builtin("nvidia"))
    assert facts.claims[0].is_generated and facts.extended_resources == {"nvidia.com/gpu": DRIVER}
    code, reason = classify(facts)
    assert code == "cdi-wrong-device" and "GPU-1" in reason and "GPU-0" in reason


# =============================================================================================
# The pytest hook proposed for draconf/pytest_plugin.py, in an inner session (no cluster:
# diagnose_item is replaced by a stub, so this checks the wiring and the message handling)
# =============================================================================================

HOOK_CONFTEST = """
import pytest
from draconf import diagnosis
from draconf.reporting import ReportingPlugin, pytest_addoption  # noqa: F401

def pytest_configure(config):
    config.pluginmanager.register(ReportingPlugin(config), "draconf-reporting")
    diagnosis.diagnose_item = lambda item, exc: diagnosis.Diagnosis(
        "cdi-wrong-device", "container sees GPU-b, allocated GPU-a", {"state": "pod running"})

@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item):
    try:
        return (yield)
    except BaseException as exc:
        diagnosis.record_failure_diagnosis(item, exc)
        raise

@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except BaseException as exc:
        diagnosis.record_failure_diagnosis(item, exc)
        raise
"""

HOOK_TESTS = """
import pytest
from draconf.reporting import record_diagnosis

@pytest.mark.draconf(workload="single-gpu", check="cdi-injection")
def test_fails():
    assert False, "CDI injection is wrong: gpu-pod/workload sees ['GPU-b'], allocated ['GPU-a']"

def test_breaks():
    raise RuntimeError("apiserver answered 500")

def test_explains_itself(request):
    record_diagnosis(request.node, "timeout")
    assert False, "no pod"

def test_has_its_own_prefix():
    pytest.fail("[quota-not-enforced] second claim admitted")

def test_skips():
    pytest.skip("nothing to do")

class TestShared:
    @pytest.fixture(scope="class")
    def deployed(self):
        raise IndexError("list index out of range")

    def test_one(self, deployed):
        pass

    def test_two(self, deployed):
        pass
"""


def test_hook_records_and_prefixes_every_failure(pytester, monkeypatch):
    import json
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(HOOK_CONFTEST)
    pytester.makepyfile(test_hooked=HOOK_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--draconf-reports=out")
    result.assert_outcomes(failed=4, skipped=1, errors=2)
    rows = {r["id"].split("::", 1)[1]: r for r in
            json.loads((pytester.path / "out" / "summary.json").read_text())["tests"]}
    assert rows["test_fails"]["diagnosis"] == "cdi-wrong-device"
    assert rows["test_fails"]["message"].startswith("[cdi-wrong-device] CDI injection is wrong")
    assert rows["test_breaks"]["outcome"] == "broken"
    assert rows["test_breaks"]["message"] == "RuntimeError: [cdi-wrong-device] apiserver answered 500"
    assert rows["test_explains_itself"]["diagnosis"] == "timeout"
    assert rows["test_has_its_own_prefix"]["diagnosis"] == "quota-not-enforced"
    assert rows["test_has_its_own_prefix"]["message"] == "[quota-not-enforced] second claim admitted"
    assert rows["test_skips"]["diagnosis"] is None
    for name in ("TestShared::test_one", "TestShared::test_two"):
        assert rows[name]["outcome"] == "error" and rows[name]["diagnosis"] == "cdi-wrong-device"
    # The reason shows on the terminal once per failure, even for a re-raised fixture error.
    # Counted in the failure reports only: on CI (env CI or BUILD_NUMBER set) pytest's short
    # summary repeats whole multi-line messages, elsewhere just their first line.
    reports = result.stdout.str().split("short test summary info")[0]
    assert reports.count("diagnosis (cdi-wrong-device): container sees GPU-b") == 4
    # ... in a section of the report; the exception is shown as it was raised.
    assert reports.count("draconf diagnosis") == 6
    assert "E       RuntimeError: apiserver answered 500" in reports
    assert "E       IndexError: list index out of range" in reports
    assert "[cdi-wrong-device]" not in reports.split("draconf conformance matrix")[0]


def test_build_facts_reads_what_containers_saw_quota_counts_and_a_competing_device_plugin():
    claim = {"metadata": {"name": "c", "namespace": "ns"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "request": "gpu"}]}}}}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "p1"},
           "spec": {"nodeName": "n1", "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}],
                    "containers": [{"name": "w", "resources": {"claims": [{"name": "gpu"}]}}, {"name": "side"}]},
           "status": {"phase": "Running"}}
    snap = Snapshot(
        namespace="ns", pods=[pod], claims=[claim, dict(claim, metadata={"name": "d", "namespace": "ns"})],
        slices=[{"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "devices": [
            {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}}]}}],
        nodes=[{"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}],
        gpu_cluster={"metadata": {"name": "gpu-cluster"}},
        cluster_policies=[{"metadata": {"name": "cluster-policy"}, "spec": {"devicePlugin": {"enabled": True}}}],
        containers={"p/w": {"stdout": "GPU 0: NVIDIA H100 (UUID: GPU-9)\n", "stderr": "", "exit_code": 0, "error": ""},
                    "p/side": {"stdout": "", "stderr": "", "exit_code": 127,
                               "error": 'exec: "nvidia-smi": executable file not found in $PATH'}},
        quotas=[{"metadata": {"name": "q", "namespace": "ns"}, "status": {"hard": {
            "count/resourceclaims.resource.k8s.io": "1", f"{DRIVER}.deviceclass.resource.k8s.io/devices": "3"}}}])
    facts = build_facts(snap, builtin("nvidia"))
    w, side = facts.containers
    assert (w.claims, w.expected, w.seen, w.no_tool) == (["gpu"], ["GPU-0"], ["GPU-9"], False)
    assert (side.claims, side.expected, side.seen, side.no_tool) == ([], [], [], True)
    assert facts.nodes[0].extended_gpus == 4 and facts.cluster_policy_device_plugin
    assert facts.quotas[0].counted == {"count/resourceclaims.resource.k8s.io": 2,
                                       f"{DRIVER}.deviceclass.resource.k8s.io/devices": 4}
    assert classify(facts)[0] == "cdi-wrong-device"
    facts.containers = []
    assert classify(facts)[0] == "quota-not-enforced"
    facts.quotas = []
    assert classify(facts)[0] == "policy-conflict"
    snap.cluster_policies[0]["spec"]["devicePlugin"]["enabled"] = False
    assert not build_facts(snap, builtin("nvidia")).cluster_policy_device_plugin


def test_a_pod_bound_with_its_claim_unallocated_is_a_scheduler_without_dra():
    pod, claim = pending(message=None)
    bound = changed(pod, node="cpu-0", scheduler_name="default-scheduler")
    code, reason = classify(with_workload(healthy(), bound, claim))
    assert code == "scheduler-without-dra"
    assert "bound to cpu-0 by default-scheduler with claim(s) gpu-pod-gpu-x unallocated" in reason
    never_generated = changed(bound, claims={}, ungenerated_claims=["gpu"])
    assert classify(with_workload(healthy(), never_generated, claim))[0] \
        == "scheduler-without-dra"


def test_a_bound_pod_whose_claim_is_allocated_is_not_a_scheduler_without_dra():
    pod, claim = bound_not_running()
    assert classify(with_workload(healthy(), pod, claim))[0] != "scheduler-without-dra"


def test_scheduler_without_dra_beats_the_missing_class_its_claim_names():
    pod, claim = pending(message=None, device_class="no-such-class")
    bound = changed(pod, node="cpu-0")
    assert classify(with_workload(healthy(), bound, claim))[0] == "scheduler-without-dra"


#: Recorded on a device-taints-ignored bed (kube-scheduler --feature-gates=DRADeviceTaints=false):
#: the H100 the inventory marks unhealthy, as the plugin publishes it, and the claim the
#: scheduler gave it to although the request tolerates nothing.
TAINTED_SLICE = {"metadata": {"name": "00000-gpu.nvidia.com-gpu-h100-0-xzjkr"}, "spec": {
    "driver": "gpu.nvidia.com", "nodeName": "gpu-h100-0", "pool": {"name": "gpu-h100-0", "generation": 1,
                                                                    "resourceSliceCount": 1},
    "devices": [{"name": "gpu-3", "attributes": {"type": {"string": "gpu"}}},
                {"name": "gpu-4", "attributes": {"type": {"string": "gpu"}},
                 "taints": [{"effect": "NoSchedule", "key": "gpu.nvidia.com/xid",
                             "timeAdded": "2026-11-30T07:39:17Z", "value": "79"}]}]}}
UNTOLERATED_CLAIM = {
    "metadata": {"name": "gpu-untolerated", "namespace": "ns", "uid": "c1"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].uuid in ['GPU-78ddcd39']"}}]}}]}},
    "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
                                                        "pool": "gpu-h100-0", "device": "gpu-4"}]}},
               "reservedFor": [{"resource": "pods", "name": "gpu-untolerated", "uid": "p1"}]}}


def _tainted_snapshot(claim: dict) -> Snapshot:
    pod = {"metadata": {"name": "gpu-untolerated", "namespace": "ns", "uid": "p1"},
           "spec": {"nodeName": "gpu-h100-0", "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-untolerated"}],
                    "containers": [{"name": "workload"}]},
           "status": {"phase": "Running", "resourceClaimStatuses": [],
                      "conditions": [{"type": "Ready", "status": "True"}]}}
    return Snapshot(namespace="ns", pods=[pod], claims=[claim], slices=[TAINTED_SLICE], all_claims=[claim],
                    control_plane={"kube-scheduler": "x"})


def test_a_tainted_device_given_to_a_claim_without_toleration_is_device_tainted():
    facts = build_facts(_tainted_snapshot(UNTOLERATED_CLAIM), builtin("nvidia"))
    assert facts.untolerated_taints == {"ns/gpu-untolerated": ["gpu: gpu-h100-0/gpu-4 (gpu.nvidia.com/xid=79:NoSchedule)"]}
    code, reason = classify(facts)
    assert code == "device-tainted"
    assert "ns/gpu-untolerated" in reason and "gpu.nvidia.com/xid=79:NoSchedule" in reason


def test_a_tolerated_taint_is_not_device_tainted():
    import copy
    claim = copy.deepcopy(UNTOLERATED_CLAIM)
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}]
    facts = build_facts(_tainted_snapshot(claim), builtin("nvidia"))
    assert facts.untolerated_taints == {}
    assert classify(facts)[0] != "device-tainted"
    # An informational taint (effect None) keeps nobody off the device.
    informational = copy.deepcopy(_tainted_snapshot(UNTOLERATED_CLAIM))
    informational.slices[0]["spec"]["devices"][1]["taints"][0]["effect"] = "None"
    assert build_facts(informational, builtin("nvidia")).untolerated_taints == {}


def _ruled(effect: str) -> Snapshot:
    """The healthy gpu-3 of TAINTED_SLICE held by UNTOLERATED_CLAIM's running pod, and a
    DeviceTaintRule (as the device-taint-rule checks create) tainting exactly it."""
    import copy
    claim = copy.deepcopy(UNTOLERATED_CLAIM)
    claim["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-3"
    snap = _tainted_snapshot(claim)
    snap.taint_rules = [{"metadata": {"name": "ns-rule"}, "spec": {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-h100-0", "device": "gpu-3"},
        "taint": {"key": "example.com/gpu-maintenance", "value": "planned", "effect": effect}}}]
    return snap


def test_a_device_a_rule_taints_given_to_a_claim_without_toleration_is_device_tainted():
    facts = build_facts(_ruled("NoSchedule"), builtin("nvidia"))
    assert facts.untolerated_taints == {
        "ns/gpu-untolerated": ["gpu: gpu-h100-0/gpu-3 (example.com/gpu-maintenance=planned:NoSchedule)"]}
    assert facts.not_evicted == {}  # NoSchedule evicts nobody
    code, reason = classify(facts)
    assert code == "device-tainted"
    assert "DeviceTaintRule ns-rule" in reason and "DRADeviceTaintRules" in reason and "kube-scheduler" in reason


def test_a_pod_left_running_on_a_device_a_rule_taints_noexecute_is_not_evicted():
    facts = build_facts(_ruled("NoExecute"), builtin("nvidia"))
    assert list(facts.not_evicted) == ["ns/gpu-untolerated"]
    code, reason = classify(facts)
    assert code == "device-tainted" and "device-taint-eviction-controller" in reason
    # Once the pod is being deleted (evicted), nothing is left to evict.
    snap = _ruled("NoExecute")
    snap.pods[0]["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    assert build_facts(snap, builtin("nvidia")).not_evicted == {}


def test_rules_of_other_devices_taint_nothing_here():
    snap = _ruled("NoSchedule")
    snap.taint_rules[0]["spec"]["deviceSelector"]["device"] = "gpu-7"
    assert build_facts(snap, builtin("nvidia")).untolerated_taints == {}


#: Recorded on the healthy bed by tests/testbed/test_allocation_branches.py: two claims an
#: external allocator gave the same device, each consumed by a running pod.
def _claim_on(name: str, device: str, pod_uid: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"c-{name}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}},
            "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
                                                                "pool": "gpu-a100-0", "device": device}]}},
                       "reservedFor": [{"resource": "pods", "name": "x", "uid": pod_uid}]}}


def _consumer(name: str, uid: str, claim: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"nodeName": "gpu-a100-0", "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                     "containers": [{"name": "workload"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


A100_SLICE = {"metadata": {"name": "s"}, "spec": {
    "driver": "gpu.nvidia.com", "nodeName": "gpu-a100-0", "pool": {"name": "gpu-a100-0", "generation": 1,
                                                                    "resourceSliceCount": 1},
    "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{i}"}}}
                for i in range(2)]}}
GPU_CLASS = {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {
    "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}


def test_one_device_in_two_claims_is_allocation_invalid():
    claims = [_claim_on("first", "gpu-1", "p1"), _claim_on("second", "gpu-1", "p2")]
    snap = Snapshot(namespace="ns", pods=[_consumer("a", "p1", "first"), _consumer("b", "p2", "second")],
                    claims=claims, all_claims=claims, slices=[A100_SLICE], device_classes=[GPU_CLASS],
                    control_plane={"kube-scheduler": "x"})
    code, reason = classify(build_facts(snap, builtin("nvidia")))
    assert code == "allocation-invalid"
    assert "device gpu.nvidia.com/gpu-a100-0/gpu-1 is allocated to both first and second" in reason


H100_MIG_SLICE = {"metadata": {"name": "m"}, "spec": {
    "driver": "gpu.nvidia.com", "nodeName": "gpu-a100-0", "pool": {"name": "gpu-a100-0", "generation": 1,
                                                                    "resourceSliceCount": 1},
    "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-0"}}},
                {"name": "gpu-0-mig-1g10gb-19-0", "attributes": {
                    "type": {"string": "mig"}, "profile": {"string": "1g.10gb"},
                    "parentUUID": {"string": "GPU-0"}}}]}}
MIG_CLASS = {"metadata": {"name": "mig.nvidia.com"}, "spec": {"selectors": [{"cel": {
    "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]}}


def test_a_gpu_and_a_mig_device_of_it_in_two_claims_is_partition_overlap():
    """Recorded from the mig-counters-ignored bed: the full GPU to one claim, a MIG device
    carved from it to another (MIG devices published without consumesCounters)."""
    mig_claim = _claim_on("mig", "gpu-0-mig-1g10gb-19-0", "p2")
    mig_claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "mig.nvidia.com"
    claims = [_claim_on("whole", "gpu-0", "p1"), mig_claim]
    snap = Snapshot(namespace="ns", pods=[_consumer("a", "p1", "whole"), _consumer("b", "p2", "mig")],
                    claims=claims, all_claims=claims, slices=[H100_MIG_SLICE],
                    device_classes=[GPU_CLASS, MIG_CLASS], control_plane={"kube-scheduler": "x"})
    code, reason = classify(build_facts(snap, builtin("nvidia")))
    assert code == "partition-overlap"
    assert "gpu-0-mig-1g10gb-19-0 (a partition of GPU GPU-0) is allocated to mig while whole" in reason


def test_right_allocations_are_not_allocation_invalid():
    claims = [_claim_on("first", "gpu-0", "p1"), _claim_on("second", "gpu-1", "p2")]
    snap = Snapshot(namespace="ns", pods=[_consumer("a", "p1", "first"), _consumer("b", "p2", "second")],
                    claims=claims, all_claims=claims, slices=[A100_SLICE], device_classes=[GPU_CLASS],
                    control_plane={"kube-scheduler": "x"})
    facts = build_facts(snap, builtin("nvidia"))
    assert facts.allocation_problems == []
    assert classify(facts)[0] != "allocation-invalid"


def _mig_same_parent_bed(listed: dict[str, str]):
    """gpu-test4 on the mig-parent-mislabelled bed, as gathered there: two H100s, each
    consuming its own counter set; the 2g and 3g devices of gpu-1 published with GPU-0's UUID as
    parentUUID; one claim whose four requests got two 1g devices of gpu-0 and those two, one
    published parentUUID as matchAttribute asks; ``listed``: container -> the GPU its
    nvidia-smi -L shows its MIG device under."""
    def part(gpu, name, profile, parent):
        return {"name": f"gpu-{gpu}-mig-{name}", "attributes": {
            "type": {"string": "mig"}, "profile": {"string": profile}, "parentUUID": {"string": parent}},
            "consumesCounters": [{"counterSet": f"gpu-{gpu}-counter-set", "counters": {}}]}
    devices = [{"name": f"gpu-{g}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{g}"}},
                "consumesCounters": [{"counterSet": f"gpu-{g}-counter-set", "counters": {}}]} for g in (0, 1)]
    devices += [part(0, "1g10gb-19-0", "1g.10gb", "GPU-0"), part(0, "1g10gb-19-1", "1g.10gb", "GPU-0"),
                part(1, "2g20gb-14-2", "2g.20gb", "GPU-0"), part(1, "3g40gb-9-4", "3g.40gb", "GPU-0")]
    pool = {"driver": "gpu.nvidia.com", "nodeName": "gpu-h100-0", "pool": {"name": "gpu-h100-0"}}
    slices = [{"metadata": {"name": "s"}, "spec": dict(pool, devices=devices)}]
    requests = {"mig-1g-0": "gpu-0-mig-1g10gb-19-0", "mig-1g-1": "gpu-0-mig-1g10gb-19-1",
                "mig-2g": "gpu-1-mig-2g20gb-14-2", "mig-3g": "gpu-1-mig-3g40gb-9-4"}
    claim = {"metadata": {"name": "mig-same-parent-mig", "namespace": "ns", "uid": "c1"},
             "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": "mig.nvidia.com"}}
                                               for r in requests],
                                  "constraints": [{"matchAttribute": "gpu.nvidia.com/parentUUID"}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": r, "driver": "gpu.nvidia.com", "pool": "gpu-h100-0", "device": d}
                 for r, d in requests.items()]}}, "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]}}
    containers = [{"name": f"ctr{i}", "resources": {"claims": [{"name": "mig", "request": r}]}}
                  for i, r in enumerate(requests)]
    pod = {"metadata": {"name": "mig-same-parent", "namespace": "ns", "uid": "p1"},
           "spec": {"nodeName": "gpu-h100-0", "resourceClaims": [{"name": "mig", "resourceClaimName": claim["metadata"]["name"]}],
                    "containers": containers},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    profiles = dict(zip((c["name"] for c in containers), ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")))
    seen = {f"mig-same-parent/{c}": {
        "stdout": f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu})\n  MIG {profiles[c]}     Device  0: (UUID: MIG-{c})\n",
        "stderr": "", "exit_code": 0, "error": ""} for c, gpu in listed.items()}
    return Snapshot(namespace="ns", pods=[pod], claims=[claim], all_claims=[claim], slices=slices,
                    device_classes=[GPU_CLASS, MIG_CLASS], containers=seen)


def test_a_mig_device_listed_under_the_gpu_whose_counters_it_consumes_is_inventory_mismatch():
    """The slice says gpu-1-mig-2g20gb-14-2 is carved from gpu-1 (it consumes gpu-1's counter
    set) and its container lists it under GPU-1, yet its parentUUID says GPU-0."""
    snap = _mig_same_parent_bed({"ctr0": "GPU-0", "ctr1": "GPU-0", "ctr2": "GPU-1", "ctr3": "GPU-1"})
    facts = build_facts(snap, builtin("nvidia"))
    assert facts.allocation_problems == []  # by the published attributes, nothing is wrong
    code, reason = classify(facts)
    assert code == "inventory-mismatch", reason
    assert ("mig-same-parent/ctr2 was allocated MIG device gpu-h100-0/gpu-1-mig-2g20gb-14-2 (2g.20gb), "
            "published with parentUUID GPU-0, but its nvidia-smi -L lists it under GPU-1, which is gpu-1, "
            "the GPU whose counter set (gpu-1-counter-set)") in reason


def test_a_mig_device_listed_under_a_gpu_sharing_no_counters_with_it_is_not_inventory_mismatch():
    """A GPU the device has no counters of (CDI handed the container another one), or the
    published parent itself: the inventory is not what the containers contradict."""
    for listed in ({"ctr0": "GPU-0", "ctr2": "GPU-7"}, {"ctr0": "GPU-0", "ctr2": "GPU-0", "ctr3": "GPU-0"}):
        facts = build_facts(_mig_same_parent_bed(listed), builtin("nvidia"))
        assert classify(facts)[0] != "inventory-mismatch"
    # MIG devices published without consumesCounters (mig-counters-ignored) say nothing of their GPU.
    snap = _mig_same_parent_bed({"ctr2": "GPU-1"})
    for d in snap.slices[0]["spec"]["devices"]:
        d.pop("consumesCounters")
    assert classify(build_facts(snap, builtin("nvidia")))[0] != "inventory-mismatch"


def test_a_mig_container_listing_its_published_parent_is_not_a_cdi_fault():
    """A MIG device's container lists the GPU its parentUUID names: what injection should give
    (a MIG device has no uuid of its own in the slice, so the parent is the expected identity)."""
    snap = _mig_same_parent_bed({"ctr0": "GPU-0", "ctr1": "GPU-0"})
    facts = build_facts(snap, builtin("nvidia"))
    assert [c.expected for c in facts.containers] == [["GPU-0"], ["GPU-0"]]
    assert classify(facts)[0] not in ("cdi-wrong-device", "cdi-not-injected")
    # Under a GPU it has nothing to do with (no shared counters either): CDI handed it another GPU.
    snap = _mig_same_parent_bed({"ctr0": "GPU-7"})
    assert classify(build_facts(snap, builtin("nvidia")))[0] == "cdi-wrong-device"


def test_a_diagnosis_that_crashes_is_diagnosis_error_and_never_rerun(monkeypatch):
    """Not ``timeout``: --reruns retries that, and a crash in our own rules would end FLAKY."""
    import draconf.diagnosis as diagnosis
    from draconf.profile import resolve
    from draconf.pytest_plugin import RERUN_CODES

    def crash(*_):
        raise KeyError("a rule read a fact that is not there")
    monkeypatch.setattr(diagnosis, "classify", crash)
    monkeypatch.setattr(diagnosis, "gather", lambda *_: None)
    monkeypatch.setattr(diagnosis, "build_facts", lambda *_: None)
    result = diagnosis.diagnose(None, resolve("nvidia"), "ns", "sees no GPU")
    assert result.code == "diagnosis-error" and "diagnosis itself failed" in result.reason
    assert result.code not in RERUN_CODES


def test_a_code_the_check_named_itself_keeps_the_checks_own_words(pytester, monkeypatch):
    """``[spec-altered] ...`` from the check, while the rules found something else (a pod left
    Running): the recorded reason is the check's sentence, not the other rule's."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(HOOK_CONFTEST.replace(
        '"cdi-wrong-device", "container sees GPU-b, allocated GPU-a", {"state": "pod running"}',
        '"timeout", "No definitive signal from the cluster; last observed: pod p Running", {}'))
    pytester.makepyfile(test_stripped="""
import pytest

@pytest.mark.draconf(workload="single-gpu", check="allocation")
def test_allocation():
    raise AssertionError("[spec-altered] no pod of the workload asks for a device (p); mutating "
                         "admission acting on pod creates: MutatingAdmissionPolicy 'strip'")
""")
    pytester.runpytest("-p", "no:cacheprovider", "--draconf-reports=reports")
    import json
    (row,) = json.loads((pytester.path / "reports" / "summary.json").read_text())["tests"]
    assert row["diagnosis"] == "spec-altered", row
    assert row["reason"].startswith("no pod of the workload asks for a device") and "'strip'" in row["reason"], row


def test_a_server_still_too_busy_after_the_retries_is_api_throttled_not_timeout():
    from kubernetes.client.exceptions import ApiException
    from draconf.waits import WaitTimeout
    facts = healthy()
    facts.failure = Failure.of(ApiException(status=429, reason="Too Many Requests"))
    code, reason = classify(facts)
    assert code == "api-throttled" and "429 Too Many Requests" in reason
    try:  # a wait that gave up while the server answered 503: the answer is in its context
        try:
            raise ApiException(status=503, reason="Service Unavailable")
        except ApiException:
            raise WaitTimeout("timed out after 30s waiting for pod p") from None
    except WaitTimeout as err:
        facts.failure = Failure.of(err)
    assert classify(facts)[0] == "api-throttled"
    # The suite's own words are not the server's answer.
    facts.failure = Failure.of(AssertionError("the API server answered 429 Too Many Requests"))
    assert classify(facts)[0] != "api-throttled"