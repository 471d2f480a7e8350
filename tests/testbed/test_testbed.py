"""The healthy test bed, proved through the real API: what a GPU cluster must show."""

from __future__ import annotations

import json
import sys

import yaml

import pytest
from kubernetes.utils import parse_quantity

from draconf import namespaces, selectors
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.pods import Pod, delete_pods, exec_in_container, parse_nvidia_smi_uuids
from draconf.profile import builtin, for_target
from draconf.testbed import inventory, nvidia, pins
from draconf.workload import DeployedWorkload, Workload
from draconf import waits

PROFILE = for_target(builtin("nvidia"), "testbed")
RUN = namespaces.RunId("selftest")


def test_version_reports_the_pinned_release(api):
    assert api.version.get_code().git_version == pins.KUBERNETES_VERSION


def test_resource_api_v1_serves_the_four_dra_kinds(api):
    names = {r.name for r in api.resource.get_api_resources().resources}
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= names


def test_device_classes_are_the_charts(api):
    classes = {c.metadata.name: c.spec.selectors[0].cel.expression
               for c in api.resource.list_device_class().items}
    assert classes["gpu.nvidia.com"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")
    # Recent charts map the classic extended resource onto full GPUs.
    assert api.resource.read_device_class("gpu.nvidia.com").spec.extended_resource_name == "nvidia.com/gpu"
    assert "type == 'mig'" in classes["mig.nvidia.com"]
    assert "type == 'vfio'" in classes["vfio.gpu.nvidia.com"]


def test_one_pool_per_gpu_node_with_the_plugins_attributes(api):
    slices = api.resource.list_resource_slice().items
    fleet = inventory.load(inventory.GUIDE_INVENTORY)
    assert sorted(s.spec.pool.name for s in slices) == sorted(n.name for n in fleet.gpu_nodes)
    for s in slices:
        assert s.spec.driver == "gpu.nvidia.com" and s.spec.node_name == s.spec.pool.name
        node = fleet.node(s.spec.node_name)
        assert [d.name for d in s.spec.devices] == [f"gpu-{g.minor}" for g in node.gpus]
        for device in s.spec.devices:
            attrs = device.attributes
            for name in ("type", "uuid", "productName", "brand", "architecture"):
                assert attrs[name].string, name
            for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
                assert attrs[name].version, name
            assert attrs["resource.kubernetes.io/pciBusID"].string.startswith("0000:")
            assert attrs["resource.kubernetes.io/pcieRoot"].string.startswith("pci0000:")
            # What NVML reports, not a round figure: 81559Mi for an H100 80GB HBM3.
            assert parse_quantity(device.capacity["memory"].value) == node.gpus[0].model.memory_bytes
        if node.kind == "real":
            # Published through the kubelet-plugin helper: generated name, owned by the Node.
            assert s.metadata.generate_name and [o.kind for o in s.metadata.owner_references] == ["Node"]
    uuids = [d.attributes["uuid"].string for s in slices for d in s.spec.devices]
    assert len(uuids) == len(set(uuids)) == fleet.gpu_count


def test_kubelet_plugin_runs_on_every_gpu_node_and_gpucluster_is_ready(api):
    pods = api.core.list_namespaced_pod(nvidia.PLUGIN_NAMESPACE,
                                        label_selector=f"app={nvidia.PLUGIN_DAEMONSET}").items
    assert sorted(p.spec.node_name for p in pods if p.status.phase == "Running") == \
        sorted(n.name for n in inventory.load(inventory.GUIDE_INVENTORY).gpu_nodes)
    gc = api.custom.get_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster")
    assert gc["status"]["state"] == "ready"


def test_seed_single_gpu_pod_gets_its_claim_and_sees_the_allocated_gpu(api, ns):
    deployed = DeployedWorkload.deploy(api, ns, Workload("single-gpu", ["01-single-gpu.yaml"], 1), PROFILE)
    (pod,) = deployed.wait_running(timeout=30)
    (claim_name,) = pod.generated_claim_names()
    claim = Claim.read(api, ns, claim_name)
    assert claim.is_allocated and pod.uid in claim.reserved_for_uids and claim.owner_pod_uid == pod.uid
    (result,) = claim.results
    device = PublishedDevices.read(api, "gpu.nvidia.com").lookup(result.driver, result.pool, result.device)
    out = exec_in_container(api, ns, pod.name, "workload", ["nvidia-smi", "-L"])
    assert out.succeeded and parse_nvidia_smi_uuids(out.stdout) == [device.attribute("uuid")]
    assert out.stdout.startswith(f"GPU 0: {device.attribute('productName')} (UUID: GPU-")


def test_container_that_lists_no_claim_has_no_nvidia_smi(api, ns):
    deployed = DeployedWorkload.deploy(api, ns, Workload("shared", ["06-shared-claim.yaml"], 2,
                                                      node="gpu-h100-0"), PROFILE)
    deployed.wait_running(timeout=30)
    out = exec_in_container(api, ns, "shared-gpu-pod-a", "container3", ["nvidia-smi", "-L"])
    assert out.exit_code == 127 and "executable file not found" in out.stderr + out.error
    shared = [exec_in_container(api, ns, p, c, ["nvidia-smi", "-L"]).stdout
              for p, c in [("shared-gpu-pod-a", "container1"), ("shared-gpu-pod-a", "container2"),
                           ("shared-gpu-pod-b", "container1")]]
    assert len(set(shared)) == 1 and parse_nvidia_smi_uuids(shared[0])


def test_h100_selector_lands_only_on_h100_and_an_unknown_model_stays_pending(api, ns):
    h100 = selectors.model("gpu.nvidia.com", "productName", "h100")
    wanted = Workload("h100", ["02-model-selected.yaml"], 1, selectors={"h100-gpu": [h100]})
    deployed = DeployedWorkload.deploy(api, ns, wanted, PROFILE)
    (pod,) = deployed.wait_running(timeout=30)
    assert pod.node == "gpu-h100-0"
    deployed.check_allocation(PublishedDevices.read(api, "gpu.nvidia.com"))

    other_ns = namespaces.create(api, RUN, "unknown-model")
    try:
        nothing = selectors.model("gpu.nvidia.com", "productName", "NVIDIA B300")
        missing = DeployedWorkload.deploy(api, other_ns, Workload(
            "b300", ["02-model-selected.yaml"], 1, selectors={"h100-gpu": [nothing]}), PROFILE)
        pod = missing.wait_pending_with("cannot allocate all claims", timeout=30)
        assert pod.node is None
    finally:
        namespaces.delete(api, other_ns, wait=60)


def test_deleting_the_pod_deletes_the_generated_claim_and_unprepares_it(api, ns, healthy_bed):
    deployed = DeployedWorkload.deploy(api, ns, Workload("single-gpu", ["01-single-gpu.yaml"], 1), PROFILE)
    (pod,) = deployed.wait_running(timeout=30)
    (claim_name,) = pod.generated_claim_names()
    claim = Claim.read(api, ns, claim_name)
    # One CDI spec per claim, where the node's runtime reads them (the KWOK agent keeps its own).
    if inventory.load(inventory.GUIDE_INVENTORY).node(pod.node).kind == "real":
        cdi_spec = healthy_bed.dir / "nodes" / pod.node / "cdi" / f"k8s.gpu.nvidia.com-claim_{claim.uid}.yaml"
        assert yaml.safe_load(cdi_spec.read_text())["kind"] == "k8s.gpu.nvidia.com/claim"
    else:
        cdi_spec = healthy_bed.dir / "cdi" / f"k8s.gpu.nvidia.com-claim_{claim.uid}.json"
        assert json.loads(cdi_spec.read_text())["claim"] == f"{ns}/{claim_name}"
    delete_pods(api, ns, pod.name)
    waits.wait_until("the generated claim to be deleted", lambda: [c.name for c in Claim.list(api, ns)],
                     lambda names: claim_name not in names, timeout=30)
    waits.wait_until("the claim to be unprepared", cdi_spec.exists, lambda exists: not exists, timeout=10)


def test_a_kwok_container_cannot_run_the_hosts_programs_or_read_its_environment(api, ns):
    kwok_nodes = [n.name for n in inventory.load(inventory.GUIDE_INVENTORY).nodes if n.kind == "kwok"]
    if not kwok_nodes:
        pytest.skip("the default fleet has no KWOK node")
    api.core.create_namespaced_pod(ns, {"metadata": {"name": "plain"}, "spec": {
        "nodeName": kwok_nodes[0], "containers": [{"name": "c", "image": PROFILE.image, "command": ["sleep", "1d"]}]}})
    waits.wait_until("pod plain to run", lambda: Pod.read(api, ns, "plain"), lambda p: p.is_running, timeout=30)
    # By name: not on the sandbox's PATH.  By path: the host's files are not in the sandbox.
    for command in (["hostname"], ["ls", "/"], ["bash", "-c", "id"], ["nvidia-smi", "-L"]):
        out = exec_in_container(api, ns, "plain", "c", command)
        assert out.exit_code == 127 and "executable file not found" in out.stderr + out.error, (command, out)
    for command in (["/bin/sh", "-c", "id"], ["/usr/bin/id"], [sys.executable, "-c", "print(1)"]):
        out = exec_in_container(api, ns, "plain", "c", command)
        assert not out.succeeded and "no such file or directory" in out.error, (command, out)
    env = exec_in_container(api, ns, "plain", "c", ["env"]).stdout
    assert env and not {"VIRTUAL_ENV", "PYTHONPATH", "KUBECONFIG", "DRACONF_STATE_DIR"} & \
        {line.split("=", 1)[0] for line in env.splitlines()}, env