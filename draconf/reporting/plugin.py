"""The pytest plugin that collects one row per test and, at the end of the session, writes
summary.json and the Allure extras and prints the matrix."""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from draconf.errors import NoVerdict
from draconf.parallel import plain_nodeid
from draconf.nodescope import scope_line
from draconf.reporting.allure_extras import write_allure_extras
from draconf.reporting.junit import (interruption_line, keep_final_attempts, mark_junit_interrupted,
                                     mark_junit_verdict)
from draconf.reporting.matrix import OUTCOME_COLOURS, matrix_lines
from draconf.reporting.recording import allure_is_recording, get_run_info
from draconf.reporting.run_verdict import RunVerdict, judge_run
from draconf.reporting.rows import (count_outcomes, first_line, fold_phase, mark_reruns, marker_fields,
                                    new_row, phase_message, phase_outcome)
from draconf.reporting.verdict import VerdictSection, register_allure_messages, start_verdict, verdict_of

log = logging.getLogger(__name__)

#: The directory whose tests make a session a conformance run (one that writes reports).
SUITE_DIR = "suites"

SUMMARY_FILENAME = "summary.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--draconf-reports DIR`` (default ``reports``, relative to the invocation dir)."""
    parser.getgroup("draconf").addoption(
        "--draconf-reports", dest="draconf_reports", default=None, metavar="DIR",
        help="directory for summary.json; without it, only a run of the conformance suite "
             "(tests under suites/) writes one, to reports/")
    parser.getgroup("draconf").addoption(
        "--draconf-allow-inconclusive", dest="draconf_allow_inconclusive", action="store_true",
        help="exit 0 when no check failed even if some had no verdict or nothing passed (the run "
             "still says INCONCLUSIVE); without it such a run exits 10")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _resolve(config: pytest.Config, path: str | os.PathLike) -> Path:
    # Relative paths are relative to where pytest was started, like --alluredir, even if a
    # test changed the working directory since.
    return config.invocation_params.dir / Path(path)


