"""Pure logic of draconf.preflight: the evaluate_* verdicts over plain data, no cluster.

The cluster-reading side is exercised against the embedded test bed by suites/test_preflight.py
(with and without faults); here only the decisions are tested, on data shaped like what the
API returns. Where a helper takes a Python-client model (plugin_pod, slice_info) it gets a real
model object built from a literal, not a stand-in client.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from draconf import preflight as pf
from draconf.devices import Device
from draconf.profile import Profile
from draconf.reporting import DIAGNOSES


# --- server-version --------------------------------------------------------------------------

@pytest.mark.parametrize("git, major, minor, expected", [
    ("v1.36.3", "1", "36", (1, 36, 3)),
    ("v1.34.0-eks-ab12cd", "1", "34+", (1, 34, 0)),
    ("v1.33.1-gke.1200", "1", "33+", (1, 33, 1)),
    ("1.35", None, None, (1, 35, 0)),
    ("", "1", "34+", (1, 34, 0)),
    (None, "1", "32", (1, 32, 0)),
    ("weird", "", "", None),
])
def test_parse_server_version(git, major, minor, expected):
    assert pf.parse_server_version(git, major, minor) == expected


@pytest.mark.parametrize("git", ["v1.34.2", "v1.35.0", "v1.36.3", "v2.0.0"])
def test_version_new_enough(git):
    r = pf.evaluate_server_version(git, None, None)
    assert r.ok and r.diagnosis is None
    assert "resource.k8s.io/v1" in r.summary


def test_version_1_34_early_patch_passes_with_operator_note():
    r = pf.evaluate_server_version("v1.34.1", "1", "34")
    assert r.ok
    assert "1.34.2" in r.summary


def test_version_1_33_names_v1beta2():
    r = pf.evaluate_server_version("v1.33.4", "1", "33")
    assert not r.ok and r.diagnosis == "api-unavailable"
    assert "v1beta2" in r.summary and "1.34" in r.summary


def test_version_1_32_names_v1beta1():
    r = pf.evaluate_server_version("v1.32.9", "1", "32")
    assert not r.ok and r.diagnosis == "api-unavailable"
    assert "v1beta1" in r.summary


def test_version_1_31_has_no_stable_api():
    r = pf.evaluate_server_version("v1.31.0", "1", "31")
    assert not r.ok and r.diagnosis == "api-unavailable"


def test_emulated_version_decides():
    # A 1.36 binary started with --emulated-version=1.33 serves 1.33's APIs.
    r = pf.evaluate_server_version("v1.36.3", "1", "36", "1", "33")
    assert not r.ok and "emulating 1.33" in r.summary
    same = pf.evaluate_server_version("v1.36.3", "1", "36", "1", "36")
    assert same.ok and "emulating" not in same.summary


def test_unparseable_version_fails_with_hint():
    r = pf.evaluate_server_version("weird", "", "")
    assert not r.ok and "kubectl version" in r.summary


# --- resource-api ----------------------------------------------------------------------------

def test_resource_api_complete_ignores_subresources():
    r = pf.evaluate_resource_api(["deviceclasses", "resourceclaims", "resourceclaims/status",
                                  "resourceclaimtemplates", "resourceslices"])
    assert r.ok


def test_resource_api_missing_resource():
    r = pf.evaluate_resource_api(["deviceclasses", "resourceclaims", "resourceclaims/status"])
    assert not r.ok and r.diagnosis == "api-unavailable"
    assert "resourceclaimtemplates" in r.summary and "resourceslices" in r.summary


def test_resource_api_not_served_names_served_versions():
    r = pf.evaluate_resource_api(None, ["v1beta2", "v1beta1"])
    assert not r.ok and r.diagnosis == "api-unavailable"
    assert "v1beta1, v1beta2" in r.summary


def test_resource_api_group_absent():
    r = pf.evaluate_resource_api(None, [])
    assert "not served at all" in r.summary


# --- device classes --------------------------------------------------------------------------

def test_device_class_present():
    assert pf.evaluate_device_class(["gpu.nvidia.com", "mig.nvidia.com"], "gpu.nvidia.com").ok


def test_device_class_missing_points_at_helm_values_not_the_workload():
    r = pf.evaluate_device_class(["mig.nvidia.com"], "gpu.nvidia.com")
    assert not r.ok and r.diagnosis == "missing-deviceclass"
    assert "Helm values" in r.summary and "not by the workload" in r.summary
    assert "mig.nvidia.com" in r.evidence["kubectl get deviceclass"]


def test_optional_classes_absent_is_a_warning_never_blocking():
    r = pf.evaluate_optional_classes(["gpu.nvidia.com", "mig.nvidia.com"],
                                     ("mig.nvidia.com", "vfio.gpu.nvidia.com"))
    r.severity = pf.SEVERITY["optional-device-classes"]  # as @check sets it
    assert not r.ok and r.status == "WARN" and not r.blocking and r.diagnosis is None
    assert "present: mig.nvidia.com" in r.summary and "absent: vfio.gpu.nvidia.com" in r.summary
    r = pf.evaluate_optional_classes(["mig.nvidia.com", "vfio.gpu.nvidia.com"],
                                     ("mig.nvidia.com", "vfio.gpu.nvidia.com"))
    assert r.ok


def test_optional_classes_none_configured_is_not_applicable():
    r = pf.evaluate_optional_classes(["gpu.nvidia.com"], ())
    assert r.ok and not r.applicable


# --- GPU nodes and ResourceSlices ------------------------------------------------------------

NFD = "feature.node.kubernetes.io/pci-10de.present"


def test_gpu_nodes_by_label_or_plugin_pod():
    nodes = [("cpu-0", {"kubernetes.io/os": "linux"}),
             ("nfd-gpu", {NFD: "true"}),
             ("gfd-gpu", {"nvidia.com/gpu.present": "true"}),
             ("false-label", {NFD: "false"}),
             ("unlabelled-gpu", None)]
    assert pf.gpu_node_names(nodes, plugin_nodes=["unlabelled-gpu", None]) == \
        ["gfd-gpu", "nfd-gpu", "unlabelled-gpu"]


def slice_(node, devices, driver="gpu.nvidia.com", name=None):
    return pf.SliceInfo(name or f"{node}-{driver}-{devices}", driver, node, node or "pool", devices)


def test_every_gpu_node_has_devices():
    r = pf.evaluate_resource_slices(["a", "b"], [slice_("a", 2), slice_("b", 4)], "gpu.nvidia.com")
    assert r.ok and "6 device(s)" in r.summary


def test_device_less_slices_are_skipped():
    # 1.35+: a node may carry an extra slice holding only sharedCounters.
    slices = [slice_("a", 0, name="a-counters"), slice_("a", 2), slice_("b", 0)]
    r = pf.evaluate_resource_slices(["a", "b"], slices, "gpu.nvidia.com")
    assert not r.ok and r.diagnosis == "no-resourceslices"
    assert r.summary.startswith("1 of 2 GPU node(s)") and ": b;" in r.summary


def test_other_drivers_do_not_count():
    r = pf.evaluate_resource_slices(["a"], [slice_("a", 8, driver="gpu.example.com")],
                                    "gpu.nvidia.com")
    assert not r.ok and r.diagnosis == "no-resourceslices"


def test_no_gpu_nodes_and_no_slices():
    r = pf.evaluate_resource_slices([], [], "gpu.nvidia.com")
    assert not r.ok and r.diagnosis == "no-resourceslices"
    assert "no node is labelled" in r.summary


def test_slices_without_labelled_nodes_pass():
    # A driver on unlabelled nodes (e.g. another vendor) still publishes its pools.
    assert pf.evaluate_resource_slices([], [slice_("x", 8)], "gpu.nvidia.com").ok


def test_slice_info_from_client_model():
    s = client.V1ResourceSlice(
        metadata=client.V1ObjectMeta(name="n1-gpu.nvidia.com"),
        spec=client.V1ResourceSliceSpec(
            driver="gpu.nvidia.com", node_name="n1",
            pool=client.V1ResourcePool(name="n1", generation=1, resource_slice_count=1),
            devices=[client.V1Device(name="gpu-0"), client.V1Device(name="gpu-1")]))
    assert pf.slice_info(s) == pf.SliceInfo("n1-gpu.nvidia.com", "gpu.nvidia.com", "n1", "n1", 2)


# --- device attributes -----------------------------------------------------------------------

def device(name, drop=(), memory=True):
    attrs = {f"gpu.nvidia.com/{k}": v for k, v in
             {"type": "gpu", "uuid": f"GPU-{name}", "productName": "NVIDIA H100 80GB HBM3",
              "architecture": "Hopper", "brand": "Nvidia"}.items() if k not in drop}
    caps = {"gpu.nvidia.com/memory": 80 * 2**30} if memory else {}
    return Device("gpu.nvidia.com", "node-a", name, "node-a", attrs, caps)


def test_minimum_attribute_set_allows_extras():
    profile = Profile()
    r = pf.evaluate_attributes([device("gpu-0"), device("gpu-1")], profile.required_attributes(),
                               profile.memory_capacity)
    assert r.ok and "all 2 device(s)" in r.summary


def test_missing_attribute_named_with_count_and_consequence():
    profile = Profile()
    devices = [device("gpu-0", drop=["productName"]), device("gpu-1"), device("gpu-2", drop=["productName"])]
    r = pf.evaluate_attributes(devices, profile.required_attributes(), profile.memory_capacity)
    assert not r.ok and r.diagnosis == "attribute-missing"
    assert "attribute productName is missing on 2 of 3 device(s)" in r.summary
    assert "Pending" in r.summary
    assert r.evidence["devices without attribute productName"] == "node-a/gpu-0\nnode-a/gpu-2"


def test_missing_memory_capacity():
    r = pf.evaluate_attributes([device("gpu-0", memory=False)], ["uuid"], "memory")
    assert not r.ok and "capacity memory is missing on 1 of 1" in r.summary


def test_qualified_attribute_names():
    d = Device("gpu.nvidia.com", "p", "gpu-0", "n",
               {"resource.kubernetes.io/pciBusID": "0000:3b:00.0"}, {"gpu.nvidia.com/memory": 1})
    assert pf.evaluate_attributes([d], ["resource.kubernetes.io/pciBusID"], "memory").ok


def test_no_devices_is_not_applicable():
    r = pf.evaluate_attributes([], ["uuid"], "memory")
    assert r.ok and not r.applicable


# --- kubelet plugin --------------------------------------------------------------------------

def v1pod(name, node, ready=True, waiting=None, restarts=0, last_exit=None, phase="Running", exited=None):
    state = (client.V1ContainerState(waiting=client.V1ContainerStateWaiting(
        reason=waiting, message="back-off 5m0s restarting failed container"))
        if waiting else client.V1ContainerState(terminated=client.V1ContainerStateTerminated(
            exit_code=exited, reason="Error")) if exited is not None
        else client.V1ContainerState(running=client.V1ContainerStateRunning()))
    last = (client.V1ContainerState(terminated=client.V1ContainerStateTerminated(
        exit_code=last_exit, reason="Error")) if last_exit is not None else None)
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="gpu-operator"),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="gpus")]),
        status=client.V1PodStatus(
            phase=phase,
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
            container_statuses=[client.V1ContainerStatus(
                name="gpus", ready=ready, restart_count=restarts, image="i", image_id="",
                state=state, last_state=last)]))


def test_plugin_pod_from_crash_looping_model():
    p = pf.plugin_pod(v1pod("plugin-x", "n1", ready=False, waiting="CrashLoopBackOff",
                            restarts=7, last_exit=1))
    assert not p.ready and p.node == "n1" and p.reasons == ("CrashLoopBackOff",)
    assert p.problems == ("gpus: CrashLoopBackOff: back-off 5m0s restarting failed container "
                          "(restarts 7, last exit 1 Error)",)


def test_a_plugin_crashed_before_its_first_restart_is_read_from_its_current_log():
    """The moment between the first crash and the kubelet's restart: no previous run is kept
    yet, the crash is in the container's current log."""
    first = pf.plugin_pod(v1pod("plugin-x", "n1", ready=False, exited=1))
    assert first.crashed_container == "gpus" and not first.crash_log_previous
    looping = pf.plugin_pod(v1pod("plugin-x", "n1", ready=False, waiting="CrashLoopBackOff", restarts=2))
    assert looping.crashed_container == "gpus" and looping.crash_log_previous
    starting = pf.plugin_pod(v1pod("plugin-x", "n1", ready=False))
    assert starting.crashed_container is None


