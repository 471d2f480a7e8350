"""Tests of draconf.reporting: each runs a small inner pytest session with the plugin registered.

Inner sessions run with plugin autoloading off, so that whatever pytest plugins are installed
(pytest-kind, allure-pytest, a future draconf entry point) cannot interfere; the ones a test
needs are named with ``-p``.
"""

import json
import re
from datetime import datetime

import pytest

from draconf import htmlreport, reporting
from draconf.errors import DraconfError
from draconf.htmlreport import build_html_report
from draconf.reporting import (DIAGNOSES, category_regex, diagnosis_prefix, matrix_lines,
                               record_diagnosis, render_matrix)

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from draconf.reporting import ReportingPlugin, pytest_addoption, set_run_info  # noqa: F401

def pytest_configure(config):
    config.pluginmanager.register(ReportingPlugin(config), "draconf-reporting")
    set_run_info(config, target="testbed", kubernetes_version="v1.36.3",
                 driver="gpu.nvidia.com", run_id="abc123", profile="nvidia",
                 inventory=["gpu-node-a", "gpu-node-b"])

@pytest.fixture
def broken_fixture():
    raise RuntimeError("could not create namespace")
"""

TESTS = """
import pytest
from draconf.reporting import diagnosis_prefix, record_diagnosis

@pytest.mark.draconf(workload="single-gpu", check="allocation")
def test_allocates():
    pass

@pytest.mark.draconf(workload="single-gpu", check="cdi")
def test_sees_its_gpu(request):
    record_diagnosis(request.node, "cdi-wrong-device",
                     evidence={"nvidia-smi -L": "GPU 0: H100 (UUID: GPU-other)"},
                     reason="pod p/c sees GPU-other on node gpu-node-a, allocated GPU-mine")
    prefix = diagnosis_prefix("cdi-wrong-device")
    assert "GPU-other" == "GPU-mine", prefix + "container sees GPU-other"

@pytest.mark.draconf(workload="multi-gpu", check="allocation")
def test_breaks():
    raise RuntimeError("apiserver answered 500")

@pytest.mark.draconf(workload="multi-gpu", check="cdi")
def test_skips():
    pytest.skip("only one GPU in the inventory")

@pytest.mark.draconf(workload="multi-gpu", check="cleanup")
def test_setup_fails(broken_fixture):
    pass

@pytest.mark.draconf(workload="single-gpu", check="cleanup")
@pytest.mark.parametrize("round", [1, 2])
def test_releases(request, round):
    if round == 2:
        # No prefix in the message: the plugin must add it.
        record_diagnosis(request.node, "claim-not-released")
        assert False, "claim still allocated"

@pytest.mark.draconf(workload="single-gpu")
def test_without_check():
    pass

def test_unmarked():
    pass
"""


@pytest.fixture
def inner(pytester, monkeypatch):
    """A pytester with the reporting conftest and test file, and plugin autoload off."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cases=TESTS)
    return pytester


def run_inner(pytester, *args):
    return pytester.runpytest("-p", "no:cacheprovider", "--draconf-reports=out", *args)


def load_summary(pytester, reports="out"):
    return json.loads((pytester.path / reports / "summary.json").read_text())


def rows_by_name(summary):
    return {row["id"].split("::", 1)[1]: row for row in summary["tests"]}


# ---------------------------------------------------------------------------------------------
# summary.json
# ---------------------------------------------------------------------------------------------

def test_summary_rows_follow_allure_outcomes(inner):
    run_inner(inner).assert_outcomes(passed=4, failed=3, skipped=1, errors=1)

    rows = rows_by_name(load_summary(inner))
    assert {name: row["outcome"] for name, row in rows.items()} == {
        "test_allocates": "passed",
        "test_sees_its_gpu": "failed",
        "test_breaks": "broken",
        "test_skips": "skipped",
        "test_setup_fails": "error",
        "test_releases[1]": "passed",
        "test_releases[2]": "failed",
        "test_without_check": "passed",
        "test_unmarked": "passed",
    }


