"""Checks of a GPU Operator-managed install: ``gpu-cluster`` (the GPUCluster is ready) and
``policy-conflict`` (no ClusterPolicy beside it); not applicable where the profile's driver has
neither."""

from __future__ import annotations

from typing import Mapping, Sequence

from draconf.preflight.nodes import PluginPod, read_plugin_pods
from draconf.preflight.reading import Access, read
from draconf.preflight.result import CheckResult, check_result
from draconf.preflight.runner import check

#: GPU Operator singletons: (group, version, plural) and the DRA-path object's name.
GPUCLUSTER = ("nvidia.com", "v1alpha1", "gpuclusters")
GPUCLUSTER_NAME = "gpu-cluster"
CLUSTERPOLICY = ("nvidia.com", "v1", "clusterpolicies")


def evaluate_gpu_cluster(gpuclusters: Sequence[Mapping] | None,
                         plugin_pods: Sequence[PluginPod] = ()) -> CheckResult:
    """``gpuclusters``: the GPUCluster objects, or None when the CRD is not installed;
    ``plugin_pods``: the driver's kubelet-plugin pods, which say whose failure a GPUCluster that
    is not ready is: the plugin's (some pod not Ready, or none) or another operand's.

    >>> ready = PluginPod("gpu-operator", "p", "n1", "Running", True)
    >>> evaluate_gpu_cluster([{"metadata": {"name": "gpu-cluster"}, "status": {"state": "notReady"}}],
    ...                      [ready]).diagnosis
    'gpu-operator-not-ready'
    >>> evaluate_gpu_cluster([{"metadata": {"name": "gpu-cluster"}, "status": {"state": "notReady"}}],
    ...                      [ready, PluginPod("gpu-operator", "q", "n2", "Pending", False)]).diagnosis
    'plugin-unhealthy'
    """
    if gpuclusters is None:
        return check_result(True, "GPUCluster CRD (nvidia.com/v1alpha1) not installed: the driver is "
                                  "not managed by GPU Operator's DRA path; nothing to check",
                            applicable=False)
    by_name = {(o.get("metadata") or {}).get("name"): o for o in gpuclusters}
    obj = by_name.get(GPUCLUSTER_NAME)
    if obj is None:
        return check_result(True, f"GPUCluster CRD installed but no `{GPUCLUSTER_NAME}` object: GPU "
                                  "Operator does not manage a DRA driver here; nothing to check",
                            applicable=False)
    status = obj.get("status") or {}
    state = status.get("state")
    conditions = status.get("conditions") or []
    evidence = {"kubectl get gpucluster gpu-cluster": f"state: {state or '(none)'}"}
    if conditions:
        evidence["conditions"] = "\n".join(
            f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}: {c.get('message') or ''}"
            .rstrip(": ") for c in conditions)
    if state == "ready":
        return check_result(True, f"GPUCluster {GPUCLUSTER_NAME} is ready", evidence=evidence)
    reported = f"GPUCluster {GPUCLUSTER_NAME} reports {'state ' + state if state else 'no state yet'} (expected ready)"
    plugin_ready = bool(plugin_pods) and all(p.ready for p in plugin_pods)
    evidence["kubelet-plugin pods"] = "\n".join(p.describe() for p in plugin_pods) or "none"
    if plugin_ready:
        return check_result(False, f"{reported} although all {len(plugin_pods)} kubelet-plugin pod(s) are "
                                   "Ready: another operand of the install failed; see `kubectl describe "
                                   "gpucluster gpu-cluster` and `kubectl get pods -n gpu-operator`",
                            "gpu-operator-not-ready", evidence)
    return check_result(False, f"{reported}: GPU Operator has not brought up the DRA components (the "
                               "kubelet plugin is not Ready everywhere); see `kubectl describe gpucluster "
                               "gpu-cluster` and `kubectl get pods -n gpu-operator`", "plugin-unhealthy", evidence)


def evaluate_policy_conflict(clusterpolicies: Sequence[Mapping] | None,
                             gpuclusters: Sequence[Mapping] | None) -> CheckResult:
    """A cluster has a GPUCluster (DRA) or a ClusterPolicy (device plugin), never both."""
    policies = sorted((o.get("metadata") or {}).get("name", "?") for o in clusterpolicies or [])
    clusters = sorted((o.get("metadata") or {}).get("name", "?") for o in gpuclusters or [])
    evidence = {"kubectl get clusterpolicy": "\n".join(policies) or (
                    "(CRD not installed)" if clusterpolicies is None else "(none)"),
                "kubectl get gpucluster": "\n".join(clusters) or (
                    "(CRD not installed)" if gpuclusters is None else "(none)")}
    if policies and clusters:
        return check_result(False, f"ClusterPolicy {', '.join(policies)} exists beside GPUCluster "
                                   f"{', '.join(clusters)}: a cluster uses the device plugin "
                                   "(ClusterPolicy) or DRA (GPUCluster), not both. Do not convert a "
                                   "ClusterPolicy cluster in place: NVIDIA documents GPUCluster as a "
                                   "new-installation workflow (clusterPolicy.deployCR=false, "
                                   "gpuCluster.deployCR=true), not a migration; keep one allocation "
                                   "path and reinstall for the other",
                            "policy-conflict", evidence)
    if policies:
        return check_result(True, f"only a ClusterPolicy ({', '.join(policies)}) exists, no GPUCluster; "
                                  "no conflict, but the GPU Operator DRA path expects a fresh install "
                                  "without one", evidence=evidence)
    return check_result(True, "no ClusterPolicy beside the GPUCluster" if clusters else
                        "neither ClusterPolicy nor GPUCluster present; no conflict", evidence=evidence)


def _list_cluster_objects(api, gvp: tuple[str, str, str]) -> list[dict] | None:
    group, version, plural = gvp
    listing = read(Access("list", plural, group), api.custom.list_cluster_custom_object,
                   group, version, plural, not_found_ok=True)
    return None if listing is None else list(listing.get("items") or [])


@check("gpu-cluster", requires="gpu_cluster")
def check_gpu_cluster(api, profile) -> CheckResult:
    gpuclusters = _list_cluster_objects(api, GPUCLUSTER)
    _, plugin_pods = read_plugin_pods(api, profile.plugin) if gpuclusters else ((), ())
    return evaluate_gpu_cluster(gpuclusters, plugin_pods)


@check("policy-conflict", requires="cluster_policy")
def check_policy_conflict(api, profile) -> CheckResult:
    return evaluate_policy_conflict(_list_cluster_objects(api, CLUSTERPOLICY),
                                    _list_cluster_objects(api, GPUCLUSTER))
