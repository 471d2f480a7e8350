"""A control-plane component stopped from outside, mid-life, the way a hung process or a node
losing its control plane looks to the suite: ``draconf run`` must name it, after stall_after
seconds of the first workload, and give every later check no verdict at once instead of a
timeout each.

The bed's kube-scheduler (then kube-controller-manager) is SIGSTOPped: the process stays, its
API connections stay open, it simply does nothing, which is what "nothing is moving" looks like
on a real cluster.  It is SIGCONTed afterwards, whatever happened, so the bed stays usable.

A bed test, not a fault-matrix row: the stop is applied to a healthy bed from outside (no bed
fault flag), and each run here costs well under a minute instead of a matrix row's ~3.  How long
the run takes is not asserted: what shows the breaker worked is that nothing waited.
"""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from draconf.devices import PublishedDevices
from draconf.profile import builtin, for_target
from draconf.waits import ControlPlaneStalled
from draconf.startup import stall_after
from draconf.workload import DeployedWorkload, Workload

from .test_cli import draconf

#: How long a run may take before the test stops it (a hang), not a bound on its speed.
RUN_TIMEOUT = 360
MANAGED_BY = "app.kubernetes.io/managed-by=draconf"


@contextmanager
def stopped(bed, component: str):
    """``component``'s process (found through the bed's own state) stopped with SIGSTOP."""
    pid = bed.state()["processes"][component]["pid"]
    assert component in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


def run_against(bed, tmp_path):
    reports = tmp_path / "reports"
    result = draconf("run", "--testbed-name", bed.name, "--reports", str(reports), timeout=RUN_TIMEOUT)
    summary = json.loads((reports / "summary.json").read_text())
    junit = next(reports.glob("*.xml")).read_text()
    return result, summary, junit


def _verdicts(summary):
    return {t["id"]: t for t in summary["tests"]}


@pytest.mark.parametrize("component, code", [
    ("kube-scheduler", "scheduler-unavailable"),
    ("kube-controller-manager", "controller-manager-unavailable"),
])
def test_stopped_component_is_named_once_and_stops_the_rest_of_the_run(healthy_bed, api, tmp_path, component,
                                                                        code):
    def ours():
        return [n.metadata.name for n in api.core.list_namespace(label_selector=MANAGED_BY).items]

    with stopped(healthy_bed, component):
        result, summary, junit = run_against(healthy_bed, tmp_path)
        while_stopped = ours()
    # With the scheduler stopped every namespace goes during the run.  With the controller-manager
    # stopped the deletions were requested and its namespace controller ends them on resuming.
    if component == "kube-scheduler":
        assert not while_stopped
    deadline = time.monotonic() + 90
    while ours() and time.monotonic() < deadline:
        time.sleep(1)
    leftover = ours()
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Traceback" not in out
    assert code in out
    tests = _verdicts(summary)
    named = [t for t in tests.values() if code in json.dumps(t)]
    assert named, f"{code} not in summary.json"
    assert code in junit
    # the workloads after the first: no verdict, with the cause, not a timeout each
    workload = [t for n, t in tests.items() if "test_workloads" in n]
    assert not any(t.get("diagnosis") == "timeout" for t in workload)
    first = workload[0]["workload"]
    assert first in out and all(t["outcome"] == "no-verdict" for t in workload if t["workload"] != first)
    assert all(t["outcome"] in ("failed", "error", "no-verdict") for t in workload if t["workload"] == first)
    # The first workload's wait ended on the stall, after stall_after seconds of nothing acting
    # (not on its schedule timeout) ...
    stalled = [t for t in workload if t["workload"] == first and t.get("diagnosis") == code]
    limit = stall_after(for_target(builtin("nvidia"), "testbed"))
    assert stalled and all(f" in {limit:.0f}s" in t["message"] for t in stalled), stalled
    # ... and the breaker then held every check of the run that needs the control plane, the
    # failure modes and features too: none was tried, none waited out a deadline.
    breaker = f"[{code}] not run: an earlier workload found the control plane not acting: "
    rest = [t for t in tests.values() if t["workload"] != first and t["outcome"] not in ("passed", "skipped")]
    assert len(rest) >= 20 and all(t["outcome"] == "no-verdict" and t["message"].startswith(breaker)
                                   for t in rest), [(t["id"], t["outcome"], t["message"]) for t in rest]
    assert not [t for t in tests.values() if t.get("diagnosis") == "timeout"
                or "timed out after " in (t.get("message") or "")], summary["tests"]
    assert not leftover


def test_claims_a_stopped_controller_manager_leaves_behind_are_its_verdict(healthy_bed, api, ns):
    """The controller-manager stops after the workload ran: its pods go (the kubelet needs no
    controller for that), but nothing deletes their generated claims.  The cleanup check names
    the controller within about stall_after seconds instead of timing out as claim-not-released."""
    profile = for_target(builtin("nvidia"), "testbed")
    start = DeployedWorkload.start(api, ns, Workload("single-gpu", ["01-single-gpu.yaml"], 1), profile)
    assert not start.never_started, start.failure
    published = PublishedDevices.read(api, profile.driver)
    with stopped(healthy_bed, "kube-controller-manager"):
        with pytest.raises(ControlPlaneStalled) as caught:
            start.deployed.check_cleanup(published, probe=lambda devices: [])
        # While it is stopped: the generated claim is still there, neither deleted nor released.
        left = [c for c in api.resource.list_namespaced_resource_claim(ns).items if not c.metadata.deletion_timestamp]
    assert caught.value.code == "controller-manager-unavailable"
    assert "resourceclaim controller did not act" in str(caught.value)
    # The verdict came once the claims had stood stall_after seconds without their consumers,
    # not at the cleanup timeout as claim-not-released (that would be a WaitTimeout).
    assert f"{stall_after(profile):.0f}s after their last consumer was gone" in str(caught.value), caught.value
    assert left and all(c.metadata.name in str(caught.value) for c in left), left
