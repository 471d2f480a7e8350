"""Diagnoses proved on real test beds: start a bed broken one way, make a workload fail the way
the suite would see it, and check that ``diagnose`` names the fault from cluster evidence alone.

Beds are named ``dg-<fault>`` and started one at a time (each test asks for its bed; asking for
another stops the previous one), so the file needs about one bed's worth of CPU and memory.
Set DRACONF_DIAGNOSIS_LOG=path to append one JSON line per diagnosis (code, timings, reason).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time

import pytest

from draconf import namespaces, waits
from draconf import selectors as sel
from draconf.devices import PublishedDevices
from draconf.diagnosis import diagnose
from draconf.kube import connect
from draconf.profile import builtin, for_target
from draconf.testbed import inventory, nvidia
from draconf.testbed import cluster, processes
from draconf.workload import DeployedWorkload, Workload
from draconf.scenarios.mig import MigWorkload
from tests.matrix.faultmatrix import EXPECTED

#: CI's choice (.ci/run), as in test_faults.py: a fault whose matrix row runs in the same CI run
#: (where the suite's own run must end with this diagnosis) gets no bed of its own here; about
#: 5 minutes left to local runs (docs/fault-matrix.md). Faults without a row, and the healthy
#: bed's cases, always run.
SKIP_SYMPTOMS = os.environ.get("DRACONF_SKIP_FAULT_SYMPTOMS") == "1"
MATRIX_ROWS = set(EXPECTED)
LOCAL_ONLY = set(os.environ.get("DRACONF_MATRIX_LOCAL_ONLY", "").split(","))

RUN = namespaces.RunId("dgself")
PROFILE = dataclasses.replace(
    for_target(builtin("nvidia"), "testbed"),
    timeouts=dataclasses.replace(builtin("nvidia").timeouts, schedule=30, running=30, cleanup=20))
DRIVER = PROFILE.driver


class Beds:
    """At most one ``dg-*`` bed up at a time; the last one is stopped at module teardown."""

    def __init__(self):
        self.bed: cluster.Testbed | None = None
        self.fault: str | None = None
        self.api = None

    def get(self, fault: str | None):
        if fault is not None and SKIP_SYMPTOMS and fault in MATRIX_ROWS and fault not in LOCAL_ONLY:
            pytest.skip(f"DRACONF_SKIP_FAULT_SYMPTOMS=1 (CI): {fault}'s fault-matrix row runs on a bed "
                        "with it and asserts this diagnosis from the suite's run")
        if self.bed is not None and self.fault == fault:
            return self.api
        self.stop()
        bed = cluster.Testbed.named(f"dg-{fault or 'healthy'}")
        if bed.dir.exists():
            bed.down(log=lambda *_: None)  # left over by an interrupted run
        self.bed, self.fault = bed, fault
        bed.up(inventory.load(inventory.GUIDE_INVENTORY), faults=[fault] if fault else [], log=lambda *_: None)
        self.api = connect(bed.kubeconfig)
        return self.api

    def stop(self):
        if self.bed is not None:
            self.bed.down(log=lambda *_: None)
        self.bed = self.fault = self.api = None


@pytest.fixture(scope="module")
def dg_beds():
    beds = Beds()
    yield beds
    beds.stop()


@pytest.fixture
def dg_namespaces(request):
    """Make namespaces on the current bed; deleted after the test (the bed may go away anyway)."""
    made = []

    def make(api, label: str) -> str:
        name = namespaces.create(api, RUN, f"{request.node.name}-{label}")
        made.append((api, name))
        return name

    yield make
    for api, name in made:
        try:
            namespaces.delete(api, name)
        except Exception:  # noqa: BLE001 - the bed may already be down
            pass


def deploy(api, ns: str, workload: Workload) -> DeployedWorkload:
    return DeployedWorkload.deploy(api, ns, workload, PROFILE, RUN.labels)


def single_gpu() -> Workload:
    return Workload("single-gpu", ["01-single-gpu.yaml"], expected_pods=1)


def failure_of(action) -> tuple[AssertionError, float]:
    """The failure ``action`` raises, and the seconds it took (for DRACONF_DIAGNOSIS_LOG only)."""
    started = time.monotonic()
    with pytest.raises(AssertionError) as info:
        action()
    return info.value, time.monotonic() - started


def ended_on_a_verdict(error: AssertionError) -> bool:
    """The wait ended on the cluster's verdict (draconf.waits.TerminalState), not on its deadline."""
    return isinstance(error, waits.TerminalState) and not isinstance(error, waits.WaitTimeout)


