"""Why a check failed, decided from evidence read from the cluster (never from the test's name).

``diagnose(api, profile, namespace, check, error_text)`` reads what an operator would look at
(the troubleshooting walkthrough of the NVIDIA DRA docs): the pods and claims of the test's
namespace, its events, the DeviceClasses the claims name, the driver's ResourceSlices, the
nodes, the kubelet-plugin pods, the GPU Operator's GPUCluster / ClusterPolicy and the
ResourceQuotas.  It returns a :class:`Diagnosis`: one code of
:data:`draconf.reporting.DIAGNOSES`, one sentence saying what was seen and what to check, and
the evidence as text (YAML of the objects involved, trimmed).

The work is split so the rules can be tested without a cluster::

    gather(api, profile, namespace)  ->  Snapshot   (raw dicts, the only part that calls the API)
    build_facts(snapshot, profile)   ->  Facts      (plain dataclasses, pure)
    classify(facts, check, error)    ->  (code, reason)   (the rule table, pure)
    evidence(snapshot, facts)        ->  {name: text}

Rules, first match wins (see :func:`classify`):

===================  ==========================================================================
api-unavailable      the API server does not answer, or does not serve resource.k8s.io/v1
missing-deviceclass  a claim/template (or the scheduler) names a DeviceClass that does not exist
no-resourceslices    no ResourceSlice of the driver holds any device
attribute-missing    the scheduler reports a CEL runtime error (no such key), or a selector of an
                     unallocated claim reads an attribute/capacity some published device lacks
node-excluded        an unschedulable pod is kept off every node holding a candidate device by
                     an untolerated taint, its nodeSelector or required node affinity
capacity-exhausted   the scheduler cannot allocate and every node's matching devices are taken
selector-unmatched   the scheduler cannot allocate and no node has enough matching devices
plugin-unhealthy     a pod is bound, its claims allocated and reserved, but it is not running,
                     with FailedPrepareDynamicResources or an unready/absent kubelet plugin
cdi-not-injected     (injection check) the running container saw none/fewer of its GPUs
cdi-wrong-device     (injection check) the running container saw a GPU not allocated to it
claim-not-released   (cleanup check) claims outlive their pods, stay allocated/reserved or are
                     stuck deleting on a finalizer
quota-not-enforced   a ResourceQuota's used exceeds its hard limit, or a quota check failed
                     while the namespace has a quota and no "exceeded quota" rejection was seen
policy-conflict      a ClusterPolicy exists beside the GPUCluster
permission-denied    the server answered one of the suite's requests 403 Forbidden (user, verb
                     and resource from its message; checked second, after api-unavailable)
timeout              nothing definitive: the last observed state is the evidence
===================  ==========================================================================

For the pytest plugin, :func:`record_failure_diagnosis` (item, exception) finds the cluster,
profile, namespace and check of a failing test, diagnoses it and calls
:func:`draconf.reporting.record_diagnosis`, so the reporting plugin prefixes the message with
``[code]``; it leaves alone tests that recorded their own diagnosis.

Selectors are the CEL the cluster holds (the claims' and templates' selectors and the live
DeviceClasses'), evaluated by :mod:`draconf.cel` (a CEL engine with Kubernetes' functions) per
published device: match, no match, or the runtime error the scheduler would report (``no such
key`` for an attribute the device lacks).  Where a selector fails otherwise on some device, the
rules fall back to coarser evidence.

>>> from draconf.devices import Device
>>> d = Device("gpu.nvidia.com", "n1", "gpu-0", "n1", {"gpu.nvidia.com/type": "gpu"}, {})
>>> selectors_eval(["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"], d)
Verdict(match)
>>> selectors_eval(["device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')"], d)
Verdict(CEL runtime error: no such key: productName)
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

import yaml
from kubernetes.utils import parse_quantity

from draconf import cel
from draconf.devices import Device, Version
from draconf.pods import Pod, describe_pod
from draconf.reporting import DIAGNOSES

log = logging.getLogger("draconf.diagnosis")

#: Where the NVIDIA kubelet plugin runs, and how its pods are labelled (dra-facts §1).
PLUGIN_NAMESPACES = ("gpu-operator", "dra-driver-nvidia-gpu", "nvidia-dra-driver-gpu")
PLUGIN_SELECTORS = ("dra-driver-nvidia-gpu-component=kubelet-plugin",
                    "nvidia-dra-driver-gpu-component=kubelet-plugin",
                    "app=nvidia-dra-driver-kubelet-plugin")
#: Seconds allowed for any one API call while diagnosing.
REQUEST_TIMEOUT = 10
#: Characters kept of each evidence text.
EVIDENCE_LIMIT = 12000


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


# =============================================================================================
# Facts: what the rules look at (plain data, built from the raw objects by build_facts)
# =============================================================================================

@dataclass
class PodFacts:
    name: str
    namespace: str = "default"
    uid: str = ""
    phase: str = "Pending"
    node: str | None = None
    ready: bool = False
    deleting: bool = False
    #: the PodScheduled=False message (reason Unschedulable or SchedulerError), else None
    unschedulable: str | None = None
    #: "container: Reason" of waiting containers
    waiting: list[str] = field(default_factory=list)
    #: "container: image (Reason: message)" of containers whose image cannot be pulled
    image_pull: list[str] = field(default_factory=list)
    #: no container runs (what is left of a deleted pod is its node's cleanup)
    stopped: bool = False
    #: pod-level claim name -> ResourceClaim name (only the ones known yet)
    claims: dict[str, str] = field(default_factory=dict)
    #: pod-level claim names whose ResourceClaim is not known yet (not generated)
    unresolved_claims: list[str] = field(default_factory=list)
    tolerations: list[dict] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    #: required node affinity: the nodeSelectorTerms (ORed), each {matchExpressions, matchFields}
    affinity_terms: list[dict] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.phase == "Running" and self.ready

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def summary(self) -> str:
        return describe_pod(self.namespace, self.name, self.phase, self.node, ready=self.ready,
                            unschedulable=self.unschedulable, waiting=self.waiting,
                            deleting=self.deleting)


@dataclass
class RequestFacts:
    """One device request (or one firstAvailable alternative)."""
    name: str
    device_class: str
    selectors: list[str] = field(default_factory=list)
    mode: str = "ExactCount"
    count: int = 1


@dataclass
class ClaimFacts:
    name: str
    namespace: str = "default"
    uid: str = ""
    generated: bool = False
    #: the Pod owning a generated claim (name, uid), if any
    owner_pod: str | None = None
    owner_pod_uid: str | None = None
    allocated: bool = False
    #: allocated devices as driver/pool/device
    devices: list[str] = field(default_factory=list)
    #: reservedFor as pod names
    reserved_for: list[str] = field(default_factory=list)
    reserved_for_uids: list[str] = field(default_factory=list)
    finalizers: list[str] = field(default_factory=list)
    deleting: bool = False
    #: each request as its alternatives (one for ``exactly``, several for ``firstAvailable``)
    requests: list[list[RequestFacts]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def device_classes(self) -> list[str]:
        return sorted({alt.device_class for req in self.requests for alt in req if alt.device_class})

    def summary(self) -> str:
        state = ("allocated " + ", ".join(self.devices)) if self.allocated else "not allocated"
        extra = f", finalizers {self.finalizers}" if self.finalizers else ""
        deleting = ", being deleted" if self.deleting else ""
        return (f"claim {self.key}: {state}, reserved for {self.reserved_for or 'nobody'}"
                f"{extra}{deleting}")


@dataclass
class TemplateFacts:
    name: str
    namespace: str = "default"
    requests: list[list[RequestFacts]] = field(default_factory=list)

    @property
    def device_classes(self) -> list[str]:
        return sorted({alt.device_class for req in self.requests for alt in req if alt.device_class})


@dataclass
class EventFacts:
    reason: str
    message: str
    type: str = "Warning"
    kind: str = "Pod"
    name: str = ""
    count: int = 1

    def line(self) -> str:
        times = f" (x{self.count})" if self.count and self.count > 1 else ""
        return f"{self.type} {self.reason} {self.kind}/{self.name}{times}: {self.message}"


@dataclass
class NodeFacts:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict] = field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False


@dataclass
class PluginPodFacts:
    name: str
    namespace: str
    node: str | None = None
    phase: str = "Pending"
    ready: bool = False
    waiting: list[str] = field(default_factory=list)
    restarts: int = 0
    log_tail: str | None = None

    def summary(self) -> str:
        state = f"{self.phase}, {'ready' if self.ready else 'not ready'}"
        if self.waiting:
            state += ", waiting: " + ", ".join(self.waiting)
        if self.restarts:
            state += f", {self.restarts} restarts"
        return f"kubelet plugin {self.namespace}/{self.name} on {self.node or '(no node)'}: {state}"


@dataclass
class QuotaFacts:
    name: str
    namespace: str = "default"
    hard: dict[str, str] = field(default_factory=dict)
    used: dict[str, str] = field(default_factory=dict)

    def exceeded(self) -> list[str]:
        """Keys whose used amount is above the hard limit (admission should prevent that)."""
        over = []
        for key, limit in self.hard.items():
            if key not in self.used:
                continue
            try:
                if parse_quantity(self.used[key]) > parse_quantity(limit):
                    over.append(f"{key} used {self.used[key]} > hard {limit}")
            except ValueError:
                continue
        return over


@dataclass
class Facts:
    """Everything the rules look at.  Defaults describe a healthy, empty cluster."""
    driver: str = "gpu.nvidia.com"
    device_class: str = "gpu.nvidia.com"
    #: attribute names (unqualified: the driver's domain) every device should publish
    required_attributes: list[str] = field(default_factory=list)
    namespace: str | None = None
    #: the API server did not answer: the error
    api_error: str | None = None
    #: resource.k8s.io/v1 is served
    resource_api: bool = True
    resource_versions: list[str] = field(default_factory=lambda: ["v1"])
    pods: list[PodFacts] = field(default_factory=list)
    claims: list[ClaimFacts] = field(default_factory=list)
    templates: list[TemplateFacts] = field(default_factory=list)
    events: list[EventFacts] = field(default_factory=list)
    #: DeviceClass name -> its CEL selectors; None when the classes could not be read
    device_classes: dict[str, list[str]] | None = field(default_factory=dict)
    #: ResourceSlices of the driver (with or without devices)
    slice_count: int = 0
    #: the driver's published devices
    devices: list[Device] = field(default_factory=list)
    #: device key (driver/pool/device) -> "namespace/claim" it is allocated to, cluster-wide
    allocated: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeFacts] = field(default_factory=list)
    plugin_pods: list[PluginPodFacts] = field(default_factory=list)
    #: False when the kubelet-plugin pods could not be listed at all
    plugin_pods_known: bool = True
    gpu_cluster: bool = False
    gpu_cluster_state: str | None = None
    cluster_policy: bool = False
    quotas: list[QuotaFacts] = field(default_factory=list)
    #: gatherer name -> error, for what could not be read
    errors: dict[str, str] = field(default_factory=dict)

    # -- lookups the rules share ---------------------------------------------------------------
    def claim(self, name: str) -> ClaimFacts | None:
        for c in self.claims:
            if c.name == name:
                return c
        return None

    def node(self, name: str) -> NodeFacts | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def pod_claims(self, pod: PodFacts) -> list[ClaimFacts]:
        return [c for name in pod.claims.values() if (c := self.claim(name)) is not None]

    def events_for(self, name: str, reason_part: str = "") -> list[EventFacts]:
        return [e for e in self.events if e.name == name and reason_part in e.reason]

    def scheduler_messages(self) -> list[str]:
        messages = [p.unschedulable for p in self.pods if p.unschedulable]
        messages += [e.message for e in self.events if e.reason == "FailedScheduling"]
        return messages


# =============================================================================================
# Device selectors: the CEL the cluster holds, evaluated by draconf.cel
# =============================================================================================

def selectors_eval(selectors: list[str], device: Device) -> cel.Verdict:
    """A list of selectors (a class's, then a request's) on one device, as the allocator
    applies them: in order, the first non-match or error decides.

    >>> d = Device("gpu.nvidia.com", "n1", "gpu-0", "n1", {"gpu.nvidia.com/type": "gpu"}, {})
    >>> selectors_eval(["device.attributes['gpu.nvidia.com'].productName == 'x'"], d).missing
    'gpu.nvidia.com/productName'
    """
    return cel.evaluate_all(selectors, device)


# =============================================================================================
# Node eligibility (taints, nodeSelector, required node affinity)
# =============================================================================================

def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Kubernetes' toleration matching (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    for t in tolerations or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expression_matches(expr: dict, labels: dict, fields: dict | None = None) -> bool:
    source = fields if fields is not None else labels
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    present = key in source
    value = source.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_exclusions(pod: PodFacts, node: NodeFacts) -> list[str]:
    """Why ``pod`` cannot go to ``node`` (empty: it can, as far as node filters go)."""
    why = []
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod.tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            why.append(f"untolerated taint {taint.get('key')}{value}:{taint.get('effect')}")
    if node.unschedulable and not any(
            "node.kubernetes.io/unschedulable" == t.get("key") for t in node.taints):
        why.append("node is cordoned (spec.unschedulable)")
    mismatched = {k: v for k, v in pod.node_selector.items() if node.labels.get(k) != v}
    if mismatched:
        why.append(f"nodeSelector {mismatched} does not match its labels")
    if pod.affinity_terms:
        fields = {"metadata.name": node.name}
        ok = any(all(_expression_matches(e, node.labels) for e in term.get("matchExpressions") or [])
                 and all(_expression_matches(e, node.labels, fields) for e in term.get("matchFields") or [])
                 and (term.get("matchExpressions") or term.get("matchFields"))
                 for term in pod.affinity_terms)
        if not ok:
            why.append("required node affinity does not match")
    return why


# =============================================================================================
# The rules
# =============================================================================================

_MISSING_CLASS = re.compile(r"device class (\S+?)[,:]? does not exist")
_NO_SUCH_KEY = re.compile(r"no such key:? ?([\w./-]+)")
_SEES = re.compile(r"(\S+) sees (\[[^\]]*\]), allocated (\[[^\]]*\])")


def _class_devices(facts: Facts, class_name: str) -> tuple[list[Device], bool]:
    """Published devices the DeviceClass selects, and whether that is exact (no selector failed
    on any device: a failing device is kept, as it may be the one the scheduler chokes on)."""
    selectors = (facts.device_classes or {}).get(class_name)
    if selectors is None:
        return list(facts.devices), False
    chosen, exact = [], True
    for d in facts.devices:
        r = selectors_eval(selectors, d)
        if r.matched:
            chosen.append(d)
        elif r.failed:
            chosen.append(d)
            exact = False
    return chosen, exact


@dataclass
class _RequestAnalysis:
    claim: str
    request: str
    needed: int | str
    #: device -> the class's then the request's selectors on it (match / no match / error)
    results: dict[str, cel.Verdict]
    devices: dict[str, Device]

    @property
    def exact(self) -> bool:
        return not any(r.failed for r in self.results.values())

    def matching(self) -> list[Device]:
        return [self.devices[k] for k, r in self.results.items() if r.matched]

    def missing(self) -> list[tuple[Device, cel.Verdict]]:
        """Devices on which a selector reads an attribute or capacity they lack."""
        return [(self.devices[k], r) for k, r in self.results.items() if r.missing]


def _analyse(facts: Facts, claim: str, req: RequestFacts) -> _RequestAnalysis:
    devices, _ = _class_devices(facts, req.device_class)
    class_selectors = (facts.device_classes or {}).get(req.device_class) or []
    results = {d.key: selectors_eval([*class_selectors, *req.selectors], d) for d in devices}
    needed = "All" if req.mode == "All" else max(1, req.count or 1)
    return _RequestAnalysis(claim, req.name, needed, results, {d.key: d for d in devices})


def _per_node(devices: list[Device]) -> dict[str, list[Device]]:
    nodes: dict[str, list[Device]] = {}
    for d in devices:
        nodes.setdefault(d.node or d.pool, []).append(d)
    return nodes


def _pending_pods(facts: Facts) -> list[PodFacts]:
    return [p for p in facts.pods if p.unschedulable and not p.deleting]


def _pending_requests(facts: Facts, pods: list[PodFacts] | None = None):
    """(claim label, request alternatives) of every claim a pending pod still waits for; for a
    template whose claim is not generated yet, the template's requests."""
    out = []
    seen = set()
    for pod in pods if pods is not None else _pending_pods(facts):
        for claim in facts.pod_claims(pod):
            if not claim.allocated and claim.key not in seen:
                seen.add(claim.key)
                out += [(f"Claim {claim.name}", req) for req in claim.requests]
    if not out and not facts.claims:
        out = [(f"ResourceClaimTemplate {t.name}", req) for t in facts.templates for req in t.requests]
    return out


