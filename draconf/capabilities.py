"""What the cluster serves and the driver publishes, for the feature scenarios (suites/test_features.py).

A feature scenario applies only where the cluster has the feature.  A disabled feature gate
does not refuse a field: the API server drops it on create, so the only honest probe is to
send the field and read back what the server kept.  Each probe here asks the real API server
(a server-side dry-run create, which persists nothing, or a read of a live object) and returns
a :class:`Capability`: whether the feature is there and, either way, what was seen.

>>> field_at({"spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [{"name": "a"}]}]}}},
...          "spec.devices.requests.0.firstAvailable.0.name")
'a'
>>> field_at({"spec": {"devices": {"requests": [{"name": "gpu"}]}}},
...          "spec.devices.requests.0.firstAvailable") is None
True
>>> Capability("prioritized-list", False, "the API server dropped firstAvailable").skip_reason
'prioritized-list is not available on this cluster: the API server dropped firstAvailable'
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from draconf.answers import ServerAnswer

#: A dry-run's answers that refuse the probe (validation, admission, RBAC), not the feature.
REFUSALS = (400, 403, 422)

#: The namespace label without which the API server refuses adminAccess claims (KEP-5018).
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
#: The annotation the scheduler puts on the claim it creates for a pod's extended resources.
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@dataclass(frozen=True)
class Capability:
    """One feature the cluster has or lacks; ``evidence`` says what the server showed."""
    name: str
    available: bool
    evidence: str
    #: the server's answer when the probe itself was refused (admission, validation, RBAC):
    #: nothing was learnt of the feature
    refusal: ServerAnswer | None = None
    #: why the cluster's own configuration promises the feature (its driver runs with the
    #: feature's gate on): then a missing feature is a failure, as a GA one is
    promised: str | None = None

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    @property
    def skip_reason(self) -> str:
        return f"{self.name} is not available on this cluster: {self.evidence}"


def field_at(obj, path: str):
    """The value at a dotted path (list indexes as numbers), None where any step is absent."""
    for step in path.split("."):
        if isinstance(obj, list):
            obj = obj[int(step)] if step.isdigit() and int(step) < len(obj) else None
        elif isinstance(obj, dict):
            obj = obj.get(step)
        else:
            return None
        if obj is None:
            return None
    return obj


def dry_run_claim(api, namespace: str, claim: dict) -> tuple[dict | None, ServerAnswer | None]:
    """Create ``claim`` with ``dryRun=All`` (validated and admitted, never stored): the object
    as the server would keep it, or None and the server's refusal."""
    body = copy.deepcopy(claim)
    body.setdefault("metadata", {})["namespace"] = namespace
    try:
        created = api.resource.create_namespaced_resource_claim(namespace, body, dry_run="All")
    except ApiException as err:
        if err.status in REFUSALS:
            return None, ServerAnswer.of(err)
        raise
    return api.api_client.sanitize_for_serialization(created), None


def refused_probe(name: str, what: str, answer: ServerAnswer) -> Capability:
    """A probe the server turned away: no verdict on the feature, its answer kept."""
    return Capability(name, False, f"a server-side dry-run create of {what} was refused: "
                                   f"HTTP {answer.status}: {answer.message}", refusal=answer)


def served_field(api, namespace: str, name: str, claim: dict, path: str) -> Capability:
    """Whether the API server keeps the field at ``path`` of ``claim`` (dry-run create, read back)."""
    kept, refused = dry_run_claim(api, namespace, claim)
    if refused:
        return refused_probe(name, "a claim using it", refused)
    value = field_at(kept, path)
    if value in (None, [], {}, False):
        return Capability(name, False, f"the API server dropped `{path}` from a dry-run create "
                                       "(its feature gate is off)")
    return Capability(name, True, f"the API server keeps `{path}` (dry-run create)")


def prioritized_list(api, namespace: str, device_class: str) -> Capability:
    """``firstAvailable`` (DRAPrioritizedList, GA in 1.36) is served."""
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "draconf-probe-first-available"},
             "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
                 {"name": "first", "deviceClassName": device_class},
                 {"name": "second", "deviceClassName": device_class}]}]}}}
    return served_field(api, namespace, "prioritized-list (firstAvailable)", claim,
                        "spec.devices.requests.0.firstAvailable.1.name")


