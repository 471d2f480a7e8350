"""What keeps a pytest-xdist run (``draconf run -n 4``) giving the verdicts of a serial run.

Two things:

* **one xdist group per workload** (:func:`workload_group`): the allocation, cdi-injection and
  cleanup checks of one workload share its class-scoped deployment, so they must run on one
  worker (``--dist loadgroup``, which ``draconf run -n N`` sets), or each worker deploys it again;
* **a per-run capacity lock** (:class:`CapacityLock`): a test that creates objects holds it
  shared while its namespace lives (a workload: across its three checks), and a test that needs
  the cluster's free GPUs to itself (``@pytest.mark.exclusive_capacity``: capacity-exhausted
  holds every free GPU of one model and expects the one it frees to go to its own pod; the
  workloads of :data:`EXCLUSIVE_WORKLOADS`, marked at collection) holds it exclusive.  One ``flock`` file per run, made by the xdist controller (:data:`LOCK_FILE_ENV`,
  inherited by its workers); without it (a serial run) the lock is a no-op.  It cannot
  deadlock: a test takes it once, before it creates anything, and no test waits for another
  while holding it.  A test waiting for it exclusive goes before tests that ask for it
  shared after it (a turnstile, :meth:`CapacityLock.acquire`): ``flock`` alone lets shared
  holders follow one another while the exclusive one waits for a gap that may never come.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re

#: The flock file every worker of one xdist run shares (set by the controller).
LOCK_FILE_ENV = "DRACONF_CAPACITY_LOCK"
#: Workloads that need the free GPUs to themselves under xdist: shared-claim pins two pods and
#: three GPUs to the one node that has them; partly placed beside other workloads it could wait on
#: them while they wait on it.  gpu-sharing pins its pod (two GPUs) to one node: beside other
#: workloads it could stand unschedulable long enough to be judged.
EXCLUSIVE_WORKLOADS = frozenset({"shared-claim", "gpu-sharing"})
#: Prefix of the xdist group names draconf sets; xdist appends ``@<group>`` to a node id.
GROUP_PREFIX = "draconf:"


def workload_group(nodeid: str) -> str:
    """The xdist group of a workload check: its module, class and parameter id, so the three
    checks of one workload (and nothing else) share it.  No brackets: xdist's loadgroup reads
    an ``@`` after the last ``]`` of a node id as its group.

    >>> workload_group("suites/test_workloads.py::TestWorkload::test_cleanup[shared-claim]")
    'draconf:test_workloads.TestWorkload/shared-claim'
    >>> workload_group("suites/test_features.py::TestFeatureWorkload::test_allocation[admin-access]")
    'draconf:test_features.TestFeatureWorkload/admin-access'
    >>> workload_group("suites/test_workloads.py::TestWorkload::test_allocation[single-gpu-H100]")
    'draconf:test_workloads.TestWorkload/single-gpu-H100'
    """
    path, _, rest = nodeid.partition("::")
    module = path.rsplit("/", 1)[-1].removesuffix(".py")
    parts = rest.split("::")
    test = parts[-1]
    scope = ".".join([module, *parts[:-1]])
    param = test[test.index("[") + 1:].removesuffix("]") if "[" in test else ""
    return f"{GROUP_PREFIX}{scope}/{param}"


def is_class_param_test(nodeid: str) -> bool:
    """A parametrized method of a test class: in the suites, a check of a class-scoped workload.

    >>> is_class_param_test("suites/test_workloads.py::TestWorkload::test_cleanup[two-gpu]")
    True
    >>> is_class_param_test("suites/test_preflight.py::test_preflight[server-version]")
    False
    >>> is_class_param_test("suites/test_x.py::TestX::test_plain")
    False
    """
    return nodeid.count("::") >= 2 and nodeid.endswith("]")


def scheduling_scope(nodeid: str) -> str:
    """The unit pytest-xdist hands one worker, for a node id as the controller sees it: a
    workload's checks together, every other test alone (``--dist load``).  A node id already
    carrying our ``@group`` (an xdist that applies the marks) gives that group.

    >>> scheduling_scope("suites/test_workloads.py::TestWorkload::test_allocation[two-gpu]")
    'draconf:test_workloads.TestWorkload/two-gpu'
    >>> scheduling_scope("suites/test_workloads.py::TestWorkload::test_cleanup[two-gpu]@draconf:test_workloads.TestWorkload/two-gpu")
    'draconf:test_workloads.TestWorkload/two-gpu'
    >>> scheduling_scope("suites/test_quota.py::test_claim_count_quota_rejects_second_claim")
    'suites/test_quota.py::test_claim_count_quota_rejects_second_claim'
    """
    at = nodeid.rfind("@" + GROUP_PREFIX)
    if at >= 0:
        return nodeid[at + 1:]
    return workload_group(nodeid) if is_class_param_test(nodeid) else nodeid


def make_scheduler(config, log):
    """pytest-xdist's loadgroup scheduling with :func:`scheduling_scope` as its grouping.

    xdist 3.8 marks a group by rewriting ``item._nodeid``, which pytest 9 no longer reads (node
    ids live in ``_id``): with it, every test is its own group and a workload's checks scatter
    over the workers.  The controller sees node ids only, so the grouping is read from them."""
    from xdist.scheduler import LoadGroupScheduling

    class WorkloadGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_scope(nodeid)

    return WorkloadGroupScheduling(config, log)


def plain_nodeid(nodeid: str) -> str:
    """A node id without the ``@<group>`` pytest-xdist's loadgroup appends to it, so a parallel
    run's report rows carry the ids of a serial run.

    >>> plain_nodeid("suites/test_workloads.py::TestWorkload::test_cleanup[two-gpu]@draconf:test_workloads.TestWorkload/two-gpu")
    'suites/test_workloads.py::TestWorkload::test_cleanup[two-gpu]'
    >>> plain_nodeid("suites/test_quota.py::test_x[a@b]")
    'suites/test_quota.py::test_x[a@b]'
    """
    return re.sub(r"@" + re.escape(GROUP_PREFIX) + r".*$", "", nodeid)


class CapacityLock:
    """The run's capacity lock as this process holds it: shared or exclusive, counted, so a test
    that makes two namespaces takes it once (a second ``flock`` on its own descriptor would
    wait for the first).  ``path`` None: no lock (a serial run)."""

    def __init__(self, path: str | None):
        self.path = path
        self._fd: int | None = None
        self._count = 0
        self._exclusive = False

    @classmethod
    def from_env(cls) -> "CapacityLock":
        return cls(os.environ.get(LOCK_FILE_ENV) or None)

    @property
    def held(self) -> str | None:
        """'exclusive', 'shared' or None."""
        if not self._count:
            return None
        return "exclusive" if self._exclusive else "shared"

    def acquire(self, exclusive: bool = False) -> None:
        """Take the lock (counted: only the first take, or the first exclusive one, waits).

        A first take passes the turnstile (a second file, ``<path>.turnstile``): an exclusive
        one holds it while it waits, so shared takes that come after it wait behind it, then
        lets it go once it holds the lock.  A process that already holds the lock shared and
        now wants it exclusive does not queue there: a writer waiting at the turnstile may be
        waiting for this very process's shared hold.
        """
        if self.path is None:
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if not self._count:
            with self._turnstile(hold=exclusive):
                fcntl.flock(self._fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            self._exclusive = exclusive
        elif exclusive and not self._exclusive:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._exclusive = True
        self._count += 1

    @contextlib.contextmanager
    def _turnstile(self, hold: bool):
        """Wait until no exclusive taker is queued; ``hold``: stay queued (as that exclusive
        taker) for the body."""
        assert self.path is not None  # only a lock with a file takes turns
        fd = os.open(self.path + ".turnstile", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not hold:
                fcntl.flock(fd, fcntl.LOCK_UN)
            yield
        finally:
            os.close(fd)  # releases the flock if still held

    def release(self) -> None:
        if self.path is None or not self._count:
            return
        self._count -= 1
        if not self._count and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd, self._exclusive = None, False


_LOCK: CapacityLock | None = None


def run_lock() -> CapacityLock:
    """This process's hold on the run's lock (one per xdist worker), read from the environment
    on first use (a worker inherits the controller's, set at its configure)."""
    global _LOCK
    if _LOCK is None:
        _LOCK = CapacityLock.from_env()
    return _LOCK
