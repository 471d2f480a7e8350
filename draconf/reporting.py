"""What a draconf run leaves behind: ``summary.json``, a terminal matrix, and Allure extras.

The main plugin registers one :class:`ReportingPlugin` per pytest process and re-exports this
module's :func:`pytest_addoption`::

    from draconf.reporting import ReportingPlugin, pytest_addoption  # noqa: F401

    def pytest_configure(config):
        config.pluginmanager.register(ReportingPlugin(config), "draconf-reporting")

Tests say what they exercise with a marker, and explain a failure with a diagnosis code::

    @pytest.mark.draconf(workload="single-gpu", check="cdi")
    def test_container_sees_its_gpu(request, pod):
        if pod.visible_gpu != pod.allocated_gpu:
            record_diagnosis(request.node, "cdi-wrong-device",
                             evidence={"nvidia-smi -L": pod.nvidia_smi})
            pytest.fail(diagnosis_prefix("cdi-wrong-device") + "container sees the wrong GPU")

At the end of the session the plugin writes ``<--draconf-reports>/summary.json`` (one row per
test, see :class:`ReportingPlugin`), prints a workload x check matrix, and, when allure-pytest
is writing results (``--alluredir``), adds ``environment.properties`` and ``categories.json``
there so that Allure groups failures by diagnosis. :func:`build_html_report` turns such a
results directory into one self-contained HTML file with Allure 3 (Node, no Java).

Outcomes follow Allure's vocabulary, so the matrix, summary.json and the HTML report agree:

========  ==========================================================================
passed    every phase passed
failed    the test body raised AssertionError (or called ``pytest.fail``): the cluster
          does not conform
broken    the test body raised anything else: the test could not reach a verdict
error     setup or teardown (a fixture) failed
skipped   skipped or xfailed: the check does not apply to this cluster
========  ==========================================================================

and one of draconf's own, for a check that applies but was blocked:

==========  ========================================================================
no-verdict  the check raised :class:`draconf.errors.NoVerdict` (in setup or call): it
            could reach no verdict, and its message names the blocking cause (e.g.
            ``workload never started: ...``).  Never a pass.  pytest, JUnit and Allure
            see a skip, whose message starts with ``NoVerdict:``; summary.json and
            the matrix (``NO VERDICT``) name it.
==========  ========================================================================
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pytest
from tabulate import tabulate

from draconf.errors import NoVerdict
from draconf.nodescope import scope_line

#: Every diagnosis a test may record, with what it means for the cluster and where to look.
#: The wording is for the operator reading a failed run, modelled on the NVIDIA DRA driver's
#: troubleshooting list.
DIAGNOSES: dict[str, str] = {
    "api-unavailable":
        "The API server does not serve resource.k8s.io/v1, so no DRA workload can run: check "
        "the Kubernetes version (1.34 or later) and the API server's --runtime-config and "
        "feature gates (`kubectl api-resources --api-group=resource.k8s.io`).",
    "scheduler-unavailable":
        "No scheduler acted on the workload's pods (no binding, no PodScheduled condition, no "
        "scheduling event) while the API server answered: kube-scheduler is stopped, hung or "
        "not leading. Check its process or pod in kube-system, its logs and its Lease "
        "(`kubectl -n kube-system get lease kube-scheduler`); the workloads after it got no verdict.",
    "controller-manager-unavailable":
        "No controller acted on the workload: no ResourceClaim was generated from its template "
        "(and no FailedResourceClaimCreation event), or its Deployment made no pods, while the API "
        "server answered: kube-controller-manager is stopped, hung or not leading. Check its "
        "process or pod in kube-system, its logs and its Lease "
        "(`kubectl -n kube-system get lease kube-controller-manager`); the workloads after it got "
        "no verdict.",
    "missing-deviceclass":
        "The DeviceClass the workload requests does not exist, which usually means the DRA "
        "driver was installed with that device type turned off: fix the driver's Helm values "
        "(for NVIDIA, resources.gpus.enabled) and check `kubectl get deviceclasses`.",
    "no-resourceslices":
        "The driver publishes no ResourceSlices, so the scheduler sees no GPUs: the kubelet "
        "plugin cannot discover the GPUs on its node; check its pod logs and the node's GPU "
        "driver, then `kubectl get resourceslices`.",
    "attribute-missing":
        "A CEL selector uses a device attribute the driver does not publish (wrong name, "
        "domain or type), so no device can ever match: compare the selector with the "
        "attributes in `kubectl get resourceslices -o yaml`.",
    "selector-unmatched":
        "The selectors are valid but no published GPU satisfies them (for example a product "
        "or memory size the cluster does not have): check the claim's CEL expressions "
        "against the devices listed in the ResourceSlices.",
    "capacity-exhausted":
        "Every GPU that matches the request is already allocated, so the pod stays Pending: "
        "free GPUs by deleting finished pods and claims (`kubectl get resourceclaims -A`) or "
        "add capacity.",
    "node-excluded":
        "The pod's node selector, affinity or an untolerated taint keeps it off every node "
        "that has a matching GPU: compare the pod spec with the GPU nodes' labels and taints "
        "(including DRA device taints).",
    "image-pull-failed":
        "A GPU node cannot pull the workload's image (no route to the registry, an air-gapped "
        "cluster, or a wrong name): set the profile's `image` to one the nodes can pull, e.g. a "
        "mirror, and check `kubectl describe pod` for the pull error.",
    "plugin-unhealthy":
        "The driver's kubelet plugin is absent or unhealthy on the GPU node, so allocated "
        "claims cannot be prepared: check the kubelet-plugin DaemonSet pods, their logs, and "
        "the kubelet's plugin registration.",
    "cdi-not-injected":
        "The container started without its allocated GPU, which means CDI is not enabled in "
        "the container runtime: enable CDI in containerd or CRI-O and check the CDI specs the "
        "driver writes (e.g. under /var/run/cdi).",
    "cdi-wrong-device":
        "The container sees a GPU other than the one allocated to its claim, so device "
        "isolation is broken: compare the claim's status.allocation with nvidia-smi inside "
        "the container and check the driver's CDI specs.",
    "claim-not-released":
        "ResourceClaims generated for pods outlive those pods, so their GPUs stay allocated: "
        "check the kube-controller-manager's resourceclaim controller and the claims' owner "
        "references and finalizers.",
    "quota-not-enforced":
        "A ResourceQuota on a DeviceClass (<class>.deviceclass.resource.k8s.io/devices) was "
        "not enforced: check that the ResourceQuota admission plugin is enabled on the API "
        "server and that the quota names the right DeviceClass; or a namespace caps GPUs only "
        "via requests.nvidia.com/gpu, which DRA claims bypass: add a "
        "<class>.deviceclass.resource.k8s.io/devices quota.",
    "policy-conflict":
        "A GPU Operator ClusterPolicy (device plugin) exists beside the GPUCluster (DRA), and a "
        "cluster may have one or the other but not both: delete the one you do not use.",
    "permission-denied":
        "The credentials draconf runs with may not do something the suite needs (RBAC): the "
        "message names each missing verb and resource; bind the ClusterRole in "
        "manifests/rbac/clusterrole.yaml to this identity and rerun. Not a cluster failure.",
    "admission-denied":
        "The cluster's admission control (a ValidatingAdmissionPolicy, an admission webhook, a "
        "LimitRange or a quota draconf did not create) refused the suite's objects; the message "
        "quotes the server naming the policy or webhook: exempt draconf's namespaces (label "
        "app.kubernetes.io/managed-by=draconf) or run where the policy does not apply.",
    "feature-disabled":
        "The API server accepted a DRA field (a prioritized list, an extended resource mapped by a "
        "DeviceClass) that kube-scheduler does not act on: its feature gate is off there, e.g. a "
        "scheduler older than the API server. Turn the gate on in kube-scheduler (and the "
        "kubelets), keeping every control-plane component at one version.",
    "admin-access-unsupported":
        "A claim was allocated a GPU with adminAccess (shared with the claim already using it, "
        "as monitoring agents and the GPU Operator's validator need), but the node's DRA driver "
        "refuses to prepare it while another claim holds that GPU: the driver treats admin access "
        "as exclusive. Upgrade the driver to a release that supports admin access.",
    "admin-access-unrestricted":
        "The API server admitted an adminAccess claim in a namespace the suite did not label "
        "`resource.kubernetes.io/admin-access: \"true\"`: something (a mutating policy or webhook, "
        "a namespace template) labels namespaces for admin access, so any user who may create "
        "claims there can reach GPUs other workloads hold. Find it (`kubectl get "
        "mutatingadmissionpolicies,mutatingwebhookconfigurations`) and restrict the label to "
        "monitoring namespaces.",
    "intermittent":
        "The check failed, but the same reading repeated by the diagnosis moments later showed "
        "the expected state: the failure did not persist. Rerun with --reruns to tell a flake "
        "from a fault; a test that passes on a rerun is reported flaky.",
    "timeout":
        "The check ran out of time without a definitive signal from the cluster, so it says "
        "nothing about conformance yet: read the events of the objects involved and rerun "
        "with a longer timeout.",
}

#: Where each test's diagnosis code lives between record_diagnosis() and the report.
DIAGNOSIS_KEY = pytest.StashKey[str]()
#: The diagnosis sentence of that code (what it names: node, taint, class, device, permission).
REASON_KEY = pytest.StashKey[str]()
#: Run metadata collected by set_run_info(); lives on the config so any code can add to it.
RUN_INFO_KEY = pytest.StashKey[dict]()

#: Outcomes from best to worst; a matrix cell shows the worst of its tests. ``failed`` is
#: worst because it is the one definitive "does not conform"; the others mean "no verdict".
OUTCOMES = ("passed", "flaky", "skipped", "not-run", "no-verdict", "error", "broken", "failed")
OUTCOME_LABELS = {"passed": "PASS", "flaky": "FLAKY", "skipped": "SKIP", "not-run": "NOT RUN", "no-verdict": "NO VERDICT",
                  "error": "ERROR", "broken": "BROKEN", "failed": "FAIL"}
#: The directory whose tests make a session a conformance run (one that writes reports).
SUITE_DIR = "suites"
_OUTCOME_COLOURS = {"passed": {"green": True}, "flaky": {"yellow": True, "bold": True}, "skipped": {"yellow": True},
                    "not-run": {"yellow": True, "bold": True},
                    "no-verdict": {"yellow": True, "bold": True},
                    "error": {"red": True}, "broken": {"purple": True},
                    "failed": {"red": True, "bold": True}}

SUMMARY_FILENAME = "summary.json"


# ---------------------------------------------------------------------------------------------
# Options and the helpers test code calls
# ---------------------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--draconf-reports DIR`` (default ``reports``, relative to the invocation dir)."""
    parser.getgroup("draconf").addoption(
        "--draconf-reports", dest="draconf_reports", default=None, metavar="DIR",
        help="directory for summary.json; without it, only a run of the conformance suite "
             "(tests under suites/) writes one, to reports/")