def admin_access(api, namespace: str, device_class: str) -> Capability:
    """``adminAccess`` (DRAAdminAccess, GA in 1.36) is served; ``namespace`` must carry
    :data:`ADMIN_ACCESS_LABEL`, else the server refuses the probe itself."""
    claim = admin_claim("draconf-probe-admin-access", device_class)
    return served_field(api, namespace, "admin access (adminAccess)", claim,
                        "spec.devices.requests.0.exactly.adminAccess")


def admin_claim(name: str, device_class: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": device_class, "adminAccess": True}}]}}}


def extended_resource(api, device_class: str, resource: str | None) -> Capability:
    """The live DeviceClass maps the device plugin's extended resource (``extendedResourceName``,
    DRAExtendedResource, beta and on in 1.36), so ``resources.limits: {<resource>: 1}`` pods
    get their device through DRA.  The field being present on the stored class is the API
    server's evidence: with the gate off it drops the field on create."""
    name = "extended resource backed by DRA (extendedResourceName)"
    if not resource:
        return Capability(name, False, "the profile names no device-plugin extended resource "
                                       "(capabilities.extendedResource)")
    try:
        obj = api.resource.read_device_class(device_class)
    except ApiException as err:
        if err.status == 404:
            return Capability(name, False, f"DeviceClass {device_class} does not exist")
        raise
    mapped = api.api_client.sanitize_for_serialization(obj).get("spec", {}).get("extendedResourceName")
    if not mapped:
        return Capability(name, False, f"DeviceClass {device_class} carries no extendedResourceName, "
                                       f"so {resource} pods are not served through DRA (the chart "
                                       "renders it on resource.k8s.io/v1 clusters with the gate on)")
    if mapped != resource:
        return Capability(name, False, f"DeviceClass {device_class} maps {mapped}, not {resource}")
    return Capability(name, True, f"DeviceClass {device_class} has extendedResourceName: {mapped}")


def device_plugin_nodes(api, resource: str) -> list[str]:
    """Nodes whose allocatable carries ``resource``: a device plugin serves it there, and the
    scheduler gives such nodes' pods the device plugin's GPUs, not DRA's (KEP-5004)."""
    return sorted(n.metadata.name for n in api.core.list_node().items
                  if resource in ((n.status.allocatable if n.status else None) or {}))


def device_taints(api, namespace: str, device_class: str) -> Capability:
    """``tolerations`` on a request (DRADeviceTaints, beta and on in 1.36) are served: with the
    gate off the API server drops them, and device taints then mean nothing to a claim."""
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "draconf-probe-device-taints"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": device_class,
                 "tolerations": [{"key": "draconf.example/probe", "operator": "Exists",
                                  "effect": "NoSchedule"}]}}]}}}
    return served_field(api, namespace, "device taints (tolerations)", claim,
                        "spec.devices.requests.0.exactly.tolerations.0.key")


def device_taint_rules(api, driver: str) -> Capability:
    """``DeviceTaintRule`` (resource.k8s.io/v1beta2, DRADeviceTaintRules: beta and **off** by
    default in 1.36, served only with ``--feature-gates=DRADeviceTaintRules=true`` and
    ``--runtime-config=resource.k8s.io/v1beta2/devicetaintrules=true``): a server-side dry-run
    create of a rule keeps its selector and taint.  Not served: the API server answers 404."""
    name = "DeviceTaintRule (resource.k8s.io/v1beta2)"
    rule = {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
            "metadata": {"name": "draconf-probe-device-taint-rule"},
            "spec": {"deviceSelector": {"driver": driver, "device": "draconf-probe"},
                     "taint": {"key": "draconf.example/probe", "effect": "NoSchedule"}}}
    try:
        kept = api.resource_beta.create_device_taint_rule(rule, dry_run="All")
    except ApiException as err:
        if err.status == 404:
            return Capability(name, False, "the API server does not serve resource.k8s.io/v1beta2 "
                                           "devicetaintrules (Kubernetes 1.36: beta and off by default; "
                                           "--feature-gates=DRADeviceTaintRules=true on kube-apiserver, "
                                           "kube-scheduler and kube-controller-manager, and "
                                           "--runtime-config=resource.k8s.io/v1beta2/devicetaintrules=true)")
        if err.status in REFUSALS:
            return refused_probe(name, "a DeviceTaintRule", ServerAnswer.of(err))
        raise
    kept = api.api_client.sanitize_for_serialization(kept)
    if field_at(kept, "spec.taint.key") is None or field_at(kept, "spec.deviceSelector.device") is None:
        return Capability(name, False, "the API server dropped the rule's taint or selector from a dry-run create")
    return Capability(name, True, "the API server serves resource.k8s.io/v1beta2 devicetaintrules "
                                  "(dry-run create kept the selector and taint)")


