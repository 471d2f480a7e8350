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

import logging
import os
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from draconf import expectations, namespaces, reporting
from draconf.breaker import BREAKER_FILE_ENV, namespace_controller_stalled, trip_breaker
from draconf.errors import DraconfError
from draconf.devices import PublishedDevices
from draconf.profile import for_target, resolve as resolve_profile
# the run's stash (the plugin sets it; the diagnosis and the suites read it there too)
from draconf.runstate import CLUSTER_API, FAILED, PROFILE, cluster_api, run_profile  # noqa: F401
from draconf.target import run_target, target_api
from draconf.xdist_hooks import WORKER_DELETING_KEY, is_xdist_controller, wait_out_the_workers_namespaces
# re-exported: the suites and scenarios make their namespaces through the plugin's module
from draconf.fixtures import PREFLIGHT_FILE_ENV, make_namespace  # noqa: F401

#: The plugin's other parts, registered with it: the fixtures, and its part in an xdist run.
pytest_plugins = ("draconf.fixtures", "draconf.xdist_hooks")

log = logging.getLogger("draconf")


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
    group.addoption("--draconf-target-limit", dest="draconf_target_limit", action="append", default=[],
                    metavar="FEATURE=WHY",
                    help="what the target cannot have, and why (draconf run sets it for a test bed whose "
                         "simulated GPUs lack a feature): added to that feature's skip, never to a failure")
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
                                     config.getoption("draconf_waive_feature"),
                                     config.getoption("draconf_target_limit"))
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
        reporting.set_run_info(config, **handed_over)
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
        if sweeping(config):
            config.stash[COLLECTED_GPU_NODES] = _gpu_nodes(api, run_profile(config))
    except Exception as err:  # DraconfError, or the API refusing the read
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        what = "model and memory classes" if flag == "--all-models" else "GPU nodes"
        raise pytest.UsageError(f"draconf: {flag} reads the published devices to collect the "
                                f"{what}, and cannot: {reason}") from None


def collected_devices(config):
    """The devices ``--all-models`` collects its classes from (read at session start)."""
    return config.stash[COLLECTED_DEVICES]


#: The GPU nodes (labelled so, or hosting a kubelet-plugin pod) the sweep collects, whether or
#: not they publish a device.
COLLECTED_GPU_NODES = pytest.StashKey[list]()


def _gpu_nodes(api, profile) -> list[str]:
    """The cluster's GPU nodes as preflight finds them; none when they cannot be read (the sweep
    then covers the nodes that publish, and preflight's own rows say what could not be read)."""
    from draconf.preflight.nodes import read_gpu_nodes, read_plugin_pods
    try:
        # As preflight's resource-slices row reads them, with the profile's GPU-node labels.
        return read_gpu_nodes(api, read_plugin_pods(api, profile.plugin)[1], dict(profile.plugin.gpu_node_labels))[0]
    except Exception:  # noqa: BLE001 - see the docstring
        log.debug("the GPU nodes could not be read for the sweep", exc_info=True)
        return []


def collected_gpu_nodes(config) -> list[str]:
    """The GPU nodes read at session start for the sweep (:func:`_gpu_nodes`)."""
    return config.stash.get(COLLECTED_GPU_NODES, [])


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
            record_diagnosis(item, exc.code, reason=exc.reason)
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
        wait_out_the_workers_namespaces(session.config)
        return
    api = cluster_api(session.config)
    workeroutput = getattr(session.config, "workeroutput", None)
    if api is None:
        if workeroutput is not None:
            workeroutput[WORKER_DELETING_KEY] = []
        return
    failed = namespaces.delete_all(api, namespaces.REGISTRY.pending())
    for name, err in sorted(failed.items()):  # best effort: reported, never masking the run's outcome
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


