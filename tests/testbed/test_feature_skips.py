"""The device-taint features' skips, shown on a real kube-apiserver v1.36.3 that lacks them.

The bed serves DeviceTaintRule (``faults.BED_GATES_ON``) and request tolerations (DRADeviceTaints,
on by default in 1.36), so its runs never show these skips.  Here etcd and one API server with
1.36's defaults for DeviceTaintRule (DRADeviceTaintRules off, resource.k8s.io/v1beta2 not served)
and DRADeviceTaints turned off are enough: the capability probes ask that server, as the feature
scenarios do before they create anything, and their skip reasons are the server's answers.
"""

from __future__ import annotations

import pytest

from draconf import capabilities
from draconf.kube import connect

from .test_old_control_plane import bare_control_plane

DRIVER, CLASS = "gpu.nvidia.com", "gpu.nvidia.com"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with bare_control_plane(tmp_path_factory.mktemp("default-gates"), "--feature-gates=DRADeviceTaints=false",
                            label="kube-apiserver (DRADeviceTaints off, DeviceTaintRule not served)") as plane:
        yield connect(plane[0])


def test_device_taint_rule_skip_is_the_servers_404(api):
    """1.36's default: DeviceTaintRule is not served, and the scenarios' skip reason says how to serve it."""
    capability = capabilities.device_taint_rules(api, DRIVER)
    assert not capability.available
    assert capability.skip_reason.startswith("DeviceTaintRule (resource.k8s.io/v1beta2) is not available on "
                                             "this cluster: the API server does not serve"), capability
    assert "--runtime-config=resource.k8s.io/v1beta2/devicetaintrules=true" in capability.skip_reason


def test_tolerations_skip_is_the_field_dropped(api):
    """DRADeviceTaints off: the API server accepts a claim whose request carries tolerations and
    drops them (no refusal), which the device-taints workload's skip reports."""
    capability = capabilities.device_taints(api, "default", CLASS)
    assert not capability.available
    assert capability.skip_reason == (
        "device taints (tolerations) is not available on this cluster: the API server dropped "
        "`spec.devices.requests.0.exactly.tolerations.0.key` from a dry-run create (its feature gate is off)")