def classify(facts: Facts, check: str | None, error_text: str) -> tuple[str, str]:
    """The diagnosis code and one operator-facing sentence for these facts (first rule wins)."""
    error_text = error_text or ""
    for rule in _RULES:
        verdict = rule(facts, check, error_text)
        if verdict:
            break
    else:
        verdict = _timeout(facts, check, error_text)
    return verdict


def _rule_api(facts: Facts, check, error_text):
    if facts.api_error:
        return ("api-unavailable", f"The API server did not answer ({facts.api_error}): check that "
                "it is running and reachable with this kubeconfig.")
    if not facts.resource_api:
        served = ", ".join(facts.resource_versions) or "no version"
        return ("api-unavailable", f"The API server serves resource.k8s.io {served} but not v1: "
                "use Kubernetes 1.34 or later, or enable resource.k8s.io/v1 with --runtime-config.")
    return None


def _rule_missing_class(facts: Facts, check, error_text):
    if facts.device_classes is None:
        return None
    referenced: dict[str, str] = {}
    for c in facts.claims:
        for name in c.device_classes:
            referenced.setdefault(name, f"Claim {c.name}")
    for t in facts.templates:
        for name in t.device_classes:
            referenced.setdefault(name, f"ResourceClaimTemplate {t.name}")
    for message in facts.scheduler_messages():
        for name in _MISSING_CLASS.findall(message):
            referenced.setdefault(name, "The scheduler")
    if not referenced and not facts.pods:
        referenced[facts.device_class] = "The driver profile"  # nothing deployed: the suite's own class
    missing = {n: who for n, who in referenced.items() if n not in facts.device_classes}
    if not missing:
        return None
    name, who = sorted(missing.items())[0]
    existing = ", ".join(sorted(facts.device_classes)) or "none"
    return ("missing-deviceclass",
            f"{who} names DeviceClass {name}, which does not exist (existing: {existing}): "
            f"install it, e.g. enable the GPU part of the {facts.driver} driver chart "
            "(resources.gpus.enabled), and check `kubectl get deviceclasses`.")