#: How a read that waited out its timeout shows in a diagnosis's ``unread`` evidence or a plugin
#: log tail (urllib3's ReadTimeoutError / ConnectTimeoutError, the socket's TimeoutError).
WAITED_READ = re.compile(r"(?i)timeout|timed out")


def diagnosed(api, ns, check, error, fault, took=None):
    started = time.monotonic()
    result = diagnose(api, PROFILE, ns, error)
    elapsed = time.monotonic() - started
    path = os.environ.get("DRACONF_DIAGNOSIS_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"fault": fault, "check": check, "code": result.code,
                                 "failure_after_s": round(took, 1) if took is not None else None,
                                 "diagnosis_s": round(elapsed, 2), "reason": result.reason,
                                 "error": str(error)[:300], "evidence": sorted(result.evidence)}) + "\n")
    # It read the cluster without waiting out any read (each may take gather.REQUEST_TIMEOUT):
    # how long a diagnosis takes is not this test's to bound.
    read_errors = [*result.evidence.get("api", "").splitlines(), *result.evidence.get("unread", "").splitlines(),
                   *(line for line in result.evidence.get("kubelet-plugin", "").splitlines()
                     if "(logs unavailable: " in line)]
    assert not [line for line in read_errors if WAITED_READ.search(line)], read_errors
    assert result.evidence["diagnosis"].startswith(f"[{result.code}]")
    return result


# --- faults that keep the workload from being scheduled ---------------------------------------

def test_missing_deviceclass(dg_beds, dg_namespaces):
    api = dg_beds.get("missing-deviceclass")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    error, took = failure_of(workload.wait_running)
    result = diagnosed(api, ns, "allocation", error, "missing-deviceclass", took)
    assert result.code == "missing-deviceclass", result
    assert "DeviceClass gpu.nvidia.com" in result.reason
    assert not any(line.startswith("gpu.nvidia.com:") for line in result.evidence["deviceclasses"].splitlines())


def test_no_resourceslices(dg_beds, dg_namespaces):
    api = dg_beds.get("no-resourceslices")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    error, took = failure_of(workload.wait_running)
    result = diagnosed(api, ns, "allocation", error, "no-resourceslices", took)
    assert result.code == "no-resourceslices", result
    # A real plugin that finds no GPU publishes its pool with no device in it.
    assert "hold no devices" in result.reason or "No ResourceSlice" in result.reason, result


def test_attribute_drift_with_the_model_selected_workload(dg_beds, dg_namespaces):
    api = dg_beds.get("attribute-drift")
    ns = dg_namespaces(api, "w")
    # The walkthrough's own selector (productName matching h100): the suite cannot pick a model
    # here, because no device publishes productName any more.
    workload = deploy(api, ns, Workload("model-selected", ["02-model-selected.yaml"], expected_pods=1))
    error, took = failure_of(workload.wait_running)
    result = diagnosed(api, ns, "allocation", error, "attribute-drift", took)
    assert result.code == "attribute-missing", result
    assert "productName" in result.reason


def test_attribute_drift_before_anything_is_deployed(dg_beds):
    # What the suite's fixture hits first: choosing a model from published productNames fails.
    api = dg_beds.get("attribute-drift")
    result = diagnosed(api, None, None, IndexError("list index out of range"), "attribute-drift")
    assert result.code == "attribute-missing", result
    assert "productName" in result.reason


def test_gpu_nodes_tainted(dg_beds, dg_namespaces):
    api = dg_beds.get("gpu-nodes-tainted")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    error, took = failure_of(workload.wait_running)
    result = diagnosed(api, ns, "allocation", error, "gpu-nodes-tainted", took)
    assert result.code == "node-excluded", result
    assert "dedicated=gpu-reserved:NoSchedule" in result.reason


def test_scheduler_without_dra(dg_beds, dg_namespaces):
    api = dg_beds.get("scheduler-without-dra")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    error, took = failure_of(workload.wait_running)
    result = diagnosed(api, ns, "allocation", error, "scheduler-without-dra", took)
    assert result.code == "scheduler-without-dra", result
    assert "by default-scheduler with claim(s) gpu-pod-gpu-" in result.reason
    # The wait ended on the bound pod with unallocated claims, not on the schedule timeout.
    assert ended_on_a_verdict(error) and "with its claims unallocated" in str(error), error


