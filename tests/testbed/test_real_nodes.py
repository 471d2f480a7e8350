"""What a real node gives that KWOK could not: proved through the real API on the healthy bed.

A container is its own machine (hostname, /dev, environment), commands end and pods complete,
logs are kept, and a classic ``nvidia.com/gpu`` request is served by a DRA device the node
prepared.
"""

from __future__ import annotations

import pytest

from draconf import namespaces, waits
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.pods import Pod, exec_in_container, parse_nvidia_smi_uuids
from draconf.profile import builtin, for_target
from draconf.testbed import inventory
from draconf.workload import DeployedWorkload, Workload

PROFILE = for_target(builtin("nvidia"), "testbed")
RUN = namespaces.RunId("selftest")
REAL_GPU_NODES = [n.name for n in inventory.load(inventory.GUIDE_INVENTORY).gpu_nodes if n.kind == "real"]

pytestmark = pytest.mark.skipif(not REAL_GPU_NODES, reason="the default fleet has no real GPU node")


def _pod(name: str, command: list[str], claim_template: str | None = None, limits: dict | None = None,
         restart: str = "Never") -> dict:
    container = {"name": "workload", "image": PROFILE.image, "command": command}
    spec: dict = {"restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                  "tolerations": [dict(t) for t in PROFILE.tolerations], "containers": [container]}
    if claim_template:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim_template}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    if limits:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _template(api, ns: str) -> str:
    api.resource.create_namespaced_resource_claim_template(ns, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": PROFILE.device_class}}]}}}})
    return "one-gpu"


def _wait_phase(api, ns: str, name: str, phases: set[str], timeout: float = 60) -> Pod:
    return waits.wait_until(f"pod {name} to reach {'/'.join(sorted(phases))}",
                            lambda: Pod.read(api, ns, name), lambda p: p.phase in phases or p.is_running,
                            timeout=timeout, describe=lambda p: p.summary())


def test_a_gpu_container_is_its_own_machine_not_the_host(api, ns):
    deployed = DeployedWorkload.deploy(api, ns, Workload("single-gpu", ["01-single-gpu.yaml"], 1), PROFILE)
    (pod,) = deployed.wait_running(timeout=60)
    assert pod.node in REAL_GPU_NODES

    def run(*command: str) -> str:
        out = exec_in_container(api, ns, pod.name, "workload", list(command))
        assert out.succeeded, f"{command}: {out}"
        return out.stdout

    assert run("hostname").strip() == pod.name
    devices = run("ls", "/dev").split()
    assert any(d.startswith("nvidia") for d in devices) and "vda" not in devices and "kvm" not in devices
    env = dict(line.split("=", 1) for line in run("env").splitlines() if "=" in line)
    assert not {"VIRTUAL_ENV", "PYTHONPATH", "KUBECONFIG", "DRACONF_STATE_DIR", "GOPATH"} & env.keys()
    assert env["HOSTNAME"] == pod.name and env.get("NVIDIA_VISIBLE_DEVICES", "").startswith("GPU-")


def test_a_pod_whose_command_ends_succeeds_logs_its_gpu_and_frees_its_claim(api, ns):
    template = _template(api, ns)
    api.core.create_namespaced_pod(ns, _pod("list-gpus", ["nvidia-smi", "-L"], claim_template=template))
    pod = waits.wait_until("pod list-gpus to complete", lambda: Pod.read(api, ns, "list-gpus"),
                           lambda p: p.phase in ("Succeeded", "Failed"), timeout=60,
                           describe=lambda p: p.summary())
    assert pod.phase == "Succeeded", pod.summary()
    log = api.core.read_namespaced_pod_log("list-gpus", ns, container="workload")
    assert len(parse_nvidia_smi_uuids(log)) == 1, log
    # The resourceclaim controller deletes a generated claim once its pod is done.
    waits.wait_until("the completed pod's claim to be deleted", lambda: Claim.list(api, ns),
                     lambda claims: not claims, timeout=30,
                     describe=lambda claims: ", ".join(c.name for c in claims))


def test_a_classic_nvidia_gpu_limit_gets_a_dra_gpu_the_node_prepared(api, ns):
    api.core.create_namespaced_pod(ns, _pod("classic", ["sleep", "3600"], limits={"nvidia.com/gpu": "1"}))
    pod = waits.wait_until("pod classic to run", lambda: Pod.read(api, ns, "classic"), lambda p: p.is_running,
                           timeout=60, describe=lambda p: p.summary())
    # The scheduler made a claim for the extended resource (DRAExtendedResource, beta in 1.36).
    claims = [c for c in Claim.list(api, ns) if c.is_allocated]
    assert len(claims) == 1, [c.name for c in Claim.list(api, ns)]
    (result,) = claims[0].results
    device = PublishedDevices.read(api, PROFILE.driver).lookup(result.driver, result.pool, result.device)
    out = exec_in_container(api, ns, "classic", "workload", ["nvidia-smi", "-L"])
    assert out.succeeded and parse_nvidia_smi_uuids(out.stdout) == [device.attribute("uuid")], out
    assert pod.node == result.pool