#: The annotation KWOK puts on the nodes it simulates: API objects only, no container runs there.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def kwok_nodes(api) -> set[str]:
    """The nodes KWOK simulates (annotation ``kwok.x-k8s.io/node``)."""
    return {n.metadata.name for n in api.core.list_node().items
            if KWOK_NODE_ANNOTATION in (n.metadata.annotations or {})}


def gpu_sharing(api, profile, published, avoid=frozenset(), gpus: int = 2,
                needs_gates: bool = True) -> tuple[Capability, list[str]]:
    """:func:`sharing_nodes` with the cluster's KWOK nodes read, and (``needs_gates``: a
    workload that must be applied, not refused) the driver's plugin pods, for their gates."""
    if not profile.capabilities.gpu_sharing:
        return sharing_nodes(profile, published, set(), avoid, gpus)
    plugin_pods = None
    if needs_gates and profile.capabilities.sharing_gates:
        from draconf.preflight.nodes import read_plugin_pods
        plugin_pods = read_plugin_pods(api, profile.plugin)[1]
    return sharing_nodes(profile, published, kwok_nodes(api), avoid, gpus, plugin_pods)


def gates_off(profile, pod) -> list[str]:
    """The feature gates sharing needs (``capabilities.sharingGates``) that kubelet-plugin
    ``pod`` runs without, each with where that shows; none when its gates cannot be read.

    >>> from draconf.plugins import PluginPod
    >>> from draconf.profile import builtin
    >>> pod = PluginPod("ns", "p", "n", "Running", True, feature_gates=(("MPSSupport", True),))
    >>> gates_off(builtin("nvidia"), pod)
    ['TimeSlicingSettings (not set: off by default)']
    >>> gates_off(builtin("nvidia"), PluginPod("ns", "p", "n", "Running", True,
    ...           feature_gates=(("MPSSupport", False), ("TimeSlicingSettings", True))))
    ['MPSSupport (set false)']
    >>> gates_off(builtin("nvidia"), PluginPod("ns", "p", "n", "Running", True, gates_known=False))
    []
    """
    if not pod.gates_known:
        return []
    off = []
    for gate, default in profile.capabilities.sharing_gates:
        on = pod.gate(gate)
        if on is False:
            off.append(f"{gate} (set false)")
        elif on is None and not default:
            off.append(f"{gate} (not set: off by default)")
    return off


