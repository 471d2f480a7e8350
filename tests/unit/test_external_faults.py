"""draconf.testbed.external_faults refuses what it cannot do, in one line, before touching a bed.

What each fault does to a running example bed, and that it is caught and mended, is the bed
test tests/testbed/test_example_external_faults.py."""

import pytest

from draconf.errors import DraconfError
from draconf.testbed import external_faults
from draconf.testbed.cluster import Testbed


@pytest.fixture
def bed(tmp_path, monkeypatch):
    monkeypatch.setenv("DRACONF_STATE_DIR", str(tmp_path))
    return Testbed.named("nowhere")


def test_a_fault_made_inside_the_driver_is_refused(bed):
    with pytest.raises(DraconfError, match="'cdi-wrong-device' is not a fault made from outside the driver"):
        external_faults.apply(bed, "cdi-wrong-device")


def test_a_bed_not_running_the_example_driver_is_refused(bed):
    with pytest.raises(DraconfError, match="runs the nvidia driver; .* `draconf testbed up --fault NAME`"):
        external_faults.apply(bed, "gpu-nodes-tainted")
