"""The rules: which diagnosis code these facts show, first match wins (see :func:`classify`).

Each rule is a small function ``(facts, check, error_text) -> (code, reason) | None``;
:data:`RULES` lists them in priority order and :func:`classify` runs them.

===================  ==========================================================================
api-unavailable      the API server does not answer, or does not serve resource.k8s.io/v1
controller-manager-  (checked third) a pending pod's template claims stayed ungenerated for
 unavailable         stall_after seconds with no FailedResourceClaimCreation event, or the
                     namespace stayed that long without its `default` ServiceAccount
scheduler-           (checked third) every pod stayed unbound without a PodScheduled condition
 unavailable         for stall_after seconds, with no scheduling event: no scheduler acted
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
admission-denied     the server refused an object (or a controller's pod/claim, per its events)
                     by a ValidatingAdmissionPolicy, webhook, LimitRange or a quota the suite did
                     not create; named from the server's answer, with the policy read if readable
device-tainted       a claim's allocation result is a device carrying a NoSchedule/NoExecute
                     taint that the result's request does not tolerate (scheduler ignores taints)
intermittent         cdi-injection failed, but every container shows its GPUs when read again
timeout              nothing definitive: the last observed state is the evidence
===================  ==========================================================================

A new code: its meaning in ``draconf.reporting.DIAGNOSES``, its rule here (reading facts, never
the wording of the suite's own assertion messages), a unit test in tests/unit/test_diagnosis.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from draconf import cel
from draconf.devices import Device
from draconf.diagnosis.facts import Facts, PodFacts, RequestFacts, selectors_eval
from draconf.diagnosis.scheduling import node_exclusions

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
    for rule in RULES:
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
                        f"{len(devices)} of {len(analysis.devices)} device(s) eligible after class "
                        f"{req.device_class}'s selector ({len(facts.devices)} published) lack "
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
            if not analysis.devices and facts.devices:
                # The class itself selects nothing: its selector is the cause, not the request's.
                class_cel = " && ".join(" ".join(c.split()) for c in
                                        (facts.device_classes or {}).get(req.device_class) or [])
                return ("selector-unmatched",
                        f"DeviceClass {req.device_class} selects 0 of {len(facts.devices)} published "
                        f"devices: {class_cel}, so {label} request {req.name} has no eligible device: "
                        "fix the DeviceClass's selector (the driver's Helm values).")
            return ("selector-unmatched",
                    f"{label} request {req.name} needs {analysis.needed} device(s) of class "
                    f"{req.device_class} on one node matching {_selectors_text(req)}, but "
                    f"{matching} of {len(analysis.devices)} device(s) eligible after the class "
                    f"selector ({len(facts.devices)} published) match: "
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


def _rule_feature_disabled(facts: Facts, check, error_text):
    """The API server kept a DRA field that the scheduler does not act on: its feature gate is
    off there (a scheduler behind the API server, or started with the gate off)."""
    for pod in _pending_pods(facts):
        message = pod.unschedulable or ""
        if "feature is disabled" in message:
            said = next(part.strip() for part in message.split(":") if "feature is disabled" in part)
            return ("feature-disabled",
                    f"Pod {pod.name} is never scheduled: the scheduler says \"{said}\" although the API "
                    "server accepted the claim: turn the feature gate on in kube-scheduler (run every "
                    "control-plane component at the same version and gates).")
        for resource, device_class in facts.extended_resources.items():
            if f"Insufficient {resource}" in message and "cannot allocate" not in message:
                return ("feature-disabled",
                        f"Pod {pod.name} asks for {resource}, which DeviceClass {device_class} maps "
                        f"(extendedResourceName), but the scheduler reports \"Insufficient {resource}\" "
                        "instead of allocating a device: DRAExtendedResource is off in kube-scheduler "
                        "(turn it on there, and in the kubelets).")
    return None


def _rule_admin_access_unsupported(facts: Facts, check, error_text):
    """The driver refuses to prepare a device allocated with adminAccess because another claim
    holds it: it treats admin access as exclusive (KEP-5018 says such devices are shared)."""
    for pod in _stuck_pods(facts):
        failed = facts.events_for(pod.name, "FailedPrepareDynamicResources")
        refused = [e for e in failed if "already allocated to different claim" in e.message]
        admin = [d for c in facts.pod_claims(pod) for d in c.admin_devices]
        if refused and admin:
            return ("admin-access-unsupported",
                    f"Pod {pod.name} cannot start on {pod.node}: its claim was allocated {', '.join(admin)} "
                    f"with adminAccess, but the driver refuses to prepare it because another claim holds "
                    f"it ({refused[-1].message[:300]}): the DRA driver does not support admin access; "
                    "upgrade it to a release that does.")
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
    # Nothing deployed in the namespace: the plugin itself is the finding.
    if not facts.pods and facts.plugin_pods:
        gpu_nodes = {d.node for d in facts.devices if d.node}
        unready = [p for p in facts.plugin_pods if not p.ready and (not gpu_nodes or p.node in gpu_nodes)]
        if unready:
            return ("plugin-unhealthy",
                    f"{len(unready)} kubelet-plugin pod(s) are not ready ({unready[0].summary()}): check "
                    "their logs and the kubelet's plugin registration.")
    return None


def _rule_cdi(facts: Facts, check, error_text):
    """What the containers saw of their GPUs (``nvidia-smi -L`` run in them by the diagnosis,
    or a finished container's log and end state), against the UUIDs of the devices allocated
    to the claims each lists: a UUID it was not given is cdi-wrong-device; none, or fewer, is
    cdi-not-injected.  Read whatever the check, as an operator's ``kubectl exec`` would."""
    allocated = [d for c in facts.claims if c.allocated for d in c.devices]
    verified = f"; its claims are allocated ({', '.join(allocated)})" if allocated else ""
    wrong, short = [], []
    for c in facts.containers:
        who = f"{c.pod}/{c.container}"
        if not c.claims:
            if c.seen:
                wrong.append(f"{who} holds no claim but sees {c.seen}")
            continue
        expected = c.expected
        if expected is None and c.seen:
            # A finished pod's generated claim is deleted by the resourceclaim controller, so
            # the cluster no longer says which device it was given.  Only here the rule reads
            # the check's own record of that allocation (its "X sees [...], allocated [...]").
            # Nothing else in the cluster keeps it; the verdict object of issue 10 will carry it.
            expected = next((_uuid_list(m.group(3)) for m in _SEES.finditer(error_text)
                             if m.group(1) == who), None)
        if expected is not None and set(c.seen) - set(expected):
            wrong.append(f"{who} sees {c.seen}, allocated {expected}")
        elif c.seen and expected is not None and set(expected) - set(c.seen):
            short.append(f"{who} sees {c.seen}, allocated {expected}")
        elif not c.seen and c.answered:
            short.append(f"{who} sees no GPU ({c.how[:300]})"
                         + (f", allocated {expected}" if expected else ""))
    if wrong:
        return ("cdi-wrong-device",
                f"Container {wrong[0]}{verified}: device isolation is broken; compare the claim's "
                "status.allocation with the driver's CDI spec for that claim and the runtime's CDI config.")
    if short:
        return ("cdi-not-injected",
                f"Container {short[0]}{verified}, although the pod ran: the runtime did not inject the "
                "claim's CDI devices; enable CDI in containerd/CRI-O and check the driver's CDI specs "
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


#: Seconds after which a claim still held past its consumers' end is overdue, not in flight
#: (the resourceclaim controller and the kubelet release a claim within seconds).
RELEASE_GRACE = 30


def _rule_cleanup(facts: Facts, check, error_text):
    """Claims that outlive their consumers.  Right after a pod ends its claim is legitimately
    still held for a moment; the cluster shows it is overdue when the claim has been deleting,
    or its owner pod done, for RELEASE_GRACE seconds.  Without such a timestamp (a named claim
    whose consumer is gone) only the cleanup check knows it waited for the release: that is
    the one thing this rule takes from the check."""
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
        owner = next((p for p in facts.pods if p.uid == c.owner_pod_uid or p.name == c.owner_pod), None)
        overdue = check == "cleanup" or (c.deleting_for or 0) >= RELEASE_GRACE or (
            owner is not None and (owner.done_for or 0) >= RELEASE_GRACE)
        if (orphan or stuck or held) and not consumers and overdue:
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
    """A quota's status.used, or what the namespace's claims amount to, above its hard limit:
    admission let through what it must refuse."""
    over = [(q, x) for q in facts.quotas for x in q.exceeded()]
    if over:
        q, x = over[0]
        return ("quota-not-enforced",
                f"ResourceQuota {q.namespace}/{q.name} shows {x}: objects beyond the limit were "
                "admitted, so the ResourceQuota admission plugin is not enforcing it; check the API "
                "server's --enable-admission-plugins.")
    return None


def _rule_policy_conflict(facts: Facts, check, error_text):
    """A ClusterPolicy beside the GPUCluster is the cause only where its device plugin competes
    with DRA for the GPUs the failing workload wanted: the ClusterPolicy deploys the device
    plugin, and a node the workload's pods run on (or could use, while pending) offers
    nvidia.com/gpu through it.  A ClusterPolicy alone explains nothing else."""
    if not (facts.gpu_cluster and facts.cluster_policy and facts.cluster_policy_device_plugin):
        return None
    for pod in facts.pods:
        if not pod.claims and not pod.unresolved_claims:
            continue
        nodes = {pod.node} if pod.node else _candidate_nodes(facts, pod)[0]
        competing = sorted(n.name for name in nodes if (n := facts.node(name)) and n.extended_gpus)
        if competing:
            node = facts.node(competing[0])
            return ("policy-conflict",
                    f"Pod {pod.name} wants GPUs through DRA on {', '.join(competing)}, where the "
                    f"ClusterPolicy's device plugin also offers {node.extended_gpus} nvidia.com/gpu: "
                    "both allocation paths hand out the same GPUs. A cluster uses the device plugin "
                    "(ClusterPolicy) or DRA (GPUCluster), not both: disable the ClusterPolicy's "
                    "devicePlugin or reinstall for one path.")
    return None


def _rule_intermittent(facts: Facts, check, error_text):
    """The injection check saw a container without its GPUs, but the diagnosis, reading every
    container again moments later, found each showing exactly the devices allocated to it:
    the failure did not persist (an exec or NVML initialisation that failed once).  Only for
    what the containers show: that is the observation the diagnosis repeats.  Last before
    ``timeout``: any rule that finds a lasting cause wins."""
    if check != "cdi-injection" or not facts.containers:
        return None
    with_claims = [c for c in facts.containers if c.claims]
    if not with_claims or not all(c.answered and c.expected and c.seen == c.expected for c in with_claims):
        return None
    if any(c.seen for c in facts.containers if not c.claims):
        return None
    shown = "; ".join(f"{c.pod}/{c.container} sees {c.seen}" for c in with_claims)[:400]
    return ("intermittent",
            f"Read again right after the failure, every container shows exactly its allocated GPUs "
            f"({shown}): the failure did not persist. Run with `--reruns N` to tell a flake from a "
            "fault (a flaky test is reported FLAKY), and watch the node's GPU driver and runtime logs.")


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


#: The API server's 403 text (its answer, quoted in the exception, not the suite's own words) (apiserver endpoints/handlers/responsewriters: forbiddenMessage),
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


def _rule_admission_denied(facts: Facts, check, error_text):
    """The server's answer (to the suite's create, or a controller's, as an event) names the
    admission control that refused it.  A quota the suite set up in the namespace is the quota
    checks' own subject, not an admin's denial."""
    from draconf.admission import denial_in_text

    # A controller held back by a quota retries until there is room (the quota checks wait
    # for that): only a policy, webhook or LimitRange in its events is a denial for good.
    texts = [(error_text, True)] + [(e.message, False) for e in reversed(facts.events)
                                    if e.reason in ("FailedCreate", "FailedResourceClaimCreation")]
    own_quotas = {q.name for q in facts.quotas}
    for text, direct in texts:
        by = denial_in_text(text)
        if not by or (by.startswith("ResourceQuota ")
                      and (not direct or by.split(" ", 1)[1] in own_quotas)):
            continue
        policy = re.search(r"ValidatingAdmissionPolicy '([^']+)'", by)
        hook = re.search(r'admission webhook "([^"]+)"', by)
        detail = ""
        if policy and policy.group(1) in facts.admission_policies:
            detail = f" (the policy {facts.admission_policies[policy.group(1)]})"
        elif hook and hook.group(1) in facts.admission_webhooks:
            detail = f" (the webhook is {facts.admission_webhooks[hook.group(1)]})"
        said = " ".join(text.split())
        quoted = said[said.find("denied"):] if "denied" in said else said
        while quoted.endswith(")") and quoted.count(")") > quoted.count("("):
            quoted = quoted[:-1]  # the close of a wrapping "(the workload never started: ...)"
        return ("admission-denied",
                f"{by} refused the suite's objects: {quoted[:300]}{detail}: this is the cluster's "
                "admission control, set up outside draconf; exempt draconf's namespaces (label "
                "app.kubernetes.io/managed-by=draconf) from it or run where it does not apply.")
    return None


def _rule_control_plane(facts: Facts, check, error_text):
    """Nothing acted on the workload for ``facts.stall_after`` seconds while the API server
    answered: the claim controller generated no claim (controller-manager), or no scheduler
    bound the pods or wrote their PodScheduled condition (scheduler).  Before every
    scheduling rule: a stopped scheduler leaves the pods looking like any unplaced pod."""
    live = [p for p in facts.pods if not p.deleting]

    def old(p: PodFacts) -> bool:
        return p.age is not None and p.age >= facts.stall_after

    def health(component: str) -> str:
        seen = facts.control_plane.get(component)
        return f" {component}: {seen}." if seen else ""

    if facts.namespace_without_sa_for is not None and facts.namespace_without_sa_for >= facts.stall_after:
        return ("controller-manager-unavailable",
                f"Namespace {facts.namespace} has had no ServiceAccount `default` for "
                f"{facts.namespace_without_sa_for:.0f}s, so no pod can be created in it: the "
                f"serviceaccount controller of kube-controller-manager is not acting."
                f"{health('kube-controller-manager')} Check its process or pod and its logs.")
    if not live:
        return None

    ungenerated = [p for p in live if p.ungenerated_claims and not p.node and old(p)]
    if ungenerated and not any(e.reason == "FailedResourceClaimCreation" for e in facts.events):
        names = ", ".join(f"{p.name} ({', '.join(p.ungenerated_claims)})" for p in ungenerated)
        return ("controller-manager-unavailable",
                f"No ResourceClaim was generated for {names} in {facts.stall_after:.0f}s or more and "
                f"no FailedResourceClaimCreation event was recorded: the resourceclaim controller of "
                f"kube-controller-manager is not acting.{health('kube-controller-manager')} Check its "
                "process or pod and its logs.")
    if all(p.unseen_by_scheduler and old(p) for p in live) and not any(
            e.reason in ("Scheduled", "FailedScheduling") for e in facts.events):
        names = ", ".join(p.name for p in live)
        return ("scheduler-unavailable",
                f"No scheduler acted on {names} in {facts.stall_after:.0f}s or more: no binding, no "
                f"PodScheduled condition, no Scheduled/FailedScheduling event, while the API server "
                f"answered.{health('kube-scheduler')} Check kube-scheduler's process or pod and its logs.")
    return None


def _rule_device_tainted(facts: Facts, check, error_text):
    """A device tainted NoSchedule/NoExecute was allocated to a claim whose request does not
    tolerate the taint: the scheduler ignores device taints (DRADeviceTaints off there)."""
    for key, problems in sorted(facts.untolerated_taints.items()):
        return ("device-tainted",
                f"Claim {key} was allocated a device whose taint its request does not tolerate: "
                f"{'; '.join(problems)}. kube-scheduler ignores device taints: turn DRADeviceTaints "
                "on there (every control-plane component at one version and gates).")
    return None


RULES = [_rule_api, _rule_permission_denied, _rule_admission_denied, _rule_control_plane,
         _rule_missing_class, _rule_no_slices, _rule_attribute_missing, _rule_device_tainted,
         _rule_feature_disabled,
         _rule_node_excluded, _rule_allocation, _rule_image_pull, _rule_admin_access_unsupported,
         _rule_plugin_unhealthy, _rule_cdi,
         _rule_cleanup, _rule_quota, _rule_policy_conflict, _rule_intermittent]

