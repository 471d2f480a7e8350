"""Reading the cluster, once per failure: the only part of the diagnosis that calls the API.

Each part is best effort and records its own error in :attr:`Snapshot.errors`.

A failure's reading has two parts: its namespace's (pods, claims, templates, events, quotas,
what its containers see, the control plane when its pods show nothing acted) and the
cluster's (DeviceClasses, every ResourceSlice of the driver, every claim, every node, the
kubelet-plugin pods, the GPU Operator's objects, admission control).  Within
:func:`cluster_read_once` (the fleet sweep's targets, diagnosed one after another once the
sweep has ended) the cluster's part is read at the first diagnosis and kept for the others:
at 1,000 nodes x 8 GPUs it was most of each failure's reading, read again for each.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from dataclasses import dataclass, field
from typing import Iterator

from draconf.kube import raw_items
from draconf.pods import Pod
from draconf.plugins import PLUGIN_DAEMONSETS, PLUGIN_POD_SELECTORS, PluginPod

#: Where the NVIDIA kubelet plugin runs, and how its pods are labelled: preflight's, defined
#: once there, and the GPU Operator-managed DaemonSet's pod label (preflight reaches those
#: pods through the DaemonSet's own selector; the diagnosis lists pods by label only).
PLUGIN_NAMESPACES = tuple(namespace for namespace, _ in PLUGIN_DAEMONSETS)
PLUGIN_SELECTORS = (*PLUGIN_POD_SELECTORS, "app=nvidia-dra-driver-kubelet-plugin")
#: Seconds allowed for any one API call while diagnosing.
REQUEST_TIMEOUT = 10


@dataclass
class Snapshot:
    """Raw objects (``sanitize_for_serialization`` dicts) read from the cluster."""
    namespace: str | None = None
    api_error: str | None = None
    resource_versions: list[str] | None = None
    pods: list[dict] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    templates: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    device_classes: list[dict] | None = None
    slices: list[dict] = field(default_factory=list)
    all_claims: list[dict] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    plugin_pods: list[dict] = field(default_factory=list)
    plugin_pods_known: bool = True
    plugin_logs: dict[str, str] = field(default_factory=dict)
    #: "pod/container" -> what it saw of its GPUs: a running container's ``nvidia-smi -L``
    #: (``stdout``, ``stderr``, ``exit_code``, ``error``), a finished one's ``log``
    containers: dict[str, dict] = field(default_factory=dict)
    gpu_cluster: dict | None = None
    cluster_policies: list[dict] = field(default_factory=list)
    #: DeviceTaintRules (resource.k8s.io/v1beta2; none where the API is not served): taints
    #: kube-scheduler and the eviction controller add to the devices they select
    taint_rules: list[dict] = field(default_factory=list)
    quotas: list[dict] = field(default_factory=list)
    #: ValidatingAdmissionPolicies, their bindings and the validating webhook configurations
    #: (admission control an admin set up; read for an ``admission-denied`` diagnosis)
    admission_policies: list[dict] = field(default_factory=list)
    admission_bindings: list[dict] = field(default_factory=list)
    admission_webhooks: list[dict] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    #: the namespace's creationTimestamp when it has no ``default`` ServiceAccount (which the
    #: serviceaccount controller makes at once), else None
    namespace_without_sa: str | None = None
    #: component -> draconf.controlplane.health, read when a pod shows nothing acting on it
    control_plane: dict[str, str] = field(default_factory=dict)


#: The Snapshot fields the cluster's part of a reading fills (the rest are the namespace's).
CLUSTER_FIELDS = ("resource_versions", "device_classes", "slices", "taint_rules", "all_claims", "nodes",
                  "plugin_pods", "plugin_pods_known", "plugin_logs", "gpu_cluster", "cluster_policies",
                  "admission_policies", "admission_bindings", "admission_webhooks")
#: The errors keys of the cluster's part (what could not be read of it is said with each failure).
CLUSTER_ERRORS = ("resource.k8s.io", "deviceclasses", "resourceslices", "devicetaintrules",
                  "resourceclaims (all namespaces)", "nodes", "kubelet-plugin pods", "gpuclusters",
                  "clusterpolicies", "validatingadmissionpolicies", "validatingadmissionpolicybindings",
                  "validatingwebhookconfigurations")


class ClusterReading:
    """The cluster's part of a diagnosis, read once for every failure diagnosed while it is
    current (:func:`cluster_read_once`).  Only a complete reading is kept: one that met an
    unreachable API server is read again by the next failure."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kept: dict[tuple, Snapshot] = {}

    def fill(self, key: tuple, snap: Snapshot, read) -> None:
        """Set ``snap``'s cluster fields (and their errors) from the reading kept for ``key``
        (the connection and the driver), reading them with ``read(snap)`` first if none is."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                kept = Snapshot()
                read(kept)
                if kept.api_error is None:
                    self._kept[key] = kept
        copy_cluster_part(kept, snap)


def copy_cluster_part(source: Snapshot, snap: Snapshot) -> None:
    """``source``'s cluster fields and errors into ``snap`` (the lists shared, read only).

    >>> a, b = Snapshot(nodes=[{"metadata": {"name": "n"}}], errors={"nodes": "x", "pods": "y"}), Snapshot()
    >>> copy_cluster_part(a, b); b.nodes, b.errors
    ([{'metadata': {'name': 'n'}}], {'nodes': 'x'})
    """
    for name in CLUSTER_FIELDS:
        value = getattr(source, name)
        setattr(snap, name, dict(value) if isinstance(value, dict) else value)
    snap.api_error = snap.api_error or source.api_error
    snap.errors.update({k: v for k, v in source.errors.items() if k in CLUSTER_ERRORS})


#: The reading every diagnosis shares, within :func:`cluster_read_once`; None: each reads its own.
_shared: contextvars.ContextVar[ClusterReading | None] = contextvars.ContextVar("draconf_cluster_reading",
                                                                                 default=None)


@contextlib.contextmanager
def cluster_read_once() -> Iterator[ClusterReading]:
    """Within it, the diagnoses read the cluster's part once (the first one), and each its own
    namespace's part: for failures diagnosed together, about a cluster that does not change
    meanwhile (the fleet sweep's targets, all ended before the first is diagnosed)."""
    reading = ClusterReading()
    token = _shared.set(reading)
    try:
        yield reading
    finally:
        _shared.reset(token)



def _taint_rules(api, snap: Snapshot, kw: dict) -> list[dict]:
    """The cluster's DeviceTaintRules; none where resource.k8s.io/v1beta2 does not serve them
    (the DRADeviceTaintRules gate is beta and off by default in 1.36)."""
    from kubernetes.client.exceptions import ApiException
    try:
        return [_plain(api, r) for r in api.resource_beta.list_device_taint_rule(**kw).items]
    except ApiException as err:
        if err.status != 404:
            snap.errors["devicetaintrules"] = describe_error(err)
    except Exception as err:  # noqa: BLE001 - evidence is gathered as far as it goes
        snap.errors["devicetaintrules"] = describe_error(err)
    return []


def _plain(api, obj) -> dict:
    return api.api_client.sanitize_for_serialization(obj)


def describe_error(err: BaseException) -> str:
    """One line for an error met while reading: ``HTTP <status> <reason>`` for an API answer,
    else the exception type and the start of its message."""
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(err).__name__}: {str(err)[:200]}"