def test_device_taints_ignored(dg_beds, dg_namespaces):
    """kube-scheduler without DRADeviceTaints hands the tainted H100 to a claim without a
    toleration: the diagnosis reads that from the claim's result and the slice's taint."""
    from draconf import taints
    api = dg_beds.get("device-taints-ignored")
    (device,) = taints.tainted_devices(taints.read_slices(api, DRIVER))
    uuid = device.attributes[f"{PROFILE.domain}/{PROFILE.attributes['uuid']}"]
    ns = dg_namespaces(api, "w")
    deploy(api, ns, Workload("device-taints", ["features/46-device-taint-untolerated.yaml"], 1, selectors={
        "gpu-untolerated": [sel.uuid_in(PROFILE.domain, PROFILE.attributes["uuid"], [uuid])]}))
    started = time.monotonic()
    waits.wait_until("the untolerated claim to be allocated", lambda: api.resource.read_namespaced_resource_claim(
        "gpu-untolerated", ns), lambda c: bool(c.status and c.status.allocation), timeout=30)
    result = diagnosed(api, ns, "untolerated", "claim gpu-untolerated was allocated", "device-taints-ignored",
                       time.monotonic() - started)
    assert result.code == "device-tainted", result
    assert "gpu.nvidia.com/xid=79:NoSchedule" in result.reason and f"{ns}/gpu-untolerated" in result.reason


def test_mig_counters_ignored(dg_beds, dg_namespaces):
    """MIG devices published without consumesCounters: the real scheduler gives a MIG device of a
    GPU another claim holds whole; the diagnosis reads that from the claims' results and the
    devices' parentUUID and uuid (allocation.judge's partition-overlap)."""
    from draconf import manifests, mig
    api = dg_beds.get("mig-counters-ignored")
    parent = sorted({mig.parent_of(d) for d in PublishedDevices.read(api, DRIVER) if mig.is_mig(d)})[0]
    ns = dg_namespaces(api, "w")
    deploy(api, ns, MigWorkload("mig", ["features/62-mig-whole-gpu.yaml"], 1, selectors={
        "gpu-whole": [sel.uuid_in(PROFILE.domain, PROFILE.attributes["uuid"], [parent])]})).wait_running()
    manifests.create(api, ns, MigWorkload("mig", ["features/63-mig-on-whole-gpu.yaml"], 1,
                                              profiles={"mig": "1g.10gb"}, parent=parent).documents(PROFILE),
                     RUN.labels)
    started = time.monotonic()
    waits.wait_until("the MIG claim to be allocated", lambda: api.resource.read_namespaced_resource_claim(
        "mig-on-whole-gpu", ns), lambda c: bool(c.status and c.status.allocation), timeout=30)
    result = diagnosed(api, ns, "exclusive", "claim mig-on-whole-gpu was allocated", "mig-counters-ignored",
                       time.monotonic() - started)
    assert result.code == "partition-overlap", result
    assert f"a partition of GPU {parent}) is allocated to mig-on-whole-gpu while gpu-whole" in result.reason


def test_mig_parent_mislabelled(dg_beds, dg_namespaces):
    """MIG devices of 2g and larger published under the next GPU's UUID: gpu-test4 is allocated
    across two GPUs under one parentUUID; the diagnosis reads, in the containers' nvidia-smi -L,
    the GPU whose counter set a device consumes where its parentUUID names another."""
    api = dg_beds.get("mig-parent-mislabelled")
    ns = dg_namespaces(api, "w")
    started = time.monotonic()
    deploy(api, ns, MigWorkload("mig", ["features/61-mig-same-parent.yaml"], 1, profiles={
        "mig-1g-0": "1g.10gb", "mig-1g-1": "1g.10gb", "mig-2g": "2g.20gb", "mig-3g": "3g.40gb"})).wait_running()
    # As test_mig_devices_share_their_parent words it (the rule does not read it).
    result = diagnosed(api, ns, "same-parent", "the containers do not see their MIG devices: ctr2 (request "
                       "mig-2g): nvidia-smi -L lists GPU(s) GPU-x, not the parent GPU-y", "mig-parent-mislabelled",
                       time.monotonic() - started)
    assert result.code == "inventory-mismatch", result
    assert "published with parentUUID GPU-" in result.reason and "-counter-set" in result.reason


# --- faults on the node side ----------------------------------------------------------------