def _rule_no_slices(facts: Facts, check, error_text):
    if facts.devices:
        return None
    if "resourceslices" in facts.errors:
        return None
    slices = (f"{facts.slice_count} ResourceSlice(s) of {facts.driver} hold no devices"
              if facts.slice_count else f"No ResourceSlice of driver {facts.driver} exists")
    plugins = ""
    if facts.plugin_pods:
        ready = sum(p.ready for p in facts.plugin_pods)
        plugins = f" ({ready} of {len(facts.plugin_pods)} kubelet-plugin pod(s) ready)"
        if not ready:
            # Nothing publishes because the publisher is down: that is the cause to fix.
            return ("plugin-unhealthy",
                    f"{slices} because no kubelet-plugin pod is ready ({facts.plugin_pods[0].summary()}): "
                    "the plugin publishes a node's GPUs only once it runs; check the plugin pods' "
                    "logs and the kubelet's plugin registration.")
    return ("no-resourceslices",
            f"{slices}, so the scheduler sees no GPUs{plugins}: check the kubelet-plugin pods' logs "
            "and the nodes' GPU driver, then `kubectl get resourceslices`.")


def _rule_attribute_missing(facts: Facts, check, error_text):
    cel_errors = [m for m in facts.scheduler_messages() if "CEL runtime error" in m]
    if cel_errors:
        keys = sorted({k.rstrip(".,") for m in cel_errors for k in _NO_SUCH_KEY.findall(m)})
        what = f" (no such key: {', '.join(keys)})" if keys else ""
        return ("attribute-missing",
                f"The scheduler reports a CEL runtime error{what}: a selector reads a device "
                "attribute the driver does not publish; compare the claim's selectors with "
                "`kubectl get resourceslices -o yaml`.")
    for label, alternatives in _pending_requests(facts, pods=[p for p in facts.pods if not p.running]):
        for req in alternatives:
            if not req.selectors:
                continue
            analysis = _analyse(facts, label, req)
            lacking = analysis.missing()
            if lacking:
                names = sorted({m.missing for _, m in lacking})
                devices = [str(d) for d, _ in lacking]
                return ("attribute-missing",
                        f"{label} request {req.name} selects on {', '.join(names)}, which "
                        f"{len(devices)} of {len(analysis.devices)} published device(s) lack "
                        f"(e.g. {', '.join(devices[:3])}): fix the selector or the driver version; "
                        "see `kubectl get resourceslices -o yaml`.")
    if not facts.pods and not facts.claims and facts.required_attributes:
        lacking = {}
        for d in facts.devices:
            for name in facts.required_attributes:
                if not d.has_attribute(name):
                    lacking.setdefault(name, []).append(str(d))
        if lacking:
            name, devices = sorted(lacking.items())[0]
            return ("attribute-missing",
                    f"{len(devices)} of {len(facts.devices)} published device(s) lack the attribute "
                    f"{name} (e.g. {', '.join(devices[:3])}), which selectors rely on: check the "
                    "driver version's attribute names in `kubectl get resourceslices -o yaml`.")
    return None


def _candidate_nodes(facts: Facts, pod: PodFacts) -> tuple[set[str], bool]:
    """Nodes holding a device one of the pod's unallocated requests could use, and whether that
    was decided with the request's selectors (False: from the DeviceClass only)."""
    nodes, exact = set(), True
    for label, alternatives in _pending_requests(facts, pods=[pod]):
        for req in alternatives:
            analysis = _analyse(facts, label, req)
            if analysis.exact:
                nodes |= {d.node or d.pool for d in analysis.matching()}
            else:
                exact = False
                nodes |= {d.node or d.pool for d in analysis.devices.values()}
    return nodes, exact


