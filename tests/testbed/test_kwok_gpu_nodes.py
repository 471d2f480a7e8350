"""KWOK GPU nodes, the simulation behind large fleets (``--nodes 100``, ``--node-kind kwok``).

The default fleet's GPU nodes are real, so these tests start a bed whose every node is a KWOK
node: the agent prepares claims, kwok plays kubelet, and ``kubectl exec`` runs in kwok's
sandbox.  What a container sees there must still be what its claim was given, and nothing of
the host.
"""

from __future__ import annotations

import pytest

from draconf import namespaces, waits
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.kube import connect
from draconf.pods import delete_pods, exec_in_container, parse_nvidia_smi_uuids
from draconf.profile import builtin, for_target
from draconf.workload import DeployedWorkload, Workload

PROFILE = for_target(builtin("nvidia"), "testbed")
RUN = namespaces.RunId("selftest")


@pytest.fixture(scope="module")
def api(kwok_gpu_bed):
    return connect(kwok_gpu_bed.kubeconfig)


def test_a_gpu_pod_on_a_kwok_node_sees_its_gpu_and_nothing_of_the_host(api, ns, kwok_gpu_bed):
    deployed = DeployedWorkload.deploy(api, ns, Workload("single-gpu", ["01-single-gpu.yaml"], 1), PROFILE)
    (pod,) = deployed.wait_running(timeout=30)
    (result,) = Claim.read(api, ns, pod.generated_claim_names()[0]).results
    device = PublishedDevices.read(api, "gpu.nvidia.com").lookup(result.driver, result.pool, result.device)

    listed = exec_in_container(api, ns, pod.name, "workload", ["nvidia-smi", "-L"])
    assert listed.succeeded and parse_nvidia_smi_uuids(listed.stdout) == [device.attribute("uuid")], listed
    memory = exec_in_container(api, ns, pod.name, "workload",
                               ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader"])
    assert memory.stdout.strip() == f"{int(device.memory('memory')) // 2**20} MiB", memory

    for command in (["/bin/sh", "-c", "id"], ["/usr/bin/env"]):
        out = exec_in_container(api, ns, pod.name, "workload", command)
        assert not out.succeeded and "no such file or directory" in out.error, (command, out)

    # The container's view is what its CDI spec gave it; it goes when the pod goes.
    view = kwok_gpu_bed.dir / "kwok-containers" / pod.uid
    assert view.is_dir()
    delete_pods(api, ns, pod.name)
    waits.wait_until("the pod's container view to be removed", view.exists, lambda exists: not exists,
                     timeout=30)