def test_plugin_unhealthy(dg_beds, dg_namespaces):
    api = dg_beds.get("plugin-unhealthy")
    # The cluster this diagnoses: plugins that crash and are restarted.  Right after the bed is
    # up they may still be starting (ContainerCreating), which is not yet that cluster.
    restarts = lambda: [sum(cs.restart_count for cs in p.status.container_statuses or [])  # noqa: E731
                        for p in api.core.list_namespaced_pod(nvidia.PLUGIN_NAMESPACE).items]
    waits.wait_until("every kubelet plugin to have crashed and been restarted", restarts,
                     lambda counts: counts and min(counts) >= 2, timeout=120,
                     describe=lambda counts: f"restarts per plugin pod: {counts}")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    error, took = failure_of(workload.wait_running)
    # As test_cdi_injection reports it when the workload never started.
    result = diagnosed(api, ns, "cdi-injection", f"injection cannot be checked: {error}",
                       "plugin-unhealthy", took)
    assert result.code == "plugin-unhealthy", result
    evidence = result.evidence["kubelet-plugin"]
    # Between crashes a restarted plugin is briefly Running (not ready) rather than in
    # CrashLoopBackOff, so the evidence is judged on what holds in both: not ready, restarted,
    # and the log line saying why it crashed.
    assert "not ready" in evidence and " restarts" in evidence, evidence
    assert "--- log tail of gpu-operator/" in evidence
    assert "Driver/library version mismatch" in evidence, evidence


@pytest.mark.parametrize("fault", ["cdi-not-injected", "cdi-wrong-device"])
def test_cdi_fault(fault, dg_beds, dg_namespaces):
    """The bed's fault and the diagnosis code share a name for both CDI faults."""
    api = dg_beds.get(fault)
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    workload.wait_running()
    published = PublishedDevices.read(api, DRIVER)
    error, took = failure_of(lambda: workload.check_injection(published))
    result = diagnosed(api, ns, "cdi-injection", error, fault, took)
    assert result.code == fault, result


def sharing_workload(name: str, manifest: str, pods: int, node: str | None = None) -> Workload:
    return Workload(name, [f"features/{manifest}"], expected_pods=pods, node=node)


def test_sharing_gates_off(dg_beds, dg_namespaces):
    """The chart's default featureGates: the driver refuses gpu-test5's sharing configs."""
    api = dg_beds.get("sharing-gates-off")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, sharing_workload("gpu-sharing", "47-gpu-sharing.yaml", 1, node="gpu-h100-0"))
    error, took = failure_of(workload.wait_running)
    # As test_sharing reports it when the workload never started.
    result = diagnosed(api, ns, "sharing", f"the sharing workload never ran: {error}", "sharing-gates-off", took)
    assert result.code == "config-rejected", result
    assert "TimeSlicingSettings feature gate" in result.reason


def test_invalid_sharing_config_on_a_healthy_bed(dg_beds, dg_namespaces):
    """48-gpu-sharing-invalid.yaml: the healthy driver refuses both configs; the pods' standing
    state is diagnosed from the driver's FailedPrepareDynamicResources message."""
    api = dg_beds.get(None)
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, sharing_workload("gpu-sharing", "48-gpu-sharing-invalid.yaml", 2))
    error, took = failure_of(workload.wait_running)
    result = diagnosed(api, ns, "invalid-config", error, None, took)
    assert result.code == "config-rejected", result
    assert "strict decoding error" in result.reason or 'sharing strategy "Exclusive"' in result.reason


def test_claims_not_released(dg_beds, dg_namespaces):
    api = dg_beds.get("claims-not-released")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    (pod,) = workload.wait_running()
    published = PublishedDevices.read(api, DRIVER)
    error, took = failure_of(lambda: workload.check_cleanup(published, lambda devices: []))
    result = diagnosed(api, ns, "cleanup", error, "claims-not-released", took)
    assert result.code == "claim-not-released", result
    if inventory.load(inventory.GUIDE_INVENTORY).node(pod.node).kind == "real":
        # The kubelet's NodeUnprepareResources fails: the pod is never finished, the claim stays.
        assert "never finished" in result.reason and "still reserved" in result.reason, result
    else:
        assert "gpu.nvidia.com/unprepare-pending" in result.reason


# --- control-plane and operator faults --------------------------------------------------------