def diagnosis_prefix(code: str) -> str:
    """The text to start a failure message with, so Allure can file it under ``code``.

    >>> diagnosis_prefix("cdi-wrong-device")
    '[cdi-wrong-device] '
    """
    _require_known_code(code)
    return f"[{code}] "


def record_diagnosis(node: pytest.Item, code: str,
                     evidence: Mapping[str, Any] | None = None, reason: str | None = None) -> None:
    """Say why ``node`` (the test item: ``request.node``) is failing, with optional evidence.

    The code lands in the test's summary.json row and matrix cell. When Allure is recording,
    the test also gets the tag ``diagnosis:<code>`` and one text attachment per evidence entry,
    e.g. ``evidence={"kubectl describe pod": text}``. ``reason`` is the diagnosis sentence,
    naming the culprit (node, taint, class, device, permission): it goes into the summary.json
    row and the terminal's diagnoses list as well. If the test then fails without the
    :func:`diagnosis_prefix` in its message, the plugin prepends it so Allure's categories can
    still match (see ``ReportingPlugin._add_prefix_to``). Recording again replaces the code.
    """
    _require_known_code(code)
    if not isinstance(node, pytest.Item):
        raise TypeError("record_diagnosis() needs the test item (request.node inside the test "
                        f"or a function-scoped fixture), not {type(node).__name__} {node.nodeid}")
    node.stash[DIAGNOSIS_KEY] = code
    if reason:
        node.stash[REASON_KEY] = reason
    if _allure_is_recording(node.config):
        import allure  # only here: reporting works without allure-pytest installed
        allure.dynamic.tag(f"diagnosis:{code}")
        for name, text in (evidence or {}).items():
            allure.attach(text if isinstance(text, str) else str(text), name=name,
                          attachment_type=allure.attachment_type.TEXT)


