"""The GPU nodes and the driver's kubelet-plugin pods on them, as the checks read them: which
nodes count as GPU nodes (labels, or a plugin pod there), and the plugin's DaemonSets and pods
in every known install."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from kubernetes.client import ApiClient

from draconf.kube import label_selector
from draconf.plugins import PLUGIN_DAEMONSETS, PLUGIN_POD_SELECTORS, PluginPod
from draconf.preflight.reading import Access, read

#: Turns client objects into the API's dicts (needs no configuration).
_SERIALIZER = ApiClient()

#: Node labels that mark a GPU node: Node Feature Discovery's PCI vendor 10de (NVIDIA) label,
#: and GPU Feature Discovery's. Absence proves nothing (the guide), so a node hosting a
#: kubelet-plugin pod counts as a GPU node too.
GPU_NODE_LABELS = {"feature.node.kubernetes.io/pci-10de.present": "true",
                   "nvidia.com/gpu.present": "true"}


def is_gpu_node_labels(labels: Mapping[str, str] | None,
                       wanted: Mapping[str, str] = GPU_NODE_LABELS) -> bool:
    """True when a node carries a GPU discovery label (NFD pci-10de or GFD).

    >>> is_gpu_node_labels({"feature.node.kubernetes.io/pci-10de.present": "true"})
    True
    >>> is_gpu_node_labels({"feature.node.kubernetes.io/pci-10de.present": "false"})
    False
    """
    labels = labels or {}
    return any(labels.get(k) == v for k, v in wanted.items())


def gpu_node_names(nodes: Iterable[tuple[str, Mapping[str, str] | None]],
                   plugin_nodes: Iterable[str] = (),
                   gpu_labels: Mapping[str, str] = GPU_NODE_LABELS) -> list[str]:
    """GPU nodes among ``(name, labels)``: labelled as such, or hosting a kubelet-plugin pod."""
    names = {name for name, labels in nodes if is_gpu_node_labels(labels, gpu_labels)}
    return sorted(names | {n for n in plugin_nodes if n})


def plugin_pod(pod) -> PluginPod:
    """A :class:`~draconf.plugins.PluginPod` from a V1Pod of the Python client."""
    return PluginPod.from_raw(_SERIALIZER.sanitize_for_serialization(pod))


@dataclass(frozen=True)
class PluginDaemonSet:
    namespace: str
    name: str
    desired: int
    ready: int
    available: int

    def describe(self) -> str:
        return (f"{self.namespace}/{self.name}: desired {self.desired}, ready {self.ready}, "
                f"available {self.available}")


def read_plugin_pods(api, plugin=None) -> tuple[list[PluginDaemonSet], list[PluginPod]]:
    """The kubelet-plugin DaemonSets of every known install (``plugin``: a profile's
    :class:`~draconf.profile.Plugin`; None: the NVIDIA ones), and their pods."""
    daemonsets, pods = [], {}
    known = plugin.daemonsets if plugin else PLUGIN_DAEMONSETS
    selectors = plugin.pod_selectors if plugin else PLUGIN_POD_SELECTORS
    labels_of: dict[tuple[str, str], dict] = {}  # (namespace, name) -> a DaemonSet's labels

    def get_daemonset(namespace: str, name: str):
        # Read as a plain object through the generic API: the typed AppsV1Api costs each
        # process 0.27 s of CPU to import (a validator for each of its methods), which every
        # xdist worker paid for this one read before its first check.
        ds = read(Access("get", "daemonsets", "apps", namespace), api.custom.get_namespaced_custom_object,
                  "apps", "v1", namespace, "daemonsets", name, not_found_ok=True)
        labels_of[(namespace, name)] = ((ds or {}).get("metadata") or {}).get("labels") or {}
        return ds

    for namespace, name in known:
        ds = get_daemonset(namespace, name)
        if ds is None:
            continue
        st = ds.get("status") or {}
        daemonsets.append(PluginDaemonSet(namespace, name, st.get("desiredNumberScheduled") or 0,
                                          st.get("numberReady") or 0, st.get("numberAvailable") or 0))
        labels = ((ds.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if labels:
            selector = label_selector(dict(sorted(labels.items())))
            for p in read(Access("list", "pods", "", namespace), api.core.list_namespaced_pod,
                          namespace, label_selector=selector).items:
                pods[(p.metadata.namespace, p.metadata.name)] = p
    for selector in selectors:
        for p in read(Access("list", "pods"), api.core.list_pod_for_all_namespaces,
                      label_selector=selector).items:
            pods[(p.metadata.namespace, p.metadata.name)] = p
    return daemonsets, [with_release(plugin_pod(p), p, labels_of, get_daemonset) for _, p in sorted(pods.items())]


def with_release(pod: PluginPod, raw, labels_of: dict, get_daemonset) -> PluginPod:
    """``pod`` with the release its owning DaemonSet's chart labels name (that DaemonSet read
    once, wherever it runs: a release installed under another name is found by its pods)."""
    owner = next((o for o in (raw.metadata.owner_references or []) if o.kind == "DaemonSet"), None)
    if owner is None:
        return pod
    key = (raw.metadata.namespace, owner.name)
    if key not in labels_of:
        get_daemonset(*key)
    return pod.with_daemonset_labels(*key, labels_of[key])


def read_gpu_nodes(api, plugin_pods: list[PluginPod],
                   gpu_labels: Mapping[str, str] = GPU_NODE_LABELS) -> tuple[list[str], list[str]]:
    """(GPU node names, all node names)."""
    nodes = read(Access("list", "nodes"), api.core.list_node).items
    pairs = [(n.metadata.name, n.metadata.labels) for n in nodes]
    return gpu_node_names(pairs, [p.node for p in plugin_pods if p.node], gpu_labels), sorted(n for n, _ in pairs)
