"""Parallel runs (draconf.parallel): one xdist group per workload, the run's capacity lock, and
report ids without xdist's ``@group``."""

from __future__ import annotations

import threading
import time

from draconf.parallel import CapacityLock, plain_nodeid, workload_group

pytest_plugins = ["pytester"]


def test_the_three_checks_of_a_workload_share_a_group_and_workloads_do_not():
    ids = [f"suites/test_workloads.py::TestWorkload::test_{check}[{w}]"
           for w in ("single-gpu", "shared-claim") for check in ("allocation", "cdi_injection", "cleanup")]
    groups = [workload_group(i) for i in ids]
    assert len(set(groups[:3])) == 1 and len(set(groups[3:])) == 1
    assert groups[0] != groups[3]
    # A feature workload of the same name in the subclass is another group.
    assert workload_group("suites/test_features.py::TestFeatureWorkload::test_cleanup[single-gpu]") != groups[0]


def test_a_group_id_is_stripped_from_report_ids_only_when_it_is_ours():
    nodeid = "suites/test_workloads.py::TestWorkload::test_cleanup[two-gpu]"
    assert plain_nodeid(f"{nodeid}@{workload_group(nodeid)}") == nodeid
    assert plain_nodeid(nodeid + "@other") == nodeid + "@other"


def test_without_a_lock_file_the_lock_does_nothing():
    lock = CapacityLock(None)
    lock.acquire(exclusive=True)
    assert lock.held is None
    lock.release()


def _acquire_in_thread(lock: CapacityLock, exclusive: bool) -> threading.Event:
    got = threading.Event()

    def run():
        lock.acquire(exclusive=exclusive)
        got.set()
    threading.Thread(target=run, daemon=True).start()
    return got


def test_shared_holders_coexist_and_exclusive_waits_for_them(tmp_path):
    path = str(tmp_path / "capacity.lock")
    first, second, exclusive = CapacityLock(path), CapacityLock(path), CapacityLock(path)
    first.acquire()
    assert _acquire_in_thread(second, exclusive=False).wait(2), "two shared holders must coexist"
    got = _acquire_in_thread(exclusive, exclusive=True)
    time.sleep(0.3)
    assert not got.is_set(), "exclusive taken while shared holders remain"
    first.release()
    time.sleep(0.2)
    assert not got.is_set()
    second.release()
    assert got.wait(2) and exclusive.held == "exclusive"
    # ... and a shared request now waits for the exclusive holder.
    later = _acquire_in_thread(CapacityLock(path), exclusive=False)
    time.sleep(0.3)
    assert not later.is_set()
    exclusive.release()
    assert later.wait(2)


def test_one_process_takes_the_lock_once_however_many_namespaces_it_makes(tmp_path):
    lock = CapacityLock(str(tmp_path / "capacity.lock"))
    lock.acquire(exclusive=True)
    lock.acquire(exclusive=True)  # a second namespace of the same test: no wait on itself
    lock.acquire()
    assert lock.held == "exclusive"
    for _ in range(3):
        lock.release()
    assert lock.held is None
    other = CapacityLock(str(tmp_path / "capacity.lock"))
    other.acquire(exclusive=True)
    assert other.held == "exclusive"
    other.release()


GROUPED = """
import pytest

@pytest.fixture(scope="class", params=["a", "shared-claim"])
def started(request):
    return request.param

class TestWorkload:
    def test_allocation(self, started): pass
    def test_cleanup(self, started): pass

def test_plain(): pass
"""


def test_the_plugin_groups_workload_checks_and_nothing_else(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_grouped=GROUPED)
    pytester.makeconftest("""
def pytest_collection_finish(session):
    for item in session.items:
        marks = [m.args[0] for m in item.iter_markers("xdist_group")]
        print("GROUP", item.nodeid, marks, item.get_closest_marker("exclusive_capacity") is not None)
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "draconf.pytest_plugin",
                                           "--collect-only", "-s", "-q")
    lines = [line for line in result.outlines if line.startswith("GROUP ")]
    assert "GROUP test_grouped.py::TestWorkload::test_allocation[a] ['draconf:test_grouped.TestWorkload/a'] False" in lines
    assert "GROUP test_grouped.py::TestWorkload::test_cleanup[a] ['draconf:test_grouped.TestWorkload/a'] False" in lines
    assert ("GROUP test_grouped.py::TestWorkload::test_cleanup[shared-claim] "
            "['draconf:test_grouped.TestWorkload/shared-claim'] True") in lines
    assert "GROUP test_grouped.py::test_plain [] False" in lines


SCATTERED = """
import os, time
from pathlib import Path
import pytest

@pytest.fixture(scope="class", params=["w1", "w2", "w3", "w4"])
def started(request):
    Path(f"deployed-{request.param}-{os.getpid()}").write_text("")  # one per deployment
    return request.param

class TestWorkload:
    def test_allocation(self, started): time.sleep(0.05)
    def test_cdi_injection(self, started): time.sleep(0.05)
    def test_cleanup(self, started): time.sleep(0.05)

@pytest.mark.parametrize("n", range(6))
def test_other(n): time.sleep(0.05)
"""


def test_under_xdist_each_workload_is_deployed_once_on_one_worker(pytester, monkeypatch):
    """Real pytest-xdist, 3 workers, ``--dist loadgroup`` as ``draconf run -n N`` sets it: every
    workload's three checks run on one worker, so its class fixture is set up once."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("DRACONF_BREAKER_FILE", raising=False)
    monkeypatch.delenv("DRACONF_CAPACITY_LOCK", raising=False)
    pytester.makepyfile(test_scattered=SCATTERED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "xdist", "-p", "draconf.pytest_plugin",
                                           "-n", "3", "--dist", "loadgroup")
    result.assert_outcomes(passed=18)
    deployed = sorted(p.name.rsplit("-", 1)[0] for p in pytester.path.glob("deployed-*"))
    assert deployed == ["deployed-w1", "deployed-w2", "deployed-w3", "deployed-w4"], deployed


def test_an_exclusive_taker_goes_before_shared_takers_that_come_after_it(tmp_path):
    """Without the turnstile, shared holders that overlap one another would keep an exclusive
    taker waiting for as long as they keep coming (a workload per worker, one after another)."""
    path = str(tmp_path / "capacity.lock")
    holder = CapacityLock(path)
    holder.acquire()
    exclusive_lock = CapacityLock(path)
    exclusive = _acquire_in_thread(exclusive_lock, exclusive=True)
    time.sleep(0.3)
    later_shared = _acquire_in_thread(CapacityLock(path), exclusive=False)
    time.sleep(0.3)
    assert not later_shared.is_set(), "a shared taker went ahead of the waiting exclusive one"
    holder.release()
    assert exclusive.wait(2)
    time.sleep(0.2)
    assert not later_shared.is_set(), "shared taken while the exclusive one holds it"
    exclusive_lock.release()
    assert later_shared.wait(2)