def note(item: pytest.Item, text: str) -> None:
    """What a passing test found worth telling (a Kubernetes property it measured, the fallback
    a claim took): in the log, as a ``draconf-note`` JUnit property and as the Allure description."""
    logging.getLogger("draconf").warning(text)
    item.user_properties.append(("draconf-note", text))
    if _allure_is_recording(item.config):
        import allure
        allure.dynamic.description(text)


def show_templated(item: pytest.Item, lines: list[str]) -> None:
    """The fields the suite set in its manifests before applying them (README, "Templated
    fields"), with their values: in the log, as a ``draconf-templated`` JUnit property and an
    Allure attachment.  Nothing to show (applied as written) says so too."""
    text = "\n".join(lines) if lines else "applied as written"
    logging.getLogger("draconf").info("templated fields: %s", text)
    item.user_properties.append(("draconf-templated", text))
    if _allure_is_recording(item.config):
        import allure
        allure.attach(text, name="templated fields", attachment_type=allure.attachment_type.TEXT)


def set_run_info(config: pytest.Config, **info: Any) -> None:
    """Add metadata about this run (target, versions, inventory...) to summary.json and Allure.

    >>> class FakeConfig: stash = pytest.Stash()
    >>> config = FakeConfig()
    >>> set_run_info(config, target="testbed", driver="gpu.nvidia.com")
    >>> set_run_info(config, run_id="abc123")
    >>> get_run_info(config)
    {'target': 'testbed', 'driver': 'gpu.nvidia.com', 'run_id': 'abc123'}
    """
    config.stash.setdefault(RUN_INFO_KEY, {}).update(info)


def get_run_info(config: pytest.Config) -> dict[str, Any]:
    """A copy of everything given to :func:`set_run_info` so far."""
    return dict(config.stash.get(RUN_INFO_KEY, {}))


def _require_known_code(code: str) -> None:
    # A typo would yield a code that no Allure category and no operator doc knows about.
    if code not in DIAGNOSES:
        raise ValueError(f"unknown diagnosis {code!r}; known: {', '.join(DIAGNOSES)}")


