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


def test_a_fault_of_nvidias_release_is_refused_on_an_example_bed(bed, monkeypatch):
    monkeypatch.setattr(type(bed), "state", lambda self: {"driver": "example"})
    with pytest.raises(DraconfError, match="'gpu-fallen-off-bus' is made on a bed of NVIDIA's release"):
        external_faults.apply(bed, "gpu-fallen-off-bus")


def test_nvidias_release_can_be_given_every_outside_fault_and_its_own():
    assert set(external_faults.faults_for("nvidia-v0.4.0")) == \
        set(external_faults.EXTERNAL) | {"gpu-fallen-off-bus", "plugin-crashloop", "sharing-gates-off", "cdi-spec-dirs-wrong",
                                            "cdi-spec-removed", "cdi-spec-edited"}
    assert set(external_faults.faults_for("example")) == set(external_faults.EXTERNAL)
