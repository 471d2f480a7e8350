"""The run's control-plane breaker: once one workload found that nothing in the control plane
acts on it (no scheduler, no claim controller), every later test that would create objects
gives no verdict with that cause at once, instead of waiting out its own timeout.

One per pytest process, in the config's stash; under pytest-xdist the first worker to trip it
writes the cause into a file every worker of the run shares (``$DRACONF_BREAKER_FILE``, made
by the controller in ``pytest_configure``), so it holds for all of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

#: The run's control-plane breaker: (code, cause) once one workload found that nothing acts on
#: it (no scheduler, no claim controller).  Every test that would create objects after that
#: gets no verdict with this cause at once, instead of waiting out its own timeout.  Kept in
#: the config's stash: one per pytest process (per xdist worker, each of which trips it once).
STALLED = pytest.StashKey[tuple[str, str]]()
#: A file every pytest-xdist worker of one run shares (made by the controller, whose environment
#: the workers inherit), so the breaker one worker trips holds for all of them.
BREAKER_FILE_ENV = "DRACONF_BREAKER_FILE"


def _shared_breaker() -> Path | None:
    path = os.environ.get(BREAKER_FILE_ENV)
    return Path(path) if path else None


def trip_breaker(config, code: str, cause: str) -> None:
    """Record that the control plane is not acting (first cause wins) and say so once."""
    if STALLED in config.stash:
        return
    config.stash[STALLED] = (code, cause)
    shared = _shared_breaker()
    if shared is not None:
        try:
            with shared.open("x", encoding="utf-8") as out:  # the first worker's cause wins
                json.dump([code, cause], out)
        except FileExistsError:
            pass
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line("")
        reporter.write_line(f"[draconf] control plane not acting, the remaining workloads get no "
                            f"verdict: {cause}", red=True, bold=True)


def _tripped(config) -> tuple[str, str] | None:
    """The breaker's (code, cause) once this process, or another worker of the run, tripped it."""
    tripped = config.stash.get(STALLED, None)
    shared = _shared_breaker()
    if tripped is None and shared is not None and shared.is_file():
        try:
            tripped = config.stash[STALLED] = tuple(json.loads(shared.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            tripped = None  # being written: the next check reads it
    return tripped


def breaker_cause(config) -> str | None:
    """The no-verdict cause for a check that needs the control plane, once the breaker tripped."""
    tripped = _tripped(config)
    if tripped is None:
        return None
    code, cause = tripped
    cause = cause.removeprefix("workload never started: ").removeprefix(f"[{code}] ")
    return f"[{code}] not run: an earlier workload found the control plane not acting: {cause}"


def namespace_controller_stalled(config) -> bool:
    """The breaker says kube-controller-manager is not acting: its namespace controller finishes
    a namespace's deletion when it acts again, and waiting for that would only time out."""
    return (_tripped(config) or ("",))[0] == "controller-manager-unavailable"