def _allure_is_recording(config: pytest.Config) -> bool:
    """True when this run was given ``--alluredir`` (allure-pytest is a dependency, so the
    option exists only where the plugin is loaded)."""
    return bool(getattr(config.option, "allure_report_dir", None))


# ---------------------------------------------------------------------------------------------
# One phase (setup / call / teardown) of one test, as seen by pytest_runtest_makereport
# ---------------------------------------------------------------------------------------------

def phase_outcome(report: pytest.TestReport, excinfo: pytest.ExceptionInfo | None) -> str:
    """Classify one phase the way Allure does (see the module docstring).

    ``excinfo`` is None for a strict XPASS, which pytest reports as a failed call.  A skip
    raised as :class:`~draconf.errors.NoVerdict` is ``no-verdict``, in any phase.
    """
    if report.passed:
        return "passed"
    if report.skipped:
        if excinfo is not None and excinfo.errisinstance(NoVerdict):
            return "no-verdict"
        return "skipped"
    if report.when != "call":
        return "error"
    if excinfo is None or excinfo.errisinstance((AssertionError, pytest.fail.Exception)):
        return "failed"
    return "broken"


def phase_message(report: pytest.TestReport, excinfo: pytest.ExceptionInfo | None) -> str | None:
    """First line of why the phase did not pass, or None if it passed.

    Assertion failures give their message (the diagnosis prefix comes first); other
    exceptions keep their type, which is what tells a reader why the test broke.
    """
    if report.passed:
        return None
    if hasattr(report, "wasxfail"):
        return first_line(f"XFAIL {report.wasxfail}".strip())
    if report.skipped and excinfo is not None and excinfo.errisinstance(NoVerdict):
        return first_line(excinfo.value.cause)
    if report.skipped and isinstance(report.longrepr, tuple):
        return first_line(report.longrepr[2].removeprefix("Skipped: ").removeprefix("NoVerdict: "))
    if excinfo is not None:
        if excinfo.errisinstance((AssertionError, pytest.fail.Exception)):
            return first_line(str(excinfo.value)) or first_line(excinfo.exconly())
        return first_line(excinfo.exconly())
    return first_line(report.longreprtext)


def first_line(text: str | None) -> str | None:
    """The first non-blank line of ``text``, stripped; None when there is none.

    >>> first_line("\\n  [timeout] no pod\\nassert False")
    '[timeout] no pod'
    >>> first_line("  ") is None
    True
    """
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return None


def marker_fields(item: pytest.Item) -> tuple[str | None, str | None]:
    """``(workload, check)`` from the closest ``@pytest.mark.draconf(...)``; None when absent."""
    marker = item.get_closest_marker("draconf")
    if marker is None:
        return None, None
    return marker.kwargs.get("workload"), marker.kwargs.get("check")


# ---------------------------------------------------------------------------------------------
# Folding the three phases of a test into one summary row
# ---------------------------------------------------------------------------------------------

def new_row(nodeid: str, phase: Mapping[str, Any]) -> dict[str, Any]:
    """A summary.json row, started from a test's setup phase."""
    return {"id": nodeid, "workload": phase.get("workload"), "check": phase.get("check"),
            "outcome": phase["outcome"], "duration": 0.0,
            "diagnosis": phase.get("diagnosis"), "reason": phase.get("reason"),
            "message": phase.get("message")}


def fold_phase(row: dict[str, Any], when: str, phase: Mapping[str, Any], duration: float) -> None:
    """Update ``row`` with one more phase of its test.

    The call phase decides the outcome unless setup already failed or skipped; a failing
    teardown turns a passed or skipped test into an error (as pytest counts it) but does not
    hide a real failure.

    >>> row = new_row("t.py::test", {"outcome": "passed"})
    >>> fold_phase(row, "call", {"outcome": "failed", "message": "boom"}, 0.5)
    >>> fold_phase(row, "teardown", {"outcome": "error", "message": "cleanup"}, 0.25)
    >>> row["outcome"], row["message"], row["duration"]
    ('failed', 'boom', 0.75)
    """
    row["duration"] = round(row["duration"] + duration, 6)  # microseconds are plenty
    row["diagnosis"] = phase.get("diagnosis") or row["diagnosis"]
    row["reason"] = phase.get("reason") or row.get("reason")
    if when == "setup":
        return  # new_row() already took setup's outcome
    takes_over = (
        (when == "call" and row["outcome"] == "passed")
        or (when == "teardown" and phase["outcome"] == "error"
            and row["outcome"] in ("passed", "skipped", "no-verdict")))
    if takes_over:
        row["outcome"] = phase["outcome"]
        row["message"] = phase.get("message")


