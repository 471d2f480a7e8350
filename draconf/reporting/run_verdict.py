"""The verdict of a whole run, from its rows: what the last line, the exit code, summary.json and
JUnit all say.

A run is **PASS** only when every selected check that applies to the cluster passed and at
least one did; **FAIL** when some check failed, broke or errored; otherwise **INCONCLUSIVE**:
some check could reach no verdict (``no-verdict``), some never ran (``not-run``), or nothing
passed at all (a run of skips only).  "Could not check" is never a pass, so an inconclusive run
has an exit code of its own, :data:`EXIT_INCONCLUSIVE`, unless the user accepted a partial run
(``draconf run --allow-inconclusive``).

A plain skip means "does not apply to this cluster" (the profile lacks an attribute, no node
has three GPUs) and does not make a run inconclusive by itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

#: The exit status of an inconclusive run: outside pytest's own 0-5 and the 7 of
#: pytest-rerunfailures' --fail-on-flaky, so a CI step can tell it from a failure.
EXIT_INCONCLUSIVE = 10

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"

#: Outcomes that are a pass (a flaky test passed when run again; --fail-on-flaky fails it).
PASSING = ("passed", "flaky")
#: Outcomes that say the cluster, or the check, is broken.
FAILING = ("failed", "broken", "error")
#: Outcomes that leave a check that applies without a verdict.
UNJUDGED = ("no-verdict", "not-run")

#: The reason given when no check passed and none failed or was left without a verdict.
NOTHING_PASSED = "no check passed (every selected check was skipped)"


def unjudged_reason(row: Mapping[str, Any]) -> str:
    """What kept one check from a verdict, short enough to group by: its diagnosis code when
    it has one, else the cause its message starts with.

    >>> unjudged_reason({"outcome": "no-verdict", "diagnosis": "node-excluded", "message": "x"})
    'node-excluded'
    >>> unjudged_reason({"outcome": "no-verdict", "message": "workload never started: pod p is Pending"})
    'workload never started'
    >>> unjudged_reason({"outcome": "not-run", "message": "never ran: the run was interrupted"})
    'not run (interrupted)'
    """
    if row.get("outcome") == "not-run":
        return "not run (interrupted)"
    if row.get("diagnosis"):
        return str(row["diagnosis"])
    message = " ".join(str(row.get("message") or "no cause given").split())
    cause = message.split(": ", 1)[0].split(" (", 1)[0].rstrip(".")
    return cause if len(cause) <= 80 else cause[:77] + "..."


@dataclass(frozen=True)
class RunVerdict:
    """The run's verdict and the counts behind it."""

    status: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    #: reason -> how many checks it kept from a verdict (most first)
    unjudged: dict[str, int] = field(default_factory=dict)
    #: --allow-inconclusive: an inconclusive run the user accepted as green
    accepted: bool = False

    @property
    def exit_code(self) -> int:
        """0 PASS (or an accepted INCONCLUSIVE), 1 FAIL, :data:`EXIT_INCONCLUSIVE`."""
        if self.status == FAIL:
            return 1
        if self.status == INCONCLUSIVE and not self.accepted:
            return EXIT_INCONCLUSIVE
        return 0

    @property
    def without_verdict(self) -> int:
        return sum(self.unjudged.values())

    def why(self) -> str:
        """The reasons, grouped: ``"6 without a verdict: 4 workload never started, 2 node-excluded"``.

        >>> RunVerdict(INCONCLUSIVE, unjudged={"node-excluded": 2, "workload never started": 1}).why()
        '3 without a verdict: 2 node-excluded, 1 workload never started'
        >>> RunVerdict(INCONCLUSIVE, skipped=8, unjudged={NOTHING_PASSED: 8}).why()
        'no check passed (every selected check was skipped)'
        """
        if list(self.unjudged) == [NOTHING_PASSED]:
            return NOTHING_PASSED
        groups = ", ".join(f"{n} {reason}" for reason, n in self.unjudged.items())
        return f"{self.without_verdict} without a verdict: {groups}"

    def line(self) -> str:
        """The verdict in one line, for the terminal and JUnit.

        >>> RunVerdict(PASS, passed=3).line()
        'PASS'
        >>> RunVerdict(INCONCLUSIVE, passed=1, unjudged={"node-excluded": 2}).line()
        'INCONCLUSIVE: 2 without a verdict: 2 node-excluded'
        >>> RunVerdict(INCONCLUSIVE, passed=1, unjudged={"node-excluded": 2}, accepted=True).line()
        'INCONCLUSIVE (accepted by --allow-inconclusive): 2 without a verdict: 2 node-excluded'
        """
        if self.status != INCONCLUSIVE:
            return self.status
        accepted = " (accepted by --allow-inconclusive)" if self.accepted else ""
        return f"{INCONCLUSIVE}{accepted}: {self.why()}"

    def as_dict(self) -> dict[str, Any]:
        """summary.json's ``verdict``."""
        return {"status": self.status, "exit_code": self.exit_code, "accepted": self.accepted,
                "passed": self.passed, "failed": self.failed, "skipped": self.skipped,
                "without_verdict": self.without_verdict, "reasons": dict(self.unjudged),
                "line": self.line()}


def judge_run(rows: Iterable[Mapping[str, Any]], accept_inconclusive: bool = False) -> RunVerdict:
    """The run's verdict from summary.json's rows (see the module docstring).

    >>> judge_run([{"outcome": "passed"}, {"outcome": "skipped"}]).status
    'PASS'
    >>> judge_run([{"outcome": "passed"}, {"outcome": "no-verdict", "diagnosis": "node-excluded"}]).line()
    'INCONCLUSIVE: 1 without a verdict: 1 node-excluded'
    >>> judge_run([{"outcome": "skipped"}] * 8).exit_code
    10
    >>> judge_run([{"outcome": "failed"}, {"outcome": "no-verdict"}]).exit_code
    1
    >>> judge_run([]).status
    'INCONCLUSIVE'
    """
    rows = list(rows)
    counts = Counter(row.get("outcome") for row in rows)
    passed = sum(counts[o] for o in PASSING)
    failed = sum(counts[o] for o in FAILING)
    skipped = counts["skipped"]
    unjudged = Counter(unjudged_reason(row) for row in rows if row.get("outcome") in UNJUDGED)
    if failed:
        status = FAIL
    elif unjudged or not passed:
        status = INCONCLUSIVE
        if not unjudged:
            unjudged = Counter({NOTHING_PASSED: skipped})
    else:
        status = PASS
    return RunVerdict(status, passed=passed, failed=failed, skipped=skipped,
                      unjudged=dict(unjudged.most_common()),
                      accepted=accept_inconclusive and status == INCONCLUSIVE)
