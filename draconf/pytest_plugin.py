"""The draconf pytest plugin: target selection, profile, namespaces, cleanup and reports.

Loaded by the repo's ``conftest.py`` and, when draconf is installed, by the ``pytest11`` entry
point, so ``pytest suites/`` works from anywhere.  Options (``draconf run`` takes them without
the ``draconf-`` prefix, e.g. ``--kubeconfig``, ``--context``)::

    --draconf-target testbed|kubeconfig|in-cluster   the embedded test bed (default), a
                                  kubeconfig's cluster, or the pod's ServiceAccount (manifests/runner/)
    --draconf-kubeconfig FILE     the kubeconfig (default $KUBECONFIG; implies target kubeconfig)
    --draconf-context NAME        context within the kubeconfig (implies target kubeconfig)
    --draconf-profile NAME|FILE   how to talk to the driver (default: nvidia; also: example)
    --draconf-image IMAGE         the workloads' image (a mirror an air-gapped cluster can pull)
    --draconf-keep-on-failure     keep a failed test's namespace for inspection
    --draconf-testbed-name NAME   which embedded test bed to start or reuse
    --draconf-all-models          model-selected and memory-selected once more per published
                                  product name and memory size (reads the cluster at collection)
    --draconf-expect-feature / --draconf-waive-feature FEATURE   see draconf.expectations
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from draconf import expectations, namespaces, reporting
from draconf.breaker import BREAKER_FILE_ENV, breaker_cause, namespace_controller_stalled, trip_breaker
from draconf.errors import DraconfError, TargetUnusable
from draconf.kube import connect, connect_target
from draconf.devices import PublishedDevices
from draconf.profile import for_target, resolve as resolve_profile
# the run's stash (the plugin sets it; the diagnosis and the suites read it there too)
from draconf.runstate import CLUSTER_API, PROFILE, cluster_api, run_profile  # noqa: F401

log = logging.getLogger("draconf")

#: Set on a failed test and on every collector above it (class, module, session), so a
#: namespace of any scope knows whether a test inside that scope failed.
FAILED = pytest.StashKey[bool]()

def run_target(config) -> str:
    """``--draconf-target``; a kubeconfig or context given alone means that kubeconfig's cluster."""
    target = config.getoption("draconf_target")
    if target == "testbed" and (config.getoption("draconf_kubeconfig") or config.getoption("draconf_context")):
        return "kubeconfig"
    return target


