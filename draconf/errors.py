"""Errors meant for the person at the terminal.

Anything raised as :class:`DraconfError` is printed by the CLI as one message without a
traceback: it must say what went wrong and what to do about it.
"""

import json


#: draconf's own exit codes (docs/reports.md, "Exit codes"), apart from pytest's: pytest keeps 0,
#: 1 and 3 (internal error) with their meanings; its 2 (interrupted) becomes EXIT_INTERRUPTED,
#: its 4 (usage error) EXIT_BAD_INPUT, its 5 (no tests collected) a failure (1).  10, the
#: inconclusive run, is draconf.reporting.run_verdict.EXIT_INCONCLUSIVE.
EXIT_BAD_INPUT = 11
EXIT_TARGET_UNUSABLE = 12
EXIT_INTERRUPTED = 130


class DraconfError(Exception):
    """A failure the user can act on; ``str(err)`` is the whole message."""

    #: The command's exit status for this failure: bad input, nothing was created.
    exit_code = EXIT_BAD_INPUT


def yaml_problem(err) -> str:
    """A PyYAML error in one line: what is wrong and where (PyYAML's own text spans lines).

    >>> import yaml
    >>> try:
    ...     yaml.safe_load("clusters: [unclosed\\n")
    ... except yaml.YAMLError as err:
    ...     print(yaml_problem(err))
    expected ',' or ']', but got '<stream end>' at line 2, column 1
    """
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{getattr(err, 'problem', None) or err}{where}"


class TargetUnusable(DraconfError):
    """The cluster under test cannot be used at all: unreachable, untrusted, credentials
    rejected.  Nothing was run and nothing was created."""

    exit_code = EXIT_TARGET_UNUSABLE


class ReleaseIncomplete(AssertionError):
    """The cleanup check waited for the claims of deleted consumers to be released, and they
    were not: what a diagnosis may take as given (how long a claim may stay held after its
    consumer is gone is the check's to know, not the cluster's to show)."""


# pytest.skip.Exception and pytest.fail.Exception by their classes' names, which a type checker
# can follow as base classes
from _pytest.outcomes import Failed, Skipped  # noqa: E402  (only for the outcomes derived below)


class CheckFailed(Failed):
    """A check's failure (pytest's fail outcome, no traceback), with its cause as data.

    ``code``: the diagnosis code of the cause, where the check read the cause itself (a claim
    whose count admission lowered is ``spec-altered``, a feature the cluster must have and lacks
    ``feature-disabled``); the diagnosis then records that code and ``reason``, never a rule's
    guess, and nothing reads the code back out of the message.  ``answers``: the API server's
    answers behind the failure (draconf.answers), for the diagnosis to read.  Its message is
    ``[code] reason`` (the reason alone without a code); tests/unit/test_errors.py.
    """

    def __init__(self, reason: str, code: str | None = None, answers: tuple = ()):
        super().__init__(msg=f"[{code}] {reason}" if code else reason, pytrace=False)
        self.reason = reason
        self.code = code
        self.answers = tuple(answers)


# As pytest does for Failed: "CheckFailed: <message>", no module path (which also hides the class
# from doctest collection, so its behaviour is unit-tested).
CheckFailed.__module__ = "builtins"


class NoVerdict(Skipped):
    """A check that could reach no verdict, with the cause that blocked it.

    Neither a pass nor a failure: the cluster gave no evidence either way (the workload never
    started, nothing was allocated to release, preflight found the cluster unfit).  It derives
    from pytest's skip outcome, so pytest, JUnit and Allure report it as *skipped* with its
    message; draconf's reports (summary.json, the matrix) show it as ``no-verdict``.  Use it
    where a check applies but cannot be judged; a plain ``pytest.skip`` stays for checks that
    do not apply to this cluster (no node with 3 GPUs, containers on KWOK nodes).

    ``code``: the diagnosis code of what blocked it, where the raiser read it itself (an
    admission policy that refused a probe): the run's verdict groups its reasons by it.
    """

    def __init__(self, cause: str, code: str | None = None):
        # pytest's skip line and JUnit lead with the code, as a failure's message does
        super().__init__(msg=f"[{code}] {cause}" if code else cause)
        self.cause = cause
        self.code = code


# As pytest does for Skipped: tracebacks and JUnit show "NoVerdict: <cause>", no module path
# (which also hides the class from doctest collection, so its behaviour is unit-tested).
NoVerdict.__module__ = "builtins"


def server_message(err) -> str:
    """What the API server said in refusing a request: the ``message`` of an ApiException's
    Status body, else the body's text, else its status and reason.  The one reading of an API
    error's words for every check, wait and preflight row.

    >>> class E(Exception):
    ...     def __init__(self, body, status=403, reason="Forbidden"):
    ...         self.body, self.status, self.reason = body, status, reason
    >>> server_message(E('{"kind":"Status","message":"pods is forbidden: no"}'))
    'pods is forbidden: no'
    >>> server_message(E(b'{"message":"bytes too"}')), server_message(E("plain text\\n"))
    ('bytes too', 'plain text')
    >>> server_message(E(None, 0, "Connection refused")), server_message(E('{"code": 500}'))
    ('0 Connection refused', '{"code": 500}')
    """
    body = getattr(err, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    try:
        message = json.loads(body or "").get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    if message:
        return str(message)
    if body and str(body).strip():
        return str(body).strip()
    status, reason = getattr(err, "status", None), getattr(err, "reason", None)
    return f"{status} {reason}".strip() if status is not None or reason else str(err)
