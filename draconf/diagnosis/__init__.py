"""Why a check failed, decided from evidence read from the cluster (never from the test's name).

``diagnose(api, profile, namespace, error)`` reads what an operator would look at
(the troubleshooting walkthrough of the NVIDIA DRA docs): the pods and claims of the test's
namespace, its events, the DeviceClasses the claims name, the driver's ResourceSlices, the
nodes, the kubelet-plugin pods, the GPU Operator's GPUCluster / ClusterPolicy and the
ResourceQuotas.  It returns a :class:`Diagnosis`: one code of
:data:`draconf.reporting.DIAGNOSES`, one sentence saying what was seen and what to check, and
the evidence as text (YAML of the objects involved, trimmed).

The work is split so the rules can be tested without a cluster::

    gather.gather(api, profile, namespace) -> Snapshot  (raw dicts, the only part that calls the API)
    facts.build_facts(snapshot, profile)   -> Facts     (plain dataclasses, pure)
    rules.classify(facts)                  -> (code, reason)  (one function per code, pure)
    evidence.evidence(snapshot, facts)     -> {name: text}    (what the report attaches)

and this module is the glue: :func:`diagnose` runs the four, and the pytest hook's
:func:`record_failure_diagnosis` records the result in the test's verdict (its stash).  The rules and their
order are in :mod:`draconf.diagnosis.rules`.

Selectors are the CEL the cluster holds (the claims' and templates' selectors and the live
DeviceClasses'), evaluated by :mod:`draconf.cel` per published device (see
:func:`draconf.diagnosis.facts.selectors_eval`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from draconf.diagnosis.evidence import evidence
from draconf.diagnosis.facts import (ContainerGPUs, EventFacts, Facts, Failure, NodeFacts,
                                     QuotaFacts, TemplateFacts, build_facts,
                                     selectors_eval)
from draconf.diagnosis.gather import (PLUGIN_NAMESPACES, PLUGIN_SELECTORS, REQUEST_TIMEOUT, Snapshot,
                                      describe_error, gather)
from draconf.diagnosis.rules import RULES, classify
from draconf.diagnosis.scheduling import node_exclusions, tolerates
from draconf.reporting.diagnoses import DIAGNOSES
from draconf.reporting.recording import recorded_namespace
from draconf.runstate import cluster_api, run_profile

log = logging.getLogger("draconf.diagnosis")

__all__ = ["ContainerGPUs", "Diagnosis", "EventFacts", "Facts", "Failure", "NodeFacts", "PLUGIN_NAMESPACES",
           "PLUGIN_SELECTORS", "QuotaFacts", "REQUEST_TIMEOUT", "RULES",
           "Snapshot", "TemplateFacts", "build_facts", "classify",
           "diagnose", "diagnose_item", "evidence", "gather", "node_exclusions", "record_failure_diagnosis",
           "selectors_eval", "tolerates"]


@dataclass
class Diagnosis:
    code: str
    reason: str
    evidence: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.code not in DIAGNOSES:
            raise ValueError(f"unknown diagnosis {self.code!r}")

    def __str__(self) -> str:
        return f"[{self.code}] {self.reason}"


# --- entry points ------------------------------------------------------------------------------

def diagnose(api, profile, namespace: str | None, error: BaseException | str | None) -> Diagnosis:
    """Read the cluster and explain why a check failed with ``error``: the exception it raised
    (what it did, :class:`~draconf.diagnosis.facts.Failure`, and what it found allocated to each
    container when the cluster may no longer say, draconf.injection.WrongInjection), or only
    its message.  Never raises."""
    started = time.monotonic()
    try:
        snap = gather(api, profile, namespace)
        facts = build_facts(snap, profile)
        facts.failure = Failure.of(error)
        facts.recorded_allocations = dict(getattr(error, "allocated", None) or {})
        code, reason = classify(facts)
        ev = evidence(snap, facts, code, reason)
    except Exception as err:  # noqa: BLE001 - the diagnosis must not replace the test's own failure
        # The traceback at DEBUG: the debug log has it (draconf run's debug.log), the terminal's
        # live log (INFO and above) gets one line.
        log.debug("diagnosis of %s failed", namespace, exc_info=True)
        log.warning("the diagnosis of %s failed (%s); the debug log has its traceback", namespace,
                    describe_error(err))
        # Its own code: not "timeout" (which --reruns retries and may end as FLAKY, exit 0).
        code, reason = "diagnosis-error", f"The diagnosis itself failed ({describe_error(err)}): read the test's message."
        ev = {"diagnosis": f"[{code}] {reason}"}
    log.info("diagnosed %s in %.1fs: %s", namespace, time.monotonic() - started, code)
    return Diagnosis(code, reason, ev)


def diagnose_item(item, exc: BaseException | None) -> Diagnosis | None:
    """Diagnose a failing draconf test item (for the pytest plugin's hook).

    Finds the cluster (:func:`draconf.runstate.cluster_api`), the profile, the test's namespace (the one
    the fixture that made it recorded for the test's scope:
    :func:`draconf.reporting.recording.recorded_namespace`).
    Returns None when there is no cluster connection to read from.
    """

    config = item.config
    api = cluster_api(config)
    profile = run_profile(config)
    if api is None or profile is None:
        return None
    return diagnose(api, profile, recorded_namespace(item), exc)


def record_failure_diagnosis(item, exc: BaseException) -> Diagnosis | None:
    """Diagnose and record a failing test, for ``pytest_runtest_setup``/``call`` wrappers.

    Does nothing for skips, xfails, interrupts and tests whose verdict has a diagnosis already
    (they recorded one themselves).  A failure that carries its cause's code as data
    (:class:`draconf.errors.CheckFailed`, a wait's :class:`~draconf.waits.WaitFailed`) gets
    that code and its reason recorded with the cluster evidence.  Otherwise the code comes from
    :func:`diagnose_item`.  The code and its sentence go into the test's verdict
    (:func:`draconf.reporting.record_diagnosis`), from which the report says them; the
    exception is left as it was raised.  Never raises: a failing diagnosis must not hide the
    test's own failure.
    """
    import pytest

    from draconf.reporting import record_diagnosis, verdict_of

    if isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception, pytest.exit.Exception,
                        KeyboardInterrupt, SystemExit, GeneratorExit)):
        return None
    if verdict_of(item).code:
        return None
    try:
        result = diagnose_item(item, exc)
        if result is None:
            return None
        own = getattr(exc, "code", None)
        if own in DIAGNOSES and own != result.code:
            # The check named the cause itself: its own words are the reason, not the words
            # of whatever rule matched the facts (a reason must go with its code).
            said = str(getattr(exc, "reason", "") or "").strip().split("\n", 1)[0]
            result = Diagnosis(own, said[:600] or result.reason, result.evidence)
        record_diagnosis(item, result.code, evidence=result.evidence, reason=result.reason)
        return result
    except Exception as err:  # noqa: BLE001
        # As in diagnose(): the traceback to the debug log only, one line to the terminal.
        nodeid = getattr(item, "nodeid", item)
        log.debug("could not diagnose %s", nodeid, exc_info=True)
        log.warning("could not diagnose %s (%s); the debug log has the traceback", nodeid, describe_error(err))
        return None