def pytest_addoption(parser):
    # Every option is draconf's own by name (--draconf-*): another plugin's option of the same
    # spelling (pytest-profiling's --profile, pytest-kind's --kubeconfig) can neither clash with
    # one of them nor silently take its value.  `draconf run` takes the short names.
    group = parser.getgroup("draconf", "draconf: GPU DRA conformance")
    group.addoption("--draconf-target", dest="draconf_target", choices=["testbed", "kubeconfig", "in-cluster"],
                    default="testbed",
                    help="cluster under test: the embedded test bed (default), a kubeconfig's "
                         "(--draconf-kubeconfig, else $KUBECONFIG), or in-cluster (the ServiceAccount "
                         "of the pod draconf runs in)")
    group.addoption("--draconf-kubeconfig", dest="draconf_kubeconfig", default=None, metavar="FILE",
                    help="kubeconfig file of the cluster under test (implies --draconf-target kubeconfig)")
    group.addoption("--draconf-context", dest="draconf_context", default=None, metavar="NAME",
                    help="kubeconfig context to use (implies --draconf-target kubeconfig)")
    group.addoption("--draconf-profile", dest="draconf_profile", default="nvidia",
                    help="driver profile: a built-in name (nvidia, example) or a YAML file")
    group.addoption("--draconf-image", dest="draconf_image", default=None, metavar="IMAGE",
                    help="the image the suite's workloads run (a mirror the nodes can pull; "
                         "default: the profile's)")
    group.addoption("--draconf-keep-on-failure", dest="draconf_keep_on_failure", action="store_true",
                    help="keep the namespace of a failed test for inspection")
    group.addoption("--draconf-testbed-name", dest="draconf_testbed_name", default="default",
                    help="name of the embedded test bed to start or reuse (target testbed)")
    group.addoption("--draconf-no-preflight-gate", dest="draconf_no_preflight_gate", action="store_true",
                    help="run workload tests even when a blocking preflight check fails")
    group.addoption("--draconf-all-models", dest="draconf_all_models", action="store_true",
                    help="also run model-selected and memory-selected once per published product "
                         "name and memory size (a test id and a report row per class); reads the "
                         "cluster's devices when the session starts")
    group.addoption("--draconf-every-node", dest="draconf_every_node", action="store_true",
                    help="also prove every GPU node: on each node that publishes GPUs a claim is "
                         "allocated, its GPU seen by a container and released (one test per node; "
                         "reads the cluster's devices when the session starts; -m every_node: only that)")
    group.addoption("--draconf-every-gpu", dest="draconf_every_gpu", action="store_true",
                    help="the sweep over every GPU instead: each published GPU allocated once and seen "
                         "by a container (one test per GPU; implies the sweep)")
    group.addoption("--draconf-sweep-max-gpus", dest="draconf_sweep_max_gpus", type=int, default=None,
                    metavar="N", help="how many GPUs the sweep may hold at once (default: a tenth of "
                                      "the published GPUs, at least one)")
    group.addoption("--draconf-expect-feature", dest="draconf_expect_feature", action="append", default=[],
                    metavar="FEATURE",
                    help="fail, not skip, when this feature is missing (repeatable; GA features of the "
                         "server's version are expected anyway): " + ", ".join(expectations.FEATURES))
    group.addoption("--draconf-waive-feature", dest="draconf_waive_feature", action="append", default=[],
                    metavar="FEATURE",
                    help="skip, not fail, when this feature is missing, even if GA (repeatable)")
    reporting.pytest_addoption(parser)


#: The failures ``--reruns`` runs again: those whose verdict is ``intermittent`` (a second
#: reading showed the expected state) or ``timeout`` (no definitive signal).
RERUN_CODES = frozenset({"intermittent", "timeout"})
#: The ``flaky`` mark _rerun_by_verdict put on an item, replaced at its next failed phase.
RERUN_MARK = pytest.StashKey[pytest.Mark]()