def mark_reruns(row: dict[str, Any], failed_attempts: list[Mapping[str, Any]]) -> None:
    """A test that failed and was run again: a pass is **flaky**, never plain passed; any
    outcome keeps its earlier failures.

    >>> row = new_row("t.py::test", {"outcome": "passed"})
    >>> mark_reruns(row, [{"message": "[intermittent] sees no GPU", "diagnosis": "intermittent"}])
    >>> row["outcome"], row["reruns"], row["failed_attempts"][0]["diagnosis"]
    ('flaky', 1, 'intermittent')
    """
    row["reruns"] = len(failed_attempts)
    row["failed_attempts"] = list(failed_attempts)
    if row["outcome"] == "passed":
        row["outcome"] = "flaky"
        first = failed_attempts[0]
        row["message"] = (f"passed on attempt {len(failed_attempts) + 1}; attempt 1 failed: "
                          f"{first.get('message') or '(no message)'}")
        row["diagnosis"], row["reason"] = first.get("diagnosis"), None


def worst_outcome(outcomes: Iterable[str]) -> str:
    """The worst of ``outcomes`` by :data:`OUTCOMES` order.

    >>> worst_outcome(["passed", "failed", "skipped"])
    'failed'
    """
    return max(outcomes, key=OUTCOMES.index)


