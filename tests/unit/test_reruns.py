"""--reruns: a failure that did not persist is run again and, passing then, reported flaky;
a verdict read from the cluster is never run again.  Real pytest runs (pytester, in a
subprocess) with pytest-rerunfailures and draconf's own plugin, which sets the rerun filter."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

pytest_plugins = ["pytester"]

TESTS = """
from pathlib import Path
import pytest
from draconf.reporting import record_diagnosis

def _attempt(name):
    mark = Path(name)
    first = not mark.exists()
    mark.touch()
    return first

@pytest.mark.draconf(workload="single-gpu", check="cdi-injection")
def test_sees_its_gpu_the_second_time(request):
    if _attempt("flake"):
        record_diagnosis(request.node, "intermittent")
        raise AssertionError("CDI injection is wrong: p/c sees no GPU: nvidia-smi -L exit 255")

@pytest.mark.draconf(workload="two-gpu", check="cdi-injection")
def test_sees_another_gpu(request):
    record_diagnosis(request.node, "cdi-wrong-device")
    raise AssertionError("CDI injection is wrong: p/c sees ['GPU-b'], allocated ['GPU-a']")

@pytest.mark.draconf(workload="deployment", check="cleanup")
@pytest.mark.flaky(reruns=0)
def test_never_rerun(request):
    if _attempt("cleanup"):
        record_diagnosis(request.node, "timeout")
        raise AssertionError("cleanup is incomplete: timed out")
"""


@pytest.fixture
def runs(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_cases=TESTS)

    def run(*args):
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-p", "pytest_rerunfailures", "-p", "draconf.pytest_plugin",
            "--draconf-reports=out", "--junitxml=out/junit.xml", *args)
        summary = json.loads((pytester.path / "out" / "summary.json").read_text())
        return result, {row["id"].split("::")[-1]: row for row in summary["tests"]}, summary
    return run


def test_a_failure_that_passes_when_run_again_is_flaky_never_plain_passed(runs, pytester):
    result, rows, summary = runs("--reruns=2")
    flaky = rows["test_sees_its_gpu_the_second_time"]
    assert flaky["outcome"] == "flaky" and flaky["reruns"] == 1, flaky
    assert flaky["failed_attempts"][0]["diagnosis"] == "intermittent"
    assert "passed on attempt 2" in flaky["message"] and "sees no GPU" in flaky["message"]
    assert summary["totals"]["flaky"] == 1 and summary["totals"]["passed"] == 0
    out = result.stdout.str()
    assert "FLAKY" in out and "flaky (failed, then passed when run again):" in out
    junit = ET.parse(pytester.path / "out" / "junit.xml").getroot()
    (case,) = [c for c in junit.iter("testcase") if c.get("name") == "test_sees_its_gpu_the_second_time"]
    assert any(p.get("name") == "draconf.flaky" and "attempt 2" in p.get("value")
               for p in case.iter("property"))


def test_a_verdict_read_from_the_cluster_is_never_run_again(runs):
    _, rows, _ = runs("--reruns=2")
    wrong = rows["test_sees_another_gpu"]
    assert wrong["outcome"] == "failed" and "reruns" not in wrong, wrong
    assert wrong["diagnosis"] == "cdi-wrong-device"


def test_a_check_marked_never_rerun_keeps_its_first_verdict(runs):
    _, rows, _ = runs("--reruns=2")
    cleanup = rows["test_never_rerun"]
    assert cleanup["outcome"] == "failed" and "reruns" not in cleanup, cleanup


def test_without_reruns_the_first_failure_stands(runs):
    _, rows, summary = runs()
    assert rows["test_sees_its_gpu_the_second_time"]["outcome"] == "failed"
    assert summary["totals"]["flaky"] == 0
