"""Is an allocation right?  A pure judgement over what was read from the cluster.

:func:`judge` takes a :class:`Snapshot` (the workload's pods, the namespace's claims, the
published devices, the live DeviceClasses' selectors) and returns a :class:`Judgement`: the
evidence it read and every broken promise of DRA it found.  It reads nothing itself, so each
branch is unit-tested over recorded objects (``tests/unit/test_allocation.py``) and shown firing
through the real API on a bed by a misbehaving allocator or driver
(``tests/testbed/test_allocation_branches.py``; ``partition-overlap`` on the mig-counters-ignored
bed, ``tests/testbed/test_diagnosis_on_beds.py``, where the real scheduler makes it).

The promises, one branch each (``Problem.kind``):

========================  ===================================================================
``pod-count``             the workload has the pods it declares
``unscheduled``           every pod is scheduled
``claim-unnamed``         the pod's status names the claim generated for each of its claims
``claim-missing``         that claim exists
``not-owned``             a generated claim is owned by its pod
``not-extended``          the scheduler's claim for extended resources is annotated as such
``not-allocated``         the claim is allocated
``not-reserved``          ``reservedFor`` holds the consuming pod
``wrong-count``           as many devices as the request asks for
``device-twice``          no device twice in one claim
``shared-device``         no device in two claims (adminAccess results excepted, KEP-5018)
``shared-gpu``            no GPU (one identity, e.g. one UUID) in two claims under two names
``unpublished``           every allocated device is in a published ResourceSlice
``missing-class``         the request's DeviceClass exists
``class-selectors``       the device satisfies the DeviceClass's selectors
``request-selectors``     the device satisfies the request's own selectors
``other-node``            the device is on the node its pod runs on
``partition-overlap``     no partition (a MIG device: ``parentUUID``) of a GPU in one claim while
                          another holds that GPU whole (shared counters, KEP-4815)
========================  ===================================================================

>>> from draconf.claims import Claim
>>> from draconf.devices import Device, PublishedDevices
>>> from draconf.pods import Pod
>>> pod = Pod({"metadata": {"name": "p", "uid": "u"}, "spec": {"nodeName": "n1",
...     "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]},
...     "status": {"phase": "Running"}})
>>> claim = Claim({"metadata": {"name": "c"}, "spec": {"devices": {"requests": [{"name": "gpu",
...     "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}, "status": {
...     "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
...     "pool": "n2", "device": "gpu-0"}]}}, "reservedFor": [{"uid": "u"}]}})
>>> published = PublishedDevices("gpu.nvidia.com", [Device("gpu.nvidia.com", "n2", "gpu-0", "n2")])
>>> judgement = judge(Snapshot([pod], {"c": claim}, published, {"gpu.nvidia.com": []}), expected_pods=1)
>>> [p.kind for p in judgement.problems]
['other-node']
>>> print(judgement.problems[0])
pod p runs on n1 but its device gpu.nvidia.com/n2/gpu-0 is on n2
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from draconf import cel
from draconf.claims import EXTENDED_RESOURCE_CLAIM_ANNOTATION, Claim
from draconf.devices import Device, PublishedDevices
from draconf.pods import EXTENDED_CLAIM, Pod


@dataclass(frozen=True)
class Snapshot:
    """What the judgement reads, as read from the cluster at one moment."""
    pods: list[Pod]
    #: the namespace's claims by name
    claims: Mapping[str, Claim]
    published: PublishedDevices
    #: each DeviceClass the claims name -> its CEL selectors (None: the class does not exist)
    device_classes: Mapping[str, list[str] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """One broken promise: ``kind`` names the branch (module docstring), ``text`` says it."""
    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Judgement:
    evidence: list[str]
    problems: list[Problem]

    @property
    def right(self) -> bool:
        return not self.problems

    def kinds(self) -> list[str]:
        return [p.kind for p in self.problems]

    def __str__(self) -> str:
        return "; ".join(str(p) for p in self.problems) or "allocation is right"


def class_names(claims) -> set[str]:
    """The DeviceClasses the claims' requests name (what ``Snapshot.device_classes`` covers).

    >>> c = Claim({"spec": {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "x"}},
    ...     {"name": "b", "firstAvailable": [{"name": "s", "deviceClassName": "y"}]}]}}})
    >>> sorted(class_names([c]))
    ['x', 'y']
    """
    names = set()
    for claim in claims:
        for request in claim.requests:
            for spec in [request.get("exactly") or {}] + list(request.get("firstAvailable") or []):
                if spec.get("deviceClassName"):
                    names.add(spec["deviceClassName"])
    return names


def requested_count(claim: Claim, request: str) -> int | None:
    """How many devices the request (``req`` or ``req/sub``) asks for; None when the claim
    cannot say (``allocationMode: All``: every matching device).

    >>> c = Claim({"spec": {"devices": {"requests": [{"name": "g", "exactly": {"count": 2}},
    ...     {"name": "a", "exactly": {"allocationMode": "All"}},
    ...     {"name": "f", "firstAvailable": [{"name": "big", "count": 3}, {"name": "one"}]}]}}})
    >>> requested_count(c, "g"), requested_count(c, "a"), requested_count(c, "f/big"), requested_count(c, "f/one")
    (2, None, 3, 1)
    """
    spec = claim.request_spec(request)
    if spec is None or spec.get("allocationMode") == "All":
        return None
    return int(spec.get("count", 1))


def judge(snapshot: Snapshot, *, expected_pods: int, extended_resources: bool = False,
          identity_attribute: str | None = None,
          describe_device: Callable[[Device], str] | None = None,
          parent_attribute: str | None = None) -> Judgement:
    """Every promise of the module docstring, checked over ``snapshot``.

    ``identity_attribute`` (e.g. ``uuid``) names the attribute that identifies one physical
    GPU; two claims holding devices that publish the same value hold the same GPU.
    ``describe_device`` renders a device's published attributes for a selector problem.
    ``parent_attribute`` (e.g. ``parentUUID``) names the attribute by which a partition (a MIG
    device) names the identity of the GPU it is carved from.
    """
    problems: list[Problem] = []
    evidence: list[str] = []
    add = lambda kind, text: problems.append(Problem(kind, text))  # noqa: E731
    owners: dict[str, str] = {}
    identities: dict[str, tuple[str, str]] = {}
    judged: set[str] = set()
    pods = snapshot.pods
    if len(pods) != expected_pods:
        add("pod-count", f"expected {expected_pods} pod(s), found {len(pods)}")
    parts: dict[str, tuple[str, str]] = {}
    for pod in pods:
        if pod.unschedulable_message:
            add("unscheduled", f"pod {pod.name} is not scheduled: {pod.unschedulable_message}")
            continue
        refs = {r["name"]: r for r in pod.spec.get("resourceClaims") or []}
        if extended_resources:
            # The scheduler creates this claim for the containers' extended resources.
            refs[EXTENDED_CLAIM] = {"name": EXTENDED_CLAIM}
        names = pod.claim_names()
        for ref_name, ref in refs.items():
            claim_name = names.get(ref_name)
            if claim_name is None:
                add("claim-unnamed",
                    f"pod {pod.name}: status.resourceClaimStatuses does not name the claim "
                    f"generated for {ref_name!r}" if ref_name != EXTENDED_CLAIM else
                    f"pod {pod.name}: status.extendedResourceClaimStatus names no claim for its "
                    f"extended resources ({extended_limits(pod)})")
                continue
            claim = snapshot.claims.get(claim_name)
            if claim is None:
                add("claim-missing", f"pod {pod.name}: claim {claim_name} does not exist")
                continue
            evidence.append(claim.summary())
            if (ref.get("resourceClaimTemplateName") or ref_name == EXTENDED_CLAIM) \
                    and claim.owner_pod_uid != pod.uid:
                add("not-owned", f"generated claim {claim_name} is not owned by pod {pod.name}")
            if ref_name == EXTENDED_CLAIM and not claim.is_extended_resource_claim:
                add("not-extended", f"claim {claim_name} lacks the annotation "
                                    f"{EXTENDED_RESOURCE_CLAIM_ANNOTATION}: \"true\"")
            if not claim.is_allocated:
                add("not-allocated", f"claim {claim_name} of pod {pod.name} is not allocated")
                continue
            if pod.uid not in claim.reserved_for_uids:
                add("not-reserved", f"claim {claim_name}: reservedFor does not hold pod {pod.name}")
            if claim_name not in judged:
                judged.add(claim_name)  # a shared claim's devices are judged once
                _judge_results(snapshot, claim, owners, identities, identity_attribute,
                               describe_device, add)
                if identity_attribute and parent_attribute:
                    _judge_partitions(snapshot, claim, identities, parts, identity_attribute,
                                      parent_attribute, add)
            for result in claim.results:
                device = snapshot.published.lookup(result.driver, result.pool, result.device)
                if device and device.node and pod.node and device.node != pod.node:
                    add("other-node", f"pod {pod.name} runs on {pod.node} but its device "
                                      f"{result.key} is on {device.node}")
    return Judgement(evidence, problems)


def _judge_results(snapshot: Snapshot, claim: Claim, owners: dict[str, str],
                   identities: dict[str, tuple[str, str]], identity_attribute: str | None,
                   describe_device, add) -> None:
    results = claim.results
    for request in claim.requests:
        name = request.get("name", "")
        if request.get("firstAvailable"):
            chosen = sorted({r.request for r in results if r.request.startswith(name + "/")})
            if len(chosen) != 1:
                add("wrong-count", f"claim {claim.name}: request {name} was allocated from "
                                   f"{len(chosen)} of its alternatives ({', '.join(chosen) or 'none'}), "
                                   "exactly one expected")
                continue
            name = chosen[0]
        got = sum(1 for r in results if r.request == name)
        want = requested_count(claim, name)
        if (want is None and not got) or (want is not None and got != want):
            add("wrong-count", f"claim {claim.name}: {got} device(s) allocated for request {name}, "
                               f"{'all matching' if want is None else want} requested")
    if len({r.key for r in results}) != len(results):
        add("device-twice", f"claim {claim.name}: the same device allocated twice")
    for result in results:
        if not result.admin_access:
            # adminAccess results may share a device with other claims (KEP-5018).
            other = owners.setdefault(result.key, claim.name)
            if other != claim.name:
                add("shared-device", f"device {result.key} is allocated to both {other} and {claim.name}")
        device = snapshot.published.lookup(result.driver, result.pool, result.device)
        if device is None:
            add("unpublished", f"claim {claim.name}: device {result.key} is not in any published "
                               "ResourceSlice")
            continue
        identity = device.attribute(identity_attribute) if identity_attribute else None
        if identity and not result.admin_access:
            first = identities.setdefault(identity, (result.key, claim.name))
            if first[0] != result.key:
                add("shared-gpu", f"GPU {identity_attribute}={identity} is allocated twice, as "
                                  f"{first[0]} to {first[1]} and as {result.key} to {claim.name}: "
                                  "the driver publishes one GPU as two devices")
        class_name, request_cel = claim.request_selectors(result.request)
        class_cel = snapshot.device_classes.get(class_name) if class_name else []
        if class_cel is None:
            add("missing-class", f"claim {claim.name}: its DeviceClass {class_name} does not exist")
        elif not (verdict := cel.evaluate_all(class_cel, device)).matched:
            add("class-selectors", f"claim {claim.name}: device {result.key} fails the DeviceClass "
                                   f"{class_name} selectors ({verdict})")
        if not (verdict := cel.evaluate_all(request_cel, device)).matched:
            published = f"; it publishes {describe_device(device)}" if describe_device else ""
            failing = next((e for e in request_cel if not cel.evaluate(e, device).matched), "")
            add("request-selectors", f"claim {claim.name}: device {result.key} does not satisfy "
                                     f"the request's selector {failing!r} ({verdict}){published}")


def _judge_partitions(snapshot: Snapshot, claim: Claim, identities: dict[str, tuple[str, str]],
                      parts: dict[str, tuple[str, str]], identity_attribute: str,
                      parent_attribute: str, add) -> None:
    """``partition-overlap``: a device naming GPU P as its parent, and P itself (by identity),
    held by two claims.  ``identities`` holds the whole GPUs judged so far, ``parts`` the first
    partition of each parent."""
    for result in claim.results:
        device = snapshot.published.lookup(result.driver, result.pool, result.device)
        if device is None or result.admin_access:
            continue
        parent = device.attribute(parent_attribute)
        if parent:
            parts.setdefault(parent, (result.key, claim.name))
            whole = identities.get(parent)
            if whole and whole[1] != claim.name:
                add("partition-overlap", f"{result.key} (a partition of GPU {parent}) is allocated to "
                                         f"{claim.name} while {whole[1]} holds that whole GPU as {whole[0]}")
        identity = device.attribute(identity_attribute)
        part = parts.get(identity) if identity else None
        if part and part[1] != claim.name:
            add("partition-overlap", f"{part[0]} (a partition of GPU {identity}) is allocated to "
                                     f"{part[1]} while {claim.name} holds that whole GPU as {result.key}")


def extended_limits(pod: Pod) -> str:
    """The extended resources the pod's containers ask for, e.g. ``workload: nvidia.com/gpu=1``.

    >>> extended_limits(Pod({"spec": {"containers": [{"name": "w", "resources": {"limits": {
    ...     "nvidia.com/gpu": 1, "cpu": "1"}}}]}}))
    'w: nvidia.com/gpu=1'
    """
    asked = [f"{c['name']}: {k}={v}" for c in pod.spec.get("containers") or []
             for k, v in ((c.get("resources") or {}).get("limits") or {}).items() if "/" in k]
    return ", ".join(asked) or "no container asks for one"
