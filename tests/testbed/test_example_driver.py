"""dra-example-driver, a driver this project did not write, on the bed's real nodes.

``draconf testbed up --driver example`` builds its kubelet plugin from the Go module, renders its
own Helm chart with helm and applies it.  These tests check that what the cluster then holds is
the driver's own doing: its DeviceClass, its slices (published through the kubelet-plugin helper
of its own release), and what its CDI spec puts into a container.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from draconf import namespaces, waits
from draconf.claims import Claim
from draconf.kube import connect
from draconf.pods import Pod, exec_in_container
from draconf.testbed import example_driver, images, inventory

RUN = namespaces.RunId("selftest")


@pytest.fixture(scope="module")
def api(example_driver_bed):
    return connect(example_driver_bed.kubeconfig)


def test_the_charts_objects_are_installed(api):
    (cls,) = [c for c in api.resource.list_device_class().items if c.metadata.name == example_driver.DEVICE_CLASS]
    assert cls.spec.selectors[0].cel.expression == "device.driver == 'gpu.example.com'"
    assert not [c for c in api.resource.list_device_class().items if c.metadata.name.endswith("nvidia.com")]
    ds = api.apps.read_namespaced_daemon_set(example_driver.PLUGIN_DAEMONSET, example_driver.NAMESPACE)
    assert ds.spec.template.spec.containers[0].image == images.EXAMPLE_PLUGIN_REF
    policies = client.AdmissionregistrationV1Api(api.api_client).list_validating_admission_policy().items
    assert any(p.metadata.name.startswith("resourceslices-policy-") for p in policies)


def test_each_real_node_publishes_the_drivers_own_devices(api):
    slices = [s for s in api.resource.list_resource_slice().items if s.spec.driver == example_driver.DRIVER]
    real = sorted(n.name for n in inventory.load(inventory.GUIDE_INVENTORY).real_nodes)
    assert sorted(s.spec.node_name for s in slices) == real
    for s in slices:
        assert [o.kind for o in s.metadata.owner_references] == ["Node"]
        # In map order, not sorted (the NVIDIA plugin sorts by minor): a suite must not assume.
        assert sorted(d.name for d in s.spec.devices) == sorted(f"gpu-{i}" for i in range(8))
        device = s.spec.devices[0]
        assert device.attributes["model"].string == "LATEST-GPU-MODEL"
        assert device.attributes["driverVersion"].version == "1.0.0"
        assert device.capacity["memory"].value == "80Gi"


def test_a_container_gets_the_allocated_device_from_the_drivers_cdi_spec(api, ns):
    api.resource.create_namespaced_resource_claim_template(ns, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "single-gpu"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": example_driver.DEVICE_CLASS}}]}}}})
    api.core.create_namespaced_pod(ns, {"metadata": {"name": "pod0"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "ctr0", "image": images.WORKLOAD_REF, "command": ["sleep", "1d"],
                        "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]}})
    pod = waits.wait_until("pod0 to run", lambda: Pod.read(api, ns, "pod0"), lambda p: p.is_running,
                           timeout=60, describe=lambda p: p.summary())
    (result,) = Claim.read(api, ns, pod.generated_claim_names()[0]).results
    assert result.driver == example_driver.DRIVER and result.pool == pod.node
    env = dict(line.split("=", 1) for line in
               exec_in_container(api, ns, "pod0", "ctr0", ["env"]).stdout.splitlines() if "=" in line)
    injected = sorted(v for k, v in env.items() if k.startswith("GPU_DEVICE_") and k[11:].isdigit())
    assert injected == [result.device], env
    assert env["DRA_RESOURCE_DRIVER_NAME"] == example_driver.DRIVER and env["KUBERNETES_NODE_NAME"] == pod.node
