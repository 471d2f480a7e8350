"""What each feature workload of ``suites/test_features.py`` promises about its allocation,
beyond the walkthrough's three checks: one judgement per feature, over the deployed workload."""

from __future__ import annotations

import json

from draconf import taints
from draconf.devices import class_selectors
from draconf.reporting import note
from draconf.scenarios.admin_access import HOLDER_CLAIM, MONITOR_CLAIM
from draconf.scenarios.device_taints import TOLERATING_CLAIM
from draconf.scenarios.extended_resource import extended_claim_problems
from draconf.scenarios.prioritized_list import satisfiable, subrequests

#: The feature workloads ``TestFeatureWorkload`` runs, in order (its ``started`` fixture's params).
FEATURES = ["extended-resource", "prioritized-list", "admin-access", "device-taints"]


def feature_allocation(request, deployed, published_devices, cluster, profile) -> None:
    """The feature's own promise about the allocation (after the walkthrough's checks passed)."""
    claims = deployed.claims()
    if deployed.workload.name == "extended-resource":
        (pod,) = deployed.pods()
        claim = claims.get(pod.extended_claim_name or "")
        assert claim is not None, (f"pod {pod.name} names no extended-resource claim: "
                                   f"{json.dumps(pod.status.get('extendedResourceClaimStatus'))}")
        problems = extended_claim_problems(pod, claim, profile.capabilities.extended_resource,
                                           profile.device_class)
        assert not problems, "the extended-resource claim is wrong: " + "; ".join(problems)
        note(request.node, f"pod {pod.name} asked for {profile.capabilities.extended_resource}: 1 and got "
                      f"{claim.summary()} (created by the scheduler)")
    elif deployed.workload.name == "prioritized-list":
        (claim,) = [c for c in claims.values() if c.is_generated]
        subs = subrequests(deployed.documents)
        class_cel = class_selectors(cluster, profile.device_class) or []
        # The first alternative that some published device satisfies is the one to get.
        want = next((s["name"] for s in subs if satisfiable(s, published_devices, class_cel)), None)
        got = sorted({r.request for r in claim.results})
        skipped = [s["name"] for s in subs[:[s["name"] for s in subs].index(want)]] if want else []
        assert got == [f"gpu/{want}"], (
            f"claim {claim.name} was allocated for {got}, expected gpu/{want}: no published device "
            f"satisfies {skipped or 'no earlier alternative'}, so the scheduler must take the first "
            "alternative it can satisfy")
        note(request.node, f"firstAvailable fell back to gpu/{want}: {claim.summary()}")
    elif deployed.workload.name == "device-taints":
        claim = claims[TOLERATING_CLAIM]
        slices = taints.read_slices(cluster, profile.driver)
        tainted = {d.key: d for d in taints.tainted_devices(slices) if d.blocking}
        got = [r.key for r in claim.results]
        assert got and all(key in tainted for key in got), (
            f"claim {TOLERATING_CLAIM} selects a tainted device and tolerates its taints, but was "
            f"allocated {got}; tainted devices: {[d.summary() for d in tainted.values()]}")
        problems = taints.untolerated(claim.raw, slices)
        assert not problems, f"claim {TOLERATING_CLAIM} holds devices whose taints it does not tolerate: {problems}"
        tols = [t for r in claim.requests for t in (r.get("exactly") or {}).get("tolerations") or []]
        note(request.node, f"{TOLERATING_CLAIM} tolerates {json.dumps(tols)} and was allocated "
                           f"{', '.join(tainted[k].summary() for k in got)} (the taint as its ResourceSlice "
                           "publishes it)")
    else:
        holder, monitor = claims[HOLDER_CLAIM], claims[MONITOR_CLAIM]
        shared = {r.key for r in holder.results} & {r.key for r in monitor.results}
        assert shared, (f"the admin-access claim {MONITOR_CLAIM} got {[r.key for r in monitor.results]}, "
                        f"not the device {HOLDER_CLAIM} holds ({[r.key for r in holder.results]})")
        not_admin = [str(r) for r in monitor.results if not r.admin_access]
        assert not not_admin, f"allocation results of {MONITOR_CLAIM} lack adminAccess: true: {not_admin}"
        note(request.node, f"{MONITOR_CLAIM} (adminAccess) shares {', '.join(sorted(shared))} with "
                      f"{HOLDER_CLAIM}, which still holds it")
