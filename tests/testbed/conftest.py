"""Fixtures that start real test beds for the project's own tests.

``healthy_bed`` is shared by the whole session; ``fault_bed(name)`` starts a bed broken in one
way.  Beds are stopped at the end unless DRACONF_KEEP_BEDS=1 (handy while iterating).
"""

from __future__ import annotations

import os

import pytest

from draconf import namespaces
from draconf.kube import connect
from draconf.testbed import inventory
from draconf.testbed.cluster import Testbed


def _start(name: str, faults: list[str], fleet: inventory.Inventory | None = None,
           driver: str = "nvidia") -> Testbed:
    bed = Testbed.named(name)
    if bed.is_up and (bed.state() or {}).get("faults") != sorted(faults):
        bed.down(log=lambda *_: None)
    bed.up(fleet or inventory.load(inventory.GUIDE_INVENTORY), faults=faults, log=lambda *_: None, driver=driver)
    return bed


def _stop(bed: Testbed) -> None:
    if os.environ.get("DRACONF_KEEP_BEDS") != "1":
        bed.down(log=lambda *_: None)


@pytest.fixture(scope="session")
def healthy_bed():
    bed = _start("selftest", [])
    yield bed
    _stop(bed)


@pytest.fixture(scope="session")
def api(healthy_bed):
    return connect(healthy_bed.kubeconfig)


@pytest.fixture
def ns(api, request):
    """A fresh namespace on the bed of the test's ``api`` (a module may bring its own bed by
    overriding ``api``), deleted afterwards."""
    name = namespaces.create(api, namespaces.RunId("selftest"), request.node.name)
    yield name
    namespaces.delete(api, name, wait=60)


@pytest.fixture(scope="module")
def kwok_gpu_bed():
    """The default fleet with every node a KWOK node: the simulation large fleets use."""
    bed = _start("selftest-kwok", [], inventory.with_node_kind(inventory.load(inventory.GUIDE_INVENTORY), "kwok"))
    yield bed
    _stop(bed)


@pytest.fixture(scope="module")
def upgrade_bed():
    """A default-fleet bed of its own: its driver gets upgraded, well and badly, in turn."""
    bed = _start("selftest-upgrade", [])
    yield bed
    _stop(bed)


@pytest.fixture(scope="module")
def example_driver_bed():
    """The default fleet's real nodes running dra-example-driver, installed from its chart."""
    bed = _start("selftest-example", [], driver="example")
    yield bed
    _stop(bed)


@pytest.fixture
def start_fault_bed():
    """Start a bed with one fault; returns (bed, api). Stopped after the test."""
    started = []

    def start(fault: str):
        bed = _start(f"selftest-{fault}", [fault])
        started.append(bed)
        return bed, connect(bed.kubeconfig)

    yield start
    for bed in started:
        _stop(bed)
