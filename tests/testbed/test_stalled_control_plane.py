"""A control-plane component stopped from outside, mid-life, the way a hung process or a node
losing its control plane looks to the suite: ``draconf run`` must name it, fast.

The bed's kube-scheduler (then kube-controller-manager) is SIGSTOPped: the process stays, its
API connections stay open, it simply does nothing, which is what "nothing is moving" looks like
on a real cluster.  It is SIGCONTed afterwards, whatever happened, so the bed stays usable.

A bed test, not a fault-matrix row: the stop is applied to a healthy bed from outside (no bed
fault flag), and each run here costs well under a minute instead of a matrix row's ~3.
"""

from __future__ import annotations

import json
import os
import signal
import sys
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

#: The issue's bound for a whole run against a stopped scheduler.
RUN_BOUND = 180
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
    started = time.monotonic()
    result = draconf("run", "--testbed-name", bed.name, "--reports", str(reports), timeout=RUN_BOUND * 2)
    took = time.monotonic() - started
    summary = json.loads((reports / "summary.json").read_text())
    junit = next(reports.glob("*.xml")).read_text()
    return result, took, summary, junit


def _verdicts(summary):
    return {t["id"]: t for t in summary["tests"]}


@pytest.mark.parametrize("component, code", [
    ("kube-scheduler", "scheduler-unavailable"),
    ("kube-controller-manager", "controller-manager-unavailable"),
])
def test_stopped_component_ends_the_run_fast_and_is_named(healthy_bed, api, tmp_path, component, code):
    def ours():
        return [n.metadata.name for n in api.core.list_namespace(label_selector=MANAGED_BY).items]

    with stopped(healthy_bed, component):
        result, took, summary, junit = run_against(healthy_bed, tmp_path)
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
    sys.stderr.write(f"{component} stopped: draconf run took {took:.0f}s, exit {result.returncode}\n")
    assert took < RUN_BOUND, f"the run took {took:.0f}s"
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
        began = time.monotonic()
        with pytest.raises(ControlPlaneStalled) as caught:
            start.deployed.check_cleanup(published, probe=lambda devices: [])
        took = time.monotonic() - began
    sys.stderr.write(f"cleanup under a stopped controller-manager: verdict in {took:.0f}s\n")
    assert caught.value.code == "controller-manager-unavailable"
    assert "resourceclaim controller did not act" in str(caught.value)
    assert took < stall_after(profile) + 15
