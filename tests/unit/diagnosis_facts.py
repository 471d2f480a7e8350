"""Hand-built facts for the diagnosis tests (tests/unit/test_diagnosis_*.py): a fleet of GPUs,
pods and claims as the cluster would show them, and the facts of a healthy cluster to change one
thing in.  Recorded evidence of real beds is quoted where it is used."""

from __future__ import annotations

import dataclasses
import itertools
import re
from datetime import datetime, timedelta, timezone

from draconf import selectors as sel
from draconf.claims import Claim, DeviceRequest
from draconf.devices import Device
from draconf.diagnosis import (
    ContainerGPUs,
    EventFacts,
    Facts,
    Failure,
    NodeFacts,
    Snapshot,
)
from draconf.plugins import PluginPod
from draconf.pods import EXTENDED_CLAIM, Pod
from draconf.profile import builtin

"""The diagnosis rules over hand-built facts: one test per rule, then the priority conflicts.

No cluster: ``classify`` is pure, and so is ``build_facts`` (selectors: tests/unit/test_cel.py).
"""


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


# --- a stalled control plane: recorded from a bed whose kube-scheduler / kube-controller-manager
# was SIGSTOPped (tests/testbed/test_stalled_control_plane.py); the bed keeps no Lease.
BED_SCHEDULER = ("no Lease kube-system/kube-scheduler (it may run without leader election); "
                 "no pod labelled component=kube-scheduler in kube-system")


def unscheduled(age: float = 20.0, **changes) -> tuple[Pod, Claim]:
    """A pod of 01-single-gpu whose claim was generated but which nothing scheduled: no
    nodeName, no PodScheduled condition."""
    pod, claim = pending(message=None)
    return changed(pod, unseen_by_scheduler=True, age=age, **changes), claim


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


def refused_with_config(message: str):
    """A pod bound and never started, whose claim carries opaque config for the driver, and the
    kubelet's FailedPrepareDynamicResources event saying ``message``: (pod, claim, facts)."""
    pod, claim = bound_not_running()
    facts = with_workload(healthy(), pod, changed(claim, opaque_config_drivers=[DRIVER]))
    facts.events = [EventFacts("FailedPrepareDynamicResources", message, name="gpu-pod")]
    return pod, claim, facts


def saw(seen=(), expected=("GPU-gpu-h100-0-0",), container="workload", claims=("gpu",), **kw) -> ContainerGPUs:
    """What the diagnosis read in a container (nvidia-smi -L by exec, or a finished one's log)."""
    return ContainerGPUs("gpu-pod", container, list(claims), None if expected is None else list(expected),
                         list(seen), **kw)


#: The failure text is the check's own words: the CDI codes must not depend on them.
UNRELATED = "something went wrong"


def competing(**changes) -> Facts:
    """A ClusterPolicy with its device plugin, offering nvidia.com/gpu on the GPU nodes."""
    facts = healthy(cluster_policy=True, cluster_policy_device_plugin=True, **changes)
    facts.nodes = [dataclasses.replace(n, extended_gpus=4) if n.name.startswith("gpu-") else n
                   for n in facts.nodes]
    return facts


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
    from draconf.errors import CheckFailed
    raise CheckFailed("second claim admitted", code="quota-not-enforced")

def test_only_words_in_brackets():
    pytest.fail("[quota-not-enforced] a code in the words is no cause")

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


H100_MIG_SLICE = {"metadata": {"name": "m"}, "spec": {
    "driver": "gpu.nvidia.com", "nodeName": "gpu-a100-0", "pool": {"name": "gpu-a100-0", "generation": 1,
                                                                    "resourceSliceCount": 1},
    "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-0"}}},
                {"name": "gpu-0-mig-1g10gb-19-0", "attributes": {
                    "type": {"string": "mig"}, "profile": {"string": "1g.10gb"},
                    "parentUUID": {"string": "GPU-0"}}}]}}


MIG_CLASS = {"metadata": {"name": "mig.nvidia.com"}, "spec": {"selectors": [{"cel": {
    "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]}}


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
