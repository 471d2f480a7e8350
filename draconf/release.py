"""Is a workload's release done, and if not, is it stuck: the cleanup check's judgement, pure.

After the suite deletes a workload's consumers, the cluster must finish the pods (the node
unprepares their claims), then delete the generated claims and release the named ones (the
resourceclaim controller).  :class:`ReleaseJudge` reads that from what one poll observed (the
pods still there, the claims) and the time, and says which of three things is true: released;
still under way; or stuck, and where.  The cleanup check (``DeployedWorkload.check_cleanup``)
polls it; the unit tests replay recorded objects through it.

>>> judge = ReleaseJudge(stall_after=15)
>>> judge.released([], [Claim({"metadata": {"name": "c"}, "status": {}})])
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from draconf.claims import Claim
from draconf.pods import Pod

#: Seconds past a deleted pod's grace period (or a deleted claim held by a driver's finalizer)
#: before the node is judged never to finish it.  A busy node is slow, not broken: a sweep of
#: 800 GPUs, 80 in flight on a 2-core machine, saw healthy KWOK nodes finish pods 10-11 s past
#: their grace period, and 10 s failed them as refusing to unprepare.  A kubelet that cannot
#: unprepare retries forever: 20 s, twice the slowest healthy finish seen, names it some 40 s
#: into the cleanup check (tests/matrix: claims-not-released, bound 60 s).
STUCK_CLAIM_AFTER = 20.0

#: Where a stuck release is: the node (a pod it never finishes, a claim a driver's finalizer
#: keeps), or the resourceclaim controller (kube-controller-manager) that never acted.
NODE, CONTROLLER = "node", "controller"


@dataclass(frozen=True)
class Stuck:
    """A release that stopped: ``where`` (:data:`NODE` or :data:`CONTROLLER`) and what was seen."""
    where: str
    observed: str


@dataclass
class ReleaseJudge:
    """Judges one release poll after poll; it remembers since when a state has stood.

    ``stall_after``: seconds with every consumer gone and no claim deleted or released before
    the controller is judged not to act (``draconf.startup.stall_after`` of the profile)."""
    stall_after: float
    stuck_after: float = STUCK_CLAIM_AFTER
    _since: dict[str, float] = field(default_factory=dict, repr=False)

    @staticmethod
    def released(pods: Iterable[Pod], claims: Iterable[Claim]) -> bool:
        """No consumer left, no generated claim left, no claim allocated or reserved."""
        if list(pods):
            return False
        return not any(c.is_generated or c.is_allocated or c.reserved_for_uids for c in claims)

    def stuck(self, pods: list[Pod], claims: list[Claim], now: float) -> Stuck | None:
        """Where the release stopped, or None while it may still be under way (``now``: a
        monotonic clock; pods' grace periods are read from their deletion timestamps).

        - a deleted pod ``stuck_after`` seconds past its grace period: its node never finished
          it (the kubelet cannot unprepare its claims), so its claims stay reserved;
        - every consumer gone and no claim deleted or released for ``stall_after`` seconds:
          the resourceclaim controller did not act;
        - a claim being deleted, reserved by nobody, held ``stuck_after`` seconds by a finalizer
          other than Kubernetes' own: the node (its driver) never let it go.
        """
        for pod in pods:
            overdue = pod.seconds_past_grace_period
            if overdue is not None and overdue >= self.stuck_after:
                held = [c.name for c in claims if pod.uid in c.reserved_for_uids]
                return Stuck(NODE, f"pod {pod.name} was deleted and its grace period ended {overdue:.0f}s ago, "
                                   f"but its node has not finished it, so its claims {held} stay reserved "
                                   "(the node never finished unpreparing them)")
        if pods:
            return None
        untouched = sorted(c.name for c in claims if not c.is_deleting and (
            c.is_generated or c.is_allocated or c.reserved_for_uids))
        if not untouched:
            self._since.pop("consumers-gone", None)
        elif self._standing("consumers-gone", now) >= self.stall_after:
            return Stuck(CONTROLLER, f"claims {', '.join(untouched)} were neither deleted nor released "
                                     f"{self.stall_after:.0f}s after their last consumer was gone: the "
                                     "resourceclaim controller did not act")
        for claim in claims:
            foreign = [f for f in claim.finalizers if not f.startswith("resource.kubernetes.io/")]
            if claim.is_deleting and foreign and not claim.reserved_for_uids:
                if self._standing(claim.name, now) >= self.stuck_after:
                    return Stuck(NODE, f"claim {claim.name} is being deleted but finalizer "
                                       f"{', '.join(foreign)} still holds it {self.stuck_after:.0f}s after its "
                                       "last consumer went away (the node never finished unpreparing it)")
        return None

    def _standing(self, key: str, now: float) -> float:
        return now - self._since.setdefault(key, now)