def _rule_node_excluded(facts: Facts, check, error_text):
    for pod in _pending_pods(facts):
        nodes, _ = _candidate_nodes(facts, pod)
        known = [n for name in sorted(nodes) if (n := facts.node(name)) is not None]
        if not known:
            continue
        reasons = {n.name: node_exclusions(pod, n) for n in known}
        if all(reasons.values()):
            detail = "; ".join(f"{n}: {', '.join(r)}" for n, r in reasons.items())
            return ("node-excluded",
                    f"Pod {pod.name} is kept off every node with a usable GPU ({detail}): add the "
                    "matching toleration/selector to the pod or fix the GPU nodes' taints and labels.")
    return None


def _rule_allocation(facts: Facts, check, error_text):
    pending = [p for p in _pending_pods(facts)
               if "cannot allocate" in (p.unschedulable or "")
               or any(not c.allocated for c in facts.pod_claims(p))]
    if not pending:
        return None
    free = lambda d: d.key not in facts.allocated  # noqa: E731
    for label, alternatives in _pending_requests(facts, pods=pending):
        verdicts = []
        for req in alternatives:
            analysis = _analyse(facts, label, req)
            if not analysis.exact:
                verdicts.append(("unknown", req, analysis))
                continue
            by_node = _per_node(analysis.matching())
            if req.mode == "All":
                enough = {n: ds for n, ds in by_node.items() if ds}
                free_ok = any(all(free(d) for d in ds) for ds in enough.values())
            else:
                enough = {n: ds for n, ds in by_node.items() if len(ds) >= analysis.needed}
                free_ok = any(sum(free(d) for d in ds) >= analysis.needed for ds in enough.values())
            if not enough:
                verdicts.append(("unmatched", req, analysis))
            elif not free_ok:
                verdicts.append(("exhausted", req, analysis))
            else:
                verdicts.append(("satisfiable", req, analysis))
        kinds = {v[0] for v in verdicts}
        if not verdicts or "satisfiable" in kinds:
            continue
        if kinds == {"unmatched"}:
            req, analysis = verdicts[0][1], verdicts[0][2]
            matching = len(analysis.matching())
            return ("selector-unmatched",
                    f"{label} request {req.name} needs {analysis.needed} device(s) of class "
                    f"{req.device_class} on one node matching {_selectors_text(req)}, but "
                    f"{matching} of {len(analysis.devices)} published device(s) match: "
                    "fix the selector or add such GPUs.")
        if "exhausted" in kinds and "unknown" not in kinds:
            req, analysis = next((v[1], v[2]) for v in verdicts if v[0] == "exhausted")
            holders = sorted({facts.allocated[d.key] for d in analysis.matching() if d.key in facts.allocated})
            return ("capacity-exhausted",
                    f"{label} request {req.name}: every matching device ({len(analysis.matching())}) "
                    f"is already allocated (to {', '.join(holders[:5])}"
                    f"{' ...' if len(holders) > 5 else ''}): free GPUs by deleting finished pods "
                    "and claims, or add capacity.")
        # Selectors not understood: decide from the DeviceClass alone (the coarse rule), but
        # only on the scheduler's word that claims cannot be allocated.
        if not any("cannot allocate" in (p.unschedulable or "") for p in pending):
            continue
        req = verdicts[0][1]
        class_devices, _ = _class_devices(facts, req.device_class)
        if class_devices and all(d.key in facts.allocated for d in class_devices):
            return ("capacity-exhausted",
                    f"{label}: all {len(class_devices)} device(s) of class {req.device_class} are "
                    "already allocated: free GPUs by deleting finished pods and claims, or add capacity.")
        return ("selector-unmatched",
                f"{label} request {req.name} cannot be allocated although {req.device_class} has free "
                f"devices, so its selectors ({_selectors_text(req)}) match none of them: compare the "
                "selectors with the published attributes.")
    return None


def _selectors_text(req: RequestFacts) -> str:
    if not req.selectors:
        return "no selector"
    return " && ".join(" ".join(s.split()) for s in req.selectors)


def _stuck_pods(facts: Facts) -> list[PodFacts]:
    """Bound pods whose claims are allocated and reserved for them, yet not running."""
    stuck = []
    for pod in facts.pods:
        if not pod.node or pod.running or pod.finished or pod.deleting or not pod.claims:
            continue
        if pod.unresolved_claims:
            continue
        claims = facts.pod_claims(pod)
        if len(claims) == len(pod.claims) and all(
                c.allocated and (pod.uid in c.reserved_for_uids or pod.name in c.reserved_for)
                for c in claims):
            stuck.append(pod)
    return stuck


def _rule_image_pull(facts: Facts, check, error_text):
    for pod in facts.pods:
        if pod.image_pull and not pod.deleting:
            return ("image-pull-failed",
                    f"Pod {pod.name} on {pod.node} cannot pull its image: {pod.image_pull[0]}. The "
                    "node cannot reach the registry or the image does not exist there: point the "
                    "profile's `image` at an image the GPU nodes can pull (a mirror for air-gapped "
                    "clusters) and check `kubectl describe pod`.")
    return None


def _rule_plugin_unhealthy(facts: Facts, check, error_text):
    for pod in _stuck_pods(facts):
        failed = facts.events_for(pod.name, "FailedPrepareDynamicResources")
        leaked = [e for e in failed if "already allocated to different claim" in e.message]
        if leaked:
            # The driver still holds the device for a claim its node never unprepared.
            return ("claim-not-released",
                    f"Pod {pod.name} cannot start on {pod.node}: the driver refuses its device because it "
                    f"is still prepared for another claim ({leaked[-1].message[:300]}): a claim on that "
                    "node was never unprepared; check the kubelet's log for NodeUnprepareResources "
                    "errors and the driver's kubelet plugin.")
        on_node = [p for p in facts.plugin_pods if p.node == pod.node]
        unready = [p for p in on_node if not p.ready]
        absent = facts.plugin_pods_known and facts.plugin_pods and not on_node
        if not (failed or unready or absent):
            continue
        seen = []
        if failed:
            seen.append(f"event FailedPrepareDynamicResources: {failed[-1].message[:300]}")
        if unready:
            seen.append("; ".join(p.summary() for p in unready[:2]))
        if absent:
            seen.append(f"no kubelet-plugin pod runs on {pod.node}")
        return ("plugin-unhealthy",
                f"Pod {pod.name} is bound to {pod.node} with its claims allocated and reserved but "
                f"never starts ({'; '.join(seen)}): check the kubelet-plugin DaemonSet pods, their "
                "logs and the kubelet's plugin registration on that node.")
    # Nothing deployed (e.g. a preflight check): the plugin itself is the finding.
    if not facts.pods and facts.plugin_pods and check is None:
        gpu_nodes = {d.node for d in facts.devices if d.node}
        unready = [p for p in facts.plugin_pods if not p.ready and (not gpu_nodes or p.node in gpu_nodes)]
        if unready:
            return ("plugin-unhealthy",
                    f"{len(unready)} kubelet-plugin pod(s) are not ready ({unready[0].summary()}): check "
                    "their logs and the kubelet's plugin registration.")
    return None


