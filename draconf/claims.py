"""ResourceClaims as the suite asserts on them.

>>> c = Claim.from_dict({"metadata": {"name": "gpu-pod-gpu-x7k2p", "namespace": "ns", "uid": "u1",
...   "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
...   "ownerReferences": [{"kind": "Pod", "name": "gpu-pod", "uid": "p1", "controller": True}]},
...   "status": {"allocation": {"devices": {"results": [
...      {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}},
...   "reservedFor": [{"resource": "pods", "name": "gpu-pod", "uid": "p1"}]}})
>>> c.is_allocated, c.is_generated, c.owner_pod, c.owner_pod_uid, c.reserved_for_uids, c.reserved_for_names
(True, True, 'gpu-pod', 'p1', {'p1'}, ['gpu-pod'])
>>> [str(r) for r in c.results], c.device_keys, c.admin_device_keys, c.key
(['gpu: gpu.nvidia.com/n1/gpu-0'], ['gpu.nvidia.com/n1/gpu-0'], [], 'ns/gpu-pod-gpu-x7k2p')
"""

from __future__ import annotations

import builtins
from typing import Callable, Iterable
from dataclasses import dataclass, field

from draconf.kube import raw, raw_items, seconds_since

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: On the claim the scheduler creates for a pod's extended resources (DRAExtendedResource).
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@dataclass(frozen=True)
class AllocationResult:
    request: str
    driver: str
    pool: str
    device: str
    #: allocated with adminAccess: the device may be in other claims too (KEP-5018)
    admin_access: bool = False

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"

    def __str__(self) -> str:
        return f"{self.request}: {self.key}"


@dataclass
class DeviceRequest:
    """One device request of a claim or template, or one ``firstAvailable`` alternative of it
    (named ``request/alternative``), as the allocator reads it."""
    name: str
    device_class: str
    selectors: list[str] = field(default_factory=list)
    mode: str = "ExactCount"
    count: int = 1


def device_requests(spec: dict) -> list[list[DeviceRequest]]:
    """Each request of a claim spec (``spec.devices.requests``) as its alternatives: one for
    ``exactly`` (or the v1beta1 shape), one per entry of ``firstAvailable``.

    >>> [[(r.name, r.device_class, r.count) for r in alts] for alts in device_requests({"devices": {"requests": [
    ...     {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
    ...     {"name": "f", "firstAvailable": [{"name": "big", "deviceClassName": "a"},
    ...                                      {"name": "small", "deviceClassName": "b"}]}]}})]
    [[('gpu', 'gpu.nvidia.com', 2)], [('f/big', 'a', 1), ('f/small', 'b', 1)]]
    """
    out = []
    for req in ((spec or {}).get("devices") or {}).get("requests") or []:
        alternatives = []
        if req.get("exactly") is not None or req.get("deviceClassName"):
            body = req.get("exactly") or req  # v1 / v1beta1 shapes
            alternatives.append(_device_request(req.get("name", ""), body))
        for sub in req.get("firstAvailable") or []:
            alternatives.append(_device_request(f"{req.get('name', '')}/{sub.get('name', '')}", sub))
        if alternatives:
            out.append(alternatives)
    return out


def _device_request(name: str, body: dict) -> DeviceRequest:
    selectors = [s["cel"]["expression"] for s in body.get("selectors") or [] if (s.get("cel") or {}).get("expression")]
    return DeviceRequest(name=name, device_class=body.get("deviceClassName", ""), selectors=selectors,
                         mode=body.get("allocationMode") or "ExactCount", count=body.get("count") or 1)


