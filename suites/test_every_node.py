"""Every GPU node proven, not a sample: ``draconf run --every-node`` (``-m every_node`` alone).

The walkthrough's workloads land wherever the scheduler puts them; a node whose CDI config or
plugin is broken is found only if one happens to land there.  Here, for each node that
publishes GPUs (read when the session starts), 01-single-gpu.yaml is applied pinned to that
node (``nodeSelector kubernetes.io/hostname``, a templated field) and judged as every workload
is: the claim allocated a GPU of that node, the container seeing exactly that GPU
(``nvidia-smi -L``), the GPU released and allocatable again.  One test id, summary row and
JUnit case per node (``every-node/<node>``), with the node's diagnosis when it fails.

Safe on a live cluster: one node at a time, one GPU held at a time.  A node whose GPUs are all
held by others is "busy, not tested" (a skip naming the holders; never preempted, never a
failure); a node preflight left out, cordoned or NotReady gives no verdict, naming why.
"""

from __future__ import annotations

import pytest

from draconf import cel
from draconf.claims import Claim
from draconf.devices import class_selectors
from draconf.errors import NoVerdict
from draconf.workload import DeployedWorkload, Workload, prove_allocatable

pytestmark = [pytest.mark.every_node, pytest.mark.conformance]

#: The walkthrough's first manifest: one pod, one claim from a template, one GPU.
MANIFEST = "01-single-gpu.yaml"


def pytest_generate_tests(metafunc):
    """One test per node that publishes the driver's devices (read at session start)."""
    if "gpu_node" not in metafunc.fixturenames:
        return
    nodes: list[str] = []
    if metafunc.config.getoption("draconf_every_node"):
        from draconf.pytest_plugin import collected_devices
        nodes = sorted(collected_devices(metafunc.config).devices_per_node())
    metafunc.parametrize("gpu_node", [
        pytest.param(node, id=node, marks=pytest.mark.draconf(workload="every-node", check=node))
        for node in nodes])


def node_state(api, name: str) -> str | None:
    """Why ``name`` cannot take a workload now (cordoned, NotReady), or None."""
    node = api.core.read_node(name)
    if node.spec.unschedulable:
        return f"node {name} is cordoned (spec.unschedulable)"
    ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
    if ready is None or ready.status != "True":
        return f"node {name} is NotReady ({ready.reason if ready else 'no Ready condition'})"
    return None


def free_gpus(api, profile, published, node: str) -> tuple[list, dict[str, str]]:
    """The devices of ``node`` the profile's DeviceClass selects and no claim of the cluster
    holds, and the holders of the others (device key -> ``namespace/claim``)."""
    class_cel = class_selectors(api, profile.device_class) or []
    mine = [d for d in published.devices if d.node == node and cel.evaluate_all(class_cel, d).matched]
    held = {}
    for item in api.resource.list_resource_claim_for_all_namespaces().items:
        claim = Claim(api.api_client.sanitize_for_serialization(item))
        for result in claim.results:
            held[result.key] = f"{item.metadata.namespace}/{item.metadata.name}"
    return [d for d in mine if d.key not in held], {d.key: held[d.key] for d in mine if d.key in held}


@pytest.mark.usefixtures("preflight_gate")
def test_node_allocates_injects_and_releases_a_gpu(request, gpu_node, cluster, profile, run_id,
                                                   published_devices, validated_nodes):
    """01-single-gpu.yaml pinned to the node: allocation, injection and release, as judged for
    every workload, on this node's GPU."""
    if not validated_nodes.keeps(gpu_node):
        raise NoVerdict(f"node {gpu_node} was left out by preflight: {validated_nodes.describe()}")
    if why := node_state(cluster, gpu_node):
        raise NoVerdict(f"{why}: not tested")
    free, held = free_gpus(cluster, profile, published_devices, gpu_node)
    if not free:
        holders = ", ".join(f"{key} by {who}" for key, who in sorted(held.items()))
        pytest.skip(f"busy, not tested: every {profile.device_class} GPU of {gpu_node} is held ({holders})")
    from draconf.pytest_plugin import make_namespace
    ns = make_namespace(request, cluster, run_id, f"node-{gpu_node}")
    workload = Workload("every-node", [MANIFEST], expected_pods=1, node=gpu_node)
    start = DeployedWorkload.start(cluster, ns, workload, profile, run_id.labels)
    if start.stalled:
        from draconf.pytest_plugin import trip_breaker
        trip_breaker(request.config, start.stalled, start.failure)
    if start.never_started and not start.refused_by_node and start.deployed is not None:
        # Allocation judges a workload that never started: the cluster's reason is the verdict.
        try:
            start.deployed.check_allocation(published_devices)
        except AssertionError as err:
            pytest.fail(f"node {gpu_node}: the workload never started: {start.failure} "
                        f"(allocation check: {str(err).removeprefix('allocation is wrong: ')})", pytrace=False)
        raise NoVerdict(f"node {gpu_node}: {start.no_verdict_cause}")
    if start.never_started:
        pytest.fail(f"node {gpu_node}: the container never got its GPU: {start.failure}", pytrace=False)
    deployed = start.deployed
    deployed.check_allocation(published_devices)
    deployed.check_injection(published_devices)
    deployed.check_cleanup(published_devices, lambda devices: prove_allocatable(
        cluster, ns, devices, profile, run_id.labels))