def gather(api, profile, namespace: str | None) -> Snapshot:
    """Read everything the rules need; each part is best effort and records its own error.
    Within :func:`cluster_read_once` the cluster's part is the one read by the first diagnosis."""
    snap = Snapshot(namespace=namespace)
    kw = {"_request_timeout": REQUEST_TIMEOUT}
    shared = _shared.get()
    if shared is None:
        _gather_cluster(api, profile, snap)
    else:
        shared.fill((id(api), profile.driver), snap, lambda kept: _gather_cluster(api, profile, kept))
    if snap.api_error is not None or (snap.resource_versions is not None and "v1" not in snap.resource_versions):
        return snap

    read = _reader(snap)
    plain = lambda items: [_plain(api, i) for i in items]  # noqa: E731
    if namespace:
        snap.pods = read("pods", lambda: plain(api.core.list_namespaced_pod(namespace, **kw).items), [])
        snap.claims = read("resourceclaims", lambda: plain(
            api.resource.list_namespaced_resource_claim(namespace, **kw).items), [])
        snap.templates = read("resourceclaimtemplates", lambda: plain(
            api.resource.list_namespaced_resource_claim_template(namespace, **kw).items), [])
        snap.events = read("events", lambda: plain(
            api.core.list_namespaced_event(namespace, **kw).items), [])
        snap.quotas = read("resourcequotas", lambda: plain(
            api.core.list_namespaced_resource_quota(namespace, **kw).items), [])
        _gather_service_account(api, snap, kw)
    _gather_control_plane(api, snap)
    _gather_containers(api, snap, profile.injection.command)
    return snap


