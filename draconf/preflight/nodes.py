"""The GPU nodes and the driver's kubelet-plugin pods on them, as the checks read them: which
nodes count as GPU nodes (labels, or a plugin pod there), and the plugin's DaemonSets and pods
in every known install."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from draconf.preflight.reading import Access, read

#: Node labels that mark a GPU node: Node Feature Discovery's PCI vendor 10de (NVIDIA) label,
#: and GPU Feature Discovery's. Absence proves nothing (the guide), so a node hosting a
#: kubelet-plugin pod counts as a GPU node too.
GPU_NODE_LABELS = {"feature.node.kubernetes.io/pci-10de.present": "true",
                   "nvidia.com/gpu.present": "true"}
#: (namespace, name) of the kubelet-plugin DaemonSet in each known install: the current chart,
#: the older chart prefix, and the GPU Operator-managed install of the guide.
PLUGIN_DAEMONSETS = (("dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu-kubelet-plugin"),
                     ("nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"),
                     ("gpu-operator", "nvidia-dra-driver-kubelet-plugin"))
#: Pod label selectors of the kubelet plugin (current and older chart prefix), any namespace.
PLUGIN_POD_SELECTORS = ("dra-driver-nvidia-gpu-component=kubelet-plugin",
                        "nvidia-dra-driver-gpu-component=kubelet-plugin")


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


@dataclass(frozen=True)
class PluginPod:
    """A kubelet-plugin pod, reduced to what its health check needs."""

    namespace: str
    name: str
    node: str | None
    phase: str | None
    ready: bool
    #: one line per unhealthy container, e.g. "gpus: CrashLoopBackOff (restarts 7, last exit 1 Error)"
    problems: tuple[str, ...] = ()
    #: the containers' waiting/terminated reasons alone, e.g. ("CrashLoopBackOff",)
    reasons: tuple[str, ...] = ()

    def describe(self) -> str:
        state = "Ready" if self.ready else f"not Ready ({self.phase or 'no phase'})"
        lines = [f"{self.namespace}/{self.name} on {self.node or '(unscheduled)'}: {state}"]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)


def plugin_pod(pod) -> PluginPod:
    """A :class:`PluginPod` from a V1Pod of the Python client."""
    status = pod.status
    ready = any(c.type == "Ready" and c.status == "True" for c in (status.conditions or [])) \
        if status else False
    problems, reasons = [], []
    for kind, statuses in (("init", status.init_container_statuses if status else None),
                           ("", status.container_statuses if status else None)):
        for cs in statuses or []:
            if cs.ready or (kind == "init" and cs.state and cs.state.terminated
                            and cs.state.terminated.exit_code == 0):
                continue
            what = "running, not ready"
            if cs.state and cs.state.waiting:
                what = cs.state.waiting.reason or "Waiting"
                reasons.append(what)
                if cs.state.waiting.message:
                    what += f": {cs.state.waiting.message}"
            elif cs.state and cs.state.terminated:
                reasons.append(cs.state.terminated.reason or "Terminated")
                what = f"terminated {cs.state.terminated.reason or ''} exit {cs.state.terminated.exit_code}"
            extra = [f"restarts {cs.restart_count}"] if cs.restart_count else []
            last = cs.last_state.terminated if cs.last_state else None
            if last:
                extra.append(f"last exit {last.exit_code} {last.reason or ''}".rstrip())
            label = f"{'init container ' if kind else ''}{cs.name}"
            problems.append(f"{label}: {what}" + (f" ({', '.join(extra)})" if extra else ""))
    return PluginPod(pod.metadata.namespace, pod.metadata.name, pod.spec.node_name if pod.spec else None,
                     status.phase if status else None, ready, tuple(problems), tuple(reasons))


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
    for namespace, name in known:
        ds = read(Access("get", "daemonsets", "apps", namespace),
                  api.apps.read_namespaced_daemon_set, name, namespace, not_found_ok=True)
        if ds is None:
            continue
        st = ds.status
        daemonsets.append(PluginDaemonSet(namespace, name, st.desired_number_scheduled or 0,
                                          st.number_ready or 0, st.number_available or 0))
        labels = (ds.spec.selector.match_labels or {}) if ds.spec and ds.spec.selector else {}
        if labels:
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            for p in read(Access("list", "pods", "", namespace), api.core.list_namespaced_pod,
                          namespace, label_selector=selector).items:
                pods[(p.metadata.namespace, p.metadata.name)] = p
    for selector in selectors:
        for p in read(Access("list", "pods"), api.core.list_pod_for_all_namespaces,
                      label_selector=selector).items:
            pods[(p.metadata.namespace, p.metadata.name)] = p
    return daemonsets, [plugin_pod(p) for _, p in sorted(pods.items())]


def read_gpu_nodes(api, plugin_pods: list[PluginPod],
                   gpu_labels: Mapping[str, str] = GPU_NODE_LABELS) -> tuple[list[str], list[str]]:
    """(GPU node names, all node names)."""
    nodes = read(Access("list", "nodes"), api.core.list_node).items
    pairs = [(n.metadata.name, n.metadata.labels) for n in nodes]
    return gpu_node_names(pairs, [p.node for p in plugin_pods], gpu_labels), sorted(n for n, _ in pairs)
