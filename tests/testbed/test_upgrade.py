"""The upgrade gate end to end: baseline, the bed's driver upgraded well or badly, compare.

Each step rolls the kubelet-plugin DaemonSet on the real nodes (pods restart, slices are
republished with the new driver version); the comparison must flag exactly what the bad
upgrade did, and nothing for a good one.
"""

from __future__ import annotations

import pytest

from draconf import baseline
from draconf.kube import connect
from draconf.profile import builtin
from draconf.testbed import inventory
from draconf.testbed.upgrade import upgrade

PROFILE = builtin("nvidia")


@pytest.fixture
def bed(upgrade_bed):
    return upgrade_bed


def regressions_after(bed, **how) -> tuple[list[str], list[str]]:
    api = connect(bed.kubeconfig)
    before = baseline.snapshot(api, PROFILE)
    upgrade(bed, log=lambda *_: None, **how)
    changes = baseline.compare(before, baseline.snapshot(api, PROFILE))
    return [str(c) for c in changes if c.regression], [str(c) for c in changes if not c.regression]


def test_a_good_upgrade_compares_clean(bed):
    regressions, others = regressions_after(bed, driver_version="580.105.08")
    assert regressions == [] and others == ["change driver: versions ['580.95.5'] -> ['580.105.8']"]


def test_lost_gpus_are_named_on_their_node(bed):
    regressions, _ = regressions_after(bed, bad="gpus-lost")
    first = sorted(n.name for n in inventory.load(inventory.GUIDE_INVENTORY).gpu_nodes if n.kind == "real")[0]
    count = len(inventory.load(inventory.GUIDE_INVENTORY).node(first).gpus)
    assert regressions == [f"REGRESSION node {first}: GPUs {count} -> {count - 1}"]


def test_a_changed_deviceclass_is_named(bed):
    regressions, _ = regressions_after(bed, bad="deviceclass-changed")
    assert len(regressions) == 1 and regressions[0].startswith("REGRESSION DeviceClass gpu.nvidia.com: selectors")
    assert "brand == 'Nvidia'" in regressions[0]


def test_a_renamed_attribute_is_named_on_every_node(bed):
    regressions, _ = regressions_after(bed, bad="attribute-renamed")
    nodes = sorted(n.name for n in inventory.load(inventory.GUIDE_INVENTORY).gpu_nodes)
    assert [r for r in regressions if "attribute" in r] == [
        f"REGRESSION node {n}: attribute gpu.nvidia.com/productName removed" for n in nodes]
    # The model is read from that attribute, so it is gone with it, and nothing else changed.
    assert len(regressions) == 2 * len(nodes) and all("models" in r for r in regressions if "attribute" not in r)
