"""The rows of summary.json: one phase (setup / call / teardown) of a test classified the way
Allure does (see :mod:`draconf.reporting`), and the three phases, and any reruns, folded into
one row per test."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import pytest

from draconf.errors import NoVerdict
from kubernetes.client.exceptions import ApiException

from draconf.reporting.verdict import QUIET_FAILURES, api_answer, with_code

#: Outcomes from best to worst; a matrix cell shows the worst of its tests. ``failed`` is
#: worst because it is the one definitive "does not conform"; the others mean "no verdict".
OUTCOMES = ("passed", "flaky", "skipped", "not-run", "no-verdict", "error", "broken", "failed")


def phase_outcome(report: pytest.TestReport, excinfo: pytest.ExceptionInfo | None) -> str:
    """Classify one phase the way Allure does (see the module docstring).

    ``excinfo`` is None for a strict XPASS, which pytest reports as a failed call.  A skip
    raised as :class:`~draconf.errors.NoVerdict` is ``no-verdict``, in any phase.
    """
    if report.passed:
        return "passed"
    if report.skipped:
        if excinfo is not None and excinfo.errisinstance(NoVerdict):
            return "no-verdict"
        return "skipped"
    if report.when != "call":
        return "error"
    if excinfo is None or excinfo.errisinstance((AssertionError, pytest.fail.Exception)):
        return "failed"
    return "broken"


def phase_message(report: pytest.TestReport, excinfo: pytest.ExceptionInfo | None,
                  code: str | None = None) -> str | None:
    """First line of why the phase did not pass, or None if it passed.

    Assertion failures, waits, API answers and bad input (:data:`~draconf.reporting.verdict.
    QUIET_FAILURES`) give their message; other exceptions (a bug of the suite) keep their type,
    which is what tells a reader why the test broke.  A failure diagnosed ``code`` says
    ``[code]`` first (after the type), unless its message carries it already.
    """
    if report.passed:
        return None
    if hasattr(report, "wasxfail"):
        return first_line(f"XFAIL {report.wasxfail}".strip())
    if report.skipped and excinfo is not None and excinfo.errisinstance(NoVerdict):
        return with_code(first_line(excinfo.value.cause), excinfo.value.code)
    if report.skipped and isinstance(report.longrepr, tuple):
        return first_line(report.longrepr[2].removeprefix("Skipped: ").removeprefix("NoVerdict: "))
    if excinfo is not None:
        if excinfo.errisinstance(ApiException):
            return with_code(api_answer(excinfo.value), code)
        if excinfo.errisinstance((*QUIET_FAILURES, pytest.fail.Exception)) and first_line(str(excinfo.value)):
            return with_code(first_line(str(excinfo.value)), code)
        return with_code(first_line(excinfo.exconly()), code, typed=True)
    return first_line(report.longreprtext)


def first_line(text: str | None) -> str | None:
    """The first non-blank line of ``text``, stripped; None when there is none.

    >>> first_line("\\n  [timeout] no pod\\nassert False")
    '[timeout] no pod'
    >>> first_line("  ") is None
    True
    """
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return None


def marker_fields(item: pytest.Item) -> tuple[str | None, str | None]:
    """``(workload, check)`` from the closest ``@pytest.mark.draconf(...)``; None when absent."""
    marker = item.get_closest_marker("draconf")
    if marker is None:
        return None, None
    return marker.kwargs.get("workload"), marker.kwargs.get("check")


def new_row(nodeid: str, phase: Mapping[str, Any]) -> dict[str, Any]:
    """A summary.json row, started from a test's setup phase (``gpus``: only a test that said
    how many GPUs it proves, a sweep's)."""
    return {"id": nodeid, "workload": phase.get("workload"), "check": phase.get("check"),
            "outcome": phase["outcome"], "duration": 0.0,
            "diagnosis": phase.get("diagnosis"), "reason": phase.get("reason"),
            "message": phase.get("message"), **({"gpus": phase["gpus"]} if phase.get("gpus") is not None else {})}


def fold_phase(row: dict[str, Any], when: str, phase: Mapping[str, Any], duration: float) -> None:
    """Update ``row`` with one more phase of its test.

    The call phase decides the outcome unless setup already failed or skipped; a failing
    teardown turns a passed or skipped test into an error (as pytest counts it) but does not
    hide a real failure.

    >>> row = new_row("t.py::test", {"outcome": "passed"})
    >>> fold_phase(row, "call", {"outcome": "failed", "message": "boom"}, 0.5)
    >>> fold_phase(row, "teardown", {"outcome": "error", "message": "cleanup"}, 0.25)
    >>> row["outcome"], row["message"], row["duration"]
    ('failed', 'boom', 0.75)
    """
    row["duration"] = round(row["duration"] + duration, 6)  # microseconds are plenty
    row["diagnosis"] = phase.get("diagnosis") or row["diagnosis"]
    row["reason"] = phase.get("reason") or row.get("reason")
    if phase.get("gpus") is not None:  # 0: a GPU node that publishes none
        row["gpus"] = phase["gpus"]
    if when == "setup":
        return  # new_row() already took setup's outcome
    takes_over = (
        (when == "call" and row["outcome"] == "passed")
        or (when == "teardown" and phase["outcome"] == "error"
            and row["outcome"] in ("passed", "skipped", "no-verdict")))
    if takes_over:
        row["outcome"] = phase["outcome"]
        row["message"] = phase.get("message")


def mark_reruns(row: dict[str, Any], failed_attempts: Sequence[Mapping[str, Any]]) -> None:
    """A test that failed and was run again: a pass is **flaky**, never plain passed; any
    outcome keeps its earlier failures.

    >>> row = new_row("t.py::test", {"outcome": "passed"})
    >>> mark_reruns(row, [{"message": "[intermittent] sees no GPU", "diagnosis": "intermittent"}])
    >>> row["outcome"], row["reruns"], row["failed_attempts"][0]["diagnosis"]
    ('flaky', 1, 'intermittent')
    """
    row["reruns"] = len(failed_attempts)
    row["failed_attempts"] = list(failed_attempts)
    if row["outcome"] == "passed":
        row["outcome"] = "flaky"
        first = failed_attempts[0]
        row["message"] = (f"passed on attempt {len(failed_attempts) + 1}; attempt 1 failed: "
                          f"{first.get('message') or '(no message)'}")
        row["diagnosis"], row["reason"] = first.get("diagnosis"), None


def worst_outcome(outcomes: Iterable[str]) -> str:
    """The worst of ``outcomes`` by :data:`OUTCOMES` order.

    >>> worst_outcome(["passed", "failed", "skipped"])
    'failed'
    """
    return max(outcomes, key=OUTCOMES.index)


def count_outcomes(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{"passed": n, "failed": n, ...}`` with every outcome present, zero or not."""
    counts = Counter(row["outcome"] for row in rows)
    return {outcome: counts.get(outcome, 0)
            for outcome in ("passed", "flaky", "failed", "broken", "no-verdict", "skipped", "error")}
