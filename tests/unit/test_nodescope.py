"""Per-node gating: which preflight failures take a node out, and how pods are kept off it."""

from __future__ import annotations

from draconf import preflight
from draconf.devices import Device, PublishedDevices
from draconf.nodescope import NodeScope, avoiding, scope_of
from draconf.preflight import CheckResult, PluginDaemonSet, PluginPod
from draconf.workload import Workload
from draconf.profile import builtin


def _failure(name, nodes=(), diagnosis="plugin-unhealthy"):
    return CheckResult(name, False, preflight.BLOCKING, "...", diagnosis, nodes=tuple(nodes))


def test_a_failure_confined_to_one_node_takes_only_that_node_out():
    scope, whole = scope_of([_failure("kubelet-plugin", ["b"]), _failure("resource-slices", ["b"])],
                            ["a", "b", "c"])
    assert whole == [] and scope.validated == ("a", "c")
    assert scope.excluded == {"b": ("kubelet-plugin [plugin-unhealthy]", "resource-slices [plugin-unhealthy]")}


def test_a_whole_cluster_failure_gates_even_beside_a_confined_one():
    cluster_wide = _failure("device-class", diagnosis="missing-deviceclass")
    scope, whole = scope_of([cluster_wide, _failure("kubelet-plugin", ["b"])], ["a", "b"])
    assert whole == [cluster_wide] and scope.avoid == {"b"}


def test_failures_that_leave_no_gpu_node_gate_everything():
    confined = [_failure("kubelet-plugin", ["a"]), _failure("resource-slices", ["b"])]
    scope, whole = scope_of(confined, ["a", "b"])
    assert whole == confined and scope.excluded == {}


def test_devices_of_the_nodes_left_out_are_not_written_for():
    devices = [Device("d", "a", "gpu-0", "a"), Device("d", "b", "gpu-0", "b"), Device("d", "net", "x", None)]
    kept = NodeScope(("a",), {"b": ("kubelet-plugin [plugin-unhealthy]",)}).devices(PublishedDevices("d", devices))
    assert [str(d) for d in kept] == ["a/gpu-0", "net/x"] and kept.driver == "d"


def test_avoiding_adds_the_exclusion_to_every_existing_term():
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                              {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}}
    terms = avoiding(spec, ["b", "a"])["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    not_in = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["a", "b"]}
    assert all(not_in in t["matchExpressions"] for t in terms) and len(terms) == 2


def test_workload_pods_carry_the_exclusion():
    profile = builtin("nvidia")
    docs = Workload("two-gpu", ["05-two-gpus.yaml"], 1, avoid_nodes=frozenset({"b"})).documents(profile)
    pod = next(d for d in docs if d["kind"] == "Pod")
    assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"] == [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["b"]}]}]
    plain = Workload("two-gpu", ["05-two-gpus.yaml"], 1).documents(profile)
    assert "affinity" not in next(d for d in plain if d["kind"] == "Pod")["spec"]


def test_plugin_down_on_one_node_names_that_node():
    ds = PluginDaemonSet("gpu-operator", "plugin", 2, 1, 1)
    pods = [PluginPod("gpu-operator", "p-a", "a", "Running", True)]
    result = preflight.evaluate_kubelet_plugin(["a", "b"], [ds], pods)
    assert not result.ok and result.nodes == ("b",)
    assert preflight.evaluate_kubelet_plugin(["a"], [ds], pods).nodes == ()


def test_a_plugin_pod_without_a_node_concerns_the_whole_cluster():
    ds = PluginDaemonSet("gpu-operator", "plugin", 2, 1, 1)
    pods = [PluginPod("gpu-operator", "p-a", "a", "Running", True), PluginPod("gpu-operator", "p-x", None, "Pending", False)]
    assert preflight.evaluate_kubelet_plugin(["a"], [ds], pods).nodes == ()


def test_slices_missing_on_one_node_name_it():
    slices = [preflight.SliceInfo("s-a", "d", "a", "a", 4)]
    assert preflight.evaluate_resource_slices(["a", "b"], slices, "d").nodes == ("b",)
    assert preflight.evaluate_resource_slices(["a", "b"], [], "d").nodes == ()


def test_attributes_missing_on_one_nodes_devices_name_it():
    devices = [Device("d", "a", "gpu-0", "a", {"d/uuid": "u0"}), Device("d", "b", "gpu-0", "b", {})]
    result = preflight.evaluate_attributes(devices, ["uuid"], None)
    assert result.nodes == ("b",) and "b/gpu-0" in result.summary


def test_a_plugin_running_nowhere_is_no_pass_even_with_no_gpu_node_known():
    ds = PluginDaemonSet("driver-ns", "example-kubelet-plugin", 0, 0, 0)
    result = preflight.evaluate_kubelet_plugin([], [ds], [])
    assert not result.ok and result.diagnosis == "plugin-unhealthy" and "desired 0" in result.summary
