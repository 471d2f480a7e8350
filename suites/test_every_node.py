"""Every GPU node proven, not a sample: ``draconf run --every-node`` (``-m every_node`` alone),
or every GPU of every node with ``--every-gpu``.

The walkthrough's workloads land wherever the scheduler puts them; a node whose CDI config or
plugin is broken is found only if one happens to land there.  Here, for each node that
publishes GPUs (read when the session starts), or each GPU with ``--every-gpu``,
01-single-gpu.yaml is applied pinned there and judged as every workload is: the claim allocated
a GPU of that node (that GPU), the container sees exactly it (``nvidia-smi -L``), and it is
released and allocatable again.  One test id, summary row and JUnit case per node
(``every-node/<node>``) or GPU (``every-node/<node>/<gpu>``), with its diagnosis when it fails.

The sweep runs once, when its first test starts, a bounded number of targets at a time
(``--sweep-max-gpus``, default a tenth of the published GPUs): see :mod:`draconf.sweep` for
what is proven and what is left alone on a live cluster (busy, tainted, cordoned, NotReady).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from draconf import reporting, sweep
from draconf.breaker import trip_breaker
from draconf.diagnosis.gather import cluster_read_once
from draconf.reporting import note, verdict_of
from draconf.reporting.plugin import attach_fleet_picture
from draconf.startup import stall_after
from draconf.watched import WatchedRun
from draconf.workload import prove_allocatable

pytestmark = [pytest.mark.every_node, pytest.mark.conformance]


def pytest_generate_tests(metafunc):
    """One test per node that publishes the driver's devices, or per device (read at session
    start)."""
    if "target" not in metafunc.fixturenames:
        return
    config, found = metafunc.config, []
    from draconf.pytest_plugin import collected_devices, collected_gpu_nodes, run_profile, sweeping
    if sweeping(config):
        published = collected_devices(config)
        found = sweep.targets(sweep.full_gpus(published, run_profile(config)),
                              every_gpu=config.getoption("draconf_every_gpu"))
        # A GPU node that publishes nothing is named too, not left out of the fleet.
        found += sweep.unpublished_targets(collected_gpu_nodes(config), published.devices_per_node())
    metafunc.parametrize("target", [
        pytest.param(t, id=t.id, marks=pytest.mark.draconf(workload="every-node", check=t.id))
        for t in found])


@pytest.fixture(scope="module")
def swept(request, cluster, profile, run_id, validated_nodes):
    """Every target this session collected, proven (draconf.sweep.run): target -> Proof."""
    from draconf.devices import PublishedDevices, class_selectors
    from draconf.pytest_plugin import make_namespace
    from draconf.taints import read_slices, tainted_devices
    published_devices = PublishedDevices.read(cluster, profile.driver)
    chosen = sorted({item.callspec.params["target"] for item in request.session.items
                     if item.get_closest_marker("every_node") and hasattr(item, "callspec")})
    gpus = sweep.full_gpus(validated_nodes.devices(published_devices), profile)
    at_once = sweep.bound(sum(map(len, gpus.values())), request.config.getoption("draconf_sweep_max_gpus"))
    tainted = {d.key: d for d in tainted_devices(read_slices(cluster, profile.driver))}
    class_cel = class_selectors(cluster, profile.device_class) or []
    say = logging.getLogger("draconf.sweep").info  # live in draconf run (log_cli), as every wait's progress
    say(f"sweep: {len(chosen)} target(s), at most {at_once} at a time")

    # The targets' waits read one watch of the run's pods and the cluster's claims, not
    # 80 targets polling the API server (draconf.watched); without it they poll.
    view = WatchedRun.start(cluster, run_id.labels, f"draconf-{run_id}-") if chosen else None

    # A node's freed GPUs are proven reusable together, by one probe (draconf.sweep.ReuseProbes).
    probes = sweep.ReuseProbes(chosen, lambda target, devices: prove_allocatable(
        cluster, probes.proofs[target].namespace, devices, profile, run_id.labels, list(tainted.values()), view))

    node_states = sweep.NodeStates(cluster)
    # The targets' namespaces are deleted together once every target's test has its verdict
    # (each failing one's diagnosis reads its namespace), 16 at a time.
    deletions: list = []

    def prove_one(target, proof):
        sweep.prove(cluster, profile, run_id, published_devices, validated_nodes, target, proof,
                    lambda label: make_namespace(request, cluster, run_id, label, deletions), tainted,
                    class_cel, view, probes, node_states)

    began = time.monotonic()
    try:
        # Paced by how promptly the cluster starts them (sweep.Window), well inside the time
        # after which a start no one acts on is a stalled control plane.
        proofs = sweep.run(chosen, at_once, prove_one, progress=say, probes=probes,
                           prompt=stall_after(profile) * sweep.PROMPT_SHARE)
    finally:
        if view is not None:
            view.stop()
    say(f"sweep: {len(proofs)} target(s) done in {time.monotonic() - began:.1f}s "
        f"({sweep.tally(proofs.values())})")  # the figure benchmarks/sweep_at_scale.py reads
    stalled = next((p for p in proofs.values() if p.stalled), None)
    if stalled is not None:
        trip_breaker(request.config, stalled.stalled, str(stalled.outcome))
    # The failed targets are diagnosed one after another once every target has ended, about
    # a cluster that no longer changes: the cluster-wide part of their evidence (every slice,
    # node, claim and plugin pod) is read once, for all of them, and each target's own part
    # (its namespace's pods, claims, events, what its container sees) for each.
    with cluster_read_once():
        yield proofs
    # Once every target's test has its verdict: the fleet picture in the Allure report, on the
    # sweep's teardown, which Allure shows with each of them (fleet.png is written at the end).
    attach_fleet_picture(request.config)
    if deletions:
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=16, thread_name_prefix="sweep-cleanup") as pool:
            list(pool.map(lambda delete: delete(), deletions))  # the first error, once all are done
        say(f"sweep: {len(deletions)} namespace(s) deleted in {time.monotonic() - began:.1f}s")


@pytest.mark.exclusive_capacity
@pytest.mark.usefixtures("preflight_gate")
def test_gpu_is_allocated_injected_and_released(request, target, swept):
    """01-single-gpu.yaml pinned to the target (a node, or one GPU): allocation, injection and
    release, as judged for every workload."""
    proof = swept[target]
    verdict_of(request.node).gpus = target.gpus  # the picture's squares for a node swept whole
    if proof.namespace:
        # This target's diagnosis reads its own namespace, not the sweep's last one.
        reporting.record_namespace(request, proof.namespace)
    for line in proof.notes:
        note(request.node, line, live=False)  # JUnit, Allure and debug.log: the terminal names failures
    if proof.outcome is not None:
        raise proof.outcome
