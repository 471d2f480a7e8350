"""The run's verdict: a run is green only when every check that applies passed.

Each inner session runs with the reporting plugin registered and plugin autoloading off (as in
test_reporting.py); what is asserted is what a user reads: the exit status, summary.json's
``verdict``, the terminal line and JUnit's suite property.
"""

import json
import xml.etree.ElementTree as ET

import pytest

from draconf.reporting.run_verdict import EXIT_INCONCLUSIVE, INCONCLUSIVE, NOTHING_PASSED, judge_run

pytest_plugins = ["pytester"]

CONFTEST = """
from draconf.reporting import ReportingPlugin, pytest_addoption  # noqa: F401

def pytest_configure(config):
    config.pluginmanager.register(ReportingPlugin(config), "draconf-reporting")
"""

PASSES = "def test_allocates():\n    assert True\n"
SKIPS = "import pytest\n\ndef test_mig():\n    pytest.skip('no MIG device published')\n"
NO_VERDICT = """
from draconf.errors import NoVerdict

def test_sees_its_gpu():
    raise NoVerdict("workload never started: pod gpu-test1 is Pending")

def test_releases():
    raise NoVerdict("workload never started: pod gpu-test1 is Pending")
"""
REFUSED_PROBE = """
from draconf.errors import NoVerdict

def test_admin_access():
    raise NoVerdict("admin access could not be probed: admission webhook \\"deny.example.com\\" refused the "
                    "probe", code="admission-denied")
"""
FAILS = "def test_breaks():\n    assert False, 'sees no GPU'\n"


@pytest.fixture
def session(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)

    def run(*args, **files):
        pytester.makepyfile(**files)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--draconf-reports=out",
                                               "--junitxml=junit.xml", *args)
        summary = json.loads((pytester.path / "out" / "summary.json").read_text())
        suite = ET.parse(pytester.path / "junit.xml").getroot().find("testsuite")
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        return result, summary, props
    return run


def test_checks_without_a_verdict_make_the_run_inconclusive_in_every_channel(session):
    result, summary, junit = session(test_a=PASSES, test_b=NO_VERDICT)
    assert result.ret == EXIT_INCONCLUSIVE
    verdict = summary["verdict"]
    assert verdict["status"] == INCONCLUSIVE and verdict["exit_code"] == EXIT_INCONCLUSIVE
    assert verdict["reasons"] == {"workload never started": 2}
    assert summary["run"]["exit_status"] == EXIT_INCONCLUSIVE
    line = "INCONCLUSIVE: 2 without a verdict: 2 workload never started"
    assert f"run verdict: {line}" in result.stdout.str()
    assert junit["draconf.verdict"] == line


def test_a_run_of_skips_only_is_never_green(session):
    result, summary, junit = session(test_a=SKIPS)
    assert result.ret == EXIT_INCONCLUSIVE
    assert summary["verdict"]["line"] == f"INCONCLUSIVE: {NOTHING_PASSED}" == junit["draconf.verdict"]


def test_a_pass_beside_checks_that_do_not_apply_is_green(session):
    result, summary, junit = session(test_a=PASSES, test_b=SKIPS)
    assert result.ret == 0 and summary["verdict"]["status"] == "PASS" == junit["draconf.verdict"]


def test_a_failure_outranks_checks_without_a_verdict(session):
    result, summary, _ = session(test_a=FAILS, test_b=NO_VERDICT)
    assert result.ret == 1 and summary["verdict"]["status"] == "FAIL"


def test_a_partial_run_is_green_only_when_asked(session):
    result, summary, junit = session("--draconf-allow-inconclusive", test_a=PASSES, test_b=NO_VERDICT)
    assert result.ret == 0
    assert summary["verdict"]["accepted"] and summary["verdict"]["status"] == INCONCLUSIVE
    assert junit["draconf.verdict"].startswith("INCONCLUSIVE (accepted by --allow-inconclusive)")


def test_reasons_are_grouped_most_first_and_by_diagnosis_when_there_is_one():
    rows = [{"outcome": "passed"},
            {"outcome": "no-verdict", "diagnosis": "node-excluded", "message": "gpu-node-b is excluded"},
            {"outcome": "no-verdict", "message": "workload never started: pod a is Pending"},
            {"outcome": "no-verdict", "diagnosis": "node-excluded", "message": "gpu-node-c is excluded"},
            {"outcome": "not-run", "message": "never ran: the run was interrupted"}]
    verdict = judge_run(rows)
    assert list(verdict.unjudged.items()) == [("node-excluded", 2), ("workload never started", 1),
                                               ("not run (interrupted)", 1)]
    assert verdict.exit_code == EXIT_INCONCLUSIVE


def test_a_flaky_pass_is_a_pass():
    assert judge_run([{"outcome": "flaky"}]).status == "PASS"


def test_a_no_verdict_that_names_its_cause_gives_its_code_in_every_channel(session):
    """A probe an admission webhook refused: the row carries admission-denied, and the run's
    reasons group by it, not by the first words of the sentence."""
    result, summary, junit = session(test_a=PASSES, test_b=REFUSED_PROBE)
    assert result.ret == EXIT_INCONCLUSIVE
    row = next(r for r in summary["tests"] if r["id"].endswith("test_admin_access"))
    assert row["outcome"] == "no-verdict" and row["diagnosis"] == "admission-denied", row
    assert summary["verdict"]["reasons"] == {"admission-denied": 1}
    assert junit["draconf.verdict"] == "INCONCLUSIVE: 1 without a verdict: 1 admission-denied"
