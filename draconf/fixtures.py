"""The fixtures a suite's tests ask for, each named after the state it guarantees: the run's
``profile`` and ``run_id``, a ``cluster`` connection (the bed started if need be), a fresh
``namespace`` (and :func:`make_namespace` for a class or module scope), the
``expected_features``, the ``preflight`` reading and its ``preflight_gate``, the
``validated_nodes``.  Registered by ``draconf.pytest_plugin`` (``pytest_plugins``)."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

from draconf import expectations, namespaces, reporting
from draconf.breaker import breaker_cause, namespace_controller_stalled
from draconf.errors import DraconfError, TargetUnusable
from draconf.runstate import CLUSTER_API, FAILED, run_profile
from draconf.target import run_target, target_api

log = logging.getLogger("draconf")


@pytest.fixture(scope="session")
def profile(pytestconfig):
    """The driver profile chosen with --profile (validated before anything is created)."""
    return run_profile(pytestconfig)


@pytest.fixture(scope="session")
def run_id():
    return namespaces.RunId.for_this_run()


@pytest.fixture(scope="session")
def cluster(pytestconfig):
    """An API connection to the cluster under test; starts the embedded test bed if needed."""
    target = run_target(pytestconfig)

    def start(bed):
        from draconf.testbed import inventory
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        say = (lambda m: reporter.write_line(f"[draconf] {m}")) if reporter else print
        bed.up(inventory.load(), faults=[], log=say)

    try:
        api = target_api(pytestconfig, start=start)
        from draconf.preflight.runner import probe
        unreachable = probe(api)
        if unreachable:
            raise TargetUnusable(unreachable)
    except DraconfError as err:
        # A bad kubeconfig (bad input) or a target that cannot be used, with draconf's code.
        pytest.exit(f"draconf: {err}", returncode=err.exit_code)
    pytestconfig.stash[CLUSTER_API] = api
    from draconf import runinfo
    if runinfo.from_env() is None:
        try:
            _set_run_info(pytestconfig, **runinfo.collect(
                api, run_profile(pytestconfig), target, namespaces.RunId.for_this_run().value))
        except Exception as err:  # the report loses detail; the run itself goes on
            log.warning("could not collect run information: %s", err)
    return api


#: make_namespace's hold on the capacity lock and its finalizers, from several threads at once.
_MAKING_NAMESPACES = threading.Lock()


def _release(lock) -> None:
    with _MAKING_NAMESPACES:
        lock.release()


def make_namespace(request, api, run_id, label: str, finish_later: list | None = None) -> str:
    """Create a run-labelled namespace and arrange its deletion at the end of ``request``'s scope
    (kept when a test in that scope failed and --keep-on-failure is set).  ``finish_later``: a
    list the deletion is appended to instead, for a caller that makes hundreds of namespaces
    in one scope and deletes them together (the fleet sweep: one after another, its 800
    namespaces' deletions took 84 s).

    Everything a test creates lives in such a namespace, so this is where a test that creates
    objects is skipped, before it creates any, when the credentials lack a permission the
    suite needs (preflight row ``permissions``)."""
    from draconf.permissions import gate_reason
    blocked = gate_reason(request.config, api) or breaker_cause(request.config)
    if blocked:
        from draconf.errors import NoVerdict
        raise NoVerdict(blocked)  # the check applies; the credentials keep it from a verdict
    from draconf.podsecurity import namespace_labels
    from draconf.startup import stall_after
    # Under pytest-xdist: hold the run's capacity lock (draconf.parallel) while this namespace
    # lives, exclusive for a test that needs the free GPUs to itself.  Released after the
    # namespace's devices are (finalizers run last-in, first-out).
    from draconf.parallel import run_lock
    lock = run_lock()
    # A class-scoped workload's request names the class; the check that set it up carries the mark.
    test = getattr(request, "_pyfuncitem", None) or request.node
    with _MAKING_NAMESPACES:  # the sweep makes its targets' namespaces from a thread pool
        lock.acquire(exclusive=test.get_closest_marker("exclusive_capacity") is not None)
        if finish_later is None:
            request.addfinalizer(lambda: _release(lock))
    # The suite's pods must pass the profile's Pod Security level: the real admission checks it.
    profile = run_profile(request.config)
    name = namespaces.create(api, run_id, label, extra_labels=namespace_labels(profile.pod_security),
                             sa_timeout=stall_after(profile))
    # The diagnosis of a failing test of this scope reads this namespace (released after
    # finish() below: finalizers run last-in, first-out).
    reporting.record_namespace(request, name)

    def finish():
        failed = request.node.stash.get(FAILED, False)
        if failed and request.config.getoption("draconf_keep_on_failure"):
            namespaces.REGISTRY.discard(name)
            log.warning("keeping namespace %s of a failed test (--keep-on-failure)", name)
            return
        if namespace_controller_stalled(request.config):
            namespaces.delete(api, name)  # no wait: it would only add a timeout per test
            return
        # The next test needs this one's devices back, not its namespace gone: the session
        # waits for every namespace of the run once, at its end.
        namespaces.delete_releasing_devices(api, name, timeout=120)

    def finish_and_release() -> None:
        try:
            finish()
        finally:
            _release(lock)  # held until the namespace's devices are released, as above

    if finish_later is None:
        request.addfinalizer(finish)
    else:
        finish_later.append(finish_and_release)
    return name


@pytest.fixture
def namespace(request, cluster, run_id):
    """A fresh namespace for this test, deleted afterwards."""
    return make_namespace(request, cluster, run_id, request.node.name)


#: Preflight checks whose failure leaves no point in deploying GPU workloads.
GATING_CHECKS = {"server-version", "resource-api", "device-class", "resource-slices",
                 "device-attributes", "device-class-selectors", "kubelet-plugin", "gpu-cluster",
                 "gpu-node-taints"}


@pytest.fixture(scope="session")
def expected_features(pytestconfig, cluster) -> expectations.Expectations:
    """The features this cluster must have: GA in its server version, and those the user named
    (``--expect-feature``); ``--waive-feature`` lets one be missing; what a test bed's simulated
    GPUs cannot have (``--draconf-target-limit``) is said in its skip."""
    return expectations.Expectations.of(cluster.version.get_code().git_version,
                                        pytestconfig.getoption("draconf_expect_feature"),
                                        pytestconfig.getoption("draconf_waive_feature"),
                                        pytestconfig.getoption("draconf_target_limit"))


#: The file the preflight reading of a pytest-xdist run is kept in (made by the controller):
#: the first worker to need it reads the cluster, the others take that reading.
PREFLIGHT_FILE_ENV = "DRACONF_PREFLIGHT_FILE"


def read_preflight_once(read) -> list:
    """``read()`` (the preflight checks), once per run: under pytest-xdist every worker shares
    the first worker's reading, so the gate, the preflight rows and every worker judge the same
    cluster state (and the cluster is read once, not once per worker)."""
    from draconf.preflight.result import CheckResult
    shared = os.environ.get(PREFLIGHT_FILE_ENV)
    if not shared:
        return read()
    import fcntl
    with open(shared + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = Path(shared)
        if path.is_file():
            return [CheckResult.from_dict(r) for r in json.loads(path.read_text(encoding="utf-8"))]
        results = read()
        path.write_text(json.dumps([r.as_dict() for r in results]), encoding="utf-8")
        return results


@pytest.fixture(scope="session")
def preflight(pytestconfig, cluster, profile):
    """The read-only preflight results, read once per run and shown on the terminal."""
    from draconf.preflight.runner import describe, run_all
    results = read_preflight_once(lambda: run_all(cluster, profile))
    # The permissions gate takes this reading's verdict, not a review of its own.
    from draconf.permissions import remember_gate
    remember_gate(pytestconfig, results)
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line("")
        reporter.write_line(describe(results))
    _set_run_info(pytestconfig, preflight={r.name: r.status for r in results})
    return results


@pytest.fixture(scope="session")
def preflight_gate(pytestconfig, preflight, cluster, profile, record_testsuite_property):
    """No verdict for GPU workloads, with the reason, when the cluster failed a check they
    depend on (they could only fail for that same reason, eighteen times over).

    A failure confined to some GPU nodes (their plugin down, no slices there) only takes those
    nodes out: the value is the run's :class:`~draconf.nodescope.NodeScope`, which steers the
    workloads to the nodes left; it is shown on the terminal and kept in the run info."""
    from draconf.nodescope import NodeScope, scope_of
    if pytestconfig.getoption("draconf_no_preflight_gate"):
        return NodeScope()
    from draconf.devices import PublishedDevices
    from draconf.errors import NoVerdict
    from draconf.preflight.runner import blocking_failures
    from draconf.permissions import gate_reason
    missing = gate_reason(pytestconfig, cluster)
    if missing:
        # Permissions preflight found missing: a test that needs them never starts (its
        # fixtures' reads would only be refused, one ForbiddenException each).
        raise NoVerdict(missing, code="permission-denied")
    blocking = [r for r in blocking_failures(preflight) if r.name in GATING_CHECKS]
    gpu_nodes = {n for r in blocking for n in r.nodes}
    if gpu_nodes:
        gpu_nodes |= set(PublishedDevices.read(cluster, profile.driver).devices_per_node())
    scope, whole_cluster = scope_of(blocking, gpu_nodes)
    if whole_cluster:
        raise NoVerdict("cluster not ready for DRA workloads (preflight): " + "; ".join(
            f"{r.name} [{r.diagnosis}] {r.summary}" for r in whole_cluster))
    if scope.excluded:
        _set_run_info(pytestconfig, nodes=scope.as_info())
        record_testsuite_property("draconf.nodes", scope.describe())
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        if reporter:
            reporter.write_line(scope.describe())
    return scope


@pytest.fixture(scope="session")
def validated_nodes(preflight_gate):
    """The GPU nodes the run validates (a :class:`~draconf.nodescope.NodeScope`): workloads
    are written for their devices and kept off the nodes preflight left out."""
    return preflight_gate


def _set_run_info(config, **info) -> None:
    reporting.set_run_info(config, **info)