def pytest_configure(config):
    config.addinivalue_line("markers", "draconf(workload, check): a conformance check of one workload")
    config.addinivalue_line("markers", "conformance: part of the conformance suite")
    config.addinivalue_line("markers", "preflight: read-only readiness checks of the cluster")
    config.addinivalue_line("markers", "quota: ResourceQuota behaviour for DRA claims")
    config.addinivalue_line("markers", "failure_modes: the source documents' failure scenarios")
    config.addinivalue_line("markers", "audit: read-only audit of the cluster's quotas")
    config.addinivalue_line("markers", "every_node: the sweep proving each GPU node (--draconf-every-node)")
    config.addinivalue_line("markers", "exclusive_capacity: under pytest-xdist, runs while no other "
                                       "test of the run holds objects (draconf.parallel)")
    if not config.pluginmanager.hasplugin("xdist"):
        # Set on every workload check; pytest-xdist registers it, and without xdist (an optional
        # extra) it must still be a known marker.
        config.addinivalue_line("markers", "xdist_group(name): keep these tests on one xdist worker")
    try:
        config.stash[PROFILE] = for_target(resolve_profile(config.getoption("draconf_profile")),
                                           run_target(config), config.getoption("draconf_image"))
        expectations.Expectations.of(None, config.getoption("draconf_expect_feature"),
                                     config.getoption("draconf_waive_feature"))
    except DraconfError as err:
        raise pytest.UsageError(str(err)) from None
    config.pluginmanager.register(reporting.ReportingPlugin(config), "draconf-reporting")
    if is_xdist_controller(config):
        # The controller of a pytest-xdist run: one run id (namespace labels) for every worker it
        # starts, so that it can sweep what they leave (draconf run sets it already) ...
        if "DRACONF_RUN_ID" not in os.environ:
            os.environ["DRACONF_RUN_ID"] = namespaces.RunId.for_this_run().value
            config.add_cleanup(lambda: os.environ.pop("DRACONF_RUN_ID", None))
        # ... one breaker file for every worker.
        handle, path = tempfile.mkstemp(prefix="draconf-breaker-", suffix=".json")
        os.close(handle)
        os.unlink(path)  # tripping creates it; its absence means closed
        os.environ[BREAKER_FILE_ENV] = path
        config.add_cleanup(lambda: (Path(path).unlink(missing_ok=True), os.environ.pop(BREAKER_FILE_ENV, None)))
        # ... one record of admission refusals (draconf.refusals), which every worker appends to ...
        from draconf import refusals
        handle, refused = tempfile.mkstemp(prefix="draconf-refusals-", suffix=".jsonl")
        os.close(handle)
        os.environ[refusals.FILE_ENV] = refused
        config.add_cleanup(lambda: (Path(refused).unlink(missing_ok=True), os.environ.pop(refusals.FILE_ENV, None)))
        # ... one preflight reading (read_preflight_once), written by the first worker ...
        handle, reading = tempfile.mkstemp(prefix="draconf-preflight-", suffix=".json")
        os.close(handle)
        os.unlink(reading)
        os.environ[PREFLIGHT_FILE_ENV] = reading
        config.add_cleanup(lambda: (Path(reading).unlink(missing_ok=True),
                                    Path(reading + ".lock").unlink(missing_ok=True),
                                    os.environ.pop(PREFLIGHT_FILE_ENV, None)))
        # ... and one capacity lock (draconf.parallel): tests needing the free GPUs to themselves
        # run while no other worker holds objects.
        from draconf.parallel import LOCK_FILE_ENV
        handle, lock = tempfile.mkstemp(prefix="draconf-capacity-", suffix=".lock")
        os.close(handle)
        os.environ[LOCK_FILE_ENV] = lock
        config.add_cleanup(lambda: (Path(lock).unlink(missing_ok=True),
                                    Path(lock + ".turnstile").unlink(missing_ok=True),
                                    os.environ.pop(LOCK_FILE_ENV, None)))
    if getattr(config.option, "reruns", None) and not getattr(config.option, "only_rerun", None):
        # pytest-rerunfailures: only failures that may not persist are run again.  A verdict
        # read from the cluster (a scheduler message that stood, a failed preflight, a wrong
        # device) is not a flake, and running it again would only hide it as one.
        config.pluginmanager.register(RerunByVerdict(), "draconf-rerun-by-verdict")
    from draconf import runinfo
    handed_over = runinfo.from_env()
    if handed_over:
        _set_run_info(config, **handed_over)
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (CI cancel, kill) unwinds like Ctrl-C, so fixtures and the sweep below run.
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """One xdist group per workload (before pytest-xdist reads the groups): its three checks
    share its class-scoped deployment, so they run on one worker, in order."""
    from draconf.parallel import EXCLUSIVE_WORKLOADS, GROUP_PREFIX, workload_group
    if not sweeping(config):
        # The sweep runs when asked for (--every-node, --every-gpu): a test per node or GPU.
        swept = [item for item in items if item.get_closest_marker("every_node")]
        if swept:
            config.hook.pytest_deselected(items=swept)
            items[:] = [item for item in items if not item.get_closest_marker("every_node")]
    for item in items:
        if item.get_closest_marker("every_node"):
            # The sweep runs once for all its tests (draconf.sweep): one worker holds it.
            item.add_marker(pytest.mark.xdist_group(f"{GROUP_PREFIX}every-node"))
        if is_workload_check(item):
            item.add_marker(pytest.mark.xdist_group(workload_group(item.nodeid)))
            if EXCLUSIVE_WORKLOADS & {str(v) for v in item.callspec.params.values()}:
                item.add_marker(pytest.mark.exclusive_capacity)
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker: the tests that need the GPUs to themselves go first, while
        # the other workers are still starting; at the end they would run one at a time while
        # the others wait.  (xdist hands out bigger groups first, then in this order.)
        items.sort(key=lambda item: item.get_closest_marker("exclusive_capacity") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (set by ``draconf run -n N``): a workload's checks on one worker,
    grouped by node id (draconf.parallel.make_scheduler says why the marks alone do not)."""
    if config.getvalue("dist") == "loadgroup":
        from draconf.parallel import make_scheduler
        return make_scheduler(config, log)
    return None


def target_api(config, start=None, down_hint: str = ""):
    """An API connection to the run's target (:func:`run_target`, ``--draconf-kubeconfig``,
    ``--draconf-context``, ``--draconf-testbed-name``).  A test bed that is down is started by
    ``start(bed)``; without ``start`` it is a :class:`DraconfError` naming it (``down_hint`` adds
    a way out)."""
    target = run_target(config)
    if target != "testbed":
        return connect_target(target, config.getoption("draconf_context"), config.getoption("draconf_kubeconfig"))
    from draconf.testbed.cluster import Testbed
    bed = Testbed.named(config.getoption("draconf_testbed_name"))
    if not bed.is_up:
        if start is None:
            raise DraconfError(f"test bed {bed.name!r} is not up (start it with `draconf testbed up`"
                               + (f", {down_hint}" if down_hint else "") + ")")
        start(bed)
    return connect(bed.kubeconfig)


def is_xdist_controller(config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


#: What a pytest-xdist worker reports to the controller at its session end (its
#: ``workeroutput``): its namespaces that are being deleted, for the controller to wait out.
WORKER_DELETING_KEY = "draconf_namespaces_deleting"
#: The controller's record of its workers: id -> the namespaces they said they are deleting
#: (None: it went down without saying, interrupted or crashed).
WORKERS_DELETING = pytest.StashKey[dict]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, on the controller: a worker starts, and has said nothing yet."""
    node.config.stash.setdefault(WORKERS_DELETING, {})[node.gateway.id] = None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist, on the controller: remember what each worker said it is deleting."""
    said = None if error else getattr(node, "workeroutput", {}).get(WORKER_DELETING_KEY)
    node.config.stash.setdefault(WORKERS_DELETING, {})[node.gateway.id] = said


def _wait_out_the_workers_namespaces(config) -> None:
    """The controller of a pytest-xdist run, once its workers are gone: wait until every
    namespace of the run is gone.  The workers delete theirs without waiting (each namespace
    takes the namespace controller 5 s; a worker that waited would hold the run's end that long
    after its last test, and its own exit after that).  A namespace no worker said it deletes
    (a worker interrupted mid-test never reaches its session end) is deleted here, by the run's
    label, and named.  The controller runs no fixture, so it connects here, to a target that is
    already up (it starts nothing)."""
    if config.option.collectonly:
        return
    said = config.stash.get(WORKERS_DELETING, {})
    if said and all(names == [] for names in said.values()):
        return  # no worker made a namespace, or all were gone already
    expected = (set() if any(names is None for names in said.values())
                else {n for names in said.values() for n in names})
    run = namespaces.RunId.for_this_run()
    try:
        api = target_api(config)
        left = namespaces.leftovers(api, run)
        unexpected = [name for name in left if name not in expected]
        if unexpected:
            log.warning("deleting %d namespace(s) of this run the workers left: %s",
                        len(unexpected), ", ".join(unexpected))
            for name in unexpected:
                namespaces.delete(api, name)
        if namespace_controller_stalled(config):
            return
        still = namespaces.wait_deleted(api, left, timeout=120) if left else []
    except Exception as err:  # best effort: report, never mask the run's own outcome
        log.warning("could not delete this run's namespaces (%s); run `draconf sweep`", err)
        return
    if still:
        log.warning("namespaces still terminating after the run: %s; run `draconf sweep`",
                    ", ".join(still))


def is_workload_check(item) -> bool:
    """A check of a class-scoped, parametrized workload (the ``started`` fixture)."""
    return (getattr(item, "cls", None) is not None and "started" in getattr(item, "fixturenames", ())
            and hasattr(item, "callspec"))


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_sessionstart(session):
    """An unusable ``--target kubeconfig`` ends the run before any test, in one line
    (``ERROR: draconf: ...``, exit status 4, pytest's usage error), with nothing created."""
    config = session.config
    if config.getoption("draconf_all_models") or sweeping(config):
        _read_devices_for_collection(config)
    if config.option.collectonly or run_target(config) == "testbed":
        return
    try:
        api = target_api(config)
        from draconf.preflight.runner import probe
        unusable = probe(api)
    except DraconfError as err:
        unusable = str(err)
    if unusable:
        raise pytest.UsageError(f"draconf: {unusable}")


#: ``--all-models``: the devices published when the session started, which the workload classes
#: are collected from (each pytest process, xdist workers too, reads them once).
COLLECTED_DEVICES = pytest.StashKey[PublishedDevices]()


def sweeping(config) -> bool:
    """Whether the run includes the fleet sweep (``--every-node`` or ``--every-gpu``)."""
    return bool(config.getoption("draconf_every_node") or config.getoption("draconf_every_gpu"))


def _read_devices_for_collection(config) -> None:
    """Read the published devices before collection; no usable cluster is a usage error in one
    line (``ERROR: draconf: --all-models ...``, exit status 4).  The bed is not started here:
    ``draconf run`` starts it before pytest; plain pytest needs ``draconf testbed up`` first."""
    from draconf.devices import PublishedDevices
    from draconf.preflight.runner import probe
    flag = "--all-models" if config.getoption("draconf_all_models") else (
        "--every-gpu" if config.getoption("draconf_every_gpu") else "--every-node")
    try:
        api = target_api(config, down_hint=f"or use `draconf run {flag}`")
        unusable = probe(api)
        if unusable:
            raise DraconfError(unusable)
        config.stash[COLLECTED_DEVICES] = PublishedDevices.read(api, run_profile(config).driver)
    except Exception as err:  # DraconfError, or the API refusing the read
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        what = "model and memory classes" if flag == "--all-models" else "GPU nodes"
        raise pytest.UsageError(f"draconf: {flag} reads the published devices to collect the "
                                f"{what}, and cannot: {reason}") from None


def collected_devices(config):
    """The devices ``--all-models`` collects its classes from (read at session start)."""
    return config.stash[COLLECTED_DEVICES]


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item):
    """A setup that fails (a workload that never came up) is diagnosed like a failed check."""
    try:
        return (yield)
    except BaseException as exc:
        _diagnose(item, exc)
        raise


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item):
    """Every failed check gets one diagnosis code read from the cluster, before its namespace
    goes.  The code goes into the test's verdict (item stash), which the reporting plugin's
    ``pytest_runtest_makereport`` reads; the exception is re-raised as it was."""
    try:
        return (yield)
    except BaseException as exc:
        _diagnose(item, exc)
        raise


