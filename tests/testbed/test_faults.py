"""Each test bed fault produces the symptom a real broken cluster shows, through the real API.

One bed per fault; the assertions read what a user would read (scheduler messages, events,
exec output, objects that should or should not exist).
"""

from __future__ import annotations

import os
import time

import pytest
from kubernetes.client.exceptions import ApiException

from draconf import capabilities, namespaces, selectors, waits
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.pods import delete_pods, exec_in_container, parse_nvidia_smi_uuids
from draconf.profile import builtin, for_target
from draconf.testbed import agent, driver_objects, faults, inventory, nvidia
from draconf.workload import DeployedWorkload, Workload
from draconf.scenarios.mig import MigWorkload

#: CI's choice (.ci/run): every fault's matrix row starts a bed with that fault in the same run;
#: the symptom tests' own beds (25, about 5 minutes) are for local runs (docs/fault-matrix.md).
SKIP_SYMPTOMS = os.environ.get("DRACONF_SKIP_FAULT_SYMPTOMS") == "1"


@pytest.fixture(autouse=True)
def _symptoms_left_to_local_runs(request):
    if SKIP_SYMPTOMS and "start_fault_bed" in request.fixturenames:
        pytest.skip("DRACONF_SKIP_FAULT_SYMPTOMS=1 (CI): this fault's matrix row runs on a bed with it")


PROFILE = for_target(builtin("nvidia"), "testbed")
#: The default fleet's GPU nodes are real: a fault then acts in the real plugin and runtime.
REAL_NODES = all(n.kind == "real" for n in inventory.load(inventory.GUIDE_INVENTORY).gpu_nodes)
RUN = namespaces.RunId("selftest")
SINGLE = Workload("single-gpu", ["01-single-gpu.yaml"], 1)


def deploy(api, workload=SINGLE):
    ns = namespaces.create(api, RUN, workload.name)
    return DeployedWorkload.deploy(api, ns, workload, PROFILE)


def pending_reason(deployed, timeout=20) -> str:
    pod = waits.wait_until("an unschedulable verdict", lambda: deployed.pods()[0],
                           lambda p: bool(p.unschedulable_message), timeout=timeout,
                           describe=lambda p: p.summary())
    return pod.unschedulable_message


def test_every_fault_is_covered_here():
    tested = {name[len("test_"):].replace("_", "-") for name in globals() if name.startswith("test_")}
    tested |= set(nvidia.ONE_NODE_FAULTS)  # one test, parametrized over both
    assert set(faults.FAULTS) <= tested


def test_missing_deviceclass(start_fault_bed):
    bed, api = start_fault_bed("missing-deviceclass")
    assert "gpu.nvidia.com" not in {c.metadata.name for c in api.resource.list_device_class().items}
    assert "device class gpu.nvidia.com does not exist" in pending_reason(deploy(api))


def test_no_resourceslices(start_fault_bed):
    bed, api = start_fault_bed("no-resourceslices")
    # A plugin that finds no GPU publishes its pool with no device in it (or nothing at all).
    assert [d for s in api.resource.list_resource_slice().items for d in s.spec.devices or []] == []
    assert "cannot allocate all claims" in pending_reason(deploy(api))


def test_attribute_drift(start_fault_bed):
    bed, api = start_fault_bed("attribute-drift")
    published = PublishedDevices.read(api, "gpu.nvidia.com")
    assert len(published) == 8 and not any(d.has_attribute("productName") for d in published)
    h100 = Workload("model", ["02-model-selected.yaml"], 1,
                    selectors={"h100-gpu": [selectors.model("gpu.nvidia.com", "productName", "h100")]})
    reason = pending_reason(deploy(api, h100))
    assert "cannot allocate all claims" in reason or "no such key" in reason


def test_cdi_not_injected(start_fault_bed):
    bed, api = start_fault_bed("cdi-not-injected")
    deployed = deploy(api)
    (pod,) = deployed.wait_running(timeout=30)
    assert Claim.read(api, pod.namespace, pod.generated_claim_names()[0]).is_allocated
    out = exec_in_container(api, pod.namespace, pod.name, "workload", ["nvidia-smi", "-L"])
    assert out.exit_code == 127 and parse_nvidia_smi_uuids(out.stdout) == []


