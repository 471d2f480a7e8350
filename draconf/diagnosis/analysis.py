"""What the facts say about a workload's pending pods and their device requests: which devices
a request's selectors match, on which nodes, which pods wait and which are stuck.  Shared by the
rules (:mod:`draconf.diagnosis.rules`) and the evidence (:mod:`draconf.diagnosis.evidence`)."""

from __future__ import annotations

from dataclasses import dataclass

from draconf import cel
from draconf.devices import Device
from draconf.claims import DeviceRequest
from draconf.diagnosis.facts import Facts, selectors_eval
from draconf.pods import Pod


def class_devices(facts: Facts, class_name: str) -> tuple[list[Device], bool]:
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
class RequestAnalysis:
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


def analyse(facts: Facts, claim: str, req: DeviceRequest) -> RequestAnalysis:
    devices, _ = class_devices(facts, req.device_class)
    class_selectors = (facts.device_classes or {}).get(req.device_class) or []
    results = {d.key: selectors_eval([*class_selectors, *req.selectors], d) for d in devices}
    needed = "All" if req.mode == "All" else max(1, req.count or 1)
    return RequestAnalysis(claim, req.name, needed, results, {d.key: d for d in devices})


def per_node(devices: list[Device]) -> dict[str, list[Device]]:
    nodes: dict[str, list[Device]] = {}
    for d in devices:
        nodes.setdefault(d.node or d.pool, []).append(d)
    return nodes


def pending_pods(facts: Facts) -> list[Pod]:
    return [p for p in facts.pods if p.unschedulable_message and not p.is_deleting]


def pending_requests(facts: Facts, pods: list[Pod] | None = None):
    """(claim label, request alternatives) of every claim a pending pod still waits for; for a
    template whose claim is not generated yet, the template's requests."""
    out = []
    seen = set()
    for pod in pods if pods is not None else pending_pods(facts):
        for claim in facts.pod_claims(pod):
            if not claim.is_allocated and claim.key not in seen:
                seen.add(claim.key)
                out += [(f"Claim {claim.name}", req) for req in claim.device_requests]
    if not out and not facts.claims:
        out = [(f"ResourceClaimTemplate {t.name}", req) for t in facts.templates for req in t.requests]
    for pod in pods if pods is not None else pending_pods(facts):
        # Extended resources a DeviceClass maps (``nvidia.com/gpu: 1``): the scheduler makes
        # their claim only once it has placed the pod, so until then the request is the class.
        for resource, count in _extended_asks(pod, facts.extended_resources):
            if not pod.extended_claim_name:
                out.append((f"Pod {pod.name}'s {resource}",
                            [DeviceRequest(resource, facts.extended_resources[resource], count=count)]))
    return out


def _extended_asks(pod: Pod, mapped: dict[str, str]) -> list[tuple[str, int]]:
    """(resource, count) of the pod's container limits that a DeviceClass maps."""
    asks: dict[str, int] = {}
    for container in pod.spec.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource, value in limits.items():
            if resource in mapped:
                try:
                    asks[resource] = asks.get(resource, 0) + int(str(value))
                except ValueError:
                    continue
    return sorted(asks.items())


def candidate_nodes(facts: Facts, pod: Pod) -> tuple[set[str], bool]:
    """Nodes holding a device one of the pod's unallocated requests could use, and whether that
    was decided with the request's selectors (False: from the DeviceClass only)."""
    nodes, exact = set(), True
    for label, alternatives in pending_requests(facts, pods=[pod]):
        for req in alternatives:
            analysis = analyse(facts, label, req)
            if analysis.exact:
                nodes |= {d.node or d.pool for d in analysis.matching()}
            else:
                exact = False
                nodes |= {d.node or d.pool for d in analysis.devices.values()}
    return nodes, exact


def selectors_text(req: DeviceRequest) -> str:
    if not req.selectors:
        return "no selector"
    return " && ".join(" ".join(s.split()) for s in req.selectors)


def stuck_pods(facts: Facts) -> list[Pod]:
    """Bound pods whose claims are allocated and reserved for them, yet not running."""
    stuck = []
    for pod in facts.pods:
        if not pod.node or pod.is_running or pod.is_finished or pod.is_deleting or not pod.claim_names():
            continue
        if pod.template_claims_not_generated:
            continue
        claims = facts.pod_claims(pod)
        if len(claims) == len(pod.claim_names()) and all(
                c.is_allocated and (pod.uid in c.reserved_for_uids or pod.name in c.reserved_for_names)
                for c in claims):
            stuck.append(pod)
    return stuck