def test_plugin_pod_ready():
    p = pf.plugin_pod(v1pod("plugin-y", "n2"))
    assert p.ready and p.problems == ()


DS = pf.PluginDaemonSet("gpu-operator", "nvidia-dra-driver-kubelet-plugin", 2, 2, 2)


def test_plugin_ready_on_every_gpu_node():
    pods = [pf.plugin_pod(v1pod("a", "n1")), pf.plugin_pod(v1pod("b", "n2"))]
    r = pf.evaluate_kubelet_plugin(["n1", "n2"], [DS], pods)
    assert r.ok and "all 2 GPU node(s)" in r.summary


def test_plugin_crash_loop_lists_pods_and_reasons():
    pods = [pf.plugin_pod(v1pod("a", "n1")),
            pf.plugin_pod(v1pod("b", "n2", ready=False, waiting="CrashLoopBackOff", restarts=3))]
    r = pf.evaluate_kubelet_plugin(["n1", "n2"], [DS], pods)
    assert not r.ok and r.diagnosis == "plugin-unhealthy"
    assert "n2" in r.summary and "CrashLoopBackOff" in r.summary
    assert "kubectl logs -n gpu-operator daemonset/nvidia-dra-driver-kubelet-plugin" in r.summary
    assert "gpu-operator/b on n2: not Ready" in r.evidence["kubelet-plugin pods not Ready"]
    assert pods[1].crashed_container == "gpus" and "last said" not in r.summary  # no log read