def _reader(snap: Snapshot):
    """``read(name, fn, default)``: ``fn()``, or ``default`` with the error kept as ``name``'s."""
    def read(name: str, fn, default=None):
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - a diagnosis must never raise
            snap.errors[name] = describe_error(err)
        return default
    return read


def _gather_cluster(api, profile, snap: Snapshot) -> None:
    """The cluster's part of a reading: the API server's answer and resource.k8s.io's versions
    (``api_error`` when it does not answer), then the cluster-wide lists."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    kw = {"_request_timeout": REQUEST_TIMEOUT}
    read = _reader(snap)
    try:
        api.version.get_code(**kw)
    except Exception as err:  # noqa: BLE001
        status = getattr(err, "status", None)
        if not status or status >= 500:
            snap.api_error = describe_error(err)
            return
    try:
        group = client.ResourceApi(api.api_client).get_api_group(**kw)
        snap.resource_versions = [v.version for v in group.versions or []]
    except ApiException as err:
        if err.status == 404:
            snap.resource_versions = []
        else:
            snap.errors["resource.k8s.io"] = describe_error(err)
    except Exception as err:  # noqa: BLE001
        snap.api_error = describe_error(err)
        return
    if snap.resource_versions is not None and "v1" not in snap.resource_versions:
        return

    plain = lambda items: [_plain(api, i) for i in items]  # noqa: E731
    snap.device_classes = read("deviceclasses", lambda: plain(api.resource.list_device_class(**kw).items))
    # The cluster-wide lists (these, and the plugin pods) as the server's JSON
    # (kube.raw_items): on a large fleet, building the client's models for every slice, claim,
    # node and plugin pod was most of a diagnosis's reading, once per failed check.
    snap.slices = read("resourceslices", lambda: raw_items(
        api.resource.list_resource_slice, field_selector=f"spec.driver={profile.driver}", **kw), [])
    snap.taint_rules = _taint_rules(api, snap, kw)
    snap.all_claims = read("resourceclaims (all namespaces)", lambda: raw_items(
        api.resource.list_resource_claim_for_all_namespaces, **kw), [])
    snap.nodes = read("nodes", lambda: raw_items(api.core.list_node, **kw), [])
    _gather_plugin(api, snap, kw, getattr(profile, "plugin", None))
    snap.gpu_cluster = _custom(api, snap, "gpuclusters", "v1alpha1", kw)
    policies = _custom(api, snap, "clusterpolicies", "v1", kw, many=True)
    snap.cluster_policies = policies or []
    _gather_admission(api, snap, read, plain, kw)


def _gather_admission(api, snap: Snapshot, read, plain, kw) -> None:
    """The cluster's ValidatingAdmissionPolicies, bindings and validating webhooks (best effort:
    a role without these reads still gets the server's own message naming the policy)."""
    snap.admission_policies = read("validatingadmissionpolicies", lambda: plain(
        api.admission.list_validating_admission_policy(**kw).items), [])
    snap.admission_bindings = read("validatingadmissionpolicybindings", lambda: plain(
        api.admission.list_validating_admission_policy_binding(**kw).items), [])
    snap.admission_webhooks = read("validatingwebhookconfigurations", lambda: plain(
        api.admission.list_validating_webhook_configuration(**kw).items), [])


def _custom(api, snap: Snapshot, plural: str, version: str, kw, many: bool = False):
    from kubernetes.client.exceptions import ApiException
    try:
        items = api.custom.list_cluster_custom_object("nvidia.com", version, plural, **kw)["items"]
    except ApiException as err:
        if err.status != 404:
            snap.errors[plural] = describe_error(err)
        return None
    except Exception as err:  # noqa: BLE001
        snap.errors[plural] = describe_error(err)
        return None
    if many:
        return items
    return items[0] if items else None