def _rule_cdi(facts: Facts, check, error_text):
    if check != "cdi-injection" and "CDI injection is wrong" not in error_text:
        return None
    if "injection cannot be checked" in error_text:
        return None  # the workload never ran: other rules (or timeout) explain why
    # A pod that ran (a job's pod may already be done) has shown what it was given.
    ran = [p for p in facts.pods if p.running or p.finished]
    allocated = {c.name: c for c in facts.claims if c.allocated}
    if facts.pods and not ran:
        return None
    verified = (f"; its claims are allocated ({', '.join(d for c in allocated.values() for d in c.devices)})"
                if allocated else "")
    wrong = []
    short = []
    for m in _SEES.finditer(error_text):
        who, seen, want = m.group(1), _uuid_list(m.group(2)), _uuid_list(m.group(3))
        if set(seen) - set(want):
            wrong.append(f"{who} sees {seen}, allocated {want}")
        elif set(want) - set(seen):
            short.append(f"{who} sees {seen or 'no GPU'}, allocated {want}")
    for m in re.finditer(r"(\S+) lists no claim but sees (\[[^\]]*\])", error_text):
        wrong.append(f"{m.group(1)} holds no claim but sees {_uuid_list(m.group(2))}")
    if wrong:
        return ("cdi-wrong-device",
                f"Container {wrong[0]}{verified}: device isolation is broken; compare the claim's "
                "status.allocation with the driver's CDI spec for that claim and the runtime's CDI config.")
    no_gpu = re.search(r"(\S+) sees no GPU", error_text)
    if no_gpu or short:
        what = short[0] if short else f"{no_gpu.group(1)} sees no GPU"
        what = f"Container {what}"
        return ("cdi-not-injected",
                f"{what}{verified}, although the pod runs: the runtime did not inject the claim's "
                "CDI devices; enable CDI in containerd/CRI-O and check the driver's CDI specs "
                "(e.g. /var/run/cdi).")
    return None


def _uuid_list(text: str) -> list[str]:
    """The identities in a list as the injection check prints it: NVIDIA UUIDs, or whatever
    the profile compares (``['gpu-3', 'gpu-5']``: device names of dra-example-driver).

    >>> _uuid_list("['GPU-a', 'GPU-b']"), _uuid_list("['gpu-3']"), _uuid_list("[]")
    (['GPU-a', 'GPU-b'], ['gpu-3'], [])
    """
    quoted = re.findall(r"'([^']*)'", text)
    return quoted if quoted else re.findall(r"(?:GPU|MIG)-[0-9A-Za-z-]+", text)


def _rule_cleanup(facts: Facts, check, error_text):
    if check != "cleanup" and "cleanup is incomplete" not in error_text \
            and "not allocatable again" not in error_text:
        return None
    # A pod still terminating keeps its claims legitimately: that is the pod's problem (timeout),
    # unless its containers have all stopped: then only its node's cleanup, unpreparing the
    # claims, is left, and a node that never finishes it does not release them.
    live = {p.uid for p in facts.pods if not p.finished and not (p.deleting and p.stopped)} | \
        {p.name for p in facts.pods if not p.finished and not (p.deleting and p.stopped)}
    leftover = []
    for c in facts.claims:
        consumers = [u for u in c.reserved_for_uids if u in live] + \
            [n for n in c.reserved_for if n in live]
        orphan = c.generated and (c.owner_pod_uid not in live and c.owner_pod not in live)
        stuck = c.deleting and c.finalizers
        held = (c.allocated or c.reserved_for) and not consumers
        if (orphan or stuck or held) and not consumers:
            leftover.append(c)
    if not leftover:
        return None
    c = leftover[0]
    what = []
    owner = next((p for p in facts.pods if p.uid == c.owner_pod_uid or p.name == c.owner_pod), None)
    if c.generated and owner is not None and owner.deleting:
        what.append(f"generated for pod {owner.name}, which was deleted and runs no container, "
                    "but which its node never finished (the kubelet could not unprepare the claim)")
    elif c.generated:
        what.append(f"generated for pod {c.owner_pod or '?'}, which is gone or finished")
    if c.allocated:
        what.append(f"still allocated ({', '.join(c.devices)})")
    if c.reserved_for:
        what.append(f"still reserved for {c.reserved_for}")
    if c.deleting:
        what.append(f"being deleted but held by finalizer(s) {c.finalizers}")
    more = f" (and {len(leftover) - 1} more)" if len(leftover) > 1 else ""
    return ("claim-not-released",
            f"Claim {c.name}{more} outlives its consumers: {'; '.join(what)}: check the "
            "kube-controller-manager's resourceclaim controller and the driver's unprepare on the "
            "node (the finalizers name who holds it).")


def _rule_quota(facts: Facts, check, error_text):
    over = [(q, x) for q in facts.quotas for x in q.exceeded()]
    if over:
        q, x = over[0]
        return ("quota-not-enforced",
                f"ResourceQuota {q.namespace}/{q.name} shows {x}: objects beyond the limit were "
                "admitted, so the ResourceQuota admission plugin is not enforcing it; check the API "
                "server's --enable-admission-plugins.")
    rejected = any("exceeded quota" in e.message for e in facts.events) or "exceeded quota" in error_text
    if facts.quotas and re.search(r"quota", error_text, re.I) and not rejected:
        q = facts.quotas[0]
        hard = ", ".join(f"{k}={v}" for k, v in q.hard.items())
        return ("quota-not-enforced",
                f"The namespace has ResourceQuota {q.name} ({hard}) but nothing was rejected with "
                "\"exceeded quota\": check that the ResourceQuota admission plugin is enabled and "
                "that the quota names the right DeviceClass.")
    return None


def _rule_policy_conflict(facts: Facts, check, error_text):
    if facts.gpu_cluster and facts.cluster_policy:
        return ("policy-conflict",
                "Both a GPUCluster (DRA) and a ClusterPolicy (device plugin) exist: a cluster may have "
                "one or the other; delete the one you do not use.")
    return None


def _timeout(facts: Facts, check, error_text):
    state = [p.summary() for p in facts.pods] or ["no pods"]
    state += [c.summary() for c in facts.claims]
    warnings = [e.line() for e in facts.events if e.type == "Warning"][-2:]
    quota = [e.message for e in facts.events if "exceeded quota" in e.message][-1:]
    if quota:
        lead = f"A ResourceQuota blocks the workload ({quota[0][:200]})"
    else:
        lead = "No definitive signal from the cluster"
    unread = f"; could not read {', '.join(sorted(facts.errors))}" if facts.errors else ""
    text = "; ".join(state)[:600]
    return ("timeout",
            f"{lead}; last observed: {text}"
            f"{'; recent warnings: ' + ' | '.join(w[:200] for w in warnings) if warnings else ''}"
            f"{unread}: read the events of these objects and rerun with a longer timeout.")


#: The API server's 403 text (apiserver endpoints/handlers/responsewriters: forbiddenMessage),
#: also as it appears JSON-escaped in an ApiException's body.
_FORBIDDEN = re.compile(r'User \\?"([^"\\]*)\\?" cannot (\w+) resource \\?"([^"\\]+)\\?"'
                        r'(?: in API group \\?"([^"\\]*)\\?")?')


def _rule_permission_denied(facts: Facts, check, error_text):
    """The server refused one of the suite's own requests (403): the credentials, not the
    cluster, stopped the check.  Read from the server's answer, which names user, verb and
    resource."""
    denied = []
    for user, verb, resource, group in _FORBIDDEN.findall(error_text):
        base, _, sub = resource.partition("/")
        name = (f"{base}.{group}" if group else base) + (f"/{sub}" if sub else "")
        item = f"`{verb}` on {name}"
        if item not in denied:
            denied.append(item)
    if not denied:
        return None
    return ("permission-denied", f"The API server refused user {user} {', '.join(denied)} (403 "
            "Forbidden): bind the ClusterRole in manifests/rbac/clusterrole.yaml to this identity "
            "and rerun; this says nothing about the cluster's DRA.")