class ReportingPlugin:
    """Collects one row per test and writes the reports; register one per pytest process.

    A row is ``{"id", "workload", "check", "outcome", "duration", "diagnosis", "message"}``.
    Rows are built from ``pytest_runtest_logreport`` using the phase of the test's verdict
    (:mod:`draconf.reporting.verdict`) attached to each report in
    ``pytest_runtest_makereport``, so they come out the same under pytest-xdist (the reports
    travel from the workers to the controller, which alone writes files and prints).
    Collection errors get a row too, with outcome ``error`` and no workload.
    """

    def __init__(self, config: pytest.Config):
        self.config = config
        self.rows: dict[str, dict[str, Any]] = {}
        self.started = _now()
        self.summary_path: Path | None = None
        self.fleet: list = []
        #: nodeid -> (workload, check) of every collected test, for rows of tests never run.
        self.collected: dict[str, tuple[str | None, str | None]] = {}
        #: The test between logstart and logfinish: the one an interrupt stopped.
        self.running: str | None = None
        self.interruption: dict[str, Any] | None = None
        #: nodeid -> the attempts of a test that failed and were run again (pytest-rerunfailures)
        self.failed_attempts: dict[str, list[dict[str, Any]]] = {}
        #: The run's verdict, once the session finished (the controller's, under xdist).
        self.run_verdict: RunVerdict | None = None
        config.addinivalue_line(
            "markers", "draconf(workload=None, check=None): what a draconf test exercises, "
                       "for the summary matrix")
        config.pluginmanager.register(VerdictSection(), "draconf-verdict-section")
        if allure_is_recording(config):
            register_allure_messages(config)

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = _now()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = {plain_nodeid(item.nodeid): marker_fields(item) for item in session.items}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        """The controller of a pytest-xdist run collects nothing itself: what its workers
        collected is what an interrupted run lists as never run (their markers stay on the
        workers, so those rows name no workload)."""
        for nodeid in ids:
            self.collected.setdefault(plain_nodeid(nodeid), (None, None))

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.running = plain_nodeid(nodeid)

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self.running = None

    # -- one verdict per test ---------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # Each attempt gets a verdict of its own: a rerun (pytest-rerunfailures) that passes
        # must not carry the code of the attempt that failed.
        start_verdict(item, *marker_fields(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        # Outside pytest's own wrapper, which makes a failure an xfail: the phase's final outcome.
        # (VerdictSection, the innermost wrapper, made the report say the diagnosis already.)
        report = yield
        verdict = verdict_of(item)
        blocked = call.excinfo.value if call.excinfo is not None else None
        if isinstance(blocked, NoVerdict) and blocked.code and not verdict.code:
            # A check that read what blocked it (the policy that refused its probe) names it
            # with a code: its row, and the run's verdict's reasons, give that code.
            verdict.diagnose(blocked.code, blocked.cause)
        # Plain values only: under xdist this attribute is serialised to the controller.
        report.draconf_phase = verdict.phase(report.when, phase_outcome(report, call.excinfo),
                                             phase_message(report, call.excinfo, verdict.code))
        attempt = getattr(item, "execution_count", 1)  # pytest-rerunfailures counts attempts
        if report.when == "call" and report.passed and attempt > 1:
            item.user_properties.append(("draconf.flaky", f"passed on attempt {attempt} after "
                                                          f"{attempt - 1} failed"))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        phase = getattr(report, "draconf_phase", None) or {
            # A process without this plugin made the report: classify with what we have.
            "outcome": phase_outcome(report, None), "message": phase_message(report, None)}
        # A parallel run's ids lose the "@group" pytest-xdist adds: its rows are a serial run's.
        nodeid = plain_nodeid(report.nodeid)
        if report.outcome == "rerun":
            # pytest-rerunfailures: this attempt failed and the test runs again.  Keep what
            # failed; the next attempt's setup starts the row afresh.
            self.failed_attempts.setdefault(nodeid, []).append(
                {"message": phase.get("message"), "diagnosis": phase.get("diagnosis")})
            return
        if report.when == "setup" or nodeid not in self.rows:
            self.rows[nodeid] = new_row(nodeid, phase)
        row = self.rows[nodeid]
        fold_phase(row, report.when, phase, report.duration)
        if report.when == "teardown" and nodeid in self.failed_attempts:
            mark_reruns(row, self.failed_attempts[nodeid])

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.rows[report.nodeid] = {
                "id": report.nodeid, "workload": None, "check": None, "outcome": "error",
                "duration": 0.0, "diagnosis": None, "message": first_line(report.longreprtext)}

    # -- write and print ---------------------------------------------------------------------

    def summary(self, exit_status: int) -> dict[str, Any]:
        """The content of summary.json for the rows collected so far."""
        run = {**get_run_info(self.config), "started": self.started, "finished": _now(),
               "exit_status": int(exit_status)}
        if self.interruption:
            run["interrupted"] = self.interruption
        rows = list(self.rows.values())
        summary = {"run": run, "totals": count_outcomes(rows), "tests": rows}
        if self.run_verdict is not None:
            summary["verdict"] = self.run_verdict.as_dict()
        return summary

    def _mark_interrupted(self) -> None:
        """An interrupted run (Ctrl-C, SIGTERM) must not read as a pass: the test that was
        running and every test never reached get a ``not-run`` row, and the run says so."""
        never_ran = [n for n in self.collected if n not in self.rows]
        if self.running is not None:
            row = self.rows.setdefault(self.running, new_row(self.running, {
                "outcome": "not-run", "workload": self.collected.get(self.running, (None, None))[0],
                "check": self.collected.get(self.running, (None, None))[1]}))
            if row["outcome"] in ("passed", "skipped"):  # only its setup had reported
                row["outcome"], row["message"] = "not-run", "interrupted while this test was running"
        for nodeid in never_ran:
            workload, check = self.collected[nodeid]
            self.rows[nodeid] = new_row(nodeid, {"outcome": "not-run", "workload": workload,
                                                 "check": check,
                                                 "message": "never ran: the run was interrupted"})
        self.interruption = {"while_running": self.running,
                             "never_ran": [n for n in never_ran if n != self.running]}

    def _writes_reports(self) -> bool:
        """Reports are the conformance run's: written when asked (``--draconf-reports``) or
        when the session ran the suite; the project's own unit tests write none."""
        if self.config.getoption("draconf_reports", None):
            return True
        return any(nodeid.split("/", 1)[0] == SUITE_DIR for nodeid in self.rows)

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file (see pytest_unconfigure)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_xdist_worker or self.config.option.collectonly:
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self._mark_interrupted()
        if not self._writes_reports():
            return
        self.run_verdict = judge_run(self.rows.values(),
                                     bool(self.config.getoption("draconf_allow_inconclusive", False)))
        if exitstatus == pytest.ExitCode.OK and self.run_verdict.exit_code:
            # pytest counts a skip (and so a NoVerdict) as success; the run does not.
            session.exitstatus = exitstatus = self.run_verdict.exit_code
        reports_dir = _resolve(self.config, self.config.getoption("draconf_reports", None) or "reports")
        reports_dir.mkdir(parents=True, exist_ok=True)
        self.summary_path = reports_dir / SUMMARY_FILENAME
        self.summary_path.write_text(
            json.dumps(self.summary(exitstatus), indent=2, default=str) + "\n", encoding="utf-8")
        allure_dir = getattr(self.config.option, "allure_report_dir", None)
        if allure_dir:
            write_allure_extras(_resolve(self.config, allure_dir), get_run_info(self.config))
        self.fleet = fleet_verdicts(self.rows.values())
        if self.fleet:
            self._draw_fleet(reports_dir)

    def _draw_fleet(self, reports_dir: Path) -> None:
        """The sweep's picture beside summary.json: fleet.svg, and fleet.png (Pillow)."""
        from draconf.reporting import fleet_picture
        title = fleet_title(self.fleet)
        (reports_dir / "fleet.svg").write_text(fleet_picture.render_svg(self.fleet, title), encoding="utf-8")
        try:
            fleet_picture.render_png(self.fleet, title, reports_dir / "fleet.png")
        except ImportError as err:  # a picture is never worth a failed run
            log.warning("fleet.png not drawn: %s", err)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        writer = config.get_terminal_writer()
        lines = matrix_lines(self.rows.values(), lambda text, outcome: writer.markup(
            text, **OUTCOME_COLOURS.get(outcome or "", {})))
        if self.summary_path is None:
            return
        if not lines:  # no test carries the draconf marker: no matrix, but the run's verdict
            self._write_verdict_line(terminalreporter)
            return
        terminalreporter.write_sep("=", "draconf conformance matrix")
        if self.interruption:
            terminalreporter.line(interruption_line(self.interruption), red=True, bold=True)
        for line in lines:
            terminalreporter.line(line)
        nodes = get_run_info(config).get("nodes")
        if nodes:
            terminalreporter.line(scope_line(nodes), yellow=True, bold=True)
        flaky = [r for r in self.rows.values() if r["outcome"] == "flaky"]
        if flaky:
            terminalreporter.line("flaky (failed, then passed when run again):", yellow=True, bold=True)
            for row in flaky:
                terminalreporter.line(f"  {row['id']}: {row['message']}")
        diagnosed = [r for r in self.rows.values() if r.get("reason") and r["outcome"] != "passed"]
        if diagnosed:
            terminalreporter.line("diagnoses:")
            for row in diagnosed:
                terminalreporter.line(f"  {row['id']}: [{row['diagnosis']}] {row['reason']}")
        if getattr(self, "fleet", None):
            from draconf.reporting.fleet_picture import terminal_lines
            for line in terminal_lines(self.fleet):  # failed and busy nodes only, then the counts
                terminalreporter.line(line)
            terminalreporter.line(f"picture: {self.summary_path.with_name('fleet.png')}")
        self._write_verdict_line(terminalreporter)
        terminalreporter.line(f"summary: {self.summary_path}")

    def _write_verdict_line(self, terminalreporter) -> None:
        verdict = self.run_verdict
        if verdict is not None:
            terminalreporter.line(f"run verdict: {verdict.line()}", bold=True,
                                  green=verdict.status == "PASS", red=verdict.status == "FAIL",
                                  yellow=verdict.status == "INCONCLUSIVE")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """junitxml has written its file by now: one test case per test run again, and say
        there, too, that the run was interrupted."""
        xmlpath = getattr(config.option, "xmlpath", None)
        if self.is_xdist_worker or not xmlpath or not Path(xmlpath).is_file():
            return
        if any(row.get("reruns") for row in self.rows.values()):
            keep_final_attempts(Path(xmlpath))
        if self.interruption:
            mark_junit_interrupted(Path(xmlpath), self.interruption)
        if self.run_verdict is not None:
            mark_junit_verdict(Path(xmlpath), self.run_verdict.line())


def fleet_title(fleet: list) -> str:
    from draconf.reporting.fleet_picture import summary_line
    return f"draconf fleet sweep: {summary_line(fleet).removeprefix('every-node: ')}"


def attach_fleet_picture(config: pytest.Config) -> bool:
    """The sweep's picture so far (its targets' rows in this process) attached to the Allure
    report, as an SVG; False when Allure is not recording or there is no sweep row."""
    from draconf.reporting.fleet_picture import render_svg
    from draconf.reporting.recording import allure_is_recording
    plugin = config.pluginmanager.get_plugin("draconf-reporting")
    fleet = fleet_verdicts(plugin.rows.values()) if plugin is not None else []
    if not fleet or not allure_is_recording(config):
        return False
    import allure
    allure.attach(render_svg(fleet, fleet_title(fleet)), name="fleet sweep",
                  attachment_type=allure.attachment_type.SVG)
    return True


def fleet_verdicts(rows) -> list:
    """The sweep's rows (workload ``every-node``, check ``<node>`` or ``<node>/<gpu>``) as the
    fleet picture's nodes: a node's status is its worst GPU's (failed, then no verdict, then
    busy, then tainted); a node swept whole is a square per GPU its row says it has (``gpus``),
    all of the node's status; a GPU node that publishes none has no square and is "not
    published".

    >>> rows = [{"workload": "every-node", "check": "n1/gpu-0", "outcome": "passed"},
    ...         {"workload": "every-node", "check": "n1/gpu-1", "outcome": "failed", "diagnosis": "plugin-unhealthy"},
    ...         {"workload": "every-node", "check": "n2", "outcome": "no-verdict", "message": "busy, not tested: x"},
    ...         {"workload": "every-node", "check": "n3", "outcome": "passed", "gpus": 3},
    ...         {"workload": "every-node", "check": "n4/gpu-0", "outcome": "passed"},
    ...         {"workload": "every-node", "check": "n4/gpu-1", "outcome": "skipped", "message": "tainted, not tested: t"},
    ...         {"workload": "every-node", "check": "n5", "outcome": "no-verdict", "gpus": 0,
    ...          "message": "not published: n5 is a GPU node ..."},
    ...         {"workload": "single-gpu", "check": "allocation", "outcome": "passed"}]
    >>> for n in fleet_verdicts(rows):
    ...     print(n.name, n.gpus, n.status, n.code, n.gpu_status)
    n1 2 failed plugin-unhealthy ('passed', 'failed')
    n2 1 busy  ('busy',)
    n3 3 passed  ('passed', 'passed', 'passed')
    n4 2 tainted  ('passed', 'tainted')
    n5 0 not-published  ()
    """
    from draconf.reporting.fleet_picture import (BUSY, FAILED, NO_VERDICT, NOT_PUBLISHED, PASSED, TAINTED,
                                                 NodeVerdict)
    from draconf.sweep import BUSY as BUSY_MESSAGE, NOT_PUBLISHED as NOT_PUBLISHED_MESSAGE, \
        TAINTED as TAINTED_MESSAGE  # how the sweep words them

    def status(row) -> str:
        outcome = row.get("outcome")
        if outcome in ("passed", "flaky"):
            return PASSED
        if outcome in ("failed", "broken", "error"):
            return FAILED
        message = str(row.get("message") or "")
        if message.startswith(BUSY_MESSAGE):
            return BUSY
        if message.startswith(NOT_PUBLISHED_MESSAGE):
            return NOT_PUBLISHED
        return TAINTED if outcome == "skipped" and message.startswith(TAINTED_MESSAGE) else NO_VERDICT

    per_node: dict[str, list] = {}
    for row in rows:
        if row.get("workload") == "every-node" and row.get("check"):
            per_node.setdefault(str(row["check"]).split("/", 1)[0], []).append(row)
    nodes = []
    for name, node_rows in sorted(per_node.items()):
        node_rows.sort(key=lambda r: str(r["check"]))
        # A GPU's row is one square; a node's, one per GPU it proved (none: it publishes none).
        squares = tuple(status(r) for r in node_rows
                        for _ in range(1 if "/" in str(r["check"]) else r.get("gpus", 1)))
        statuses = {status(r) for r in node_rows}
        worst = next(s for s in (FAILED, NO_VERDICT, BUSY, TAINTED, NOT_PUBLISHED, PASSED) if s in statuses)
        code = next((str(r.get("diagnosis") or "") for r in node_rows if status(r) == FAILED), "")
        nodes.append(NodeVerdict(name, len(squares), worst, code, squares))
    return nodes