def count_outcomes(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{"passed": n, "failed": n, ...}`` with every outcome present, zero or not."""
    counts = Counter(row["outcome"] for row in rows)
    return {outcome: counts.get(outcome, 0)
            for outcome in ("passed", "flaky", "failed", "broken", "no-verdict", "skipped", "error")}


# ---------------------------------------------------------------------------------------------
# The workload x check matrix
# ---------------------------------------------------------------------------------------------

_NO_CHECK = "(no check)"


def matrix_cells(rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[str], dict]:
    """Workloads and checks in first-seen order, and ``{(workload, check): (outcome, code)}``.

    A cell holds the worst outcome of its tests; its diagnosis is the one recorded on a test
    with that outcome, if any. Tests without a workload are left out.
    """
    workloads: list[str] = []
    checks: list[str] = []
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        if not row.get("workload"):
            continue
        workload, check = row["workload"], row.get("check") or _NO_CHECK
        if workload not in workloads:
            workloads.append(workload)
        if check not in checks:
            checks.append(check)
        grouped.setdefault((workload, check), []).append(row)
    cells = {}
    for key, group in grouped.items():
        outcome = worst_outcome(row["outcome"] for row in group)
        codes = [row["diagnosis"] for row in group
                 if row["outcome"] == outcome and row.get("diagnosis")]
        cells[key] = (outcome, codes[0] if codes else None)
    return workloads, checks, cells


def cell_label(outcome: str, diagnosis: str | None) -> str:
    """The text of one matrix cell.

    >>> cell_label("failed", "cdi-wrong-device")
    'FAIL[cdi-wrong-device]'
    """
    return OUTCOME_LABELS[outcome] + (f"[{diagnosis}]" if diagnosis else "")


def matrix_lines(rows: Iterable[Mapping[str, Any]],
                 colour: Callable[[str, str | None], str] = lambda text, outcome: text) -> list[str]:
    """The matrix as aligned lines of text; ``colour(cell text, outcome)`` may wrap each result
    cell in terminal escapes (alignment ignores them).

    Workloads that share no check (preflight vs the GPU workloads) get a block of their own,
    each with its own header, separated by an empty line, so no block is mostly empty cells.
    Empty when no test carries a workload.
    """
    rows = list(rows)
    checks_of: dict[str, set] = {}
    for row in rows:
        if row.get("workload"):
            checks_of.setdefault(row["workload"], set()).add(row.get("check") or _NO_CHECK)
    blocks: list[set] = []
    for workload, checks in checks_of.items():
        for block in blocks:
            if any(checks & checks_of[w] for w in block):
                block.add(workload)
                break
        else:
            blocks.append({workload})
    lines: list[str] = []
    for block in blocks:
        if lines:
            lines.append("")
        lines += _block_lines([r for r in rows if r.get("workload") in block], colour)
    return lines


def _block_lines(rows: list[Mapping[str, Any]], colour: Callable[[str, str | None], str]) -> list[str]:
    workloads, checks, cells = matrix_cells(rows)
    if not workloads:
        return []
    table = [["workload", *checks]]
    for workload in workloads:
        table.append([workload] + [colour(cell_label(*cells[workload, check]), cells[workload, check][0])
                                   if (workload, check) in cells else "-" for check in checks])
    # The header goes in as a row: tabulate's `headers` would widen each column by two.
    text = tabulate(table, tablefmt="plain", disable_numparse=True)
    return [line.rstrip() for line in text.splitlines()]


def render_matrix(rows: Iterable[Mapping[str, Any]]) -> str:
    """The matrix as plain text, or "" when no test has a workload.

    >>> print(render_matrix([
    ...     {"workload": "single-gpu", "check": "allocation", "outcome": "passed"},
    ...     {"workload": "single-gpu", "check": "cdi", "outcome": "failed",
    ...      "diagnosis": "cdi-wrong-device"},
    ...     {"workload": "multi-gpu", "check": "allocation", "outcome": "skipped"}]))
    workload    allocation  cdi
    single-gpu  PASS        FAIL[cdi-wrong-device]
    multi-gpu   SKIP        -
    """
    return "\n".join(matrix_lines(rows))


# ---------------------------------------------------------------------------------------------
# Files written at the end of the session
# ---------------------------------------------------------------------------------------------

def allure_categories() -> list[dict[str, Any]]:
    """One Allure category per diagnosis, matching messages that carry ``[code]``.

    Allure 2 (Java) requires the regex to match the whole message, Allure 3 searches for it,
    so the pattern allows anything around the tag: allure-pytest's message starts with the
    exception type ("AssertionError: [code] ..."). Only ``messageRegex`` is set because a
    ``traceRegex`` too would have to match as well, which only narrows the category.
    """
    return [{"name": code, "description": meaning,
             "matchedStatuses": ["failed", "broken"],
             "messageRegex": category_regex(code)}
            for code, meaning in DIAGNOSES.items()] + [NO_VERDICT_CATEGORY]


#: Allure files a NoVerdict as skipped with the message "NoVerdict: <cause>"; this category
#: sets them apart from checks that do not apply.
NO_VERDICT_CATEGORY = {
    "name": "no verdict",
    "description": "The check applies but could reach no verdict; the message names the cause "
                   "that blocked it (e.g. the workload never started). Not a pass.",
    "matchedStatuses": ["skipped"], "messageRegex": r"\s*NoVerdict: [\s\S]*"}


def category_regex(code: str) -> str:
    r"""A regex, valid in Java, JavaScript and Python, for a message containing ``[code]``.

    ``[\s\S]`` rather than ``.`` so that it spans lines without a DOTALL flag.

    >>> import re
    >>> bool(re.fullmatch(category_regex("timeout"), "AssertionError: [timeout] pod\nassert 0"))
    True
    >>> bool(re.fullmatch(category_regex("timeout"), "AssertionError: timeout"))
    False
    """
    escaped = "".join("\\" + ch if ch in "[]().*+?{}|^$\\" else ch for ch in code)
    return rf"[\s\S]*\[{escaped}\][\s\S]*"


def environment_properties(info: Mapping[str, Any]) -> str:
    """Run info as Java properties lines for Allure's Environment widget.

    Lists are joined with ", ", a dict becomes one ``key.subkey`` line per entry, None is
    left out.

    >>> print(environment_properties({"target": "testbed", "driver": None,
    ...        "inventory": ["node-a", "node-b"], "gpus": {"node-a": 2}}), end="")
    target=testbed
    inventory=node-a, node-b
    gpus.node-a=2
    """
    lines = []
    for key, value in _flatten_properties(info):
        lines.append(f"{_escape_property(key, is_key=True)}={_escape_property(value)}\n")
    return "".join(lines)


def _flatten_properties(info: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    pairs = []
    for key, value in info.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            pairs += _flatten_properties(value, prefix=f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", _property_text(value)))
    return pairs


def _property_text(value: Any) -> str:
    """One property value: lists joined with ", ", dicts inside them in parentheses.

    >>> _property_text([{"name": "n1", "gpus": 2}, "n2"])
    '(name: n1, gpus: 2), n2'
    """
    if isinstance(value, (list, tuple, set)):
        return ", ".join(_property_text(item) for item in value)
    if isinstance(value, Mapping):
        return "(" + ", ".join(f"{k}: {_property_text(v)}" for k, v in value.items()) + ")"
    return str(value)


def _escape_property(text: str, is_key: bool = False) -> str:
    # Java properties treat backslash as an escape and a newline as the end of the entry;
    # in keys, '=', ':' and spaces would also end the key early.
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if is_key:
        for ch in "=: ":
            text = text.replace(ch, "\\" + ch)
    return text


def write_allure_extras(allure_dir: Path, info: Mapping[str, Any]) -> None:
    """Write ``environment.properties`` and ``categories.json`` into an Allure results dir."""
    allure_dir.mkdir(parents=True, exist_ok=True)
    (allure_dir / "environment.properties").write_text(environment_properties(info),
                                                       encoding="utf-8")
    (allure_dir / "categories.json").write_text(json.dumps(allure_categories(), indent=2),
                                                encoding="utf-8")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _resolve(config: pytest.Config, path: str | os.PathLike) -> Path:
    # Relative paths are relative to where pytest was started, like --alluredir, even if a
    # test changed the working directory since.
    return config.invocation_params.dir / Path(path)


# ---------------------------------------------------------------------------------------------
# The plugin
# ---------------------------------------------------------------------------------------------

class ReportingPlugin:
    """Collects one row per test and writes the reports; register one per pytest process.

    A row is ``{"id", "workload", "check", "outcome", "duration", "diagnosis", "message"}``.
    Rows are built from ``pytest_runtest_logreport`` using facts attached to each report in
    ``pytest_runtest_makereport``, so they come out the same under pytest-xdist (the reports
    travel from the workers to the controller, which alone writes files and prints).
    Collection errors get a row too, with outcome ``error`` and no workload.
    """

    def __init__(self, config: pytest.Config):
        self.config = config
        self.rows: dict[str, dict[str, Any]] = {}
        self.started = _now()
        self.summary_path: Path | None = None
        #: nodeid -> (workload, check) of every collected test, for rows of tests never run.
        self.collected: dict[str, tuple[str | None, str | None]] = {}
        #: The test between logstart and logfinish: the one an interrupt stopped.
        self.running: str | None = None
        self.interruption: dict[str, Any] | None = None
        #: nodeid -> the attempts of a test that failed and were run again (pytest-rerunfailures)
        self.failed_attempts: dict[str, list[dict[str, Any]]] = {}
        config.addinivalue_line(
            "markers", "draconf(workload=None, check=None): what a draconf test exercises, "
                       "for the summary matrix")

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = _now()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = {item.nodeid: marker_fields(item) for item in session.items}

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.running = nodeid

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self.running = None

    # -- make sure a diagnosed failure's message carries its [code] -------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        # Each attempt is diagnosed afresh: a rerun (pytest-rerunfailures) that passes must not
        # carry the code of the attempt that failed.
        for key in (DIAGNOSIS_KEY, REASON_KEY):
            if key in item.stash:
                del item.stash[key]
        return (yield from self._with_prefixed_failure(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        return (yield from self._with_prefixed_failure(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item):
        return (yield from self._with_prefixed_failure(item))

    def _with_prefixed_failure(self, item: pytest.Item):
        # Shared body of the three wrappers above: a generator that pluggy drives.
        try:
            return (yield)
        except BaseException as exc:
            code = item.stash.get(DIAGNOSIS_KEY, None)
            if code:
                self._add_prefix_to(exc, code)
            raise

    @staticmethod
    def _add_prefix_to(exc: BaseException, code: str) -> None:
        """Prepend ``[code] `` to the exception's message unless it is already there.

        Done before pytest and allure-pytest format the exception, so both see it. Skips and
        xfails are left alone (they are not failures); so are exceptions whose message does
        not come from ``args[0]``, where callers must use :func:`diagnosis_prefix` themselves.
        """
        prefix = diagnosis_prefix(code)
        if isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception)):
            return
        if prefix.strip() in str(exc):
            return
        if isinstance(exc, pytest.fail.Exception):
            exc.msg = prefix + (exc.msg or "")
            exc.args = (exc.msg,)
        elif isinstance(exc, Exception):
            if not exc.args:
                exc.args = (prefix.strip(),)
            elif isinstance(exc.args[0], str):
                exc.args = (prefix + exc.args[0], *exc.args[1:])

    # -- collect rows ------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        workload, check = marker_fields(item)
        # Plain values only: under xdist this attribute is serialised to the controller.
        report.draconf_phase = {
            "workload": workload, "check": check,
            "outcome": phase_outcome(report, call.excinfo),
            "message": phase_message(report, call.excinfo),
            "diagnosis": item.stash.get(DIAGNOSIS_KEY, None),
            "reason": item.stash.get(REASON_KEY, None),
        }
        attempt = getattr(item, "execution_count", 1)  # pytest-rerunfailures counts attempts
        if report.when == "call" and report.passed and attempt > 1:
            item.user_properties.append(("draconf.flaky", f"passed on attempt {attempt} after "
                                                          f"{attempt - 1} failed"))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        phase = getattr(report, "draconf_phase", None) or {
            # A process without this plugin made the report: classify with what we have.
            "outcome": phase_outcome(report, None), "message": phase_message(report, None)}
        if report.outcome == "rerun":
            # pytest-rerunfailures: this attempt failed and the test runs again.  Keep what
            # failed; the next attempt's setup starts the row afresh.
            self.failed_attempts.setdefault(report.nodeid, []).append(
                {"message": phase.get("message"), "diagnosis": phase.get("diagnosis")})
            return
        if report.when == "setup" or report.nodeid not in self.rows:
            self.rows[report.nodeid] = new_row(report.nodeid, phase)
        row = self.rows[report.nodeid]
        fold_phase(row, report.when, phase, report.duration)
        if report.when == "teardown" and report.nodeid in self.failed_attempts:
            mark_reruns(row, self.failed_attempts[report.nodeid])

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.rows[report.nodeid] = {
                "id": report.nodeid, "workload": None, "check": None, "outcome": "error",
                "duration": 0.0, "diagnosis": None, "message": first_line(report.longreprtext)}

    # -- write and print ---------------------------------------------------------------------

    def summary(self, exit_status: int) -> dict[str, Any]:
        """The content of summary.json for the rows collected so far."""
        run = {**get_run_info(self.config), "started": self.started, "finished": _now(),
               "exit_status": int(exit_status)}
        if self.interruption:
            run["interrupted"] = self.interruption
        rows = list(self.rows.values())
        return {"run": run, "totals": count_outcomes(rows), "tests": rows}

    def _mark_interrupted(self) -> None:
        """An interrupted run (Ctrl-C, SIGTERM) must not read as a pass: the test that was
        running and every test never reached get a ``not-run`` row, and the run says so."""
        never_ran = [n for n in self.collected if n not in self.rows]
        if self.running is not None:
            row = self.rows.setdefault(self.running, new_row(self.running, {
                "outcome": "not-run", "workload": self.collected.get(self.running, (None, None))[0],
                "check": self.collected.get(self.running, (None, None))[1]}))
            if row["outcome"] in ("passed", "skipped"):  # only its setup had reported
                row["outcome"], row["message"] = "not-run", "interrupted while this test was running"
        for nodeid in never_ran:
            workload, check = self.collected[nodeid]
            self.rows[nodeid] = new_row(nodeid, {"outcome": "not-run", "workload": workload,
                                                 "check": check,
                                                 "message": "never ran: the run was interrupted"})
        self.interruption = {"while_running": self.running,
                             "never_ran": [n for n in never_ran if n != self.running]}

    def _writes_reports(self) -> bool:
        """Reports are the conformance run's: written when asked (``--draconf-reports``) or
        when the session ran the suite; the project's own unit tests write none."""
        if self.config.getoption("draconf_reports", None):
            return True
        return any(nodeid.split("/", 1)[0] == SUITE_DIR for nodeid in self.rows)

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file (see pytest_unconfigure)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_xdist_worker or self.config.option.collectonly:
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self._mark_interrupted()
        if not self._writes_reports():
            return
        reports_dir = _resolve(self.config, self.config.getoption("draconf_reports", None) or "reports")
        reports_dir.mkdir(parents=True, exist_ok=True)
        self.summary_path = reports_dir / SUMMARY_FILENAME
        self.summary_path.write_text(
            json.dumps(self.summary(exitstatus), indent=2, default=str) + "\n", encoding="utf-8")
        allure_dir = getattr(self.config.option, "allure_report_dir", None)
        if allure_dir:
            write_allure_extras(_resolve(self.config, allure_dir), get_run_info(self.config))

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        writer = config.get_terminal_writer()
        lines = matrix_lines(self.rows.values(), lambda text, outcome: writer.markup(
            text, **_OUTCOME_COLOURS.get(outcome, {})))
        if not lines or self.summary_path is None:
            return
        terminalreporter.write_sep("=", "draconf conformance matrix")
        if self.interruption:
            terminalreporter.line(interruption_line(self.interruption), red=True, bold=True)
        for line in lines:
            terminalreporter.line(line)
        nodes = get_run_info(config).get("nodes")
        if nodes:
            terminalreporter.line(scope_line(nodes), yellow=True, bold=True)
        flaky = [r for r in self.rows.values() if r["outcome"] == "flaky"]
        if flaky:
            terminalreporter.line("flaky (failed, then passed when run again):", yellow=True, bold=True)
            for row in flaky:
                terminalreporter.line(f"  {row['id']}: {row['message']}")
        diagnosed = [r for r in self.rows.values() if r.get("reason") and r["outcome"] != "passed"]
        if diagnosed:
            terminalreporter.line("diagnoses:")
            for row in diagnosed:
                terminalreporter.line(f"  {row['id']}: [{row['diagnosis']}] {row['reason']}")
        terminalreporter.line(f"summary: {self.summary_path}")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """junitxml has written its file by now: say there, too, that the run was interrupted."""
        xmlpath = getattr(config.option, "xmlpath", None)
        if self.interruption and xmlpath and Path(xmlpath).is_file():
            mark_junit_interrupted(Path(xmlpath), self.interruption)


def interruption_line(interruption: Mapping[str, Any]) -> str:
    """One line for the terminal and JUnit.

    >>> interruption_line({"while_running": "t.py::a", "never_ran": ["t.py::b", "t.py::c"]})
    'INTERRUPTED while running t.py::a; 2 test(s) never ran: not a conformance verdict'
    """
    running = interruption.get("while_running")
    return (f"INTERRUPTED{' while running ' + running if running else ''}; "
            f"{len(interruption.get('never_ran') or [])} test(s) never ran: not a conformance verdict")


def mark_junit_interrupted(path: Path, interruption: Mapping[str, Any]) -> None:
    """Add to a JUnit file what pytest's own writer leaves out of an interrupted run: a suite
    property saying so, and a skipped test case for each test that never ran."""
    import xml.etree.ElementTree as ET
    tree = ET.parse(path)
    root = tree.getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return
    properties = suite.find("properties")
    if properties is None:
        properties = ET.Element("properties")
        suite.insert(0, properties)
    ET.SubElement(properties, "property", name="draconf.interrupted", value=interruption_line(interruption))
    for nodeid in interruption.get("never_ran") or []:
        module, _, name = nodeid.partition("::")
        case = ET.SubElement(suite, "testcase", classname=module.removesuffix(".py").replace("/", "."),
                             name=name, time="0")
        ET.SubElement(case, "skipped", type="pytest.skip", message="never ran: the run was interrupted")
    suite.set("skipped", str(int(suite.get("skipped", "0")) + len(interruption.get("never_ran") or [])))
    suite.set("tests", str(int(suite.get("tests", "0")) + len(interruption.get("never_ran") or [])))
    tree.write(path, encoding="utf-8", xml_declaration=True)
