"""Six GPU workloads x three checks: allocation, CDI injection, cleanup.

Each workload follows the source documents' walkthrough: apply the manifest from
``manifests/``, wait for its pods, then check

* **allocation** - the scheduler gave every claim published devices that satisfy its
  DeviceClass and selectors, the right number of them, reserved for the consuming pods;
* **cdi-injection** - ``nvidia-smi -L`` in each container lists exactly the allocated GPUs;
* **cleanup** - once the pods are gone, generated claims are deleted, named claims are
  deallocated, and the freed devices can be allocated again.

Selectors are chosen from what the cluster publishes: the model-selected workload asks for a
model that exists, the memory-selected one for a threshold some but not all GPUs pass.
With ``--all-models`` both also run once per published class (``model-selected/<model>``,
``memory-selected/<size>``), each selecting exactly that class (:func:`all_workloads`).

A workload that never started (the cluster refused or never ran it) still gets an allocation
verdict, read from its pods and claims with the cluster's reason; injection and cleanup then
give **no verdict** (:class:`~draconf.errors.NoVerdict`) naming that reason, as does cleanup
when nothing was allocated.  The start outcome travels as the ``started`` fixture's value.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from draconf.breaker import trip_breaker
from draconf.errors import NoVerdict
from draconf.scenarios.walkthrough import (WORKLOADS, NotBuildable, all_workloads, build_workload,
                                           check_allocation, check_cdi_injection, check_cleanup)
from draconf.workload import DeployedWorkload, Start


def pytest_generate_tests(metafunc):
    """``--all-models``: TestWorkload's workloads are :func:`all_workloads` of the devices read
    when the session started (the params of ``started`` otherwise)."""
    if metafunc.cls is not TestWorkload or not metafunc.config.getoption("draconf_all_models", False):
        return
    from draconf.pytest_plugin import collected_devices, run_profile
    names = all_workloads(collected_devices(metafunc.config), run_profile(metafunc.config))
    # A parametrize mark takes precedence over the fixture's own params.
    metafunc.definition.add_marker(pytest.mark.parametrize("started", names, indirect=True, scope="class"))


@pytest.fixture(scope="class", params=WORKLOADS)
def started(request, cluster, profile, run_id, published_devices, validated_nodes) -> Start:
    """The workload applied in its own namespace and waited for: a :class:`Start`, whose
    ``failure`` (the cluster's reason the workload never started) each check judges by.

    It is written for the devices of the GPU nodes the run validates and kept off the others."""
    from draconf.pytest_plugin import make_namespace
    validated = validated_nodes.devices(published_devices)
    if "/" in request.param and request.param not in all_workloads(validated, profile) \
            and request.param in all_workloads(published_devices, profile):
        raise NoVerdict(f"every GPU of class {request.param!r} is on a node the run does not validate "
                        f"({validated_nodes.describe()})")
    try:
        workload = replace(build_workload(request.param, validated, profile),
                           avoid_nodes=validated_nodes.avoid)
    except NotBuildable as err:
        return Start(None, err.reason, code=err.code)
    ns = make_namespace(request, cluster, run_id, request.param)
    start = DeployedWorkload.start(cluster, ns, workload, profile, run_id.labels)
    if start.stalled:
        trip_breaker(request.config, start.stalled, start.failure)
    return start


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
class TestWorkload:
    """One class instance per workload; the checks run in this order."""

    def test_allocation(self, request, started, published_devices):
        check_allocation(request, started, published_devices)

    def test_cdi_injection(self, started, published_devices):
        check_cdi_injection(started, published_devices)

    # Never run again by --reruns: it deletes the consumers, so a second attempt would find
    # nothing left to release instead of repeating the check.
    @pytest.mark.flaky(reruns=0)
    def test_cleanup(self, started, published_devices, cluster, profile, run_id):
        check_cleanup(started, published_devices, cluster, profile, run_id)
