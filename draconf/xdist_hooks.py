"""The plugin's part in a pytest-xdist run (``draconf run -n N``): the scheduler that keeps a
workload's checks on one worker, and the controller's wait for the namespaces its workers
deleted (or, killed, could not).  Registered by ``draconf.pytest_plugin`` (``pytest_plugins``)."""

from __future__ import annotations

import logging

import pytest

from draconf import namespaces
from draconf.breaker import namespace_controller_stalled
from draconf.target import target_api

log = logging.getLogger("draconf")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (set by ``draconf run -n N``): a workload's checks on one worker,
    grouped by node id (draconf.parallel.make_scheduler says why the marks alone do not)."""
    if config.getvalue("dist") == "loadgroup":
        from draconf.parallel import make_scheduler
        return make_scheduler(config, log)
    return None


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


def wait_out_the_workers_namespaces(config) -> None:
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
