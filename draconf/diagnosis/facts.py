"""Facts: what the rules look at, as plain data built from the raw objects of a
:class:`~draconf.diagnosis.gather.Snapshot` by :func:`build_facts` (pure: no API calls).

>>> from draconf.devices import Device
>>> d = Device("gpu.nvidia.com", "n1", "gpu-0", "n1", {"gpu.nvidia.com/type": "gpu"}, {})
>>> selectors_eval(["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"], d)
Verdict(match)
>>> selectors_eval(["device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')"], d)
Verdict(CEL runtime error: no such key: productName)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubernetes.utils import parse_quantity

from draconf import allocation, cel, mig
from draconf.answers import carried_by
from draconf.audit import CLAIM_COUNT_KEY, DEVICECLASS_SUFFIX
from draconf.claims import Claim, DeviceRequest, device_requests
from draconf.devices import Device, PublishedDevices, devices_from_slices
from draconf.errors import ReleaseIncomplete
from draconf.injection import WrongInjection
from draconf.kube import label_selector, seconds_since
from draconf.namespaces import MANAGED_BY
from draconf.plugins import PluginPod
from draconf.taints import describe_rule, only_effect, with_rule_taints
from draconf.pods import Pod, request_matches

#: draconf's own objects carry this label (a quota the suite made is its checks' subject)
(MANAGED_BY_LABEL, MANAGED_BY_VALUE), = MANAGED_BY.items()

if TYPE_CHECKING:
    from draconf.diagnosis.gather import Snapshot


@dataclass
class TemplateFacts:
    name: str
    namespace: str = "default"
    requests: list[list[DeviceRequest]] = field(default_factory=list)

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
    #: ``status.allocatable`` of the device plugin's extended resource (nvidia.com/gpu): GPUs a
    #: device plugin offers on this node beside DRA
    extended_gpus: int = 0


@dataclass
class ContainerGPUs:
    """What one container of the namespace was given and what it saw, read from the cluster:
    ``nvidia-smi -L`` run in it (a running pod) or its log and end state (a finished one)."""
    pod: str
    container: str
    #: pod-level claim names the container lists in resources.claims
    claims: list[str] = field(default_factory=list)
    #: UUIDs of the devices allocated to those claims; None when an allocation could not be read
    #: (a finished pod's generated claim is deleted by the resourceclaim controller)
    expected: list[str] | None = None
    #: GPU UUIDs the container listed
    seen: list[str] = field(default_factory=list)
    #: the container could not run nvidia-smi at all (not in the container: exit 127, or the
    #: runtime's "executable file not found")
    no_tool: bool = False
    #: the reading gave an answer: nvidia-smi's exit code, or the finished container's log
    answered: bool = True
    #: how it was read, e.g. "nvidia-smi -L: exit 0; stdout: GPU 0: ..." or "log: ..."
    how: str = ""

    def line(self) -> str:
        want = "unknown" if self.expected is None else (self.expected or "no GPU")
        return f"{self.pod}/{self.container}: allocated {want}; {self.how}"


@dataclass
class QuotaFacts:
    name: str
    namespace: str = "default"
    hard: dict[str, str] = field(default_factory=dict)
    used: dict[str, str] = field(default_factory=dict)
    #: key -> what the namespace's objects amount to, counted from them (claims, and devices
    #: their requests ask of each DeviceClass): the quota controller's status may lag them
    counted: dict[str, int] = field(default_factory=dict)
    #: made by draconf (labelled app.kubernetes.io/managed-by=draconf): a quota check's own
    managed_by_draconf: bool = False

    def exceeded(self) -> list[str]:
        """Keys whose used amount, or the amount counted from the namespace's objects, is above
        the hard limit (admission should prevent that)."""
        over = []
        for key, limit in self.hard.items():
            try:
                if key in self.used and parse_quantity(self.used[key]) > parse_quantity(limit):
                    over.append(f"{key} used {self.used[key]} > hard {limit}")
                elif key in self.counted and self.counted[key] > parse_quantity(limit):
                    over.append(f"{key}: the namespace holds {self.counted[key]} > hard {limit}")
            except ValueError:
                continue
        return over


@dataclass(frozen=True)
class Failure:
    """What the failing check did, as the exception it raised says: the rules read this, never
    the check's name.

    >>> Failure.of(ReleaseIncomplete("cleanup is incomplete: ...")).waited_for_release
    True
    >>> Failure.of("text only")
    Failure(waited_for_release=False, compared_injection=False, answers=())
    """
    #: it deleted the consumers and waited for their claims to be released (they were not)
    waited_for_release: bool = False
    #: it read what the running containers show and compared it with their allocation
    compared_injection: bool = False
    #: the API server's answers that turned its requests (or a controller's for its workload)
    #: away: draconf.answers.ServerAnswer, carried by the exception (draconf.answers.carried_by)
    answers: tuple = ()

    @classmethod
    def of(cls, error) -> "Failure":
        if not isinstance(error, BaseException):
            return cls()
        return cls(waited_for_release=isinstance(error, ReleaseIncomplete),
                   compared_injection=isinstance(error, WrongInjection), answers=carried_by(error))


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
    #: the namespace's pods, as the suite reads them (:class:`draconf.pods.Pod`)
    pods: list[Pod] = field(default_factory=list)
    #: the namespace's ResourceClaims, as the suite reads them (:class:`draconf.claims.Claim`)
    claims: list[Claim] = field(default_factory=list)
    templates: list[TemplateFacts] = field(default_factory=list)
    events: list[EventFacts] = field(default_factory=list)
    #: DeviceClass name -> its CEL selectors; None when the classes could not be read
    device_classes: dict[str, list[str]] | None = field(default_factory=dict)
    #: extended resource -> the DeviceClass mapping it (``spec.extendedResourceName``)
    extended_resources: dict[str, str] = field(default_factory=dict)
    #: ResourceSlices of the driver (with or without devices)
    slice_count: int = 0
    #: the driver's published devices
    devices: list[Device] = field(default_factory=list)
    #: device key (driver/pool/device) -> "namespace/claim" it is allocated to, cluster-wide
    allocated: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeFacts] = field(default_factory=list)
    plugin_pods: list[PluginPod] = field(default_factory=list)
    #: False when the kubelet-plugin pods could not be listed at all
    plugin_pods_known: bool = True
    gpu_cluster: bool = False
    gpu_cluster_state: str | None = None
    cluster_policy: bool = False
    #: a ClusterPolicy deploys the device plugin (spec.devicePlugin.enabled, true by default)
    cluster_policy_device_plugin: bool = False
    #: ValidatingAdmissionPolicy name -> what it checks and where its bindings apply it
    admission_policies: dict[str, str] = field(default_factory=dict)
    #: validating webhook name -> its configuration and failure policy
    admission_webhooks: dict[str, str] = field(default_factory=dict)
    #: what each container with GPU claims (or in a pod with claims) was given and saw
    containers: list[ContainerGPUs] = field(default_factory=list)
    #: ``pod/container`` -> the identities the failing check found allocated to it, as the
    #: check recorded them (draconf.injection.WrongInjection): a finished pod's generated claim
    #: is deleted, and with it the cluster's only record of which GPU it was given
    recorded_allocations: dict[str, list[str]] = field(default_factory=dict)
    #: what the failing check did (never its name)
    failure: Failure = field(default_factory=Failure)
    quotas: list[QuotaFacts] = field(default_factory=list)
    #: claim key (namespace/name) -> its allocation results whose device carries a NoSchedule or
    #: NoExecute taint the request does not tolerate ("request: pool/device (key=value:effect)")
    untolerated_taints: dict[str, list[str]] = field(default_factory=dict)
    #: of those, claim key -> its results on a device tainted NoExecute while a pod consuming the
    #: claim still runs (the device-taint-eviction controller should have evicted it)
    not_evicted: dict[str, list[str]] = field(default_factory=dict)
    #: DeviceTaintRule name -> what it taints (draconf.taints.describe_rule), every rule served
    taint_rules: dict[str, str] = field(default_factory=dict)
    #: what :func:`draconf.allocation.judge` finds wrong with the allocations of the namespace's
    #: scheduled pods (the broken promises only, not "not allocated yet")
    allocation_problems: list[str] = field(default_factory=list)
    #: those of them that are a partition (MIG device) and its whole GPU in two claims
    #: (``partition-overlap``: shared counters not kept)
    partition_overlaps: list[str] = field(default_factory=list)
    #: gatherer name -> error, for what could not be read
    errors: dict[str, str] = field(default_factory=dict)
    #: seconds without any scheduler/controller action that mean a stalled control plane
    #: (draconf.workload.stall_after of the profile)
    stall_after: float = 15.0
    #: seconds the namespace has existed without its ``default`` ServiceAccount (None: it has one)
    namespace_without_sa_for: float | None = None
    #: component (kube-scheduler, kube-controller-manager) -> what its Lease and pods show
    control_plane: dict[str, str] = field(default_factory=dict)

    # -- lookups the rules share ---------------------------------------------------------------
    def claim(self, name: str) -> Claim | None:
        for c in self.claims:
            if c.name == name:
                return c
        return None

    def node(self, name: str) -> NodeFacts | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def pod_claims(self, pod: Pod) -> list[Claim]:
        return [c for name in pod.claim_names().values() if (c := self.claim(name)) is not None]

    def events_for(self, name: str, reason_part: str = "") -> list[EventFacts]:
        return [e for e in self.events if e.name == name and reason_part in e.reason]

    def scheduler_messages(self) -> list[str]:
        messages = [p.unschedulable_message for p in self.pods if p.unschedulable_message]
        messages += [e.message for e in self.events if e.reason == "FailedScheduling"]
        return messages

    def container_devices(self, seen: ContainerGPUs) -> list[Device]:
        """The published devices allocated to what ``seen``'s container lists (a claim, or one
        request of it), as read now; those of a claim gone or unallocated are left out."""
        pod = next((p for p in self.pods if p.name == seen.pod), None)
        if pod is None or seen.container not in pod.containers:
            return []
        names, by_key = pod.claim_names(), {d.key: d for d in self.devices}
        found = []
        for ref, request in pod.container_claim_requests(seen.container):
            claim = self.claim(names.get(ref, ""))
            if claim is None or not claim.is_allocated:
                continue
            keys = claim.device_keys if request is None else [
                key for req, keys in claim.request_devices.items() if request_matches(req, request) for key in keys]
            found += [by_key[k] for k in keys if k in by_key]
        return found


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
# Raw objects -> Facts (pure)
# =============================================================================================

def build_facts(snap: Snapshot, profile) -> Facts:
    """Turn a :class:`Snapshot` into :class:`Facts` (pure: no API calls)."""
    facts = Facts(driver=profile.driver, device_class=profile.device_class,
                  required_attributes=list(profile.required_attributes()),
                  namespace=snap.namespace, api_error=snap.api_error, errors=dict(snap.errors),
                  control_plane=dict(snap.control_plane),
                  namespace_without_sa_for=seconds_since(snap.namespace_without_sa))
    if getattr(profile, "timeouts", None) is not None:
        from draconf.startup import stall_after
        facts.stall_after = stall_after(profile)
    if snap.resource_versions is not None:
        facts.resource_versions = list(snap.resource_versions)
        facts.resource_api = "v1" in snap.resource_versions
    facts.pods = [Pod(p) for p in snap.pods]
    facts.claims = [Claim(c) for c in snap.claims]
    facts.templates = [TemplateFacts(name=(t.get("metadata") or {}).get("name", ""),
                                     namespace=(t.get("metadata") or {}).get("namespace", ""),
                                     requests=device_requests(((t.get("spec") or {}).get("spec")) or {}))
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
        facts.extended_resources = {
            (c.get("spec") or {})["extendedResourceName"]: (c.get("metadata") or {}).get("name", "")
            for c in snap.device_classes if (c.get("spec") or {}).get("extendedResourceName")}
    facts.admission_policies = admission_policy_facts(snap.admission_policies, snap.admission_bindings)
    facts.admission_webhooks = {
        w.get("name", ""): f"in {(c.get('metadata') or {}).get('name', '')}, failurePolicy "
                           f"{w.get('failurePolicy', 'Fail')}"
        for c in snap.admission_webhooks for w in c.get("webhooks") or []}
    facts.slice_count = len(snap.slices)
    facts.devices = devices_from_slices(snap.slices)
    # What kube-scheduler and the eviction controller see: the slices' taints and the rules'.
    tainted_slices = with_rule_taints(snap.slices, snap.taint_rules)
    facts.untolerated_taints = _untolerated_taints(snap.claims, tainted_slices)
    facts.not_evicted = _not_evicted(snap, tainted_slices)
    facts.taint_rules = {(r.get("metadata") or {}).get("name", ""): describe_rule(r) for r in snap.taint_rules}
    facts.allocation_problems = _allocation_problems(snap, facts, profile)
    for c in map(Claim, snap.all_claims):
        for key in c.device_keys:
            facts.allocated[key] = c.key
    facts.nodes = [NodeFacts(
        name=(n.get("metadata") or {}).get("name", ""), labels=dict((n.get("metadata") or {}).get("labels") or {}),
        taints=list((n.get("spec") or {}).get("taints") or []),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True"
                  for c in (n.get("status") or {}).get("conditions") or []),
        unschedulable=bool((n.get("spec") or {}).get("unschedulable")),
        extended_gpus=_int_quantity(((n.get("status") or {}).get("allocatable") or {}).get(EXTENDED_GPU)))
        for n in snap.nodes]
    facts.plugin_pods = [PluginPod.from_raw(raw).with_log(
        snap.plugin_logs.get(f"{raw['metadata']['namespace']}/{raw['metadata']['name']}"))
        for raw in snap.plugin_pods]
    facts.plugin_pods_known = snap.plugin_pods_known
    facts.gpu_cluster = snap.gpu_cluster is not None
    facts.gpu_cluster_state = ((snap.gpu_cluster or {}).get("status") or {}).get("state")
    facts.cluster_policy = bool(snap.cluster_policies)
    facts.cluster_policy_device_plugin = any(
        ((p.get("spec") or {}).get("devicePlugin") or {}).get("enabled", True) is not False
        for p in snap.cluster_policies)
    facts.containers = _container_gpus(snap, facts, profile)
    facts.quotas = [QuotaFacts(name=(q.get("metadata") or {}).get("name", ""),
                               namespace=(q.get("metadata") or {}).get("namespace", ""),
                               hard=dict(((q.get("status") or {}).get("hard")) or (q.get("spec") or {}).get("hard") or {}),
                               used=dict(((q.get("status") or {}).get("used")) or {}),
                               managed_by_draconf=((q.get("metadata") or {}).get("labels") or {}).get(
                                   MANAGED_BY_LABEL) == MANAGED_BY_VALUE)
                    for q in snap.quotas]
    for q in facts.quotas:
        q.counted = _counted(q.hard, [c for c in facts.claims if not c.is_deleting])
    return facts


def _event_time(e: dict) -> str:
    return str(e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or "")



#: The device plugin's extended resource for a whole NVIDIA GPU.
EXTENDED_GPU = "nvidia.com/gpu"
#: What a runtime says when the container has no such command (the CDI spec mounts nvidia-smi).
NO_EXECUTABLE = "executable file not found"


def _int_quantity(value) -> int:
    try:
        return int(parse_quantity(value)) if value is not None else 0
    except (ValueError, TypeError):
        return 0


def _container_gpus(snap: Snapshot, facts: Facts, profile) -> list[ContainerGPUs]:
    """Each container of a pod with claims whose GPUs were read (see gather's ``containers``):
    the identities allocated to the claims it lists (the profile's: UUIDs for NVIDIA, device
    names for dra-example-driver), from the claims' status and the published devices, beside
    the identities it showed (the profile's injection command, parsed)."""
    # A MIG device has no UUID of its own in the slice; nvidia-smi -L lists it under its GPU,
    # the one its parentUUID names (the GPU line is what the injection command's parser reads).
    uuids = {d.key: profile.identity(d) or (mig.parent_of(d) if mig.is_mig(d) else None) for d in facts.devices}
    claims = {c.name: c for c in facts.claims}
    out = []
    for raw in snap.pods:
        pod = Pod(raw)
        names = pod.claim_names()
        ended = {cs.get("name"): (cs.get("state") or {}).get("terminated") or {}
                 for cs in pod.status.get("containerStatuses") or []}
        for container in pod.containers:
            read = snap.containers.get(f"{pod.name}/{container}")
            if read is None:
                continue
            listed = pod.container_claims(container)
            found: list[str] = []
            unknown = False  # a claim of the container not found or not allocated
            for ref, request in pod.container_claim_requests(container):
                claim = claims.get(names.get(ref, ""))
                if claim is None or not claim.is_allocated:
                    unknown = True
                    break
                keys = claim.device_keys if request is None else [
                    key for req, keys in claim.request_devices.items() if request_matches(req, request)
                    for key in keys]
                found += [u for key in keys if (u := uuids.get(key))]
            expected = None if unknown else found
            text = read.get("stdout") or ""
            terminated = ended.get(container) or {}
            message = f"{read.get('error') or ''} {read.get('stderr') or ''} {terminated.get('message') or ''}"
            exit_code = read.get("exit_code")
            no_tool = exit_code in (126, 127) or NO_EXECUTABLE in message
            if "log" in read:
                text = read["log"] or ""
                how = (f"log: {text.strip()[:300]!r}; ended: exit {terminated.get('exitCode')} "
                       f"{terminated.get('reason') or ''} {(terminated.get('message') or '').strip()[:200]}")
            else:
                how = f"{profile.injection.describe()}: exit {exit_code}; stdout: {text.strip()[:300]!r}"
                if message.strip():
                    how += f"; {message.strip()[:300]}"
            out.append(ContainerGPUs(pod.name or "", container, listed,
                                     sorted(set(expected)) if expected is not None else None,
                                     sorted(set(profile.injection.parse(text))), no_tool,
                                     "log" in read or exit_code is not None or no_tool, how))
    return out


def _counted(hard: dict[str, str], claims: list[Claim]) -> dict[str, int]:
    """What ``claims`` amount to under the quota keys in ``hard`` that count claims or devices
    (a request's first alternative, ExactCount; All is not countable before allocation)."""
    counted = {}
    for key in hard:
        if key == CLAIM_COUNT_KEY:
            counted[key] = len(claims)
        elif key.endswith(DEVICECLASS_SUFFIX):
            device_class = key[:-len(DEVICECLASS_SUFFIX)]
            counted[key] = sum(req[0].count for c in claims for req in c.device_requests
                               if req and req[0].device_class == device_class and req[0].mode != "All")
    return counted


def admission_policy_facts(policies: list[dict], bindings: list[dict]) -> dict[str, str]:
    """Each ValidatingAdmissionPolicy as one line: its validations and its bindings' actions and
    namespace selectors.

    >>> pol = {"metadata": {"name": "no-gpu"}, "spec": {"validations": [
    ...     {"expression": "false", "message": "no GPU pods"}]}}
    >>> b = {"metadata": {"name": "no-gpu-b"}, "spec": {"policyName": "no-gpu", "validationActions": ["Deny"],
    ...      "matchResources": {"namespaceSelector": {"matchLabels": {"team": "x"}}}}}
    >>> print(admission_policy_facts([pol], [b])["no-gpu"])
    validates `false` ("no GPU pods"); binding no-gpu-b: Deny in namespaces team=x
    """
    out = {}
    for pol in policies:
        name = (pol.get("metadata") or {}).get("name", "")
        checks = [f"`{' '.join(str(v.get('expression', '')).split())}`"
                  + (f' ("{v["message"]}")' if v.get("message") else "")
                  for v in (pol.get("spec") or {}).get("validations") or []]
        text = f"validates {' and '.join(checks) or 'nothing'}"
        for b in bindings:
            spec = b.get("spec") or {}
            if spec.get("policyName") != name:
                continue
            sel = (spec.get("matchResources") or {}).get("namespaceSelector") or {}
            labels = label_selector(sel.get("matchLabels"))
            exprs = ",".join(f"{e.get('key')} {e.get('operator')} {e.get('values') or ''}".strip()
                             for e in sel.get("matchExpressions") or [])
            where = " ".join(x for x in (labels, exprs) if x) or "all"
            text += (f"; binding {(b.get('metadata') or {}).get('name', '')}: "
                     f"{'/'.join(spec.get('validationActions') or [])} in namespaces {where}")
        out[name] = text
    return out


def _untolerated_taints(claims: list[dict], slices: list[dict]) -> dict[str, list[str]]:
    """Claim key -> results on a device whose blocking taint its request does not tolerate."""
    from draconf.taints import untolerated
    found = {}
    for raw in claims:
        meta = raw.get("metadata") or {}
        if problems := untolerated(raw, slices):
            found[f"{meta.get('namespace', '')}/{meta.get('name', '')}"] = problems
    return found


def _not_evicted(snap: Snapshot, tainted_slices: list[dict]) -> dict[str, list[str]]:
    """Claim key -> results on a device whose NoExecute taint the request does not tolerate,
    for claims a running pod (not being deleted) still consumes."""
    running = {p.uid for p in map(Pod, snap.pods) if p.is_running and not p.is_deleting}
    no_execute = only_effect(tainted_slices, "NoExecute")
    return {key: problems for key, problems in _untolerated_taints(
                [c for c in snap.claims if running & set(Claim(c).reserved_for_uids)], no_execute).items()}


#: Branches of :func:`draconf.allocation.judge` that say an allocation is wrong, not that it has
#: not happened yet (those are the scheduling rules' to explain).
BROKEN_ALLOCATION = frozenset({"not-owned", "not-extended", "not-reserved", "wrong-count", "device-twice",
                               "shared-device", "shared-gpu", "unpublished", "missing-class",
                               "class-selectors", "request-selectors", "other-node",
                               "partition-overlap"})


def _allocation_problems(snap: Snapshot, facts: Facts, profile) -> list[str]:
    """The allocation judgement over the namespace's scheduled pods, as the allocation check
    makes it, reduced to :data:`BROKEN_ALLOCATION`."""
    pods = [Pod(raw) for raw in snap.pods]
    pods = [p for p in pods if p.node and not p.is_deleting]
    if not pods or snap.device_classes is None:
        return []
    judgement = allocation.judge(
        allocation.Snapshot(pods, {c.name: c for c in facts.claims},
                            PublishedDevices(profile.driver, facts.devices),
                            dict(facts.device_classes or {})),
        expected_pods=len(pods), identity_attribute=(getattr(profile, "attributes", None) or {}).get("uuid"),
        parent_attribute=mig.PARENT_ATTRIBUTE)
    facts.partition_overlaps = [str(p) for p in judgement.problems if p.kind == "partition-overlap"]
    return [str(p) for p in judgement.problems if p.kind in BROKEN_ALLOCATION]