def test_quota_not_enforced(dg_beds, dg_namespaces):
    api = dg_beds.get("quota-not-enforced")
    ns = dg_namespaces(api, "q")
    key = "count/resourceclaims.resource.k8s.io"
    api.core.create_namespaced_resource_quota(ns, {
        "metadata": {"name": "one-claim"}, "spec": {"hard": {key: "1"}}})
    waits.wait_until("the quota to be counted", lambda: api.core.read_namespaced_resource_quota(
        "one-claim", ns).status, lambda s: s is not None and s.used is not None, timeout=30)
    for i in range(2):  # the second is beyond the quota, but no admission plugin stops it
        api.resource.create_namespaced_resource_claim(ns, {
            "metadata": {"name": f"claim-{i}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}})
    error = AssertionError(f"the ResourceQuota allows 1 claim ({key}=1) but the API server "
                           "admitted a second one")
    result = diagnosed(api, ns, None, error, "quota-not-enforced")
    assert result.code == "quota-not-enforced", result


def test_clusterpolicy_conflict(dg_beds, dg_namespaces):
    api = dg_beds.get("clusterpolicy-conflict")
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    (pod,) = workload.wait_running()
    # A ClusterPolicy whose device plugin offers nothing on the pod's node explains nothing.
    result = diagnosed(api, ns, None, AssertionError("GPU Operator footprint is inconsistent"),
                       "clusterpolicy-conflict: no nvidia.com/gpu")
    assert result.code != "policy-conflict", result
    # What the ClusterPolicy's device plugin does on a GPU node: offer nvidia.com/gpu
    # (the documented way to advertise an extended resource is this status patch).
    patch = lambda value: api.core.patch_node_status(pod.node, [  # noqa: E731
        {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": value}])
    patch("4")
    try:
        waits.wait_until("the node to offer nvidia.com/gpu", lambda: api.core.read_node(pod.node).status.allocatable,
                         lambda a: (a or {}).get("nvidia.com/gpu") == "4", timeout=30)
        result = diagnosed(api, ns, None, AssertionError("GPU Operator footprint is inconsistent"),
                           "clusterpolicy-conflict")
        assert result.code == "policy-conflict", result
        assert pod.node in result.reason and "nvidia.com/gpu" in result.reason, result
    finally:
        api.core.patch_node_status(pod.node, [{"op": "remove", "path": "/status/capacity/nvidia.com~1gpu"}])


# --- a healthy bed: failures the workload brings itself, and no false alarm -----------------

def test_selector_matching_nothing(dg_beds, dg_namespaces):
    api = dg_beds.get(None)
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, Workload("model-selected", ["02-model-selected.yaml"], expected_pods=1,
                                        selectors={"h100-gpu": [sel.model(DRIVER, "productName", "NVIDIA B200")]}))
    error, took = failure_of(workload.wait_running)
    result = diagnosed(api, ns, "allocation", error, "healthy: B200 selector", took)
    assert result.code == "selector-unmatched", result


def test_every_matching_gpu_taken(dg_beds, dg_namespaces):
    api = dg_beds.get(None)
    h200_pair = lambda: Workload("two-gpu", ["05-two-gpus.yaml"], expected_pods=1,  # noqa: E731
                                 selectors={"two-gpus": [sel.model(DRIVER, "productName", "NVIDIA H200")]})
    first = deploy(api, dg_namespaces(api, "first"), h200_pair())
    first.wait_running()
    ns = dg_namespaces(api, "second")
    second = deploy(api, ns, h200_pair())
    error, took = failure_of(second.wait_running)
    result = diagnosed(api, ns, "allocation", error, "healthy: both H200 taken", took)
    assert result.code == "capacity-exhausted", result
    assert first.namespace in result.reason


def test_an_image_the_nodes_cannot_pull(dg_beds, dg_namespaces):
    """A real node has no registry to pull from: the wait ends at once and names the image."""
    api = dg_beds.get(None)
    ns = dg_namespaces(api, "w")
    workload = DeployedWorkload.deploy(api, ns, single_gpu(), dataclasses.replace(PROFILE, image="ubuntu:24.04"),
                                       RUN.labels)
    # While it waits, progress lines show what the kubelet is doing with the image.
    waits.wait_until("the pull to show in the workload's progress line", workload.describe,
                     lambda line: 'image "ubuntu:24.04"' in line and "last event: " in line, timeout=20)
    error, took = failure_of(workload.wait_running)
    assert ended_on_a_verdict(error) and "cannot pull its image" in str(error), error
    result = diagnosed(api, ns, "allocation", error, None, took)
    assert result.code == "image-pull-failed" and "ubuntu:24.04" in result.reason, result


def test_healthy_workload_gives_no_false_alarm(dg_beds, dg_namespaces):
    api = dg_beds.get(None)
    ns = dg_namespaces(api, "w")
    workload = deploy(api, ns, single_gpu())
    workload.wait_running()
    result = diagnosed(api, ns, "allocation", AssertionError("something else went wrong"), "healthy")
    assert result.code == "timeout", result
    assert "Running" in result.reason


def test_api_server_unreachable():
    # No bed needed: a port nothing listens on is what a stopped API server looks like.
    from kubernetes import client
    from draconf.kube import Api
    api = Api(client.ApiClient(client.Configuration(host=f"https://127.0.0.1:{processes.free_ports(1)[0]}")))
    result = diagnosed(api, "any", "allocation", AssertionError("boom"), "no API server")
    assert result.code == "api-unavailable", result
