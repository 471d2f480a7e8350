"""One verdict per test: what an attempt of a test came to, in one object in the item's stash.

The reporting plugin starts a fresh :class:`Verdict` when an attempt's setup begins
(:func:`start_verdict`; a rerun by pytest-rerunfailures starts afresh).  While the test runs,
:func:`draconf.reporting.record_diagnosis` (the test's own, or the diagnosis hook's after a
failure) sets its code and reason.  ``pytest_runtest_makereport`` then stashes each phase's
outcome and message in it and puts the phase, as plain values, on the report
(``report.draconf_phase``), which is what summary.json, the matrix, the rerun policy and, under
pytest-xdist, the controller read.

Nothing rewrites the exception: the ``[code]`` is added to what the report says (its row's
message, its crash line, a ``draconf diagnosis`` section of its failure text, which the
terminal, JUnit and Allure's trace show), and Allure's result gets it through
:class:`AllureMessages`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
import urllib3
from _pytest._code.code import ExceptionRepr  # a failure's traceback, which takes report sections
from kubernetes.client.exceptions import ApiException

from draconf.errors import DraconfError
from draconf.preflight.reading import Inconclusive

from draconf.reporting.diagnoses import DIAGNOSES, diagnosis_prefix, require_known_code

#: Where each test's verdict lives, from its setup to its last report.
VERDICT_KEY = pytest.StashKey["Verdict"]()

#: The title of the failure-text section that names the diagnosis.
SECTION = "draconf diagnosis"


@dataclass
class Verdict:
    """What one attempt of a test came to.

    >>> v = Verdict("single-gpu", "cdi-injection")
    >>> v.diagnose("cdi-wrong-device", "pod p/c sees GPU-b, allocated GPU-a")
    >>> v.explanation()
    'diagnosis (cdi-wrong-device): pod p/c sees GPU-b, allocated GPU-a'
    >>> v.diagnose("timeout")  # a code without a sentence keeps the sentence it had
    >>> v.reason
    'pod p/c sees GPU-b, allocated GPU-a'
    >>> Verdict().explanation() is None
    True
    """
    workload: str | None = None
    check: str | None = None
    #: The diagnosis code (one of DIAGNOSES) and its sentence, once recorded.
    code: str | None = None
    reason: str | None = None
    #: when ("setup", "call", "teardown") -> the phase as the report carries it.
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: how many GPUs the test proves at once (a sweep's node): its row's ``gpus``; None: not said
    gpus: int | None = None

    def diagnose(self, code: str, reason: str | None = None) -> None:
        require_known_code(code)
        self.code = code
        if reason:
            self.reason = reason

    def explanation(self) -> str | None:
        """The line a failure's text carries: the code and what was seen (or, for a code a test
        recorded without a sentence, what the code means)."""
        if not self.code:
            return None
        return f"diagnosis ({self.code}): {self.reason or DIAGNOSES[self.code]}"

    def phase(self, when: str, outcome: str, message: str | None) -> dict[str, Any]:
        """Stash one phase's outcome and message; the phase as plain values (for the report,
        which pytest-xdist serialises to its controller)."""
        self.phases[when] = {
            "workload": self.workload, "check": self.check, "outcome": outcome, "message": message,
            "diagnosis": self.code, "reason": self.reason,
            **({"gpus": self.gpus} if self.gpus is not None else {})}
        return dict(self.phases[when])


def start_verdict(item: pytest.Item, workload: str | None = None, check: str | None = None) -> Verdict:
    """A fresh verdict for an attempt of ``item`` that starts now."""
    item.stash[VERDICT_KEY] = verdict = Verdict(workload, check)
    return verdict


def verdict_of(item: pytest.Item) -> Verdict:
    """``item``'s verdict (one is started if none was: a test run without the reporting plugin's
    setup, e.g. record_diagnosis() called from a plain pytest session)."""
    verdict = item.stash.get(VERDICT_KEY, None)
    return verdict if verdict is not None else start_verdict(item)


def with_code(text: str | None, code: str | None, typed: bool = False) -> str | None:
    """``text`` with ``[code]`` in front of its message, unless it carries it already.

    ``typed``: the text is pytest's ``Type: message`` form, and the code goes after the type.

    >>> with_code("claim still allocated", "claim-not-released")
    '[claim-not-released] claim still allocated'
    >>> with_code("RuntimeError: apiserver answered 500", "timeout", typed=True)
    'RuntimeError: [timeout] apiserver answered 500'
    >>> with_code("draconf.errors.DraconfError: no\\nmore", "timeout", typed=True)
    'draconf.errors.DraconfError: [timeout] no\\nmore'
    >>> with_code("RuntimeError", "timeout", typed=True)
    'RuntimeError: [timeout]'
    >>> with_code("AssertionError: [timeout] no pod", "timeout", typed=True)
    'AssertionError: [timeout] no pod'
    >>> with_code(None, "timeout") is None and with_code("x", None)
    'x'
    """
    if text is None or not code:
        return text
    prefix = diagnosis_prefix(code)
    if prefix.strip() in text:
        return text
    if typed:
        typed_head = _TYPE_HEAD.match(text)
        if typed_head:
            head = typed_head.group(0)
            return head + prefix + text[len(head):] if head.endswith(": ") else head + ": " + prefix.strip()
    return prefix + text


#: ``module.Type: `` at the start of pytest's exconly() text, or the bare type name.
_TYPE_HEAD = re.compile(r"^[\w.]+(?:: |$)")


#: Failures whose message is the verdict: the suite's assertions and waits (AssertionError,
#: draconf.waits.WaitFailed), an API server's answer, an unusable connection, bad input.  Their
#: traceback is the suite's own code or the client's, which tells an operator nothing; it goes to
#: the debug log (``draconf run`` writes it to reports/debug.log).  Anything else (a TypeError:
#: a bug of the suite) keeps its traceback.
QUIET_FAILURES = (AssertionError, ApiException, urllib3.exceptions.HTTPError, ConnectionError, DraconfError,
                  Inconclusive)

_debug = logging.getLogger("draconf.failures")


def quiet_failure(item, call, report) -> bool:
    """A failed phase whose exception is one of :data:`QUIET_FAILURES` reports its message
    only (pytest's ``value`` style, as ``pytest.fail(pytrace=False)``); the full text is logged
    at DEBUG.  True when the failure is such a verdict (``pytest.fail``'s too)."""
    excinfo = call.excinfo
    if not report.failed or excinfo is None or not excinfo.errisinstance((*QUIET_FAILURES, pytest.fail.Exception)):
        return False
    if excinfo.errisinstance(pytest.fail.Exception):
        return True  # its traceback as its caller asked (pytrace)
    _debug.debug("%s %s failed:\n%s", item.nodeid, report.when, report.longreprtext)
    report.longrepr = excinfo.getrepr(style="value")
    if excinfo.errisinstance(ApiException):
        report.longrepr.reprcrash.message = api_answer(excinfo.value)
        report.longrepr.chain[-1][0].reprentries[-1].lines[:] = [api_answer(excinfo.value)]
    return True


def untype_crash_line(excinfo, report) -> None:
    """The crash line (the short summary, JUnit's failure message) without the exception's
    type: ``[code] message``, not ``draconf.preflight.reading.Inconclusive: [code] message``."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is None or not isinstance(crash.message, str):
        return
    text = excinfo.exconly()
    head = text[:len(text) - len(str(excinfo.value))] if text.endswith(str(excinfo.value)) else ""
    if head and crash.message.startswith(head):
        crash.message = crash.message[len(head):]


def api_answer(err: ApiException) -> str:
    """An API error as one line: status, reason and the server's message (not the client's
    dump of headers and body).

    >>> api_answer(ApiException(status=403, reason="Forbidden"))
    'the API server answered 403 Forbidden'
    """
    from draconf.admission import server_message
    said = server_message(err) if err.body else ""
    return f"the API server answered {err.status} {err.reason}" + (f": {said}" if said else "")


def annotate_report(report: pytest.TestReport, verdict: Verdict) -> None:
    """Make a failed report say its diagnosis: ``[code]`` on its crash line (the terminal's
    short summary, JUnit's failure message) and a :data:`SECTION` section with
    :meth:`Verdict.explanation` in its failure text (the terminal, JUnit's failure text,
    Allure's trace).  The exception itself is left as it was raised."""
    line = verdict.explanation()
    if not report.failed or line is None:
        return
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and isinstance(crash.message, str):
        crash.message = with_code(crash.message, verdict.code, typed=True)
    if isinstance(longrepr, ExceptionRepr):  # a failure's traceback: the section goes with it
        if (SECTION, line, "-") not in longrepr.sections:
            longrepr.addsection(SECTION, line)
    else:  # a bare text (a crashed xdist worker, a collection-style repr): a report section
        report.sections.append((SECTION, line))


class VerdictSection:
    """The pytest plugin that makes each failed report say its diagnosis (:func:`annotate_report`).

    Its ``pytest_runtest_makereport`` is the innermost wrapper (``trylast``), so the report
    says it before allure-pytest reads the failure text for its trace.  (Inside pytest's own
    wrapper too, before a failure becomes an xfail: an xfail's failure text, which no report
    shows, may carry the section as well.)"""

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        quiet = quiet_failure(item, call, report)
        verdict = item.stash.get(VERDICT_KEY, None)
        if verdict is not None:
            annotate_report(report, verdict)
        if quiet:
            untype_crash_line(call.excinfo, report)
        return report


class AllureMessages:
    """An allure-commons plugin: a failed result's status message gets the ``[code]`` of the
    test's diagnosis (its ``diagnosis:<code>`` tag) before allure-pytest writes the result, so
    the categories of ``categories.json`` file it.  allure-pytest takes that message from the
    exception, which draconf no longer rewrites."""

    @staticmethod
    def _code(result) -> str | None:
        tags = [label.value for label in getattr(result, "labels", None) or []
                if label.name == "tag" and str(label.value).startswith("diagnosis:")]
        code = tags[-1].removeprefix("diagnosis:") if tags else None
        return code if code in DIAGNOSES else None

    def report_result(self, result) -> None:
        details = getattr(result, "statusDetails", None)
        code = self._code(result)
        if code and details is not None and result.status in ("failed", "broken") and details.message:
            details.message = with_code(details.message, code, typed=True)


def register_allure_messages(config: pytest.Config) -> None:
    """Register :class:`AllureMessages` with allure-commons for this process's results (when
    allure-pytest records: ``--alluredir``), first among the implementations of its
    ``report_result`` hook, so before allure-pytest's writer."""
    import allure_commons  # only here: reporting works without allure-pytest installed

    allure_commons.hookimpl(tryfirst=True)(AllureMessages.report_result)
    plugin = AllureMessages()
    allure_commons.plugin_manager.register(plugin)
    config.add_cleanup(lambda: allure_commons.plugin_manager.unregister(plugin))