def sharing_nodes(profile, published, kwok: set[str], avoid=frozenset(),
                  gpus: int = 2, plugin_pods=None) -> tuple[Capability, list[str]]:
    """GpuConfig sharing (TimeSlicing, MPS): the profile's driver takes it
    (``capabilities.gpuSharing``), and some node that runs containers (not a KWOK node, not left
    out of the run) publishes at least ``gpus`` full GPUs.  With the capability, those nodes,
    most GPUs first.

    ``plugin_pods`` (None: not read) also leaves out the nodes whose kubelet plugin runs with a
    gate sharing needs off (``capabilities.sharingGates``; NVIDIA's are Alpha, off by default):
    such a driver refuses the sharing config it was never told to take, which is not a
    promise the cluster made.  A node without a plugin pod, or whose pod's gates cannot be
    read, stays: its driver is judged on what it does.

    >>> from draconf.devices import Device
    >>> from draconf.plugins import PluginPod
    >>> from draconf.profile import builtin
    >>> gpu = lambda node, n: Device("gpu.nvidia.com", node, f"gpu-{n}", node,
    ...                              {"gpu.nvidia.com/type": "gpu"})
    >>> published = [gpu("a", 0), gpu("a", 1), gpu("b", 0), gpu("b", 1), gpu("b", 2), gpu("c", 0)]
    >>> sharing_nodes(builtin("nvidia"), published, kwok=set())[1]
    ['b', 'a']
    >>> cap, nodes = sharing_nodes(builtin("nvidia"), published, kwok={"a", "b"})
    >>> cap.available, nodes, cap.evidence
    (False, [], 'no node that runs containers publishes 2 gpu.nvidia.com GPUs (per node: a: 2 (KWOK), b: 3 (KWOK), c: 1); KWOK nodes run no container, so what the driver does to a GPU cannot be observed there')
    >>> sharing_nodes(builtin("example"), published, kwok=set())[0].skip_reason
    'GPU sharing (GpuConfig TimeSlicing/MPS) is not available on this cluster: profile example: driver gpu.example.com takes no GpuConfig sharing config (capabilities.gpuSharing)'
    >>> on = (("MPSSupport", True), ("TimeSlicingSettings", True))
    >>> pods = [PluginPod("d", "plugin-a", "a", "Running", True, feature_gates=on),
    ...         PluginPod("d", "plugin-b", "b", "Running", True)]
    >>> sharing_nodes(builtin("nvidia"), published, set(), plugin_pods=pods)[1]
    ['a']
    >>> sharing_nodes(builtin("nvidia"), published, set(), plugin_pods=pods[1:])[1]  # a: no pod read
    ['a']
    >>> pods[0] = PluginPod("d", "plugin-a", "a", "Running", True, feature_gates=on[:1])
    >>> print(sharing_nodes(builtin("nvidia"), published, set(), plugin_pods=pods)[0].evidence)
    the driver's kubelet plugin runs without the feature gates GPU sharing needs, on every node that could host it: a: pod d/plugin-a: TimeSlicingSettings (not set: off by default); b: pod d/plugin-b: TimeSlicingSettings (not set: off by default), MPSSupport (not set: off by default). Such a driver refuses TimeSlicing and MPS configs; the chart's featureGates turn them on (TimeSlicingSettings=true, MPSSupport=true)
    """
    name = "GPU sharing (GpuConfig TimeSlicing/MPS)"
    if not profile.capabilities.gpu_sharing:
        return Capability(name, False, f"profile {profile.name}: driver {profile.driver} takes no GpuConfig "
                                       "sharing config (capabilities.gpuSharing)"), []
    counts: dict[str, int] = {}
    role = profile.attributes.get("type")
    for device in published:
        if role and device.attribute(role) not in (None, profile.device_type):
            continue  # a MIG slice or a passthrough device: not a full GPU
        if device.node:
            counts[device.node] = counts.get(device.node, 0) + 1
    nodes = sorted((n for n, c in counts.items() if c >= gpus and n not in kwok and n not in avoid),
                   key=lambda n: (-counts[n], n))
    if nodes and plugin_pods is not None:
        gated = {}
        for pod in plugin_pods:
            off = gates_off(profile, pod)
            if pod.node in nodes and off:
                gated[pod.node] = f"pod {pod.namespace}/{pod.name}: {', '.join(off)}"
        if gated and all(n in gated for n in nodes):
            return Capability(name, False, (
                "the driver's kubelet plugin runs without the feature gates GPU sharing needs, on every "
                f"node that could host it: {'; '.join(f'{n}: {why}' for n, why in sorted(gated.items()))}. "
                "Such a driver refuses TimeSlicing and MPS configs; the chart's featureGates turn them on ("
                + ", ".join(f"{g}=true" for g, _ in profile.capabilities.sharing_gates) + ")")), []
        nodes = [n for n in nodes if n not in gated]
    if nodes:
        return Capability(name, True, f"{', '.join(nodes)} publish {gpus}+ GPUs and run containers"), nodes
    seen = ", ".join(f"{n}: {c}{' (KWOK)' if n in kwok else ''}{' (left out)' if n in avoid else ''}"
                     for n, c in sorted(counts.items())) or "none"
    return Capability(name, False, f"no node that runs containers publishes {gpus} {profile.driver} GPUs "
                                   f"(per node: {seen}); KWOK nodes run no container, so what the driver "
                                   "does to a GPU cannot be observed there"), []