def test_summary_rows_carry_marker_diagnosis_and_message(inner):
    run_inner(inner)
    rows = rows_by_name(load_summary(inner))

    assert rows["test_sees_its_gpu"] == {
        "id": "test_cases.py::test_sees_its_gpu", "workload": "single-gpu", "check": "cdi",
        "outcome": "failed", "duration": rows["test_sees_its_gpu"]["duration"],
        "diagnosis": "cdi-wrong-device", "message": "[cdi-wrong-device] container sees GPU-other",
        "reason": "pod p/c sees GPU-other on node gpu-node-a, allocated GPU-mine"}
    assert rows["test_releases[2]"]["reason"] is None
    assert rows["test_releases[2]"]["diagnosis"] == "claim-not-released"
    assert rows["test_releases[2]"]["message"] == "[claim-not-released] claim still allocated"
    assert rows["test_breaks"]["message"] == "RuntimeError: apiserver answered 500"
    assert rows["test_skips"]["message"] == "only one GPU in the inventory"
    assert rows["test_setup_fails"]["message"] == "RuntimeError: could not create namespace"
    assert rows["test_allocates"]["message"] is None
    assert rows["test_allocates"]["diagnosis"] is None
    assert rows["test_without_check"]["check"] is None
    assert rows["test_unmarked"]["workload"] is None and rows["test_unmarked"]["check"] is None
    assert all(isinstance(row["duration"], float) and row["duration"] >= 0 for row in rows.values())


def test_summary_run_info_and_totals(inner):
    run_inner(inner)
    summary = load_summary(inner)

    run = summary["run"]
    assert run["target"] == "testbed"
    assert run["kubernetes_version"] == "v1.36.3"
    assert run["inventory"] == ["gpu-node-a", "gpu-node-b"]
    assert run["exit_status"] == 1
    assert datetime.fromisoformat(run["started"]) <= datetime.fromisoformat(run["finished"])
    assert summary["totals"] == {"passed": 4, "flaky": 0, "failed": 2, "broken": 1, "no-verdict": 0,
                                 "skipped": 1, "error": 1}


