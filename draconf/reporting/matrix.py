"""The workload x check matrix printed at the end of a run: one cell per (workload, check), the
worst outcome of its tests with its diagnosis."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from draconf.reporting.rows import worst_outcome
from draconf.tables import plain_lines

OUTCOME_LABELS = {"passed": "PASS", "flaky": "FLAKY", "skipped": "SKIP", "not-run": "NOT RUN", "no-verdict": "NO VERDICT",
                  "error": "ERROR", "broken": "BROKEN", "failed": "FAIL"}

#: Terminal markup of a matrix cell, by outcome.
OUTCOME_COLOURS = {"passed": {"green": True}, "flaky": {"yellow": True, "bold": True}, "skipped": {"yellow": True},
                   "not-run": {"yellow": True, "bold": True},
                   "no-verdict": {"yellow": True, "bold": True},
                   "error": {"red": True}, "broken": {"purple": True},
                   "failed": {"red": True, "bold": True}}

_NO_CHECK = "(no check)"


def matrix_cells(rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[str], dict]:
    """Workloads and checks in first-seen order, and ``{(workload, check): (outcome, code)}``.

    A cell holds the worst outcome of its tests; its diagnosis is the one recorded on a test
    with that outcome, if any. Tests without a workload are left out.
    """
    workloads: list[str] = []
    checks: list[str] = []
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        if not row.get("workload"):
            continue
        workload, check = row["workload"], row.get("check") or _NO_CHECK
        if workload not in workloads:
            workloads.append(workload)
        if check not in checks:
            checks.append(check)
        grouped.setdefault((workload, check), []).append(row)
    cells = {}
    for key, group in grouped.items():
        outcome = worst_outcome(row["outcome"] for row in group)
        codes = [row["diagnosis"] for row in group
                 if row["outcome"] == outcome and row.get("diagnosis")]
        cells[key] = (outcome, codes[0] if codes else None)
    return workloads, checks, cells


def cell_label(outcome: str, diagnosis: str | None) -> str:
    """The text of one matrix cell.

    >>> cell_label("failed", "cdi-wrong-device")
    'FAIL[cdi-wrong-device]'
    """
    return OUTCOME_LABELS[outcome] + (f"[{diagnosis}]" if diagnosis else "")


def matrix_lines(rows: Iterable[Mapping[str, Any]],
                 colour: Callable[[str, str | None], str] = lambda text, outcome: text) -> list[str]:
    """The matrix as aligned lines of text; ``colour(cell text, outcome)`` may wrap each result
    cell in terminal escapes (alignment ignores them).

    Workloads that share no check (preflight vs the GPU workloads) get a block of their own,
    each with its own header, separated by an empty line, so no block is mostly empty cells.
    Empty when no test carries a workload.
    """
    rows = list(rows)
    checks_of: dict[str, set] = {}
    for row in rows:
        if row.get("workload"):
            checks_of.setdefault(row["workload"], set()).add(row.get("check") or _NO_CHECK)
    blocks: list[set] = []
    for workload, checks in checks_of.items():
        for block in blocks:
            if any(checks & checks_of[w] for w in block):
                block.add(workload)
                break
        else:
            blocks.append({workload})
    lines: list[str] = []
    for block in blocks:
        if lines:
            lines.append("")
        lines += _block_lines([r for r in rows if r.get("workload") in block], colour)
    return lines


def _block_lines(rows: list[Mapping[str, Any]], colour: Callable[[str, str | None], str]) -> list[str]:
    workloads, checks, cells = matrix_cells(rows)
    if not workloads:
        return []
    table = [["workload", *checks]]
    for workload in workloads:
        table.append([workload] + [colour(cell_label(*cells[workload, check]), cells[workload, check][0])
                                   if (workload, check) in cells else "-" for check in checks])
    return plain_lines(table)


def render_matrix(rows: Iterable[Mapping[str, Any]]) -> str:
    """The matrix as plain text, or "" when no test has a workload.

    >>> print(render_matrix([
    ...     {"workload": "single-gpu", "check": "allocation", "outcome": "passed"},
    ...     {"workload": "single-gpu", "check": "cdi", "outcome": "failed",
    ...      "diagnosis": "cdi-wrong-device"},
    ...     {"workload": "multi-gpu", "check": "allocation", "outcome": "skipped"}]))
    workload    allocation  cdi
    single-gpu  PASS        FAIL[cdi-wrong-device]
    multi-gpu   SKIP        -
    """
    return "\n".join(matrix_lines(rows))
