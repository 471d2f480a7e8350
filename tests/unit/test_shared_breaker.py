"""The breaker a pytest-xdist worker trips holds for every worker of the run (real pytest,
two workers, in a subprocess): a stopped control plane costs one timeout per run, not one per
worker."""

from __future__ import annotations

pytest_plugins = ["pytester"]

TESTS = """
import time
from pathlib import Path
import pytest
from draconf.breaker import breaker_cause, trip_breaker

@pytest.mark.xdist_group("one")
def test_trips(request):
    trip_breaker(request.config, "scheduler-unavailable", "no scheduler acted on gpu-pod in 15s")
    Path("tripped").write_text(request.config.workerinput["workerid"])

@pytest.mark.xdist_group("two")
def test_sees_it_on_another_worker(request):
    deadline = time.monotonic() + 30
    while not Path("tripped").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Path("tripped").read_text() != request.config.workerinput["workerid"], "same worker"
    cause = breaker_cause(request.config)
    assert cause and "no scheduler acted on gpu-pod" in cause, cause
"""


def test_a_breaker_tripped_on_one_worker_holds_on_the_others(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("DRACONF_BREAKER_FILE", raising=False)
    pytester.makepyfile(test_breaker=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "xdist", "-p", "draconf.pytest_plugin",
                                           "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=2)
