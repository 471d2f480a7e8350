"""Nightly history: each run's verdicts kept in a directory the user chooses, and the pass rate
of the last runs per workload x check.

``draconf report --history DIR`` appends the run's ``summary.json`` to ``DIR/runs.jsonl`` (one
JSON object per line, a run only once) and hands Allure 3 ``DIR/allure-history.jsonl`` as its
history file, so the HTML report shows trends and each test's history; the terminal gets the
pass rate of the last N runs.

>>> runs = [{"run": {"run_id": str(i)}, "tests": [
...     {"workload": "single-gpu", "check": "allocation", "outcome": o}]}
...     for i, o in enumerate(["passed", "failed", "flaky", "passed"])]
>>> print(render(pass_rates(runs)))
workload    check       passed  of  rate  last
single-gpu  allocation  2       4   50%   passed
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from draconf.errors import DraconfError
from draconf.tables import plain_lines

RUNS_FILE = "runs.jsonl"
ALLURE_HISTORY_FILE = "allure-history.jsonl"


def _identity(summary: Mapping[str, Any]) -> tuple:
    run = summary.get("run") or {}
    return run.get("run_id"), run.get("started")


def load_runs(directory: Path, last: int | None = None) -> list[dict[str, Any]]:
    """The runs kept in ``directory``, oldest first (the last ``last`` of them)."""
    path = Path(directory) / RUNS_FILE
    if not path.is_file():
        return []
    runs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            runs.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise DraconfError(f"{path}:{number}: not a JSON line ({err.msg}); the history file "
                               "is written by `draconf report --history`, one run per line") from None
    return runs[-last:] if last else runs


def append_run(directory: Path, summary: Mapping[str, Any]) -> bool:
    """Keep ``summary`` (a summary.json) in the history; False when that run is already there."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if any(_identity(run) == _identity(summary) for run in load_runs(directory)):
        return False
    with (directory / RUNS_FILE).open("a", encoding="utf-8") as out:
        out.write(json.dumps(summary, separators=(",", ":"), default=str) + "\n")
    return True


def pass_rates(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per workload x check (in first-seen order): how many runs it passed in, of how many it
    ran in, and its outcome in the latest.  Flaky is not passed: a test that needed a rerun
    did not pass that night."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        for row in run.get("tests", []):
            if not row.get("workload"):
                continue
            key = (row["workload"], row.get("check") or "-")
            entry = table.setdefault(key, {"workload": key[0], "check": key[1], "passed": 0, "runs": 0})
            entry["runs"] += 1
            entry["passed"] += row["outcome"] == "passed"
            entry["last"] = row["outcome"]
    return list(table.values())


def render(rates: Sequence[Mapping[str, Any]]) -> str:
    """The pass rates as an aligned table."""
    rows = [[r["workload"], r["check"], r["passed"], r["runs"], f"{100 * r['passed'] // r['runs']}%", r["last"]]
            for r in rates]
    return "\n".join(plain_lines([["workload", "check", "passed", "of", "rate", "last"], *rows]))