def test_a_crash_looping_plugin_is_quoted_from_its_previous_run():
    crashed = pf.plugin_pod(v1pod("b", "n2", ready=False, waiting="CrashLoopBackOff", restarts=3)).with_log(
        "  -v value  number for the log level verbosity\n\nError: could not parse \"MPSSuport=true,\" from "
        "environment variable \"FEATURE_GATES\": unrecognized feature gate: MPSSuport\n")
    r = pf.evaluate_kubelet_plugin(["n2"], [DS], [crashed])
    assert not r.ok and r.diagnosis == "plugin-unhealthy"
    assert "b on n2 last said: Error: could not parse" in r.summary
    assert r.summary.index("last said") < r.summary.index("Claims on those nodes")
    assert "unrecognized feature gate: MPSSuport" in r.evidence["log of gpu-operator/b"]


def test_gpu_node_without_plugin_pod():
    r = pf.evaluate_kubelet_plugin(["n1", "n2"], [DS], [pf.plugin_pod(v1pod("a", "n1"))])
    assert not r.ok and r.diagnosis == "plugin-unhealthy"
    assert r.summary.startswith("1 of 2 GPU node(s) have no Ready kubelet-plugin pod: n2")


def test_no_plugin_at_all():
    r = pf.evaluate_kubelet_plugin(["n1"], [], [])
    assert not r.ok and r.diagnosis == "plugin-unhealthy"
    assert "no DRA kubelet plugin found" in r.summary


