"""Rules for a pod the scheduler cannot place: kept off the GPU nodes (taints, node selectors,
affinity), or no node with enough matching, free devices."""

from __future__ import annotations

from typing import cast

from draconf.diagnosis.analysis import (analyse, candidate_nodes, class_devices, pending_pods,
                                       pending_requests, per_node, selectors_text)
from draconf.diagnosis.facts import Facts
from draconf.diagnosis.scheduling import node_exclusions


def rule_scheduler_without_dra(facts: Facts):
    """A pod bound to a node while a claim it uses is unallocated, or not even generated: a
    scheduler running DRA allocates (and reserves) every claim before it binds, so whatever
    bound this pod did not."""
    for pod in facts.pods:
        if not pod.node or pod.is_deleting or pod.phase != "Pending":
            continue
        unallocated = [c.name for c in facts.pod_claims(pod) if not c.is_allocated]
        unallocated += [f"{ref} (never generated)" for ref in pod.template_claims_not_generated]
        if unallocated:
            return ("scheduler-without-dra",
                    f"Pod {pod.name} was bound to {pod.node} by {pod.scheduler_name} with claim(s) "
                    f"{', '.join(unallocated)} unallocated, so no node can prepare them: that scheduler "
                    "does not run DRA. Enable the DynamicResources plugin in its "
                    "KubeSchedulerConfiguration (or use a scheduler that has it).")
    return None


def rule_partition_overlap(facts: Facts):
    """A GPU and a MIG device of it held by two claims: the shared counters (KEP-4815) were not
    kept (before allocation-invalid, which would also list it, as one broken promise of many)."""
    if not facts.partition_overlaps:
        return None
    return ("partition-overlap",
            f"{'; '.join(facts.partition_overlaps[:2])}: a GPU and a MIG device carved from it are "
            "held by two claims. The driver's MIG devices must consume its counter set "
            "(consumesCounters in their ResourceSlice), and kube-scheduler must honour it "
            "(DRAPartitionableDevices).")


def rule_allocation_invalid(facts: Facts):
    """The namespace's scheduled pods hold allocations that break DRA's promises (the same
    judgement as the allocation check, :mod:`draconf.allocation`, over the gathered objects)."""
    if not facts.allocation_problems:
        return None
    shown = "; ".join(facts.allocation_problems[:4])
    more = f" (and {len(facts.allocation_problems) - 4} more)" if len(facts.allocation_problems) > 4 else ""
    return ("allocation-invalid",
            f"Allocations break DRA's promises: {shown}{more}. The scheduler allocates right, so look "
            "for what else writes claims' status (an external allocator or controller) or publishes "
            "devices (a driver publishing one GPU twice, a slice naming the wrong node).")


def rule_node_excluded(facts: Facts):
    for pod in pending_pods(facts):
        nodes, _ = candidate_nodes(facts, pod)
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


def rule_allocation(facts: Facts):
    pending = [p for p in pending_pods(facts)
               if "cannot allocate" in (p.unschedulable_message or "")
               or any(not c.is_allocated for c in facts.pod_claims(p))]
    if not pending:
        return None
    free = lambda d: d.key not in facts.allocated  # noqa: E731
    for label, alternatives in pending_requests(facts, pods=pending):
        verdicts = []
        for req in alternatives:
            analysis = analyse(facts, label, req)
            if not analysis.exact:
                verdicts.append(("unknown", req, analysis))
                continue
            by_node = per_node(analysis.matching())
            if req.mode == "All":
                enough = {n: ds for n, ds in by_node.items() if ds}
                free_ok = any(all(free(d) for d in ds) for ds in enough.values())
            else:
                needed = cast(int, analysis.needed)  # a count: mode All is the branch above
                enough = {n: ds for n, ds in by_node.items() if len(ds) >= needed}
                free_ok = any(sum(free(d) for d in ds) >= needed for ds in enough.values())
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
                    f"{req.device_class} on one node matching {selectors_text(req)}, but "
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
        if not any("cannot allocate" in (p.unschedulable_message or "") for p in pending):
            continue
        req = verdicts[0][1]
        of_class, _ = class_devices(facts, req.device_class)
        if of_class and all(d.key in facts.allocated for d in of_class):
            return ("capacity-exhausted",
                    f"{label}: all {len(of_class)} device(s) of class {req.device_class} are "
                    "already allocated: free GPUs by deleting finished pods and claims, or add capacity.")
        return ("selector-unmatched",
                f"{label} request {req.name} cannot be allocated although {req.device_class} has free "
                f"devices, so its selectors ({selectors_text(req)}) match none of them: compare the "
                "selectors with the published attributes.")
    return None
