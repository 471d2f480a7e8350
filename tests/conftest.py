"""Where the project's own test run spends its time, per test file: CI's lane budget.

With ``DRACONF_CI_TIMINGS=<file>`` set (``.ci/run`` sets it and prints the file after the run),
the run writes the seconds each test file took, setup and teardown included (the beds its
fixtures start), slowest first.  Only the run that collects ``tests/`` loads this file: a
``draconf run`` a test starts never does.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

_SECONDS: defaultdict[str, float] = defaultdict(float)
_TESTS: defaultdict[str, set] = defaultdict(set)


def pytest_runtest_logreport(report):
    where = report.nodeid.split("::", 1)[0]
    _SECONDS[where] += report.duration
    _TESTS[where].add(report.nodeid)


def pytest_sessionfinish(session):
    target = os.environ.get("DRACONF_CI_TIMINGS")
    if not target or not _SECONDS:
        return
    total = sum(_SECONDS.values())
    lines = [f"{'seconds':>8}  {'tests':>5}  file   (total {total / 60:.1f} min)"]
    for where, seconds in sorted(_SECONDS.items(), key=lambda item: -item[1]):
        lines.append(f"{seconds:8.0f}  {len(_TESTS[where]):5d}  {where}")
    Path(target).write_text("\n".join(lines) + "\n")