def test_cdi_wrong_device(start_fault_bed):
    bed, api = start_fault_bed("cdi-wrong-device")
    deployed = deploy(api)
    (pod,) = deployed.wait_running(timeout=30)
    (result,) = Claim.read(api, pod.namespace, pod.generated_claim_names()[0]).results
    allocated = PublishedDevices.read(api, "gpu.nvidia.com").lookup(result.driver, result.pool, result.device)
    seen = parse_nvidia_smi_uuids(
        exec_in_container(api, pod.namespace, pod.name, "workload", ["nvidia-smi", "-L"]).stdout)
    assert len(seen) == 1 and seen != [allocated.attribute("uuid")]
    assert seen[0] in PublishedDevices.read(api, "gpu.nvidia.com").by_uuid("uuid")


@pytest.mark.skipif(not REAL_NODES, reason="the flake is the real nodes' nvidia-smi under CDI")
def test_exec_flaky(start_fault_bed):
    bed, api = start_fault_bed("exec-flaky")
    deployed = deploy(api)
    (pod,) = deployed.wait_running(timeout=30)
    first, second = (exec_in_container(api, pod.namespace, pod.name, "workload", ["nvidia-smi", "-L"])
                     for _ in range(2))
    assert first.exit_code == 255 and "Failed to initialize NVML: Unknown Error" in first.stdout, first.describe()
    (result,) = Claim.read(api, pod.namespace, pod.generated_claim_names()[0]).results
    allocated = PublishedDevices.read(api, "gpu.nvidia.com").lookup(result.driver, result.pool, result.device)
    assert second.succeeded and parse_nvidia_smi_uuids(second.stdout) == [allocated.attribute("uuid")]


def test_claims_not_released(start_fault_bed):
    bed, api = start_fault_bed("claims-not-released")
    deployed = deploy(api)
    (pod,) = deployed.wait_running(timeout=30)
    (claim_name,) = pod.generated_claim_names()
    delete_pods(api, pod.namespace, pod.name)
    if REAL_NODES:
        # The kubelet cannot unprepare, so it never finishes deleting the pod: pod and claim stay.
        time.sleep(5)  # a healthy bed removes pod and claim well within this
        (stuck,) = deployed.pods()
        claim = Claim.read(api, pod.namespace, claim_name)
        assert stuck.is_deleting and claim.is_allocated and pod.uid in claim.reserved_for_uids
        return
    waits.wait_until("the pod to be gone", deployed.pods, lambda pods: not pods, timeout=30)
    time.sleep(3)  # the resourceclaim controller deletes a healthy bed's claim well within this
    claim = Claim.read(api, pod.namespace, claim_name)
    assert claim.is_deleting and agent.UNPREPARE_FINALIZER in claim.finalizers