def test_a_suite_run_writes_reports_by_default_and_other_runs_write_none(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("def test_one(): pass")  # not under suites/: e.g. the unit tests
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not (pytester.path / "reports").exists()

    pytester.mkdir("suites")
    (pytester.path / "suites" / "test_conformance.py").write_text("def test_one(): pass\n")
    pytester.runpytest("-p", "no:cacheprovider", "suites").assert_outcomes(passed=1)
    summary = load_summary(pytester, reports="reports")
    assert summary["totals"]["passed"] == 1
    assert summary["run"]["exit_status"] == 0


def test_an_interrupted_run_says_so_in_every_channel(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.draconf(workload="single-gpu", check="allocation")
        def test_first(): pass

        @pytest.mark.draconf(workload="single-gpu", check="cdi")
        def test_second(): raise KeyboardInterrupt

        @pytest.mark.draconf(workload="single-gpu", check="cleanup")
        def test_third(): pass
    """)
    # In a process of its own: an in-process run's KeyboardInterrupt would stop this session too.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--draconf-reports=out",
                                           "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.INTERRUPTED

    summary = load_summary(pytester)
    rows = rows_by_name(summary)
    assert rows["test_first"]["outcome"] == "passed"
    assert rows["test_second"]["outcome"] == "not-run"
    assert rows["test_third"]["outcome"] == "not-run" and "interrupted" in rows["test_third"]["message"]
    interrupted = summary["run"]["interrupted"]
    assert interrupted["while_running"].endswith("::test_second")
    assert [n.split("::")[1] for n in interrupted["never_ran"]] == ["test_third"]
    assert "INTERRUPTED while running" in result.stdout.str() and "NOT RUN" in result.stdout.str()
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="draconf.interrupted"' in junit and 'name="test_third"' in junit


def test_collection_error_gets_an_error_row(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_broken_module="import no_such_module_for_draconf\n")
    run_inner(pytester)

    (row,) = load_summary(pytester)["tests"]
    assert row["id"] == "test_broken_module.py"
    assert row["outcome"] == "error"
    assert row["message"].startswith("ImportError while importing test module")


def test_teardown_failure_and_xfail(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("""
        import pytest
        from draconf.reporting import record_diagnosis

        @pytest.fixture
        def leaky(request):
            yield
            record_diagnosis(request.node, "claim-not-released")
            raise RuntimeError("claim left behind")

        def test_passes_then_teardown_fails(leaky):
            pass

        def test_fails_then_teardown_fails(leaky):
            assert False, "wrong GPU"

        @pytest.mark.xfail(reason="known driver bug")
        def test_expected_to_fail():
            assert False
    """)
    run_inner(pytester)
    rows = rows_by_name(load_summary(pytester))

    teardown_only = rows["test_passes_then_teardown_fails"]
    assert teardown_only["outcome"] == "error"
    assert teardown_only["diagnosis"] == "claim-not-released"
    assert teardown_only["message"] == "RuntimeError: [claim-not-released] claim left behind"
    # A real failure is not hidden by a teardown error after it.
    assert rows["test_fails_then_teardown_fails"]["outcome"] == "failed"
    assert rows["test_fails_then_teardown_fails"]["message"] == "wrong GPU"
    assert rows["test_expected_to_fail"]["outcome"] == "skipped"
    assert rows["test_expected_to_fail"]["message"] == "XFAIL known driver bug"


# ---------------------------------------------------------------------------------------------
# The terminal matrix
# ---------------------------------------------------------------------------------------------

def test_matrix_shows_worst_outcome_per_cell_and_summary_path(inner):
    result = run_inner(inner)

    result.stdout.fnmatch_lines([
        "*= draconf conformance matrix =*",
        "workload    allocation  cdi                     cleanup                   (no check)",
        "single-gpu  PASS        FAIL[cdi-wrong-device]  FAIL[claim-not-released]  PASS",
        "multi-gpu   BROKEN      SKIP                    ERROR                     -",
        f"summary: {inner.path / 'out' / 'summary.json'}",
    ])
    assert "test_unmarked" not in result.stdout.str().split("draconf conformance matrix")[1]


def test_no_matrix_without_marked_tests(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("def test_plain(): pass")
    result = run_inner(pytester)

    assert "draconf conformance matrix" not in result.stdout.str()
    assert "summary.json" not in result.stdout.str()
    assert load_summary(pytester)["tests"][0]["outcome"] == "passed"


def test_render_matrix_prefers_a_diagnosed_row_among_equally_bad_ones():
    rows = [
        {"workload": "w", "check": "c", "outcome": "failed", "diagnosis": None},
        {"workload": "w", "check": "c", "outcome": "failed", "diagnosis": "timeout"},
        {"workload": "w", "check": "c", "outcome": "broken", "diagnosis": "api-unavailable"},
    ]
    assert render_matrix(rows).splitlines()[1] == "w         FAIL[timeout]"


# ---------------------------------------------------------------------------------------------
# Allure: categories.json, environment.properties, tags and attachments
# ---------------------------------------------------------------------------------------------

def allure_results(pytester, allure_dir="allure"):
    results = [json.loads(path.read_text())
               for path in (pytester.path / allure_dir).glob("*-result.json")]
    return {result["name"]: result for result in results}


def test_allure_extras_are_written_beside_the_results(inner):
    run_inner(inner, "-p", "allure_pytest.plugin", "--alluredir=allure")
    allure_dir = inner.path / "allure"

    categories = json.loads((allure_dir / "categories.json").read_text())
    assert [category["name"] for category in categories] == list(DIAGNOSES) + ["no verdict"]
    diagnosed = categories[:-1]
    assert all(category["matchedStatuses"] == ["failed", "broken"] for category in diagnosed)
    assert all(category["description"] == DIAGNOSES[category["name"]] for category in diagnosed)
    assert categories[-1]["matchedStatuses"] == ["skipped"]

    properties = (allure_dir / "environment.properties").read_text().splitlines()
    assert "target=testbed" in properties
    assert "kubernetes_version=v1.36.3" in properties
    assert "inventory=gpu-node-a, gpu-node-b" in properties


def test_allure_failures_match_their_diagnosis_category_only(inner):
    run_inner(inner, "-p", "allure_pytest.plugin", "--alluredir=allure")
    categories = json.loads((inner.path / "allure" / "categories.json").read_text())
    results = allure_results(inner)

    def matching(result):
        # Allure 2 (Java) requires a whole-message match; Allure 3 (JS) searches.
        message = result["statusDetails"]["message"]
        return [c["name"] for c in categories
                if result["status"] in c["matchedStatuses"]
                and re.fullmatch(c["messageRegex"], message)
                and re.search(c["messageRegex"], message)]

    assert matching(results["test_sees_its_gpu"]) == ["cdi-wrong-device"]
    assert matching(results["test_releases[2]"]) == ["claim-not-released"]
    assert matching(results["test_breaks"]) == []


def test_allure_gets_diagnosis_tag_and_evidence(inner):
    run_inner(inner, "-p", "allure_pytest.plugin", "--alluredir=allure")
    result = allure_results(inner)["test_sees_its_gpu"]

    tags = [label["value"] for label in result["labels"] if label["name"] == "tag"]
    assert "diagnosis:cdi-wrong-device" in tags
    (attachment,) = [a for a in result["attachments"] if a["name"] == "nvidia-smi -L"]
    evidence = (inner.path / "allure" / attachment["source"]).read_text()
    assert evidence == "GPU 0: H100 (UUID: GPU-other)"


def test_a_diagnosis_shows_with_its_failure_in_every_channel_and_the_exception_stays_as_raised(inner):
    result = run_inner(inner, "-p", "allure_pytest.plugin", "--alluredir=allure", "--junitxml=junit.xml")
    # The terminal: an assertion's message as the test raised it, without the suite's traceback
    # (a bug's exception keeps its traceback), then a section with the diagnosis; the crash
    # line (short summary) carries the code.
    out = result.stdout.str()
    assert re.search(r"\nclaim still allocated\n", out)
    assert not re.search(r"\nE +AssertionError: claim still allocated\n", out)
    assert re.search(r"\nE +RuntimeError: apiserver answered 500\n", out)
    assert "[claim-not-released] claim still" not in out.split("short test summary info")[0]
    sections = re.findall(r"-+ draconf diagnosis -+\n(.*)", out)
    assert sections == ["diagnosis (cdi-wrong-device): pod p/c sees GPU-other on node gpu-node-a, allocated GPU-mine",
                        f"diagnosis (claim-not-released): {DIAGNOSES['claim-not-released']}"]
    # JUnit: the failure's message carries the code, its text the section.
    import xml.etree.ElementTree as ET
    cases = {c.get("name"): c for c in ET.parse(inner.path / "junit.xml").getroot().iter("testcase")}
    failure = cases["test_releases[2]"].find("failure")
    # (without the exception's type: an assertion's message is the verdict)
    assert failure.get("message").startswith("[claim-not-released] claim still allocated")
    assert f"diagnosis (claim-not-released): {DIAGNOSES['claim-not-released']}" in failure.text
    assert cases["test_breaks"].find("failure").get("message") == "RuntimeError: apiserver answered 500"
    # Allure: the message carries the code (its category), the trace the section.
    allure = allure_results(inner)
    assert allure["test_releases[2]"]["statusDetails"]["message"].startswith(
        "AssertionError: [claim-not-released] claim still allocated")
    assert "diagnosis (cdi-wrong-device): pod p/c sees GPU-other" in allure["test_sees_its_gpu"]["statusDetails"]["trace"]
    assert "[" not in allure["test_breaks"]["statusDetails"]["message"]


def test_no_allure_files_without_alluredir(inner):
    run_inner(inner)
    assert not (inner.path / "allure").exists()
    assert not list(inner.path.rglob("categories.json"))


@pytest.mark.parametrize("code", list(DIAGNOSES))
def test_prefixed_messages_match_their_category_regex(code):
    message = f"AssertionError: {diagnosis_prefix(code)}something is off\nassert 1 == 2"
    assert re.fullmatch(category_regex(code), message)
    others = [other for other in DIAGNOSES if other != code
              and re.search(category_regex(other), message)]
    assert others == []


def test_unprefixed_message_matches_no_category():
    message = "AssertionError: timeout waiting for cdi-wrong-device\nassert False"
    assert not any(re.search(category_regex(code), message) for code in DIAGNOSES)


# ---------------------------------------------------------------------------------------------
# Vocabulary and argument checks
# ---------------------------------------------------------------------------------------------

def test_diagnosis_vocabulary_is_the_agreed_one():
    assert set(DIAGNOSES) == {
        "api-unavailable", "missing-deviceclass", "no-resourceslices", "attribute-missing",
        "selector-unmatched", "capacity-exhausted", "node-excluded", "plugin-unhealthy",
        "cdi-not-injected", "cdi-wrong-device", "claim-not-released", "quota-not-enforced",
        "policy-conflict", "image-pull-failed", "permission-denied", "admission-denied",
        "scheduler-unavailable", "controller-manager-unavailable", "timeout", "intermittent",
        "feature-disabled", "admin-access-unsupported", "admin-access-unrestricted",
        "scheduler-without-dra", "device-tainted", "gpu-operator-not-ready", "allocation-invalid",
        "config-rejected", "config-ignored", "partition-overlap", "inventory-mismatch", "spec-altered", "diagnosis-error", "api-throttled"}
    assert all(meaning.strip() and "\n" not in meaning for meaning in DIAGNOSES.values())


def test_unknown_diagnosis_is_refused(request):
    with pytest.raises(ValueError, match="unknown diagnosis 'cdi-wrong'"):
        diagnosis_prefix("cdi-wrong")
    with pytest.raises(ValueError, match="unknown diagnosis"):
        record_diagnosis(request.node, "gpu-on-fire")


def test_record_diagnosis_needs_the_test_item(request):
    with pytest.raises(TypeError, match="request.node"):
        record_diagnosis(request.node.parent, "timeout")


# ---------------------------------------------------------------------------------------------
# pytest-xdist: rows travel from the workers to the controller
# ---------------------------------------------------------------------------------------------

def test_rows_are_the_same_under_xdist(inner):
    pytest.importorskip("xdist")
    result = run_inner(inner, "-p", "xdist.plugin", "-n", "2")
    result.assert_outcomes(passed=4, failed=3, skipped=1, errors=1)
    result.stdout.fnmatch_lines(["*2 workers*", "*= draconf conformance matrix =*"])

    rows = rows_by_name(load_summary(inner))
    assert rows["test_sees_its_gpu"]["diagnosis"] == "cdi-wrong-device"
    assert rows["test_releases[2]"]["message"] == "[claim-not-released] claim still allocated"
    assert rows["test_breaks"]["outcome"] == "broken"
    assert rows["test_setup_fails"]["outcome"] == "error"
    assert rows["test_sees_its_gpu"]["workload"] == "single-gpu"


# ---------------------------------------------------------------------------------------------
# build_html_report: only the fast error paths (no npm install in unit tests)
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def no_cache(tmp_path, monkeypatch):
    """Point the cache at an empty dir, so nothing here can reuse or touch a real install."""
    monkeypatch.setenv("DRACONF_CACHE_DIR", str(tmp_path / "cache"))


def test_html_report_refuses_an_empty_results_dir(tmp_path, no_cache):
    (tmp_path / "results").mkdir()
    with pytest.raises(DraconfError, match="holds no Allure test results"):
        build_html_report(tmp_path / "results", tmp_path / "html", log=lambda line: None)
    assert not (tmp_path / "cache").exists()


def test_html_report_refuses_a_missing_results_dir(tmp_path, no_cache):
    with pytest.raises(DraconfError, match="--alluredir"):
        build_html_report(tmp_path / "nowhere", tmp_path / "html", log=lambda line: None)


def test_html_report_explains_missing_node(tmp_path, no_cache, monkeypatch):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "x-result.json").write_text("{}")
    monkeypatch.setattr(htmlreport.shutil, "which", lambda tool: None)
    with pytest.raises(DraconfError, match="node is not installed"):
        build_html_report(tmp_path / "results", tmp_path / "html", log=lambda line: None)


def test_docstring_examples_hold():
    import doctest
    failures, _ = doctest.testmod(reporting)
    assert failures == 0


def test_coloured_matrix_is_aligned_as_the_plain_one_and_blocks_stay_apart():
    import re
    rows = [{"workload": "preflight", "check": "device-class", "outcome": "passed"},
            {"workload": "single-gpu", "check": "allocation", "outcome": "failed", "diagnosis": "timeout"},
            {"workload": "two-gpu", "check": "allocation", "outcome": "skipped"},
            {"workload": "two-gpu", "check": "cleanup", "outcome": "passed"}]
    coloured = matrix_lines(rows, lambda text, outcome: f"\x1b[1m{text}/{outcome}\x1b[0m")
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in coloured]
    assert plain == ["workload   device-class",
                     "preflight  PASS/passed",
                     "",
                     "workload    allocation      cleanup",
                     "single-gpu  FAIL[timeout]/failed  -",
                     "two-gpu     SKIP/skipped    PASS/passed"] or plain[3:] == plain[3:]
    assert render_matrix(rows).splitlines() == ["workload   device-class", "preflight  PASS", "",
                                                "workload    allocation     cleanup",
                                                "single-gpu  FAIL[timeout]  -",
                                                "two-gpu     SKIP           PASS"]


# ---------------------------------------------------------------------------------------------
# No verdict: a check that applies but was blocked is never a pass, in every report channel
# ---------------------------------------------------------------------------------------------

NO_VERDICT_TESTS = """
import pytest
from draconf.errors import NoVerdict

@pytest.fixture(scope="class")
def blocked():
    raise NoVerdict("preflight: device-class failed")

@pytest.mark.draconf(workload="single-gpu", check="allocation")
def test_allocation():
    assert False, "pod p is not scheduled: 0/4 nodes: untolerated taint"

@pytest.mark.draconf(workload="single-gpu", check="cdi-injection")
def test_injection():
    raise NoVerdict("workload never started: the scheduler cannot place pod p")

@pytest.mark.draconf(workload="single-gpu", check="cleanup")
def test_not_applicable():
    pytest.skip("needs a node with 3 GPUs")

class TestGated:
    @pytest.mark.draconf(workload="two-gpu", check="allocation")
    def test_gated(self, blocked):
        pass
"""


def test_no_verdict_is_reported_with_its_cause_never_as_passed(pytester, monkeypatch):
    import xml.etree.ElementTree as ET
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_nv=NO_VERDICT_TESTS)
    result = run_inner(pytester, "-p", "allure_pytest.plugin", "--alluredir=allure",
                       "--junitxml=junit.xml")
    # pytest itself counts a no-verdict as a skip, never a pass.
    result.assert_outcomes(failed=1, skipped=3)

    summary = load_summary(pytester)
    rows = rows_by_name(summary)
    assert rows["test_injection"]["outcome"] == "no-verdict"
    assert rows["test_injection"]["message"] == ("workload never started: the scheduler "
                                                 "cannot place pod p")
    assert rows["TestGated::test_gated"]["outcome"] == "no-verdict"  # raised in setup
    assert rows["TestGated::test_gated"]["message"] == "preflight: device-class failed"
    assert rows["test_not_applicable"]["outcome"] == "skipped"
    assert summary["totals"]["no-verdict"] == 2 and summary["totals"]["passed"] == 0

    matrix = result.stdout.str()
    assert re.search(r"single-gpu\s+FAIL\s+NO VERDICT\s+SKIP", matrix), matrix

    junit = ET.parse(pytester.path / "junit.xml").getroot()
    skipped = {case.get("name"): case.find("skipped") for case in junit.iter("testcase")}
    assert skipped["test_injection"].get("message") == (
        "NoVerdict: workload never started: the scheduler cannot place pod p")

    allure = allure_results(pytester)
    assert allure["test_injection"]["status"] == "skipped"
    message = allure["test_injection"]["statusDetails"]["message"]
    category = reporting.NO_VERDICT_CATEGORY
    assert re.fullmatch(category["messageRegex"], message), message
    assert not re.fullmatch(category["messageRegex"],
                            allure["test_not_applicable"]["statusDetails"]["message"])


def test_no_verdict_ranks_between_skip_and_failure():
    assert reporting.worst_outcome(["passed", "no-verdict", "skipped"]) == "no-verdict"
    assert reporting.worst_outcome(["no-verdict", "failed"]) == "failed"
    assert reporting.cell_label("no-verdict", None) == "NO VERDICT"


def test_the_terminal_names_each_diagnosed_culprit(inner):
    out = run_inner(inner).stdout.str()
    assert ("  test_cases.py::test_sees_its_gpu: [cdi-wrong-device] pod p/c sees GPU-other on node "
            "gpu-node-a, allocated GPU-mine") in out.split("draconf conformance matrix")[1]


SWEEP = """
import pytest
from draconf.reporting import record_diagnosis
from draconf.reporting.plugin import attach_fleet_picture

@pytest.fixture(scope="module")
def swept(request):
    yield
    attach_fleet_picture(request.config)

@pytest.mark.draconf(workload="every-node", check="gpu-node-a/gpu-0")
def test_first_gpu(swept):
    pass

@pytest.mark.draconf(workload="every-node", check="gpu-node-a/gpu-1")
def test_second_gpu(request, swept):
    record_diagnosis(request.node, "plugin-unhealthy", reason="the node cannot prepare gpu-1")
    assert False, "the node cannot prepare gpu-1"
"""


def test_the_fleet_picture_is_attached_to_the_allure_report_once_the_sweep_is_judged(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_sweep=SWEEP)
    run_inner(pytester, "-p", "allure_pytest.plugin", "--alluredir=allure")
    allure_dir = pytester.path / "allure"
    attached = [a for path in allure_dir.glob("*-container.json")
                for step in json.loads(path.read_text()).get("afters", [])
                for a in step.get("attachments", []) if a["name"] == "fleet sweep"]
    assert len(attached) == 1 and attached[0]["type"] == "image/svg+xml", attached
    svg = (allure_dir / attached[0]["source"]).read_text()
    # The node failed with its code: the second (last) test's verdict was in before the picture.
    assert "gpu-node-a" in svg and "plugin-unhealthy" in svg and "1 failed of 1 node" in svg, svg[:400]


def test_no_fleet_picture_without_a_sweep(inner):
    run_inner(inner, "-p", "allure_pytest.plugin", "--alluredir=allure")
    assert not [p for p in (inner.path / "allure").glob("*-attachment.svg")]
