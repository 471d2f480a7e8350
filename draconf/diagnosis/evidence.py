"""What the report attaches to a diagnosis: the objects involved, as trimmed YAML and one-line
summaries, each capped to a sane size."""

from __future__ import annotations

import yaml

from draconf.diagnosis.facts import Facts
from draconf.diagnosis.gather import Snapshot
from draconf.diagnosis.analysis import candidate_nodes, pending_pods

#: Characters kept of each evidence text.
EVIDENCE_LIMIT = 12000


def _trim(obj: dict) -> dict:
    """Drop the noise (managedFields, last-applied annotations) from an object dict."""
    obj = dict(obj)
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if "last-applied-configuration" not in k}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    obj["metadata"] = meta
    return obj


def _yaml(objs: list[dict]) -> str:
    return yaml.safe_dump_all([_trim(o) for o in objs], sort_keys=False, default_flow_style=False)


def _cap(text: str, limit: int = EVIDENCE_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters cut)"


def evidence(snap: Snapshot, facts: Facts, code: str, reason: str) -> dict[str, str]:
    """The texts an operator needs to check the diagnosis, each trimmed to a sane size."""
    out: dict[str, str] = {"diagnosis": f"[{code}] {reason}"}
    if snap.api_error:
        out["api"] = snap.api_error
        return out
    if snap.resource_versions is not None and "v1" not in snap.resource_versions:
        out["api"] = f"resource.k8s.io versions served: {snap.resource_versions or 'none'}"
    state = [p.summary() for p in facts.pods] + [c.summary() for c in facts.claims]
    if state:
        out["state"] = "\n".join(state)
    if snap.pods:
        out["pods"] = _cap(_yaml(snap.pods))
    if snap.claims:
        out["resourceclaims"] = _cap(_yaml(snap.claims))
    if snap.templates:
        out["resourceclaimtemplates"] = _cap(_yaml(snap.templates))
    if facts.events:
        out["events"] = _cap("\n".join(e.line() for e in facts.events))
    if snap.taint_rules:
        out["devicetaintrules"] = _cap(_yaml(snap.taint_rules))
    if facts.device_classes is not None:
        out["deviceclasses"] = "\n".join(f"{n}: {' && '.join(s) or '(no selector)'}"
                                         for n, s in sorted(facts.device_classes.items())) or "(none)"
    involved = {p.node for p in facts.pods if p.node}
    involved |= {k.split("/")[1] for c in facts.claims for k in c.device_keys if k.count("/") >= 2}
    for pod in pending_pods(facts):
        involved |= candidate_nodes(facts, pod)[0]
    slices = [s for s in snap.slices if (s.get("spec") or {}).get("nodeName") in involved] or snap.slices[:2]
    out["resourceslices"] = _cap(_yaml(slices)) if slices else f"(no ResourceSlice of {facts.driver})"
    if facts.nodes:
        lines = []
        # Once, not per node: at 1,000 nodes x 8 GPUs, asking every device for every node was
        # 8 million comparisons per failure.
        gpu_nodes = {d.node or d.pool for d in facts.devices}
        for n in facts.nodes:
            gpu = " (GPU node)" if n.name in gpu_nodes else ""
            taints = ", ".join(f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in n.taints)
            lines.append(f"{n.name}{gpu}: {'Ready' if n.ready else 'NotReady'}"
                         f"{', cordoned' if n.unschedulable else ''}; taints: {taints or 'none'}")
        out["nodes"] = "\n".join(lines)
    plugin = [p.summary() for p in facts.plugin_pods] or (
        ["(kubelet-plugin pods could not be listed)"] if not facts.plugin_pods_known
        else ["(no kubelet-plugin pods found)"])
    for p in facts.plugin_pods:
        if p.log_tail:
            plugin.append(f"--- log tail of {p.namespace}/{p.name}:\n{p.log_tail[-3000:]}")
    out["kubelet-plugin"] = _cap("\n".join(plugin))
    out["gpu-operator"] = (f"GPUCluster: {'present' if facts.gpu_cluster else 'absent'}"
                           f"{' (state ' + facts.gpu_cluster_state + ')' if facts.gpu_cluster_state else ''}; "
                           f"ClusterPolicy: {'present' if facts.cluster_policy else 'absent'}")
    if snap.quotas:
        out["resourcequotas"] = _cap(_yaml(snap.quotas))
    if snap.errors:
        out["unread"] = "\n".join(f"{k}: {v}" for k, v in sorted(snap.errors.items()))
    return out

