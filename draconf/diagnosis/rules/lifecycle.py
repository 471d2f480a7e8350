"""Rules for what outlives or exceeds a workload: claims not released after their pods, quotas
not enforced, and a ClusterPolicy's device plugin competing with DRA for the same GPUs."""

from __future__ import annotations

from draconf.diagnosis.analysis import candidate_nodes
from draconf.diagnosis.facts import Facts

#: Seconds after which a claim still held past its consumers' end is overdue, not in flight
#: (the resourceclaim controller and the kubelet release a claim within seconds).
RELEASE_GRACE = 30


def rule_cleanup(facts: Facts):
    """Claims that outlive their consumers.  Right after a pod ends its claim is legitimately
    still held for a moment; the cluster shows it is overdue when the claim has been deleting,
    or its owner pod done, for RELEASE_GRACE seconds.  Without such a timestamp (a named claim
    whose consumer is gone) only the failing check knows it waited for the release: that is
    the one thing this rule takes from it (``facts.failure.waited_for_release``)."""
    # A pod still terminating keeps its claims legitimately: that is the pod's problem (timeout),
    # unless its containers have all stopped: then only its node's cleanup, unpreparing the
    # claims, is left, and a node that never finishes it does not release them.
    live = {p.uid for p in facts.pods if not p.is_finished and not (p.is_deleting and p.containers_stopped)} | \
        {p.name for p in facts.pods if not p.is_finished and not (p.is_deleting and p.containers_stopped)}
    leftover = []
    for c in facts.claims:
        consumers = [u for u in c.reserved_for_uids if u in live] + \
            [n for n in c.reserved_for_names if n in live]
        orphan = c.is_generated and (c.owner_pod_uid not in live and c.owner_pod not in live)
        stuck = c.is_deleting and c.finalizers
        held = (c.is_allocated or c.reserved_for_names) and not consumers
        owner = next((p for p in facts.pods if p.uid == c.owner_pod_uid or p.name == c.owner_pod), None)
        overdue = facts.failure.waited_for_release or (c.deleting_for or 0) >= RELEASE_GRACE or (
            owner is not None and (owner.finished_for or 0) >= RELEASE_GRACE)
        if (orphan or stuck or held) and not consumers and overdue:
            leftover.append(c)
    if not leftover:
        return None
    c = leftover[0]
    what = []
    owner = next((p for p in facts.pods if p.uid == c.owner_pod_uid or p.name == c.owner_pod), None)
    if c.is_generated and owner is not None and owner.is_deleting:
        what.append(f"generated for pod {owner.name}, which was deleted and runs no container, "
                    "but which its node never finished (the kubelet could not unprepare the claim)")
    elif c.is_generated:
        what.append(f"generated for pod {c.owner_pod or '?'}, which is gone or finished")
    if c.is_allocated:
        what.append(f"still allocated ({', '.join(c.device_keys)})")
    if c.reserved_for_names:
        what.append(f"still reserved for {c.reserved_for_names}")
    if c.is_deleting:
        what.append(f"being deleted but held by finalizer(s) {c.finalizers}")
    more = f" (and {len(leftover) - 1} more)" if len(leftover) > 1 else ""
    return ("claim-not-released",
            f"Claim {c.name}{more} outlives its consumers: {'; '.join(what)}: check the "
            "kube-controller-manager's resourceclaim controller and the driver's unprepare on the "
            "node (the finalizers name who holds it).")


def rule_quota(facts: Facts):
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


def rule_policy_conflict(facts: Facts):
    """A ClusterPolicy beside the GPUCluster is the cause only where its device plugin competes
    with DRA for the GPUs the failing workload wanted: the ClusterPolicy deploys the device
    plugin, and a node the workload's pods run on (or could use, while pending) offers
    nvidia.com/gpu through it.  A ClusterPolicy alone explains nothing else."""
    if not (facts.gpu_cluster and facts.cluster_policy and facts.cluster_policy_device_plugin):
        return None
    for pod in facts.pods:
        if not pod.claim_names() and not pod.template_claims_not_generated:
            continue
        nodes = {pod.node} if pod.node else candidate_nodes(facts, pod)[0]
        competing = sorted(n.name for name in nodes if (n := facts.node(name)) and n.extended_gpus)
        if competing and (node := facts.node(competing[0])):
            return ("policy-conflict",
                    f"Pod {pod.name} wants GPUs through DRA on {', '.join(competing)}, where the "
                    f"ClusterPolicy's device plugin also offers {node.extended_gpus} nvidia.com/gpu: "
                    "both allocation paths hand out the same GPUs. A cluster uses the device plugin "
                    "(ClusterPolicy) or DRA (GPUCluster), not both: disable the ClusterPolicy's "
                    "devicePlugin or reinstall for one path.")
    return None