def mig_promised(published, plugin_pods) -> str | None:
    """Why the cluster must publish MIG devices, or None: a kubelet plugin runs with the
    DynamicMIG gate on (:data:`draconf.mig.MIG_GATE`) on a node that publishes a partitionable
    GPU (one that consumes a counter set, which only a GPU that can be carved does).

    >>> from draconf.devices import Device
    >>> from draconf.plugins import PluginPod
    >>> gpu = Device("gpu.nvidia.com", "n1", "gpu-0", "n1", {}, counter_sets=("gpu-0-counter-set",))
    >>> on = PluginPod("d", "plugin-n1", "n1", "Running", True, feature_gates=(("DynamicMIG", True),))
    >>> mig_promised([gpu], [on])
    'the kubelet plugin runs with DynamicMIG=true on n1 (pod d/plugin-n1), where gpu-0 is published partitionable (it consumes counter set gpu-0-counter-set)'
    >>> mig_promised([gpu], [PluginPod("d", "plugin-n1", "n1", "Running", True)]) is None  # gate not set
    True
    >>> mig_promised([Device("gpu.nvidia.com", "n1", "gpu-0", "n1", {})], [on]) is None  # nothing to carve
    True
    """
    from draconf.mig import MIG_GATE
    partitionable: dict = {}  # node -> its first partitionable GPU
    for device in published:
        if device.node and device.counter_sets:
            partitionable.setdefault(device.node, device)
    for pod in plugin_pods:
        device = partitionable.get(pod.node or "")
        if device is not None and pod.gate(MIG_GATE) is True:
            return (f"the kubelet plugin runs with {MIG_GATE}=true on {pod.node} (pod {pod.namespace}/{pod.name}), "
                    f"where {device.name} is published partitionable (it consumes counter set "
                    f"{', '.join(device.counter_sets)})")
    return None


def mig(api, profile, published) -> tuple[Capability, list]:
    """MIG devices are published: the profile knows the MIG DeviceClass, it exists, and some
    published device (of the validated nodes: ``published``) satisfies its selectors and names
    its parent GPU.  Returns the capability and those devices."""
    from draconf.devices import class_selectors
    from draconf.mig import MIG_DEVICE_CLASS, class_devices, is_mig
    from draconf.preflight.nodes import read_plugin_pods
    name = "MIG (DeviceClass mig.nvidia.com)"
    if MIG_DEVICE_CLASS not in (profile.optional_device_classes or []):
        return Capability(name, False, f"the {profile.name} driver profile has no {MIG_DEVICE_CLASS} "
                                       "DeviceClass (not an NVIDIA driver)"), []
    class_cel = class_selectors(api, MIG_DEVICE_CLASS)
    if class_cel is None:
        return Capability(name, False, f"DeviceClass {MIG_DEVICE_CLASS} does not exist"), []
    found = [d for d in class_devices(published, class_cel) if is_mig(d)]
    if not found:
        from draconf.expectations import release_word
        pods = read_plugin_pods(api, profile.plugin)[1]
        word = release_word("mig", pods)  # the driver's release: whether, and by which gate, it has MIG
        return Capability(name, False, f"no published device matches DeviceClass {MIG_DEVICE_CLASS} "
                                       "(the driver publishes no MIG device: DynamicMIG off, no "
                                       "MIG-capable GPU, or KWOK nodes)" + (f"; {word.note}" if word.note else ""),
                          promised=mig_promised(published, pods)), []
    nodes = sorted({d.node for d in found if d.node})
    return Capability(name, True, f"{len(found)} MIG device(s) published on {', '.join(nodes)}"), found
