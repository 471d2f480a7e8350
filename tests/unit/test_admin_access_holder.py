"""Where admin-access's GPU in use may land: a held GPU that consumes counters (DynamicMIG) cannot
be given to the monitor by Kubernetes 1.36's allocator, so the holder is kept on GPUs that consume
none when the cluster has both kinds (pure function of draconf/scenarios/admin_access.py)."""

import pytest

from draconf.scenarios import admin_access
from draconf.devices import Device, PublishedDevices
from draconf.errors import NoVerdict
from draconf.profile import resolve

DRIVER = "gpu.nvidia.com"
CLASS_CEL = [f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"]


def gpu(node: str, n: int, partitionable: bool, kind: str = "gpu") -> Device:
    attrs = {f"{DRIVER}/type": kind, f"{DRIVER}/uuid": f"GPU-{node}-{n}"}
    sets = (f"gpu-{n}-counter-set",) if partitionable else ()
    return Device(DRIVER, node, f"gpu-{n}", node, attrs, {}, sets)


@pytest.fixture
def profile():
    return resolve("nvidia")


def test_a_mixed_fleet_keeps_the_holder_on_gpus_that_consume_no_counters(profile):
    fleet = PublishedDevices(DRIVER, [gpu("h100", 0, True), gpu("h100", 1, True),
                                      gpu("a100", 0, False), gpu("a100", 1, False)])
    chosen = admin_access.holder_selectors(CLASS_CEL, profile, fleet)
    [selector] = chosen[admin_access.HOLDER_CLAIM]
    assert "GPU-a100-0" in selector.cel and "GPU-a100-1" in selector.cel
    assert "GPU-h100" not in selector.cel


def test_a_fleet_of_one_kind_gets_the_manifest_as_written(profile):
    fleet = PublishedDevices(DRIVER, [gpu("a100", 0, False), gpu("a100", 1, False),
                                      gpu("a100", 2, False, kind="mig")])
    assert admin_access.holder_selectors(CLASS_CEL, profile, fleet) == {}


def test_a_fleet_where_every_gpu_consumes_counters_gives_no_verdict_naming_why(profile):
    fleet = PublishedDevices(DRIVER, [gpu("h100", 0, True), gpu("h100", 1, True),
                                      gpu("a100", 0, False, kind="mig")])
    with pytest.raises(NoVerdict, match="consumes shared counters"):
        admin_access.holder_selectors(CLASS_CEL, profile, fleet)