# --- GPUCluster and ClusterPolicy ------------------------------------------------------------

def gpucluster(state=None, name="gpu-cluster"):
    obj = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": name}}
    if state:
        obj["status"] = {"state": state}
    return obj


def test_gpucluster_crd_absent_is_not_applicable():
    r = pf.evaluate_gpu_cluster(None)
    assert r.ok and not r.applicable and "not installed" in r.summary


def test_gpucluster_ready():
    assert pf.evaluate_gpu_cluster([gpucluster("ready")]).ok


@pytest.mark.parametrize("state", ["notReady", "disabled", "ignored", None])
def test_gpucluster_not_ready(state):
    r = pf.evaluate_gpu_cluster([gpucluster(state)])
    assert not r.ok and r.diagnosis == "plugin-unhealthy"


def test_gpucluster_crd_without_singleton_is_not_applicable():
    r = pf.evaluate_gpu_cluster([gpucluster("ready", name="other")])
    assert r.ok and not r.applicable


def test_policy_conflict_when_both_exist():
    r = pf.evaluate_policy_conflict([{"metadata": {"name": "cluster-policy"}}], [gpucluster("ready")])
    assert not r.ok and r.diagnosis == "policy-conflict"
    assert "in place" in r.summary and "cluster-policy" in r.summary


@pytest.mark.parametrize("policies, clusters", [
    (None, None), ([], [gpucluster("ready")]), (None, [gpucluster("ready")]),
    ([{"metadata": {"name": "cluster-policy"}}], None)])
def test_no_policy_conflict(policies, clusters):
    assert pf.evaluate_policy_conflict(policies, clusters).ok


# --- results, errors, rendering --------------------------------------------------------------

