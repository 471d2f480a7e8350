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
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path

import pytest

from draconf import namespaces

from .test_cli import draconf

#: The issue's bound for a whole run against a stopped scheduler.
RUN_BOUND = 180


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
    with stopped(healthy_bed, component):
        result, took, summary, junit = run_against(healthy_bed, tmp_path)
        leftover = [n.metadata.name for n in api.core.list_namespace(
            label_selector="app.kubernetes.io/managed-by=draconf").items if n.status.phase != "Terminating"]
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
    assert sum(1 for t in workload if t["outcome"] in ("no-verdict", "skipped")) >= len(workload) - 1
    assert not leftover