def _gather_plugin(api, snap: Snapshot, kw, plugin=None) -> None:
    """The kubelet-plugin pods: the NVIDIA driver's known places, and the profile's."""
    from kubernetes.client.exceptions import ApiException
    selectors = tuple(dict.fromkeys(PLUGIN_SELECTORS + tuple(plugin.pod_selectors if plugin else ())))
    namespaces = tuple(dict.fromkeys(PLUGIN_NAMESPACES + tuple(plugin.namespaces if plugin else ())))
    found: dict[str, dict] = {}
    denied = 0
    for selector in selectors:
        try:
            items = raw_items(api.core.list_pod_for_all_namespaces, label_selector=selector, **kw)
        except ApiException as err:
            if err.status not in (401, 403):
                snap.errors["kubelet-plugin pods"] = describe_error(err)
            denied += 1
            items = []
            for ns in namespaces:
                try:
                    items += raw_items(api.core.list_namespaced_pod, ns, label_selector=selector, **kw)
                except ApiException:
                    continue
        except Exception as err:  # noqa: BLE001
            snap.errors["kubelet-plugin pods"] = describe_error(err)
            snap.plugin_pods_known = False
            return
        for pod in items:
            found[pod["metadata"]["uid"]] = pod
    snap.plugin_pods = sorted(found.values(), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    snap.plugin_pods_known = "kubelet-plugin pods" not in snap.errors
    # Log tails of the unready ones (the real driver's logs say why); kwok nodes serve none.
    # A crashed container's log is its last run's, as preflight reads it (kubectl logs
    # --previous): the current run of a crash-looping plugin has not said why yet.
    for raw in [p for p in snap.plugin_pods if not Pod(p).is_ready][:3]:
        meta = raw["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        plugin = PluginPod.from_raw(raw)
        container = plugin.crashed_container or (raw.get("spec", {}).get("containers") or [{}])[0].get("name")
        previous = bool(plugin.crashed_container) and plugin.crash_log_previous
        try:
            snap.plugin_logs[key] = api.core.read_namespaced_pod_log(
                meta["name"], meta["namespace"], container=container, previous=previous,
                tail_lines=200, limit_bytes=64 * 1024, _request_timeout=5)
        except Exception as err:  # noqa: BLE001 - logs are a bonus
            snap.plugin_logs[key] = f"(logs unavailable: {describe_error(err)})"



#: At most this many containers are asked for their GPUs per diagnosis.
CONTAINER_LIMIT = 8


def _gather_containers(api, snap: Snapshot, command: tuple[str, ...]) -> None:
    """What each container of the namespace's pods with claims sees of its GPUs: the profile's
    injection ``command`` (``nvidia-smi -L``, ``env`` ...) run in a running container, the log
    of a finished one (a job's command is that).  The same reading an operator does by hand
    (``kubectl exec ... -- nvidia-smi -L``)."""
    from draconf.pods import exec_in_container

    asked = 0
    for raw in snap.pods:
        pod = Pod(raw)
        # Claims it names, or the one the scheduler made for its extended resources.
        if not (pod.spec.get("resourceClaims") or pod.extended_claim_name) or pod.is_deleting:
            continue
        finished = pod.phase in ("Succeeded", "Failed")
        if not (pod.is_running or finished):
            continue
        for container in pod.containers:
            if asked >= CONTAINER_LIMIT:
                return
            asked += 1
            key = f"{pod.name}/{container}"
            try:
                if finished:
                    snap.containers[key] = {"log": api.core.read_namespaced_pod_log(
                        pod.name, pod.namespace, container=container, tail_lines=50,
                        _request_timeout=REQUEST_TIMEOUT)}
                else:
                    r = exec_in_container(api, pod.namespace, pod.name, container, list(command),
                                          timeout=REQUEST_TIMEOUT)
                    snap.containers[key] = {"stdout": r.stdout, "stderr": r.stderr,
                                            "exit_code": r.exit_code, "error": r.error}
            except Exception as err:  # noqa: BLE001 - a diagnosis must never raise
                snap.errors[f"GPUs seen by {key}"] = describe_error(err)


def _gather_control_plane(api, snap: Snapshot) -> None:
    """The scheduler's and controller-manager's Lease and pods, when a pod of the namespace
    shows that one of them did not act (unbound without PodScheduled, claims not generated)."""
    from draconf.controlplane import health
    pods = [Pod(p) for p in snap.pods]
    if any(p.template_claims_not_generated and not p.node for p in pods) or snap.namespace_without_sa:
        snap.control_plane["kube-controller-manager"] = health(api, "kube-controller-manager")
    if any(p.unseen_by_scheduler for p in pods):
        snap.control_plane["kube-scheduler"] = health(api, "kube-scheduler")


def _gather_service_account(api, snap: Snapshot, kw) -> None:
    """Whether the namespace lacks its ``default`` ServiceAccount (best effort)."""
    from kubernetes.client.exceptions import ApiException
    try:
        api.core.read_namespaced_service_account("default", snap.namespace, **kw)
    except ApiException as err:
        if err.status != 404:
            return
        try:
            ns = api.core.read_namespace(snap.namespace, **kw)
            snap.namespace_without_sa = _plain(api, ns)["metadata"].get("creationTimestamp")
        except Exception:  # noqa: BLE001
            pass
    except Exception:  # noqa: BLE001
        pass
