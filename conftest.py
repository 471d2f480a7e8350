"""Loads the draconf plugin when pytest runs from a source checkout, and keeps two rules of the
project's own test run (``python -m pytest``), beyond its tests' verdicts.

**The default bed shows every check.**  The run's ``suites/`` part runs against the default
bed (``draconf/testbed/data/inventories/default.yaml``), which has every feature the suite
probes: a check skipped there means the bed (or the suite) stopped exercising it, and the run
fails naming it, as a newcomer's first run would otherwise quietly do less.

**Fast lanes first.**  The doctests and unit tests (a minute, no bed) run before the tests
that start beds, so a broken unit shows in the first minute, not after the fault matrix.
CI runs that lane on its own before it builds anything, then sets
``DRACONF_FAST_LANE_DONE=1`` so that the full run does not run it a second time (its tests are
deselected, and say so).

**A hang names its test.**  Every test of the project's own run has a timeout (pytest-timeout,
``SELF_TEST_TIMEOUT`` unless it sets its own ``timeout`` mark): a wait that never ends fails
that test with its stack instead of holding CI until its budget runs out.  ``draconf run``'s
checks are not given one (their waits end on their own, with the last state).

**Where the time goes**, per test file: CI's lane budget.  With ``DRACONF_CI_TIMINGS=<file>``
set (``.ci/run`` sets it and prints the file after the run), the run writes the seconds each
test file took, setup and teardown included (the beds its fixtures start), slowest first.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

_SECONDS: defaultdict[str, float] = defaultdict(float)
_TESTS: defaultdict[str, set] = defaultdict(set)
#: suites/ checks skipped in this run: node id -> pytest's skip reason
_SKIPPED_CHECKS: dict[str, str] = {}


pytest_plugins = ["draconf.pytest_plugin"]


def _is_the_projects_run(session) -> bool:
    """The project's own run collects tests/; a ``draconf run`` from the checkout (whose rootdir
    is this directory too) collects suites/ only, and neither rule applies to it."""
    return any(item.nodeid.startswith("tests/") for item in session.items)


#: Where the run's fast lane is: doctests of the package and the unit tests.
_FAST = ("draconf/", "tests/unit/")
#: Seconds any one test of the project's own run may take, its fixtures' setup included: the
#: longest (a fault-matrix row, the upstream driver's first bed) take a few minutes; building
#: NVIDIA's release from a cold cache inside a fixture takes about 12 on this machine's 2 cores.
SELF_TEST_TIMEOUT = 1800


def pytest_collection_modifyitems(session, config, items):
    if not any(item.nodeid.startswith("tests/") for item in items):
        return
    if config.pluginmanager.hasplugin("timeout"):
        import pytest
        for item in items:
            if item.nodeid.startswith(("tests/", "draconf/")) and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SELF_TEST_TIMEOUT))
    # A stable partition: each lane keeps the order pytest and the plugins gave it.
    fast = [i for i in items if i.nodeid.startswith(_FAST)]
    rest = [i for i in items if not i.nodeid.startswith(_FAST)]
    if os.environ.get("DRACONF_FAST_LANE_DONE") == "1" and rest:
        config.hook.pytest_deselected(items=fast)
        items[:] = rest
    else:
        items[:] = fast + rest


def pytest_runtest_logreport(report):
    where = report.nodeid.split("::", 1)[0]
    _SECONDS[where] += report.duration
    _TESTS[where].add(report.nodeid)
    if report.skipped and where.startswith("suites/"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED_CHECKS[report.nodeid] = reason.removeprefix("Skipped: ")


def pytest_sessionfinish(session):
    if not _is_the_projects_run(session):
        return
    if _SKIPPED_CHECKS:
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"the default bed must show every check, but {len(_SKIPPED_CHECKS)} were skipped "
                 "(draconf/testbed/data/inventories/default.yaml publishes what each needs):"]
        lines += [f"  {nodeid}: {reason}" for nodeid, reason in sorted(_SKIPPED_CHECKS.items())]
        if terminal:
            terminal.ensure_newline()
        for line in lines:
            terminal.write_line(line, red=True) if terminal else print(line)
        if session.exitstatus == 0:
            session.exitstatus = 1
    _write_timings()


def _write_timings():
    target = os.environ.get("DRACONF_CI_TIMINGS")
    if not target or not _SECONDS:
        return
    total = sum(_SECONDS.values())
    lines = [f"{'seconds':>8}  {'tests':>5}  file   (total {total / 60:.1f} min)"]
    for where, seconds in sorted(_SECONDS.items(), key=lambda item: -item[1]):
        lines.append(f"{seconds:8.0f}  {len(_TESTS[where]):5d}  {where}")
    Path(target).write_text("\n".join(lines) + "\n")