def _diagnose(item, exc) -> None:
    from draconf.startup import ControlPlaneStalled
    if isinstance(exc, ControlPlaneStalled):
        trip_breaker(item.config, exc.code, str(exc))
        # The wait read the evidence itself (no binding, no claim, no ServiceAccount, the
        # component's Lease and pods), possibly before the test had a namespace the rules
        # could read again: its sentence is the diagnosis.
        from draconf.reporting import record_diagnosis, verdict_of
        if not verdict_of(item).code:
            record_diagnosis(item, exc.code, reason=str(exc).removeprefix(f"[{exc.code}] "))
    from draconf.diagnosis import record_failure_diagnosis
    record_failure_diagnosis(item, exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for node in item.listchain():
            node.stash[FAILED] = True


class RerunByVerdict:
    """Registered when ``--reruns`` is given without the user's own ``--only-rerun``."""

    # trylast: inside pytest-rerunfailures' wrapper, which reads the rerun filter after this.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.failed:
            _rerun_by_verdict(item)
        return report


#: pytest-rerunfailures' ``only_rerun`` filters (regexes searched in "ExceptionType: message"):
#: one every failure matches, one none does.
_RERUN_ANY, _RERUN_NONE = r"", r"(?!)"


def _rerun_by_verdict(item) -> None:
    """Tell pytest-rerunfailures whether this failed phase may run again: only when the test's
    verdict is one of RERUN_CODES.  Its filter reads the exception's text, which draconf leaves
    as raised (the code is in the verdict, not the message), so the item's ``flaky`` mark gets
    an ``only_rerun`` that matches every failure or none; the mark's other arguments (reruns,
    delay, condition) are kept."""
    from draconf.reporting import verdict_of
    previous = item.stash.get(RERUN_MARK, None)
    if previous is not None and previous in item.own_markers:
        item.own_markers.remove(previous)
    mark = item.get_closest_marker("flaky")
    args, kwargs = (mark.args, dict(mark.kwargs)) if mark else ((), {"reruns": item.config.getvalue("reruns")})
    kwargs["only_rerun"] = [_RERUN_ANY if verdict_of(item).code in RERUN_CODES else _RERUN_NONE]
    item.add_marker(pytest.mark.flaky(*args, **kwargs), append=False)
    item.stash[RERUN_MARK] = item.own_markers[0]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Whatever a test could not delete (interrupted, crashed fixture), delete it now; then wait,
    once for the whole run, until every namespace it deleted is gone: nothing is left behind.
    Under pytest-xdist a worker hands that wait to the controller, which (after xdist has
    stopped its workers: ``trylast``) waits for them all and deletes, by the run's label, what
    workers killed by Ctrl-C or SIGTERM could not."""
    if is_xdist_controller(session.config):
        _wait_out_the_workers_namespaces(session.config)
        return
    api = cluster_api(session.config)
    workeroutput = getattr(session.config, "workeroutput", None)
    if api is None:
        if workeroutput is not None:
            workeroutput[WORKER_DELETING_KEY] = []
        return
    for name in namespaces.REGISTRY.pending():
        try:
            namespaces.delete(api, name)
            namespaces.REGISTRY.deleting(name)
        except Exception as err:  # best effort: report, never mask the run's own outcome
            log.warning("could not delete namespace %s: %s; run `draconf sweep`", name, err)
    deleting = namespaces.REGISTRY.still_deleting()
    if workeroutput is not None:  # an xdist worker: its controller waits for them
        workeroutput[WORKER_DELETING_KEY] = deleting
        return
    if not deleting:
        return
    if namespace_controller_stalled(session.config):
        return
    try:
        left = namespaces.wait_deleted(api, deleting, timeout=120)
    except Exception as err:  # best effort, as above
        left, why = deleting, f" ({err})"
    else:
        why = ""
    if left:
        log.warning("namespaces still terminating after the run%s: %s; run `draconf sweep`",
                    why, ", ".join(left))


# --- fixtures --------------------------------------------------------------------------------
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


def make_namespace(request, api, run_id, label: str) -> str:
    """Create a run-labelled namespace and arrange its deletion at the end of ``request``'s scope
    (kept when a test in that scope failed and --keep-on-failure is set).

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

    request.addfinalizer(finish)
    return name


@pytest.fixture
def namespace(request, cluster, run_id):
    """A fresh namespace for this test, deleted afterwards."""
    return make_namespace(request, cluster, run_id, request.node.name)


#: Preflight checks whose failure leaves no point in deploying GPU workloads.
GATING_CHECKS = {"server-version", "resource-api", "device-class", "resource-slices",
                 "device-attributes", "device-class-selectors", "kubelet-plugin", "gpu-cluster"}


@pytest.fixture(scope="session")
def expected_features(pytestconfig, cluster) -> expectations.Expectations:
    """The features this cluster must have: GA in its server version, and those the user named
    (``--expect-feature``); ``--waive-feature`` lets one be missing."""
    return expectations.Expectations.of(cluster.version.get_code().git_version,
                                        pytestconfig.getoption("draconf_expect_feature"),
                                        pytestconfig.getoption("draconf_waive_feature"))


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
        raise NoVerdict(f"[permission-denied] {missing}")
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
