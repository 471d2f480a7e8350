"""The ``kubelet-plugin`` check: the driver's kubelet plugin runs, ready, on every GPU node."""

from __future__ import annotations

from typing import Iterable

from draconf.preflight.nodes import (PLUGIN_DAEMONSETS, PLUGIN_POD_SELECTORS, PluginDaemonSet, PluginPod,
                                    read_gpu_nodes, read_plugin_pods)
from draconf.preflight.result import CheckResult, check_result, name_list
from draconf.preflight.runner import check


def evaluate_kubelet_plugin(gpu_nodes: Iterable[str], daemonsets: Iterable[PluginDaemonSet],
                            pods: Iterable[PluginPod],
                            known_daemonsets: Iterable[tuple[str, str]] = PLUGIN_DAEMONSETS,
                            pod_selectors: Iterable[str] = PLUGIN_POD_SELECTORS) -> CheckResult:
    """A Ready kubelet-plugin pod on every GPU node."""
    gpu_nodes = sorted(set(gpu_nodes))
    daemonsets, pods = list(daemonsets), list(pods)
    evidence = {}
    if daemonsets:
        evidence["kubelet-plugin DaemonSets"] = "\n".join(d.describe() for d in daemonsets)
    ready_pods = [p for p in pods if p.ready]
    if ready_pods:
        evidence["Ready kubelet-plugin pods"] = "\n".join(p.describe() for p in ready_pods)
    if not daemonsets and not pods:
        known = ", ".join(f"{ns}/{name}" for ns, name in known_daemonsets)
        return check_result(False, "no DRA kubelet plugin found (none of the DaemonSets "
                                   f"{known}, no pod labelled {' or '.join(pod_selectors)}): "
                                   "install the DRA driver, or check its release namespace",
                            "plugin-unhealthy", evidence)
    if not gpu_nodes and not ready_pods:
        # Nothing marks a GPU node and no plugin pod runs: "Ready on all 0 nodes" would be a
        # pass without evidence.  A DaemonSet whose selector matches no node looks like this.
        wanted = ", ".join(f"{d.namespace}/{d.name} (desired {d.desired})" for d in daemonsets) or "none"
        return check_result(False, f"no kubelet-plugin pod runs on any node (DaemonSets: {wanted}) and no node "
                                   "is labelled as a GPU node: check the DaemonSet's nodeSelector and "
                                   "affinity against the GPU nodes' labels", "plugin-unhealthy", evidence)
    not_ready = [p for p in pods if not p.ready]
    ready_nodes = {p.node for p in pods if p.ready}
    uncovered = [n for n in gpu_nodes if n not in ready_nodes]
    if not_ready:
        evidence["kubelet-plugin pods not Ready"] = "\n".join(p.describe() for p in not_ready)
    if uncovered or not_ready:
        reasons = sorted({r for p in not_ready for r in p.reasons})
        parts = []
        if uncovered:
            parts.append(f"{len(uncovered)} of {len(gpu_nodes)} GPU node(s) have no Ready "
                         f"kubelet-plugin pod: {name_list(uncovered)}")
        if not_ready:
            parts.append(f"{len(not_ready)} plugin pod(s) not Ready"
                         + (f" ({', '.join(reasons)})" if reasons else ""))
            said = next(((p, p.last_error) for p in not_ready if p.last_error), None)
            if said:
                parts.append(f"{said[0].name} on {said[0].node or '(no node)'} last said: {said[1]}")
                evidence[f"log of {said[0].namespace}/{said[0].name}"] = said[0].log_tail or ""
        if daemonsets:
            logs = f"kubectl logs -n {daemonsets[0].namespace} daemonset/{daemonsets[0].name}"
        elif not_ready:
            logs = f"kubectl logs -n {not_ready[0].namespace} {not_ready[0].name}"
        else:
            logs = "kubectl logs <kubelet-plugin pod>"
        return check_result(False, "; ".join(parts) + ". Claims on those nodes cannot be prepared: "
                                   f"check the plugin's logs (`{logs} --all-containers --tail=200`) "
                                   "and the node's GPU driver", "plugin-unhealthy", evidence,
                            nodes=() if any(p.node is None for p in not_ready)
                            else set(uncovered) | {p.node for p in not_ready if p.node})
    return check_result(True, f"kubelet plugin Ready on all {len(gpu_nodes)} GPU node(s)"
                              + (f" ({', '.join(d.namespace + '/' + d.name for d in daemonsets)})"
                                 if daemonsets else ""), evidence=evidence)


def with_crash_log(api, pod: PluginPod) -> PluginPod:
    """``pod`` with the log of its crashed container's run that crashed (``kubectl logs
    --previous`` once it has restarted): why it crash-loops.  Unreadable logs leave it as it
    was (logs are a bonus)."""
    try:
        return pod.with_log(api.core.read_namespaced_pod_log(
            pod.name, pod.namespace, container=pod.crashed_container, previous=pod.crash_log_previous,
            tail_lines=200, limit_bytes=64 * 1024,
            _request_timeout=5))
    except Exception:  # noqa: BLE001 - e.g. no pods/log permission, or no previous run kept
        return pod


@check("kubelet-plugin")
def check_kubelet_plugin(api, profile) -> CheckResult:
    daemonsets, pods = read_plugin_pods(api, profile.plugin)
    # One crash-looping pod's last words: they name the cause (a bad flag, a missing driver).
    crashing = next((i for i, p in enumerate(pods) if not p.ready and p.crashed_container), None)
    if crashing is not None:
        pods[crashing] = with_crash_log(api, pods[crashing])
    gpu_nodes, _ = read_gpu_nodes(api, pods, dict(profile.plugin.gpu_node_labels))
    return evaluate_kubelet_plugin(gpu_nodes, daemonsets, pods, profile.plugin.daemonsets,
                                   profile.plugin.pod_selectors)
