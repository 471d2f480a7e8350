"""Node eligibility as the scheduler decides it: taints and tolerations, nodeSelector and
required node affinity (k8s.io/api/core/v1, k8s.io/component-helpers/scheduling)."""

from __future__ import annotations

from draconf.diagnosis.facts import NodeFacts
from draconf.pods import Pod
# Kubernetes' toleration matching (Toleration.ToleratesTaint): the same rules for node taints
# as for device taints, one implementation.
from draconf.taints import tolerates


def _expression_matches(expr: dict, labels: dict, fields: dict | None = None) -> bool:
    source = fields if fields is not None else labels
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    present = key in source
    value = source.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            a, b = int(str(value)), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_exclusions(pod: Pod, node: NodeFacts) -> list[str]:
    """Why ``pod`` cannot go to ``node`` (empty: it can, as far as node filters go)."""
    why = []
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod.tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            why.append(f"untolerated taint {taint.get('key')}{value}:{taint.get('effect')}")
    if node.unschedulable and not any(
            "node.kubernetes.io/unschedulable" == t.get("key") for t in node.taints):
        why.append("node is cordoned (spec.unschedulable)")
    mismatched = {k: v for k, v in pod.node_selector.items() if node.labels.get(k) != v}
    if mismatched:
        why.append(f"nodeSelector {mismatched} does not match its labels")
    if pod.required_node_terms:
        fields = {"metadata.name": node.name}
        ok = any(all(_expression_matches(e, node.labels) for e in term.get("matchExpressions") or [])
                 and all(_expression_matches(e, node.labels, fields) for e in term.get("matchFields") or [])
                 and (term.get("matchExpressions") or term.get("matchFields"))
                 for term in pod.required_node_terms)
        if not ok:
            why.append("required node affinity does not match")
    return why

