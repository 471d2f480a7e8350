"""Is a claim short of devices right now?  The cluster's own state, confirming a scheduler's
"cannot allocate all claims" at once instead of waiting for it to stand (issue 13).

The scheduler says *that* it cannot allocate, not *why*; a workload used to wait
``VERDICT_AFTER`` seconds for the message to stand, in case the state behind it was passing.
:func:`shortage` reads that state instead: for each request of an unallocated claim, how many
published devices pass the DeviceClass's and the request's selectors (the same CEL the
scheduler evaluates, :mod:`draconf.cel`), and how many of those other claims hold.  Fewer free
than the request wants is the scheduler's message, confirmed.

It confirms only what cannot change without someone acting: a matching device held by a claim
that is being deleted, or reserved for no pod, or for a pod that is being deleted, is about to
be free (:attr:`Availability.releasing`), and then nothing is confirmed: the caller waits, and
should not let the scheduler's message count as standing while a release is under way.  Whatever else stops an allocation (node affinity, device taints, shared
counters, constraints between requests) only makes fewer devices usable, so a request short
without them is short with them; a request that is not short is not confirmed here at all.

>>> from draconf.devices import Device
>>> gpus = [Device("gpu.nvidia.com", "n1", f"gpu-{i}", "n1", {"gpu.nvidia.com/type": "gpu"}) for i in range(2)]
>>> want = Claim({"metadata": {"name": "want"}, "spec": {"devices": {"requests": [
...     {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
>>> holder = Claim({"metadata": {"name": "h", "namespace": "a"}, "status": {
...     "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
...     "pool": "n1", "device": f"gpu-{i}"} for i in range(2)]}}, "reservedFor": [{"name": "p", "uid": "u"}]}})
>>> print(shortage(want, gpus, {"gpu.nvidia.com": []}, [holder], consumers_leaving=lambda c: False))
claim want, request gpu: 1 device(s) wanted; 2 published device(s) pass its selectors, 0 free
>>> shortage(want, gpus, {"gpu.nvidia.com": []}, [holder], consumers_leaving=lambda c: True).releasing
['a/h']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from draconf import cel
from draconf.allocation import requested_count
from draconf.claims import Claim
from draconf.devices import Device


@dataclass(frozen=True)
class Shortage:
    """One request with fewer free devices passing its selectors than it wants."""
    claim: str
    request: str
    wanted: int
    matching: int
    free: int

    def __str__(self) -> str:
        return (f"claim {self.claim}, request {self.request}: {self.wanted} device(s) wanted; "
                f"{self.matching} published device(s) pass its selectors, {self.free} free")


@dataclass
class Availability:
    """What :func:`shortage` read: the short requests; the holders (``namespace/name``) about to
    release a matching device; whether some request could not be counted (``allocationMode:
    All``, ``firstAvailable``, a missing class)."""
    shortages: list[Shortage] = field(default_factory=list)
    releasing: list[str] = field(default_factory=list)
    uncounted: bool = False

    @property
    def confirmed(self) -> bool:
        """The scheduler's "cannot allocate" holds on this state and nothing is about to change it."""
        return bool(self.shortages) and not self.releasing and not self.uncounted

    def __str__(self) -> str:
        return "; ".join(str(s) for s in self.shortages)


def shortage(claim: Claim, published: Iterable[Device], class_cel: Mapping[str, list[str] | None],
             claims: Iterable[Claim], consumers_leaving: Callable[[Claim], bool],
             into: Availability | None = None) -> Availability:
    """The requests of ``claim`` that are short of free devices, read from ``published`` (every
    driver's devices), the live DeviceClasses' selectors and every claim in the cluster;
    ``consumers_leaving(holder)`` says whether a pod ``holder`` is reserved for is being
    deleted (asked only of the holders of matching devices).

    ``into``: add to the reading of another claim (a pod's claims, read together)."""
    found = into if into is not None else Availability()
    published = list(published)
    held: dict[str, Claim] = {}
    for other in claims:
        if other.uid and other.uid == claim.uid:
            continue
        for result in other.results:
            if not result.admin_access:
                held[result.key] = other
    for request in claim.requests:
        name = request.get("name", "")
        wanted = requested_count(claim, name) if request.get("exactly") else None
        class_name, selectors = claim.request_selectors(name)
        class_selectors = class_cel.get(class_name or "")
        if wanted is None or class_selectors is None:  # a missing class: the scheduler's "does not exist"
            found.uncounted = True
            continue
        matching = [d for d in published if cel.evaluate_all([*class_selectors, *selectors], d).matched]
        holders = {id(held[d.key]): held[d.key] for d in matching if d.key in held}.values()
        # A holder keeps its devices until someone acts: not deleted, reserved for pods that stay.
        found.releasing += [f"{h.namespace}/{h.name}" for h in holders
                            if h.is_deleting or not h.reserved_for_uids or consumers_leaving(h)]
        free = len(matching) - sum(1 for d in matching if d.key in held)
        if free < wanted:
            found.shortages.append(Shortage(claim.name, name, wanted, len(matching), free))
    return found