_RULES = [_rule_api, _rule_permission_denied, _rule_missing_class, _rule_no_slices, _rule_attribute_missing,
          _rule_node_excluded, _rule_allocation, _rule_image_pull, _rule_plugin_unhealthy, _rule_cdi,
          _rule_cleanup, _rule_quota, _rule_policy_conflict]


# =============================================================================================
# Reading the cluster
# =============================================================================================

@dataclass
class Snapshot:
    """Raw objects (``sanitize_for_serialization`` dicts) read from the cluster."""
    namespace: str | None = None
    api_error: str | None = None
    resource_versions: list[str] | None = None
    pods: list[dict] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    templates: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    device_classes: list[dict] | None = None
    slices: list[dict] = field(default_factory=list)
    all_claims: list[dict] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    plugin_pods: list[dict] = field(default_factory=list)
    plugin_pods_known: bool = True
    plugin_logs: dict[str, str] = field(default_factory=dict)
    gpu_cluster: dict | None = None
    cluster_policies: list[dict] = field(default_factory=list)
    quotas: list[dict] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def _plain(api, obj) -> dict:
    return api.api_client.sanitize_for_serialization(obj)


def _describe_error(err: BaseException) -> str:
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(err).__name__}: {str(err)[:200]}"


def gather(api, profile, namespace: str | None) -> Snapshot:
    """Read everything the rules need; each part is best effort and records its own error."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    snap = Snapshot(namespace=namespace)
    kw = {"_request_timeout": REQUEST_TIMEOUT}

    def read(name: str, fn, default=None):
        try:
            return fn()
        except ApiException as err:
            snap.errors[name] = _describe_error(err)
        except Exception as err:  # noqa: BLE001 - a diagnosis must never raise
            snap.errors[name] = _describe_error(err)
        return default

    try:
        api.version.get_code(**kw)
    except Exception as err:  # noqa: BLE001
        status = getattr(err, "status", None)
        if not status or status >= 500:
            snap.api_error = _describe_error(err)
            return snap
    try:
        group = client.ResourceApi(api.api_client).get_api_group(**kw)
        snap.resource_versions = [v.version for v in group.versions or []]
    except ApiException as err:
        if err.status == 404:
            snap.resource_versions = []
        else:
            snap.errors["resource.k8s.io"] = _describe_error(err)
    except Exception as err:  # noqa: BLE001
        snap.api_error = _describe_error(err)
        return snap
    if snap.resource_versions is not None and "v1" not in snap.resource_versions:
        return snap

    plain = lambda items: [_plain(api, i) for i in items]  # noqa: E731
    if namespace:
        snap.pods = read("pods", lambda: plain(api.core.list_namespaced_pod(namespace, **kw).items), [])
        snap.claims = read("resourceclaims", lambda: plain(
            api.resource.list_namespaced_resource_claim(namespace, **kw).items), [])
        snap.templates = read("resourceclaimtemplates", lambda: plain(
            api.resource.list_namespaced_resource_claim_template(namespace, **kw).items), [])
        snap.events = read("events", lambda: plain(
            api.core.list_namespaced_event(namespace, **kw).items), [])
        snap.quotas = read("resourcequotas", lambda: plain(
            api.core.list_namespaced_resource_quota(namespace, **kw).items), [])
    snap.device_classes = read("deviceclasses", lambda: plain(api.resource.list_device_class(**kw).items))
    snap.slices = read("resourceslices", lambda: plain(api.resource.list_resource_slice(
        field_selector=f"spec.driver={profile.driver}", **kw).items), [])
    snap.all_claims = read("resourceclaims (all namespaces)", lambda: plain(
        api.resource.list_resource_claim_for_all_namespaces(**kw).items), [])
    snap.nodes = read("nodes", lambda: plain(api.core.list_node(**kw).items), [])
    _gather_plugin(api, snap, kw, getattr(profile, "plugin", None))
    snap.gpu_cluster = _custom(api, snap, "gpuclusters", "v1alpha1", kw)
    policies = _custom(api, snap, "clusterpolicies", "v1", kw, many=True)
    snap.cluster_policies = policies or []
    return snap


def _custom(api, snap: Snapshot, plural: str, version: str, kw, many: bool = False):
    from kubernetes.client.exceptions import ApiException
    try:
        items = api.custom.list_cluster_custom_object("nvidia.com", version, plural, **kw)["items"]
    except ApiException as err:
        if err.status != 404:
            snap.errors[plural] = _describe_error(err)
        return None
    except Exception as err:  # noqa: BLE001
        snap.errors[plural] = _describe_error(err)
        return None
    if many:
        return items
    return items[0] if items else None


def _gather_plugin(api, snap: Snapshot, kw, plugin=None) -> None:
    """The kubelet-plugin pods: the NVIDIA driver's known places, and the profile's."""
    selectors = tuple(dict.fromkeys(PLUGIN_SELECTORS + tuple(plugin.pod_selectors if plugin else ())))
    namespaces = tuple(dict.fromkeys(PLUGIN_NAMESPACES + tuple(plugin.namespaces if plugin else ())))
    from kubernetes.client.exceptions import ApiException
    found: dict[str, dict] = {}
    denied = 0
    for selector in selectors:
        try:
            items = api.core.list_pod_for_all_namespaces(label_selector=selector, **kw).items
        except ApiException as err:
            if err.status not in (401, 403):
                snap.errors["kubelet-plugin pods"] = _describe_error(err)
            denied += 1
            items = []
            for ns in namespaces:
                try:
                    items += api.core.list_namespaced_pod(ns, label_selector=selector, **kw).items
                except ApiException:
                    continue
        except Exception as err:  # noqa: BLE001
            snap.errors["kubelet-plugin pods"] = _describe_error(err)
            snap.plugin_pods_known = False
            return
        for pod in items:
            found[pod.metadata.uid] = _plain(api, pod)
    snap.plugin_pods = sorted(found.values(), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    snap.plugin_pods_known = "kubelet-plugin pods" not in snap.errors
    # Log tails of the unready ones (the real driver's logs say why); kwok nodes serve none.
    for raw in [p for p in snap.plugin_pods if not Pod(p).is_ready][:3]:
        meta = raw["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        try:
            snap.plugin_logs[key] = api.core.read_namespaced_pod_log(
                meta["name"], meta["namespace"], tail_lines=40, _request_timeout=5,
                container=(raw.get("spec", {}).get("containers") or [{}])[0].get("name"))
        except Exception as err:  # noqa: BLE001 - logs are a bonus
            snap.plugin_logs[key] = f"(logs unavailable: {_describe_error(err)})"


# --- raw objects -> Facts (pure) -------------------------------------------------------------

def _requests(spec: dict) -> list[list[RequestFacts]]:
    out = []
    for req in ((spec or {}).get("devices") or {}).get("requests") or []:
        alternatives = []
        if req.get("exactly") is not None or req.get("deviceClassName"):
            body = req.get("exactly") or req  # v1 / v1beta1 shapes
            alternatives.append(_request(req.get("name", ""), body))
        for sub in req.get("firstAvailable") or []:
            alternatives.append(_request(f"{req.get('name', '')}/{sub.get('name', '')}", sub))
        if alternatives:
            out.append(alternatives)
    return out


def _request(name: str, body: dict) -> RequestFacts:
    selectors = [s["cel"]["expression"] for s in body.get("selectors") or [] if (s.get("cel") or {}).get("expression")]
    return RequestFacts(name=name, device_class=body.get("deviceClassName", ""), selectors=selectors,
                        mode=body.get("allocationMode") or "ExactCount", count=body.get("count") or 1)


def _pod_facts(raw: dict) -> PodFacts:
    pod = Pod(raw)
    claims = pod.claim_names()
    affinity = (((pod.spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return PodFacts(
        name=pod.name or "", namespace=pod.namespace or "", uid=pod.uid or "", phase=pod.phase,
        node=pod.node, ready=pod.is_ready, deleting=pod.is_deleting,
        unschedulable=pod.unschedulable_message, waiting=pod.waiting_reasons,
        image_pull=pod.image_pull_failures, stopped=pod.containers_stopped, claims=claims,
        unresolved_claims=[r.get("name") for r in pod.spec.get("resourceClaims") or []
                           if r.get("name") not in claims],
        tolerations=list(pod.spec.get("tolerations") or []),
        node_selector=dict(pod.spec.get("nodeSelector") or {}),
        affinity_terms=list(affinity.get("nodeSelectorTerms") or []))


def _claim_facts(raw: dict) -> ClaimFacts:
    meta, status = raw.get("metadata") or {}, raw.get("status") or {}
    owner = next((r for r in meta.get("ownerReferences") or []
                  if r.get("kind") == "Pod" and r.get("controller")), None)
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return ClaimFacts(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), uid=meta.get("uid", ""),
        generated="resource.kubernetes.io/pod-claim-name" in (meta.get("annotations") or {}),
        owner_pod=owner.get("name") if owner else None, owner_pod_uid=owner.get("uid") if owner else None,
        allocated=bool(status.get("allocation")),
        devices=[f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in results],
        reserved_for=[r.get("name", "") for r in status.get("reservedFor") or []],
        reserved_for_uids=[r.get("uid", "") for r in status.get("reservedFor") or []],
        finalizers=list(meta.get("finalizers") or []), deleting=bool(meta.get("deletionTimestamp")),
        requests=_requests(raw.get("spec") or {}))


def _attribute_value(attr: dict):
    for kind in ("string", "int", "bool", "version"):
        if attr.get(kind) is not None:
            return Version(attr[kind]) if kind == "version" else attr[kind]
    return None


def devices_from_raw_slices(slices: list[dict]) -> list[Device]:
    devices = []
    for s in slices:
        spec = s.get("spec") or {}
        driver = spec.get("driver", "")
        for dev in spec.get("devices") or []:
            attrs = {(k if "/" in k else f"{driver}/{k}"): _attribute_value(v or {})
                     for k, v in (dev.get("attributes") or {}).items()}
            caps = {}
            for k, v in (dev.get("capacity") or {}).items():
                try:
                    caps[k if "/" in k else f"{driver}/{k}"] = parse_quantity((v or {}).get("value"))
                except (ValueError, TypeError):
                    continue
            devices.append(Device(driver, (spec.get("pool") or {}).get("name", ""), dev.get("name", ""),
                                  spec.get("nodeName"), attrs, caps))
    return devices


def build_facts(snap: Snapshot, profile) -> Facts:
    """Turn a :class:`Snapshot` into :class:`Facts` (pure: no API calls)."""
    facts = Facts(driver=profile.driver, device_class=profile.device_class,
                  required_attributes=list(profile.required_attributes()),
                  namespace=snap.namespace, api_error=snap.api_error, errors=dict(snap.errors))
    if snap.resource_versions is not None:
        facts.resource_versions = list(snap.resource_versions)
        facts.resource_api = "v1" in snap.resource_versions
    facts.pods = [_pod_facts(p) for p in snap.pods]
    facts.claims = [_claim_facts(c) for c in snap.claims]
    facts.templates = [TemplateFacts(name=(t.get("metadata") or {}).get("name", ""),
                                     namespace=(t.get("metadata") or {}).get("namespace", ""),
                                     requests=_requests(((t.get("spec") or {}).get("spec")) or {}))
                       for t in snap.templates]
    facts.events = [EventFacts(reason=e.get("reason") or "", message=e.get("message") or "",
                               type=e.get("type") or "", kind=(e.get("involvedObject") or {}).get("kind", ""),
                               name=(e.get("involvedObject") or {}).get("name", ""), count=e.get("count") or 1)
                    for e in sorted(snap.events, key=_event_time)]
    if snap.device_classes is None:
        facts.device_classes = None
    else:
        facts.device_classes = {
            (c.get("metadata") or {}).get("name", ""):
                [s["cel"]["expression"] for s in (c.get("spec") or {}).get("selectors") or []
                 if (s.get("cel") or {}).get("expression")]
            for c in snap.device_classes}
    facts.slice_count = len(snap.slices)
    facts.devices = devices_from_raw_slices(snap.slices)
    for c in snap.all_claims:
        cf = _claim_facts(c)
        for key in cf.devices:
            facts.allocated[key] = cf.key
    facts.nodes = [NodeFacts(
        name=(n.get("metadata") or {}).get("name", ""), labels=dict((n.get("metadata") or {}).get("labels") or {}),
        taints=list((n.get("spec") or {}).get("taints") or []),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True"
                  for c in (n.get("status") or {}).get("conditions") or []),
        unschedulable=bool((n.get("spec") or {}).get("unschedulable"))) for n in snap.nodes]
    for raw in snap.plugin_pods:
        pf = _pod_facts(raw)
        restarts = sum(cs.get("restartCount") or 0 for cs in (raw.get("status") or {}).get("containerStatuses") or [])
        facts.plugin_pods.append(PluginPodFacts(
            name=pf.name, namespace=pf.namespace, node=pf.node, phase=pf.phase, ready=pf.ready,
            waiting=pf.waiting, restarts=restarts, log_tail=snap.plugin_logs.get(f"{pf.namespace}/{pf.name}")))
    facts.plugin_pods_known = snap.plugin_pods_known
    facts.gpu_cluster = snap.gpu_cluster is not None
    facts.gpu_cluster_state = ((snap.gpu_cluster or {}).get("status") or {}).get("state")
    facts.cluster_policy = bool(snap.cluster_policies)
    facts.quotas = [QuotaFacts(name=(q.get("metadata") or {}).get("name", ""),
                               namespace=(q.get("metadata") or {}).get("namespace", ""),
                               hard=dict(((q.get("status") or {}).get("hard")) or (q.get("spec") or {}).get("hard") or {}),
                               used=dict(((q.get("status") or {}).get("used")) or {}))
                    for q in snap.quotas]
    return facts


def _event_time(e: dict) -> str:
    return str(e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or "")


# --- evidence ----------------------------------------------------------------------------------

def _trim(obj: dict) -> dict:
    """Drop the noise (managedFields, last-applied annotations) from an object dict."""
    obj = dict(obj)
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if "last-applied-configuration" not in k}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    obj["metadata"] = meta
    return obj


def _yaml(objs: list[dict]) -> str:
    return yaml.safe_dump_all([_trim(o) for o in objs], sort_keys=False, default_flow_style=False)


def _cap(text: str, limit: int = EVIDENCE_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters cut)"


def evidence(snap: Snapshot, facts: Facts, code: str, reason: str) -> dict[str, str]:
    """The texts an operator needs to check the diagnosis, each trimmed to a sane size."""
    out: dict[str, str] = {"diagnosis": f"[{code}] {reason}"}
    if snap.api_error:
        out["api"] = snap.api_error
        return out
    if snap.resource_versions is not None and "v1" not in snap.resource_versions:
        out["api"] = f"resource.k8s.io versions served: {snap.resource_versions or 'none'}"
    state = [p.summary() for p in facts.pods] + [c.summary() for c in facts.claims]
    if state:
        out["state"] = "\n".join(state)
    if snap.pods:
        out["pods"] = _cap(_yaml(snap.pods))
    if snap.claims:
        out["resourceclaims"] = _cap(_yaml(snap.claims))
    if snap.templates:
        out["resourceclaimtemplates"] = _cap(_yaml(snap.templates))
    if facts.events:
        out["events"] = _cap("\n".join(e.line() for e in facts.events))
    if facts.device_classes is not None:
        out["deviceclasses"] = "\n".join(f"{n}: {' && '.join(s) or '(no selector)'}"
                                         for n, s in sorted(facts.device_classes.items())) or "(none)"
    involved = {p.node for p in facts.pods if p.node}
    involved |= {k.split("/")[1] for c in facts.claims for k in c.devices if k.count("/") >= 2}
    for pod in _pending_pods(facts):
        involved |= _candidate_nodes(facts, pod)[0]
    slices = [s for s in snap.slices if (s.get("spec") or {}).get("nodeName") in involved] or snap.slices[:2]
    out["resourceslices"] = _cap(_yaml(slices)) if slices else f"(no ResourceSlice of {facts.driver})"
    if facts.nodes:
        lines = []
        for n in facts.nodes:
            gpu = " (GPU node)" if any((d.node or d.pool) == n.name for d in facts.devices) else ""
            taints = ", ".join(f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in n.taints)
            lines.append(f"{n.name}{gpu}: {'Ready' if n.ready else 'NotReady'}"
                         f"{', cordoned' if n.unschedulable else ''}; taints: {taints or 'none'}")
        out["nodes"] = "\n".join(lines)
    plugin = [p.summary() for p in facts.plugin_pods] or (
        ["(kubelet-plugin pods could not be listed)"] if not facts.plugin_pods_known
        else ["(no kubelet-plugin pods found)"])
    for p in facts.plugin_pods:
        if p.log_tail:
            plugin.append(f"--- log tail of {p.namespace}/{p.name}:\n{p.log_tail[-3000:]}")
    out["kubelet-plugin"] = _cap("\n".join(plugin))
    out["gpu-operator"] = (f"GPUCluster: {'present' if facts.gpu_cluster else 'absent'}"
                           f"{' (state ' + facts.gpu_cluster_state + ')' if facts.gpu_cluster_state else ''}; "
                           f"ClusterPolicy: {'present' if facts.cluster_policy else 'absent'}")
    if snap.quotas:
        out["resourcequotas"] = _cap(_yaml(snap.quotas))
    if snap.errors:
        out["unread"] = "\n".join(f"{k}: {v}" for k, v in sorted(snap.errors.items()))
    return out


# --- entry points ------------------------------------------------------------------------------

def diagnose(api, profile, namespace: str | None, check: str | None, error_text: str) -> Diagnosis:
    """Read the cluster and explain why ``check`` failed with ``error_text``.  Never raises."""
    started = time.monotonic()
    try:
        snap = gather(api, profile, namespace)
        facts = build_facts(snap, profile)
        code, reason = classify(facts, check, error_text or "")
        ev = evidence(snap, facts, code, reason)
    except Exception as err:  # noqa: BLE001 - the diagnosis must not replace the test's own failure
        log.exception("diagnosis failed")
        code, reason = "timeout", f"The diagnosis itself failed ({_describe_error(err)}): read the test's message."
        ev = {"diagnosis": f"[{code}] {reason}"}
    log.info("diagnosed %s in %.1fs: %s", namespace, time.monotonic() - started, code)
    return Diagnosis(code, reason, ev)


def diagnose_item(item, exc: BaseException | None) -> Diagnosis | None:
    """Diagnose a failing draconf test item (for the pytest plugin's hook).

    Finds the cluster (``config.draconf_api``), the profile, the test's namespace (the
    ``started`` workload's, a ``deployed`` one's or the ``namespace`` fixture's) and its check
    (``draconf`` marker).
    Returns None when there is no cluster connection to read from.
    """
    config = item.config
    api = getattr(config, "draconf_api", None)
    profile = getattr(config, "draconf_profile", None)
    if api is None or profile is None:
        return None
    funcargs = getattr(item, "funcargs", {}) or {}
    namespace = None
    started = funcargs.get("started")  # a draconf.workload.Start (suites/test_workloads.py)
    deployed = started.deployed if started is not None else funcargs.get("deployed")
    if deployed is not None and getattr(deployed, "namespace", None):
        namespace = deployed.namespace
    elif isinstance(funcargs.get("namespace"), str):
        namespace = funcargs["namespace"]
    marker = item.get_closest_marker("draconf")
    check = marker.kwargs.get("check") if marker else None
    text = str(exc) if exc is not None else ""
    return diagnose(api, profile, namespace, check, text)


_CODE_PREFIX = re.compile(r"^\s*(?:\w+(?:\.\w+)*: )?\[([a-z-]+)\]")


def record_failure_diagnosis(item, exc: BaseException, annotate: bool = True) -> Diagnosis | None:
    """Diagnose and record a failing test, for ``pytest_runtest_setup``/``call`` wrappers.

    Does nothing for skips, xfails, interrupts and tests that recorded a diagnosis themselves.
    A test whose message already starts with a ``[code]`` gets that code recorded (so the
    reporting plugin does not add a second one) with the cluster evidence.  Otherwise the code
    comes from :func:`diagnose_item`; with ``annotate`` the reason is added to the exception
    message as a ``diagnosis (code): ...`` line after the first, so the terminal shows it too.
    Never raises: a failing diagnosis must not hide the test's own failure.
    """
    import pytest

    from draconf.reporting import DIAGNOSIS_KEY, record_diagnosis

    if isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception, pytest.exit.Exception,
                        KeyboardInterrupt, SystemExit, GeneratorExit)):
        return None
    if item.stash.get(DIAGNOSIS_KEY, None):
        return None
    try:
        result = diagnose_item(item, exc)
        if result is None:
            return None
        own = _CODE_PREFIX.match(str(exc))
        if own and own.group(1) in DIAGNOSES and own.group(1) != result.code:
            result = Diagnosis(own.group(1), result.reason, result.evidence)
        elif annotate:
            # No "[code]" here: the reporting plugin prefixes the first line with it only when
            # the message does not contain it yet.
            _append_line(exc, f"diagnosis ({result.code}): {result.reason}")
        record_diagnosis(item, result.code, evidence=result.evidence, reason=result.reason)
        return result
    except Exception:  # noqa: BLE001
        log.exception("could not diagnose %s", getattr(item, "nodeid", item))
        return None


def _append_line(exc: BaseException, line: str) -> None:
    """Add ``line`` to the message of ``exc`` (after its first line, which reports keep)."""
    import pytest

    if line in str(exc):
        return  # a class-scoped fixture re-raises the same exception for every test
    if isinstance(exc, pytest.fail.Exception):
        exc.msg = f"{exc.msg or ''}\n{line}"
        exc.args = (exc.msg,)
    elif exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]}\n{line}", *exc.args[1:])
    elif not exc.args:
        exc.args = (line,)