def test_every_diagnosis_is_a_known_code():
    samples = [pf.evaluate_server_version("v1.32.0"), pf.evaluate_resource_api(None),
               pf.evaluate_device_class([], "gpu.nvidia.com"),
               pf.evaluate_resource_slices([], [], "d"),
               pf.evaluate_attributes([device("g", drop=["uuid"])], ["uuid"], "memory"),
               pf.evaluate_kubelet_plugin(["n"], [], []), pf.evaluate_gpu_cluster([gpucluster()]),
               pf.evaluate_policy_conflict([{"metadata": {"name": "p"}}], [gpucluster()])]
    assert all(not r.ok and r.diagnosis in DIAGNOSES for r in samples)


def test_registered_checks_and_severities():
    assert list(pf.CHECKS) == ["server-version", "permissions", "resource-api", "device-class",
                               "optional-device-classes", "resource-slices", "device-attributes",
                               "device-class-selectors", "kubelet-plugin", "gpu-cluster", "policy-conflict",
                               "gpu-node-taints", "device-taints"]
    assert pf.SEVERITY["optional-device-classes"] == pf.INFO
    assert pf.SEVERITY["device-taints"] == pf.INFO
    assert {s for n, s in pf.SEVERITY.items()
            if n not in ("optional-device-classes", "device-taints")} == {pf.BLOCKING}


def test_blocking_failures_excludes_info_and_inconclusive():
    results = [pf.CheckResult("a", False, pf.BLOCKING, "broken", "no-resourceslices"),
               pf.CheckResult("b", False, pf.INFO, "meh"),
               pf.CheckResult("c", False, pf.BLOCKING, "forbidden", inconclusive=True),
               pf.CheckResult("d", True, pf.BLOCKING, "fine")]
    assert [r.name for r in pf.blocking_failures(results)] == ["a"]
    assert [r.status for r in results] == ["FAIL", "WARN", "INCONCLUSIVE", "PASS"]


def test_forbidden_message_names_the_permission():
    text = pf.forbidden_summary(pf.Access("get", "daemonsets", "apps", "gpu-operator"))
    assert "`get` on daemonsets.apps in namespace gpu-operator" in text
    assert "Role" in text
    assert "`list` on nodes" in pf.forbidden_summary(pf.Access("list", "nodes"))


def test_describe_is_one_line_per_check():
    results = [pf.CheckResult("server-version", True, pf.BLOCKING, "Kubernetes v1.36.3 " * 20),
               pf.CheckResult("gpu-cluster", True, pf.BLOCKING, "not installed", applicable=False)]
    lines = pf.describe(results, width=80).splitlines()
    assert len(lines) == 3 and lines[0].startswith("CHECK")
    assert all(len(line) <= 80 for line in lines)
    assert "N/A" in lines[2]


# --- device-class-selectors ------------------------------------------------------------------

CLASS_GPU = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def _gpus(n: int = 8, **extra) -> list:
    from draconf.devices import Device
    return [Device("gpu.nvidia.com", f"node-{i // 4}", f"gpu-{i % 4}", f"node-{i // 4}",
                   {"gpu.nvidia.com/type": "gpu", **extra}) for i in range(n)]


def test_class_selecting_no_device_fails_naming_class_expression_and_count():
    wrong = CLASS_GPU.replace("'gpu'", "'tpu'")
    r = pf.evaluate_class_selectors("gpu.nvidia.com", [wrong], _gpus())
    assert not r.ok and r.diagnosis == "selector-unmatched"
    assert r.summary.startswith(f"gpu.nvidia.com selects 0 of 8 published devices: {wrong}")


def test_class_selecting_devices_passes_with_the_count():
    r = pf.evaluate_class_selectors("gpu.nvidia.com", [CLASS_GPU], _gpus())
    assert r.ok and r.summary == f"gpu.nvidia.com selects 8 of 8 published devices: {CLASS_GPU}"


def test_class_selector_reading_a_missing_attribute_is_attribute_missing():
    expr = "device.attributes['gpu.nvidia.com'].productName == 'H100'"
    r = pf.evaluate_class_selectors("gpu.nvidia.com", [expr], _gpus())
    assert not r.ok and r.diagnosis == "attribute-missing" and "0 of 8" in r.summary
    assert "no such key" in r.summary


def test_class_selectors_not_applicable_without_class_or_devices():
    assert pf.evaluate_class_selectors("gpu.nvidia.com", None, _gpus()).applicable is False
    assert pf.evaluate_class_selectors("gpu.nvidia.com", [CLASS_GPU], []).applicable is False