@dataclass
class Claim:
    raw: dict

    @classmethod
    def from_dict(cls, raw: dict) -> "Claim":
        return cls(raw)

    @classmethod
    def read(cls, api, namespace: str, name: str) -> "Claim":
        return cls(raw(api.resource.read_namespaced_resource_claim, name, namespace))

    @classmethod
    def list(cls, api, namespace: str) -> builtins.list["Claim"]:
        return [cls(i) for i in raw_items(api.resource.list_namespaced_resource_claim, namespace)]

    meta = property(lambda self: self.raw.get("metadata", {}))
    name = property(lambda self: self.meta.get("name"))
    namespace = property(lambda self: self.meta.get("namespace"))
    uid = property(lambda self: self.meta.get("uid"))
    status = property(lambda self: self.raw.get("status") or {})

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def requests(self) -> builtins.list[dict]:
        return (self.raw.get("spec") or {}).get("devices", {}).get("requests", [])

    @property
    def device_requests(self) -> builtins.list[builtins.list[DeviceRequest]]:
        """Each request as its alternatives (see :func:`device_requests`)."""
        return device_requests(self.raw.get("spec") or {})

    @property
    def device_classes(self) -> builtins.list[str]:
        """The DeviceClasses its requests name, sorted.

        >>> Claim({"spec": {"devices": {"requests": [{"name": "f", "firstAvailable": [
        ...     {"name": "a", "deviceClassName": "mig.nvidia.com"}, {"name": "b", "deviceClassName": "gpu.nvidia.com"}]}]}}}
        ...       ).device_classes
        ['gpu.nvidia.com', 'mig.nvidia.com']
        """
        return sorted({alt.device_class for req in self.device_requests for alt in req if alt.device_class})

    def request_spec(self, request: str) -> dict | None:
        """The spec an allocation result's request names: ``req`` (its ``exactly``) or
        ``req/sub`` (that ``firstAvailable`` alternative); None when the claim has no such request.

        >>> c = Claim({"spec": {"devices": {"requests": [{"name": "f", "firstAvailable": [
        ...     {"name": "big", "count": 2}]}]}}})
        >>> c.request_spec("f/big"), c.request_spec("f/small"), c.request_spec("g")
        ({'name': 'big', 'count': 2}, {}, None)
        """
        name, _, sub = request.partition("/")
        for r in self.requests:
            if r.get("name") == name:
                if sub:
                    return next((a for a in r.get("firstAvailable") or [] if a.get("name") == sub), {})
                return r.get("exactly") or {}
        return None

    def request_selectors(self, request: str) -> tuple[str | None, builtins.list[str]]:
        """The DeviceClass and CEL selectors of the request an allocation result names
        (``req`` of ``exactly``, or ``req/sub`` of a ``firstAvailable`` alternative).

        >>> c = Claim({"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        ...     "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": "true"}}]}}]}}})
        >>> c.request_selectors("gpu"), c.request_selectors("other")
        (('gpu.nvidia.com', ['true']), (None, []))
        """
        spec = self.request_spec(request)
        if spec is None:
            return None, []
        return spec.get("deviceClassName"), [s["cel"]["expression"] for s in spec.get("selectors") or []
                                             if (s.get("cel") or {}).get("expression")]

    @property
    def is_allocated(self) -> bool:
        return bool(self.status.get("allocation"))

    @property
    def is_deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def deleting_for(self) -> float | None:
        """Seconds since its deletion was asked (``metadata.deletionTimestamp``); else None."""
        return seconds_since(self.meta.get("deletionTimestamp"))

    @property
    def is_generated(self) -> bool:
        """Made for one pod and deleted with it: by the resourceclaim controller from a
        template, or by the scheduler for the pod's extended resources."""
        annotations = self.meta.get("annotations") or {}
        return POD_CLAIM_ANNOTATION in annotations or self.is_extended_resource_claim

    @property
    def is_extended_resource_claim(self) -> bool:
        """Created by the scheduler for a pod's extended resources (``nvidia.com/gpu: 1``).

        >>> Claim({"metadata": {"annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}}}).is_generated
        True
        """
        return (self.meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"

    @property
    def owner_pod_uid(self) -> str | None:
        return (self._owner_pod or {}).get("uid")

    @property
    def owner_pod(self) -> str | None:
        """The name of the Pod that controls the claim (a generated claim's), else None."""
        return (self._owner_pod or {}).get("name")

    @property
    def _owner_pod(self) -> dict | None:
        return next((ref for ref in self.meta.get("ownerReferences") or []
                     if ref.get("kind") == "Pod" and ref.get("controller")), None)

    @property
    def results(self) -> builtins.list[AllocationResult]:
        alloc = self.status.get("allocation") or {}
        return [AllocationResult(r.get("request", ""), r["driver"], r["pool"], r["device"],
                                 bool(r.get("adminAccess")))
                for r in (alloc.get("devices") or {}).get("results") or []]

    @property
    def request_devices(self) -> dict[str, builtins.list[str]]:
        """Allocated devices (driver/pool/device) by the request their result names (``req`` or
        ``req/sub``): a container that lists one request of the claim gets only those.

        >>> Claim({"status": {"allocation": {"devices": {"results": [
        ...     {"request": "ts", "driver": "d", "pool": "n", "device": "gpu-0"},
        ...     {"request": "mps", "driver": "d", "pool": "n", "device": "gpu-1"}]}}}}).request_devices
        {'ts': ['d/n/gpu-0'], 'mps': ['d/n/gpu-1']}
        """
        out: dict[str, builtins.list[str]] = {}
        for r in self.results:
            out.setdefault(r.request, []).append(r.key)
        return out

    @property
    def opaque_config_drivers(self) -> builtins.list[str]:
        """The drivers the claim gives opaque configuration to (``spec.devices.config[].opaque``).

        >>> Claim({"spec": {"devices": {"config": [{"opaque": {"driver": "gpu.nvidia.com",
        ...     "parameters": {}}}]}}}).opaque_config_drivers
        ['gpu.nvidia.com']
        """
        configs = ((self.raw.get("spec") or {}).get("devices") or {}).get("config") or []
        return sorted({(c.get("opaque") or {}).get("driver") or "" for c in configs if c.get("opaque")})

    @property
    def device_keys(self) -> builtins.list[str]:
        """The allocated devices as ``driver/pool/device``."""
        return [r.key for r in self.results]

    @property
    def admin_device_keys(self) -> builtins.list[str]:
        """The allocated devices given with adminAccess (shared with other claims)."""
        return [r.key for r in self.results if r.admin_access]

    @property
    def reserved_for_uids(self) -> set[str]:
        return {r.get("uid") for r in self.status.get("reservedFor") or []}

    @property
    def reserved_for_names(self) -> builtins.list[str]:
        """The consumers in ``status.reservedFor`` by name (pods), in order."""
        return [r.get("name", "") for r in self.status.get("reservedFor") or []]

    @property
    def finalizers(self) -> builtins.list[str]:
        return list(self.meta.get("finalizers") or [])

    def summary(self) -> str:
        """One line for messages, e.g. ``claim ns/x: allocated gpu: drv/pool/dev, reserved for 1 pod``."""
        if not self.is_allocated:
            state = "not allocated"
        else:
            state = "allocated " + ", ".join(str(r) for r in self.results)
        reserved = len(self.reserved_for_uids)
        deleting = f", being deleted (finalizers {self.finalizers})" if self.is_deleting and self.finalizers \
            else ", being deleted" if self.is_deleting else ""
        return f"claim {self.namespace}/{self.name}: {state}, reserved for {reserved} pod(s){deleting}"


def held_devices(claims: Iterable[Claim], where: Callable[[Claim], bool], keys: set[str] | None = None) -> dict[str, str]:
    """Device key (``driver/pool/device``) -> ``namespace/claim`` of each device allocated to one
    of ``claims`` for which ``where(claim)`` holds; only ``keys``, when given.

    >>> held = Claim({"metadata": {"namespace": "team-a", "name": "c"}, "status": {"allocation": {"devices": {
    ...     "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}}}})
    >>> held_devices([held], lambda c: c.namespace != "draconf-r1-x")
    {'gpu.nvidia.com/n1/gpu-0': 'team-a/c'}
    >>> held_devices([held], lambda c: True, keys={"gpu.nvidia.com/n1/gpu-1"})
    {}
    """
    return {key: claim.key for claim in claims if where(claim)
            for key in claim.device_keys if keys is None or key in keys}


def device_holders(api) -> dict[str, list[str]]:
    """Every device allocated in the cluster, by key (``driver/pool/device``), with the claims
    (``namespace/name``) that hold it, from one list of every claim; ``set(device_holders(api))``
    is the allocated devices."""
    holders: dict[str, list[str]] = {}
    for obj in raw_items(api.resource.list_resource_claim_for_all_namespaces):
        claim = Claim(obj)
        for key in claim.device_keys:
            holders.setdefault(key, []).append(claim.key)
    return holders