def test_quota_not_enforced(start_fault_bed):
    bed, api = start_fault_bed("quota-not-enforced")
    ns = namespaces.create(api, RUN, "quota")
    api.core.create_namespaced_resource_quota(ns, {
        "metadata": {"name": "no-gpus"},
        "spec": {"hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "0"}}})
    claim = {"metadata": {"name": "over-quota"}, "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    api.resource.create_namespaced_resource_claim(ns, claim)  # admitted: nothing enforces the cap


def test_quota_is_enforced_on_a_healthy_bed(api):
    """The twin of test_quota_not_enforced: proves that test asserts a real difference."""
    ns = namespaces.create(api, RUN, "quota")
    try:
        api.core.create_namespaced_resource_quota(ns, {
            "metadata": {"name": "no-gpus"},
            "spec": {"hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "0"}}})
        claim = {"metadata": {"name": "over-quota"}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
        with pytest.raises(ApiException):
            waits.wait_until("the quota to reject a claim", lambda: _try_create(api, ns, claim),
                             lambda rejected: rejected is not None, timeout=20)
            raise AssertionError("unreachable")
    except waits.WaitFailed:
        pytest.fail("a DeviceClass quota of 0 never rejected a claim")
    finally:
        namespaces.delete(api, ns)


def _try_create(api, ns, claim):
    try:
        api.resource.create_namespaced_resource_claim(ns, claim)
    except ApiException as err:
        if err.status == 403 and "exceeded quota" in str(err.body):
            raise
        return None
    api.resource.delete_namespaced_resource_claim(claim["metadata"]["name"], ns)
    return None


def test_clusterpolicy_conflict(start_fault_bed):
    bed, api = start_fault_bed("clusterpolicy-conflict")
    policies = api.custom.list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies")["items"]
    clusters = api.custom.list_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters")["items"]
    assert policies and clusters


def test_plugin_unhealthy(start_fault_bed):
    bed, api = start_fault_bed("plugin-unhealthy")
    if REAL_NODES:
        # The plugin exits at start: the kubelet restarts it, it never registers or publishes.
        plugin = waits.wait_until(
            "every plugin pod to have crashed", lambda: api.core.list_namespaced_pod(nvidia.PLUGIN_NAMESPACE).items,
            lambda pods: pods and all(p.status.container_statuses and p.status.container_statuses[0].restart_count
                                      for p in pods), timeout=30)
        assert not [d for s in api.resource.list_resource_slice().items for d in s.spec.devices or []]
        assert "cannot allocate all claims" in pending_reason(deploy(api))
        return
    plugin = api.core.list_namespaced_pod(nvidia.PLUGIN_NAMESPACE).items
    assert plugin and all(p.status.container_statuses[0].state.waiting.reason == "CrashLoopBackOff"
                          for p in plugin)
    deployed = deploy(api)
    waits.wait_until("a FailedPrepareDynamicResources event", deployed.events,
                     lambda events: any("FailedPrepareDynamicResources" in e for e in events), timeout=20)
    (pod,) = deployed.pods()
    assert pod.node and pod.phase == "Pending"
    assert Claim.read(api, pod.namespace, pod.generated_claim_names()[0]).is_allocated


def test_gpu_nodes_tainted(start_fault_bed):
    bed, api = start_fault_bed("gpu-nodes-tainted")
    assert "untolerated taint" in pending_reason(deploy(api))


def test_extended_resource_off(start_fault_bed):
    bed, api = start_fault_bed("extended-resource-off")
    assert api.resource.read_device_class("gpu.nvidia.com").spec.extended_resource_name == "nvidia.com/gpu"
    extres = Workload("extended-resource", ["features/40-extended-resource.yaml"], 1, extended_resources=True)
    assert "Insufficient nvidia.com/gpu" in pending_reason(deploy(api, extres))


def test_prioritized_list_off(start_fault_bed):
    bed, api = start_fault_bed("prioritized-list-off")
    prio = Workload("prioritized-list", ["features/41-prioritized-list.yaml"], 1)
    assert "DRAPrioritizedList feature is disabled" in pending_reason(deploy(api, prio))


def test_scheduler_without_dra(start_fault_bed):
    """The pod is bound at once, its generated claim never allocated; and the workload's
    verdict says so within seconds, where it used to wait out the running timeout."""
    bed, api = start_fault_bed("scheduler-without-dra")
    deployed = deploy(api)
    (pod,) = waits.wait_until("the pod to be bound", deployed.pods, lambda pods: pods and pods[0].node,
                              timeout=20, describe=lambda pods: deployed.describe(pods))
    claims = deployed.claims()
    assert claims and not any(c.is_allocated for c in claims.values())
    with pytest.raises(waits.WaitFailed, match="bound to .* with its claims unallocated"):
        deployed.wait_running(timeout=30)


def test_resource_api_partial(start_fault_bed):
    bed, api = start_fault_bed("resource-api-partial")
    served = {r.name for r in api.resource.get_api_resources().resources}
    assert "resourceclaims" in served and "resourceclaimtemplates" not in served


def test_gpu_cluster_not_ready(start_fault_bed):
    bed, api = start_fault_bed("gpu-cluster-not-ready")
    gpucluster = api.custom.get_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster")
    assert gpucluster["status"]["state"] == "notReady"
    # The bed counts as up once every plugin pod is Ready: the operator's verdict is its own.
    plugin = api.apps.read_namespaced_daemon_set(nvidia.PLUGIN_DAEMONSET, nvidia.PLUGIN_NAMESPACE).status
    assert plugin.desired_number_scheduled and plugin.number_ready == plugin.desired_number_scheduled, plugin


def test_admin_access_exclusive(start_fault_bed):
    if not REAL_NODES:
        pytest.skip("the fault acts in the real kubelet plugin; the default fleet has no real GPU node")
    bed, api = start_fault_bed("admin-access-exclusive")
    holder = deploy(api, Workload("admin-access", ["features/42-gpu-in-use.yaml"], 1))
    api.core.patch_namespace(holder.namespace, {"metadata": {"labels": {driver_objects.ADMIN_ACCESS_LABEL: "true"}}})
    holder.wait_running()
    (device,) = Claim.read(api, holder.namespace, "gpu-in-use").results
    uuid = PublishedDevices.read(api, PROFILE.driver).lookup(device.driver, device.pool, device.device) \
        .attribute(PROFILE.attributes["uuid"])
    monitor = DeployedWorkload.deploy(api, holder.namespace, Workload(
        "admin-monitor", ["features/43-admin-access-monitor.yaml"], 1,
        selectors={"gpu-monitor": [selectors.uuid_in(PROFILE.domain, PROFILE.attributes["uuid"], [uuid])]}),
        PROFILE)
    events = waits.wait_until(
        "the monitor's FailedPrepareDynamicResources event", monitor.events,
        lambda events: any("FailedPrepareDynamicResources" in e and "is held by claim" in e
                           for e in events), timeout=30)
    assert Claim.read(api, holder.namespace, "gpu-monitor").results[0].admin_access, events


def test_admin_access_everywhere(start_fault_bed):
    bed, api = start_fault_bed("admin-access-everywhere")
    ns = namespaces.create(api, RUN, "unlabelled")
    assert (api.core.read_namespace(ns).metadata.labels or {}).get(driver_objects.ADMIN_ACCESS_LABEL) == "true"
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "monitor"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "adminAccess": True}}]}}}
    created = api.resource.create_namespaced_resource_claim(ns, claim)
    assert created.spec.devices.requests[0].exactly.admin_access


def test_sharing_config_ignored(start_fault_bed):
    if not REAL_NODES:
        pytest.skip("the fault acts in the real kubelet plugin; the default fleet has no real GPU node")
    bed, api = start_fault_bed("sharing-config-ignored")
    # An invalid config is not even read: both pods run.
    deployed = deploy(api, Workload("gpu-sharing", ["features/48-gpu-sharing-invalid.yaml"], 2))
    pods = deployed.wait_running(timeout=60)
    assert sorted(p.name for p in pods) == ["bad-field", "bad-strategy"]
    # A valid TimeSlicing config is not applied: the GPU keeps the default time slice.
    (device,) = Claim.read(api, deployed.namespace, "bad-field").results
    out = exec_in_container(api, deployed.namespace, "bad-field", "workload",
                            ["nvidia-smi", "compute-policy", "-l"])
    assert out.succeeded and "Long" not in out.stdout and "Default" in out.stdout, out.describe()


def test_sharing_gates_off(start_fault_bed):
    if not REAL_NODES:
        pytest.skip("the fault acts in the real kubelet plugin; the default fleet has no real GPU node")
    bed, api = start_fault_bed("sharing-gates-off")
    ds = api.apps.read_namespaced_daemon_set(nvidia.PLUGIN_DAEMONSET, nvidia.PLUGIN_NAMESPACE)
    env = {e.name for e in ds.spec.template.spec.containers[0].env}
    assert "FEATURE_GATES" not in env  # the chart renders none for featureGates: {}
    deployed = deploy(api, Workload("gpu-sharing", ["features/47-gpu-sharing.yaml"], 1, node="gpu-h100-0"))
    events = waits.wait_until(
        "the driver's refusal of the TimeSlicing config", deployed.events,
        lambda events: any("FailedPrepareDynamicResources" in e and "feature gate" in e
                           for e in events), timeout=60)
    assert any('sharing strategy "TimeSlicing" needs the TimeSlicingSettings feature gate' in e
               for e in events), events
    # The suite reads the same from the plugin's pods: GPU sharing is not offered here (a skip
    # naming both gates; a failure only where the run expects it).
    capability, nodes = capabilities.gpu_sharing(api, PROFILE, PublishedDevices.read(api, PROFILE.driver).devices)
    assert not capability.available and nodes == [], capability
    assert "TimeSlicingSettings (not set: off by default)" in capability.evidence
    assert "MPSSupport (not set: off by default)" in capability.evidence


def test_mps_daemon_fails(start_fault_bed):
    if not REAL_NODES:
        pytest.skip("the fault acts in the real kubelet plugin; the default fleet has no real GPU node")
    bed, api = start_fault_bed("mps-daemon-fails")
    deployed = deploy(api, Workload("gpu-sharing", ["features/47-gpu-sharing.yaml"], 1, node="gpu-h100-0"))
    # The plugin created the daemon, pinned to the node, but its container exits at once ...
    daemons = waits.wait_until(
        "the MPS control daemon's Deployment",
        lambda: api.apps.list_namespaced_deployment(nvidia.PLUGIN_NAMESPACE).items,
        lambda items: any(d.metadata.name.startswith("mps-control-daemon-") for d in items), timeout=60)
    (daemon,) = [d for d in daemons if d.metadata.name.startswith("mps-control-daemon-")]
    assert daemon.spec.template.spec.node_name == "gpu-h100-0"
    assert not daemon.status.ready_replicas
    # ... so preparation fails naming the daemon as not ready, and the pod never starts.
    events = waits.wait_until(
        "the driver's refusal to prepare without a ready MPS daemon", deployed.events,
        lambda events: any("FailedPrepareDynamicResources" in e and
                           f"MPS control daemon {daemon.metadata.name} is not ready" in e
                           for e in events), timeout=90)
    assert not any(p.is_running for p in deployed.pods()), events


def test_device_taints_ignored(start_fault_bed):
    bed, api = start_fault_bed("device-taints-ignored")
    from draconf import taints
    # The bed adds an unhealthy H100, which the plugin (the agent on KWOK nodes) publishes
    # tainted as the NVIDIA driver does.
    (device,) = taints.tainted_devices(taints.read_slices(api, PROFILE.driver))
    assert (device.node, device.name) == ("gpu-h100-0", "gpu-4")
    assert [taints.describe(t) for t in device.taints] == ["gpu.nvidia.com/xid=79:NoSchedule"]
    # kube-scheduler ignores the taint: the claim without a toleration gets the unhealthy GPU.
    claim = untolerated_claim_for(api, device)
    assert [r.key for r in claim.results] == [device.key]
    assert taints.untolerated(claim.raw, taints.read_slices(api, PROFILE.driver))



def untolerated_claim_for(api, device) -> Claim:
    """46-device-taint-untolerated.yaml asking for ``device`` (a published or tainted device:
    ``attributes`` by qualified name) by uuid, without a toleration: its
    claim once allocated (on these beds something ignores the device's taint)."""
    uuid = device.attributes[f"{PROFILE.domain}/{PROFILE.attributes['uuid']}"]
    untolerated = Workload("device-taints", ["features/46-device-taint-untolerated.yaml"], 1, selectors={
        "gpu-untolerated": [selectors.uuid_in(PROFILE.domain, PROFILE.attributes["uuid"], [uuid])]})
    deployed = deploy(api, untolerated)
    return waits.wait_until("the untolerated claim to be allocated",
                            lambda: Claim.read(api, deployed.namespace, "gpu-untolerated"),
                            lambda c: c.is_allocated, timeout=30, describe=lambda c: c.summary())


def _taint_rule(api, name: str, key: str, effect: str) -> None:
    """A DeviceTaintRule tainting the device ``key`` (driver/pool/device), as an admin writes one."""
    driver, pool, device = key.split("/")
    api.resource_beta.create_device_taint_rule({
        "apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "metadata": {"name": name},
        "spec": {"deviceSelector": {"driver": driver, "pool": pool, "device": device},
                 "taint": {"key": "example.com/gpu-maintenance", "effect": effect}}})


def _rule(api, name: str) -> dict:
    return api.api_client.sanitize_for_serialization(api.resource_beta.read_device_taint_rule(name))


def test_device_taint_rules_ignored(start_fault_bed):
    bed, api = start_fault_bed("device-taint-rules-ignored")
    from draconf import taints
    device = sorted(PublishedDevices.read(api, PROFILE.driver), key=lambda d: d.key)[0]
    _taint_rule(api, "selftest-ruled", device.key, "NoSchedule")
    # The API server serves the rule and kube-controller-manager reads it (it writes the status)...
    rule = waits.wait_until("the rule's status", lambda: _rule(api, "selftest-ruled"),
                            lambda r: taints.rule_condition(r) is not None, timeout=20,
                            describe=taints.describe_rule)
    assert taints.rule_condition(rule)["reason"] == "OtherEffect"
    # ...kube-scheduler does not: the claim without a toleration gets the ruled GPU.
    claim = untolerated_claim_for(api, device)
    assert [r.key for r in claim.results] == [device.key]


def test_device_taint_eviction_off(start_fault_bed):
    bed, api = start_fault_bed("device-taint-eviction-off")
    from draconf import taints
    from draconf.pods import Pod
    drained = Workload("device-taint-rule", ["features/51-gpu-drained.yaml"], 2)
    deployed = deploy(api, drained)
    deployed.wait_running()
    pod = Pod.read(api, deployed.namespace, "gpu-drained")
    (result,) = Claim.read(api, deployed.namespace, "gpu-drained").results
    _taint_rule(api, "selftest-drain", result.key, "NoExecute")
    # The scheduler applies the taint (no new claim gets the GPU), but nothing evicts: 15 s on,
    # the pod still runs on it and no controller has written the rule's status.
    time.sleep(15)
    after = Pod.read(api, deployed.namespace, "gpu-drained")
    assert after.uid == pod.uid and after.is_running and not after.is_deleting, after.summary()
    assert taints.rule_condition(_rule(api, "selftest-drain")) is None


def _mig_devices(api):
    from draconf import mig
    return [d for d in PublishedDevices.read(api, PROFILE.driver) if mig.is_mig(d)]


@pytest.mark.skipif(not REAL_NODES, reason="MIG devices are published on real nodes only")
def test_mig_unpublished(start_fault_bed):
    """The bed turns DynamicMIG on; the plugin publishes each MIG-capable GPU whole, with its
    counter set, and none of its MIG devices."""
    bed, api = start_fault_bed("mig-unpublished")
    slices = [api.api_client.sanitize_for_serialization(s) for s in
              api.resource.list_resource_slice(field_selector=f"spec.driver={PROFILE.driver}").items]
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    assert not [d for d in devices if d["attributes"]["type"]["string"] == "mig"]
    assert any(d.get("consumesCounters") for d in devices)  # the GPUs still count theirs


def test_mig_counters_ignored(start_fault_bed):
    """The bed turns DynamicMIG on; the plugin publishes MIG devices without consumesCounters,
    so the scheduler gives a GPU held whole and a MIG device of it to two claims."""
    from draconf import mig
    bed, api = start_fault_bed("mig-counters-ignored")
    slices = [api.api_client.sanitize_for_serialization(s) for s in
              api.resource.list_resource_slice(field_selector=f"spec.driver={PROFILE.driver}").items]
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    parts = [d for d in devices if d["attributes"]["type"]["string"] == "mig"]
    assert parts and not any(d.get("consumesCounters") for d in parts)
    assert any(s["spec"].get("sharedCounters") for s in slices)  # the GPUs still count theirs
    parent = sorted(mig.parent_of(d) for d in _mig_devices(api))[0]
    uuid = selectors.uuid_in(PROFILE.domain, PROFILE.attributes["uuid"], [parent])
    whole = deploy(api, MigWorkload("mig", ["features/62-mig-whole-gpu.yaml"], 1, selectors={"gpu-whole": [uuid]}))
    whole.wait_running()
    part = MigWorkload("mig", ["features/63-mig-on-whole-gpu.yaml"], 1, profiles={"mig": "1g.10gb"}, parent=parent)
    from draconf import manifests
    manifests.create(api, whole.namespace, part.documents(PROFILE), {})
    claim = waits.wait_until("the MIG claim to be allocated", lambda: Claim.read(api, whole.namespace, "mig-on-whole-gpu"),
                             lambda c: c.is_allocated, timeout=30, describe=lambda c: c.summary())
    assert claim.results[0].device.startswith(Claim.read(api, whole.namespace, "gpu-whole").results[0].device + "-mig-")


@pytest.mark.skipif(not REAL_NODES, reason="MIG devices are prepared on real nodes only")
def test_mig_caps_missing(start_fault_bed):
    """DynamicMIG on, but the nodes have no /dev/nvidia-caps: a MIG claim is allocated and the
    node fails to prepare it, naming the capability node it cannot find."""
    bed, api = start_fault_bed("mig-caps-missing")
    assert _mig_devices(api)
    deployed = deploy(api, MigWorkload("mig", ["features/60-mig-by-profile.yaml"], 1, profiles={"mig": "1g.10gb"}))
    with pytest.raises(waits.WaitFailed, match="nvidia-caps"):
        deployed.wait_running(timeout=60)


@pytest.mark.skipif(not REAL_NODES, reason="MIG devices are published on real nodes only")
def test_mig_parent_mislabelled(start_fault_bed):
    """DynamicMIG on; the plugin publishes the MIG devices of 2g and larger under the next GPU's
    UUID.  gpu-test4 (1g, 1g, 2g, 3g under matchAttribute parentUUID) is allocated devices of
    one published parentUUID, and its containers list them under two GPUs."""
    from draconf import mig
    bed, api = start_fault_bed("mig-parent-mislabelled")
    published = PublishedDevices.read(api, PROFILE.driver)
    whole = {d.attribute("uuid"): d.name for d in published if d.attribute("type") == "gpu"}
    # gpu-<m>-mig-...: the name (like its counter set) still says which GPU it is carved from.
    wrong = [d for d in published if mig.is_mig(d) and whole.get(mig.parent_of(d)) != d.name.split("-mig-")[0]]
    assert wrong and all(mig.profile_of(d) != "1g.10gb" for d in wrong), [str(d) for d in wrong]
    deployed = deploy(api, MigWorkload("mig", ["features/61-mig-same-parent.yaml"], 1, profiles={
        "mig-1g-0": "1g.10gb", "mig-1g-1": "1g.10gb", "mig-2g": "2g.20gb", "mig-3g": "3g.40gb"}))
    deployed.wait_running(timeout=60)
    (pod,) = deployed.pods()
    (claim,) = deployed.claims().values()
    parents = {mig.parent_of(published.lookup(r.driver, r.pool, r.device)) for r in claim.results}
    assert len(parents) == 1, parents  # the scheduler kept the constraint, by the labels
    listed = {mig.parse_list(exec_in_container(api, pod.namespace, pod.name, c, ["nvidia-smi", "-L"]).stdout)[0].uuid
              for c in pod.containers}
    assert len(listed) == 2 and parents < listed, (parents, listed)


def _refusals(api, pod) -> list[str]:
    return [e.message for e in api.core.list_namespaced_event(pod.namespace).items
            if e.reason == "FailedPrepareDynamicResources" and e.involved_object.name == pod.name]


def test_prepare_refused(start_fault_bed):
    """Allocated, bound, and the node's plugin refuses to prepare: the pod never starts, the
    kubelet says why."""
    bed, api = start_fault_bed("prepare-refused")
    deployed = deploy(api)
    pod = waits.wait_until("the node to refuse the claim", lambda: deployed.pods()[0],
                           lambda p: bool(p.node and _refusals(api, p)), timeout=60, describe=lambda p: p.summary())
    assert not pod.is_running
    assert Claim.read(api, pod.namespace, pod.generated_claim_names()[0]).is_allocated
    assert "cannot prepare claim" in _refusals(api, pod)[-1]


#: 01-single-gpu.yaml's claim template
TEMPLATE = "single-gpu"


@pytest.mark.skipif(not REAL_NODES, reason="the kept device is the real plugin's record of it")
def test_unprepare_keeps_device(start_fault_bed):
    """Unprepare reports success, the claim is released, and the same GPU is then refused to the
    next claim: the node still holds it."""
    bed, api = start_fault_bed("unprepare-keeps-device")
    first = deploy(api)
    (pod,) = first.wait_running(timeout=30)
    (result,) = Claim.read(api, pod.namespace, pod.generated_claim_names()[0]).results
    delete_pods(api, pod.namespace, pod.name)
    waits.wait_until("the pod to be gone", first.pods, lambda pods: not pods, timeout=60)
    uuid = PublishedDevices.read(api, "gpu.nvidia.com").lookup(result.driver, result.pool, result.device).attribute("uuid")
    again = deploy(api, Workload("single-gpu-again", ["01-single-gpu.yaml"], 1,
                                 selectors={TEMPLATE: [selectors.uuid_in(PROFILE.domain, "uuid", [uuid])]}))
    pod = waits.wait_until("the node to refuse the freed GPU", lambda: again.pods()[0],
                           lambda p: bool(p.node and _refusals(api, p)), timeout=60, describe=lambda p: p.summary())
    assert not pod.is_running and "held by claim" in _refusals(api, pod)[-1]


def test_claims_stripped(start_fault_bed):
    """The admin's policy removes the claims of pods in the suite's namespaces: the pod runs,
    asking for no device."""
    bed, api = start_fault_bed("claims-stripped")
    deployed = deploy(api)
    (pod,) = deployed.wait_running(timeout=60)
    assert not pod.spec.get("resourceClaims")
    assert not any((c.get("resources") or {}).get("claims") for c in pod.spec["containers"])


def test_claim_count_lowered(start_fault_bed):
    """The admin's policy makes the suite's claims ask for one device: a pod written for two GPUs
    (05-two-gpus.yaml) runs with its generated claim asking for, and allocated, one."""
    bed, api = start_fault_bed("claim-count-lowered")
    deployed = deploy(api, Workload("two-gpu", ["05-two-gpus.yaml"], 1))
    (pod,) = deployed.wait_running(timeout=60)
    claim = Claim.read(api, pod.namespace, pod.generated_claim_names()[0])
    assert [r["exactly"]["count"] for r in claim.requests] == [1] and len(claim.results) == 1


@pytest.mark.skipif(not REAL_NODES, reason="the fault is the real plugin's, on one node")
@pytest.mark.parametrize("fault", ["one-node-refuses-prepare", "one-node-wrong-device", "one-gpu-bad"])
def test_one_node_faults_act_on_that_node_only(fault, start_fault_bed):
    bed, api = start_fault_bed(fault)
    ds = api.apps.read_namespaced_daemon_set(nvidia.PLUGIN_DAEMONSET, nvidia.PLUGIN_NAMESPACE)
    env = {e.name: e.value for e in ds.spec.template.spec.containers[0].env}
    assert env["SIMULATE_FAULTS_ON_NODES"] == nvidia.ONE_NODE and env["SIMULATE_FAULTS"] == nvidia.PLUGIN_FAULTS[fault]
    healthy = next(n.name for n in inventory.load(inventory.GUIDE_INVENTORY).gpu_nodes if n.name != nvidia.ONE_NODE)
    deployed = deploy(api, Workload("single-gpu", ["01-single-gpu.yaml"], 1, node=healthy))
    (pod,) = deployed.wait_running(timeout=30)  # the other nodes stay healthy
    (result,) = Claim.read(api, pod.namespace, pod.generated_claim_names()[0]).results
    allocated = PublishedDevices.read(api, "gpu.nvidia.com").lookup(result.driver, result.pool, result.device)
    seen = parse_nvidia_smi_uuids(exec_in_container(api, pod.namespace, pod.name, "workload", ["nvidia-smi", "-L"]).stdout)
    assert seen == [allocated.attribute("uuid")]
