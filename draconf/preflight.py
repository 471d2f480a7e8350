"""Read-only preflight checks: is this cluster ready for DRA GPU workloads at all?

They follow the "Prerequisites and preflight checks" and "Validate the installation" steps of
the GPU Operator DRA guide, and the install footprint of the NVIDIA DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu, deployments/helm): each check reads the cluster, never
writes, and answers with one :class:`CheckResult`::

    from draconf.preflight import run_all, blocking_failures, describe
    results = run_all(api, profile)
    print(describe(results))
    for r in blocking_failures(results):
        print(r.diagnosis, r.summary)

Every check is a function ``(api, profile) -> CheckResult`` listed in :data:`CHECKS`, made of
a thin reading part and a pure ``evaluate_*`` function over plain data (unit-tested without
a cluster). API trouble never escapes as a traceback: a 403 names the RBAC permission that is
missing, an unreachable server says so, and in both cases the result is *inconclusive*
(``ok=False, inconclusive=True``, no diagnosis): the check could not reach a verdict, which
is not the same as the cluster failing it. A check with nothing to look at (e.g. no GPUCluster
CRD on a standalone driver install) is *not applicable* (``ok=True, applicable=False``).

>>> r = evaluate_server_version("v1.33.4", "1", "33")
>>> r.ok, r.diagnosis
(False, 'api-unavailable')
>>> "v1beta2" in r.summary
True
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import urllib3
from kubernetes.client.exceptions import ApiException
from tabulate import DataRow, TableFormat, tabulate

from draconf.devices import Device, devices_from_slices

BLOCKING = "blocking"
INFO = "info"

#: Seconds any single preflight request may take (an unroutable server must not hang the run).
REQUEST_TIMEOUT = 20

#: The lowest Kubernetes release serving resource.k8s.io/v1 (DRA GA).
MIN_VERSION = (1, 34)
#: The GPU Operator-managed DRA workflow asks for at least this patch release (the guide).
OPERATOR_MIN_VERSION = (1, 34, 2)
#: Resources the resource.k8s.io/v1 group must serve (`kubectl api-resources`).
REQUIRED_RESOURCES = ("deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices")

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

#: GPU Operator singletons: (group, version, plural) and the DRA-path object's name.
GPUCLUSTER = ("nvidia.com", "v1alpha1", "gpuclusters")
GPUCLUSTER_NAME = "gpu-cluster"
CLUSTERPOLICY = ("nvidia.com", "v1", "clusterpolicies")


@dataclass
class CheckResult:
    """The verdict of one check.

    ``ok`` is False both when the cluster fails the check and when the check could not be
    evaluated (``inconclusive``); ``diagnosis`` (a code of ``draconf.reporting.DIAGNOSES``) is
    set only for a definitive failure.
    """

    name: str
    ok: bool
    severity: str
    summary: str
    diagnosis: str | None = None
    evidence: dict[str, str] = field(default_factory=dict)
    #: the check could not reach a verdict (forbidden, unreachable, unexpected API answer).
    inconclusive: bool = False
    #: False when there was nothing to check (e.g. the GPUCluster CRD is not installed).
    applicable: bool = True
    #: the API server could not be used at all: unreachable, untrusted TLS certificate or
    #: credentials rejected (implies ``inconclusive``); run_all() stops asking after one.
    unreachable: bool = False
    #: the GPU nodes a failure is confined to (its plugin down there, no slices, devices
    #: lacking attributes); empty: it concerns the whole cluster.  See :mod:`draconf.nodescope`.
    nodes: tuple[str, ...] = ()

    @property
    def blocking(self) -> bool:
        """A definitive failure of a blocking check: DRA workloads cannot work here."""
        return not self.ok and not self.inconclusive and self.severity == BLOCKING

    @property
    def status(self) -> str:
        """PASS, FAIL, WARN (a failed info check), INCONCLUSIVE or N/A."""
        if self.inconclusive:
            return "INCONCLUSIVE"
        if not self.applicable:
            return "N/A"
        if self.ok:
            return "PASS"
        return "FAIL" if self.severity == BLOCKING else "WARN"


# --------------------------------------------------------------------------------------------
# Reading the API with errors turned into verdicts
# --------------------------------------------------------------------------------------------

class Inconclusive(Exception):
    """Raised while reading: the check cannot reach a verdict; ``str(err)`` says why."""

    def __init__(self, summary: str, evidence: Mapping[str, str] | None = None,
                 unreachable: bool = False):
        super().__init__(summary)
        self.summary = summary
        self.evidence = dict(evidence or {})
        self.unreachable = unreachable


@dataclass(frozen=True)
class Access:
    """What a read needs from RBAC: ``verb`` on ``resource`` in ``group`` (``""`` = core)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None

    def __str__(self) -> str:
        qualified = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f" in namespace {self.namespace}" if self.namespace else (
            " in all namespaces" if self.verb == "list" and self.resource == "pods" else "")
        return f"`{self.verb}` on {qualified}{where}"


def forbidden_summary(access: Access, server_message: str = "") -> str:
    """The operator-facing line for a 403.

    >>> forbidden_summary(Access("list", "resourceslices", "resource.k8s.io"))
    'forbidden: the credentials in use lack `list` on resourceslices.resource.k8s.io; grant it (e.g. with a ClusterRole bound to this user) and rerun'
    """
    line = (f"forbidden: the credentials in use lack {access}; grant it (e.g. with a "
            f"{'Role' if access.namespace else 'ClusterRole'} bound to this user) and rerun")
    return f"{line} (server: {server_message})" if server_message else line


def _server_message(err: ApiException) -> str:
    body = err.body.decode(errors="replace") if isinstance(err.body, bytes) else (err.body or "")
    match = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
    if match:
        return match.group(1).replace('\\"', '"')
    return body.strip() or f"{err.status} {err.reason}"


def _read(access: Access, call: Callable, *args, not_found_ok: bool = False, **kwargs):
    """``call(*args, **kwargs)`` with a request timeout; API trouble becomes :class:`Inconclusive`.

    A 404 returns None when ``not_found_ok``; any other 404 and any non-403 error status
    also become Inconclusive (the check could not read what it needs).
    """
    try:
        return call(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except ApiException as err:
        if err.status == 404 and not_found_ok:
            return None
        message = _server_message(err)
        if err.status == 403:
            raise Inconclusive(forbidden_summary(access), {"403 Forbidden": message}) from None
        if err.status == 401:
            raise Inconclusive("unauthorized: the API server rejected the credentials in the "
                               "kubeconfig (expired token or certificate?); refresh them and rerun",
                               {"401 Unauthorized": message}, unreachable=True) from None
        raise Inconclusive(f"the API server answered {err.status} {err.reason} to {access}: "
                           f"{message}", {f"{err.status} {err.reason}": message}) from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        host = _host_of(call)
        if "CERTIFICATE_VERIFY_FAILED" in str(err) or isinstance(
                getattr(err, "reason", None), urllib3.exceptions.SSLError):
            raise Inconclusive(f"the API server{' at ' + host if host else ''} presented a TLS "
                               f"certificate the kubeconfig does not trust ({_reason(err)}); "
                               "check the server address and certificate-authority-data in the "
                               "kubeconfig", {"TLS error": str(err)}, unreachable=True) from None
        raise Inconclusive(f"cannot reach the API server{' at ' + host if host else ''}: "
                           f"{_reason(err)}; check the kubeconfig's server address, the network "
                           "and that the control plane is up", {"connection error": str(err)},
                           unreachable=True) from None


def _host_of(call) -> str:
    api_client = getattr(getattr(call, "__self__", None), "api_client", None)
    return getattr(getattr(api_client, "configuration", None), "host", "") or ""


def _reason(err: Exception) -> str:
    reason = getattr(err, "reason", None) or err
    text = str(reason)
    # urllib3 wraps the OS error: "<...NewConnectionError object at 0x..>: Failed to establish
    # a new connection: [Errno 111] Connection refused" -> keep the part after the repr.
    return text.split(">: ", 1)[-1]


def check(name: str, severity: str = BLOCKING, requires: str | None = None):
    """Register a check function under ``name``; turns :class:`Inconclusive` into a result.

    ``requires`` names a field of the profile's :class:`~draconf.profile.Capabilities`: when the
    profile says the driver lacks it, the check is not applicable and reads nothing.
    """

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(api, profile) -> CheckResult:
            try:
                if requires and not getattr(profile.capabilities, requires):
                    result = _result(True, not_applicable_by_profile(profile, requires),
                                     applicable=False)
                else:
                    result = fn(api, profile)
            except Inconclusive as err:
                result = CheckResult(name, False, severity, err.summary, None, err.evidence,
                                     inconclusive=True, unreachable=err.unreachable)
            result.name, result.severity = name, severity
            return result

        run.check_name = name  # type: ignore[attr-defined]
        CHECKS[name] = run
        SEVERITY[name] = severity
        return run

    return wrap


#: Capability -> (profile key, what it means), for the N/A line of a check that needs it.
CAPABILITY_MEANING = {
    "gpu_cluster": ("gpuCluster", "the driver is not managed by GPU Operator's GPUCluster"),
    "cluster_policy": ("clusterPolicy", "the driver has no GPU Operator ClusterPolicy to conflict with"),
}


def not_applicable_by_profile(profile, capability: str) -> str:
    """Why a check needing ``capability`` does not apply to the profile's driver.

    >>> from draconf.profile import builtin
    >>> not_applicable_by_profile(builtin("example"), "gpu_cluster")
    "profile example (driver gpu.example.com): the driver is not managed by GPU Operator's GPUCluster (capabilities.gpuCluster: false); nothing to check"
    """
    key, meaning = CAPABILITY_MEANING.get(capability, (capability, f"the driver lacks {capability}"))
    return (f"profile {profile.name} (driver {profile.driver}): {meaning} "
            f"(capabilities.{key}: false); nothing to check")


#: Every check in the order run_all() runs them: name -> function(api, profile).
CHECKS: dict[str, Callable] = {}
#: name -> severity of every registered check.
SEVERITY: dict[str, str] = {}


def _result(ok: bool, summary: str, diagnosis: str | None = None,
            evidence: Mapping[str, str] | None = None, applicable: bool = True,
            nodes: Iterable[str] = ()) -> CheckResult:
    # name and severity are filled in by @check.
    return CheckResult("", ok, BLOCKING, summary, None if ok else diagnosis, dict(evidence or {}),
                       applicable=applicable, nodes=() if ok else tuple(sorted(set(nodes))))


#: kubectl's layout: left-aligned columns three spaces apart, no rules.
_KUBECTL = TableFormat(lineabove=None, linebelowheader=None, linebetweenrows=None, linebelow=None,
                       headerrow=DataRow("", "   ", ""), datarow=DataRow("", "   ", ""),
                       padding=0, with_header_hide=None)


def _table(rows: Iterable[Iterable[object]], header: Iterable[str]) -> str:
    """Rows as aligned columns, like kubectl's output.

    >>> print(_table([("slice-a", 4), ("slice-bb", 12)], ("NAME", "DEVICES")))
    NAME       DEVICES
    slice-a    4
    slice-bb   12
    """
    # The header goes in as a row: tabulate's `headers` would widen each column by two.
    text = tabulate([list(header), *rows], tablefmt=_KUBECTL, disable_numparse=True)
    return "\n".join(line.rstrip() for line in text.splitlines())


def _names(items: Iterable[str], limit: int = 10) -> str:
    items = sorted(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# --------------------------------------------------------------------------------------------
# server-version
# --------------------------------------------------------------------------------------------

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_server_version(git_version: str | None, major: str | None = None,
                         minor: str | None = None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a server, from ``gitVersion`` or else ``major``/``minor``.

    Managed clusters decorate both: ``v1.30.2-eks-1a2b3c``, minor ``30+``.

    >>> parse_server_version("v1.36.3")
    (1, 36, 3)
    >>> parse_server_version("v1.33.1-gke.1200", "1", "33+")
    (1, 33, 1)
    >>> parse_server_version("", "1", "34+")
    (1, 34, 0)
    >>> parse_server_version("garbage", "x", "y") is None
    True
    """
    match = _VERSION.match((git_version or "").strip())
    if match:
        return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    digits = [re.match(r"\d+", (v or "").strip()) for v in (major, minor)]
    if all(digits):
        return int(digits[0].group()), int(digits[1].group()), 0
    return None


def evaluate_server_version(git_version: str | None, major: str | None = None,
                            minor: str | None = None, emulation_major: str | None = None,
                            emulation_minor: str | None = None) -> CheckResult:
    """Kubernetes 1.34+ serves resource.k8s.io/v1; say what older releases would need.

    An API server started with ``--emulated-version`` serves the APIs of the emulated release,
    so that one decides.
    """
    evidence = {"server version": f"gitVersion={git_version} major={major} minor={minor}"
                + (f" emulationMajor={emulation_major} emulationMinor={emulation_minor}"
                   if emulation_minor else "")}
    version = parse_server_version(git_version, major, minor)
    if version is None:
        return _result(False, f"cannot tell the Kubernetes version from the server's /version "
                              f"({git_version!r}); check `kubectl version`", "api-unavailable",
                       evidence)
    label = f"v{version[0]}.{version[1]}.{version[2]}"
    effective = version[:2]
    emulated = parse_server_version(None, emulation_major, emulation_minor) if emulation_minor else None
    if emulated and emulated[:2] != effective:
        effective = emulated[:2]
        label += f" (emulating {emulated[0]}.{emulated[1]})"
    if effective >= MIN_VERSION:
        summary = f"Kubernetes {label} serves resource.k8s.io/v1 (needs 1.34 or later)"
        if version[:2] == OPERATOR_MIN_VERSION[:2] and version < OPERATOR_MIN_VERSION:
            summary += ("; note: the GPU Operator-managed DRA workflow asks for 1.34.2 or later")
        return _result(True, summary, evidence=evidence)
    if effective == (1, 33):
        need = ("it serves DRA as resource.k8s.io/v1beta2 at most, so the driver and workloads "
                "would need v1beta2; this suite tests resource.k8s.io/v1")
    elif effective == (1, 32):
        need = ("it serves DRA only as resource.k8s.io/v1beta1 (v1beta2 arrives in 1.33), behind "
                "the DynamicResourceAllocation feature gate; this suite tests resource.k8s.io/v1")
    else:
        need = "it has no stable DRA API; this suite tests resource.k8s.io/v1"
    return _result(False, f"Kubernetes {label} is too old for resource.k8s.io/v1 (GA in 1.34): "
                          f"{need}. Upgrade the control plane to 1.34 or later "
                          "(1.34.2+ for the GPU Operator workflow)", "api-unavailable", evidence)


@check("server-version")
def check_server_version(api, profile) -> CheckResult:
    info = _read(Access("get", "/version"), api.version.get_code)
    return evaluate_server_version(info.git_version, info.major, info.minor,
                                   getattr(info, "emulation_major", None),
                                   getattr(info, "emulation_minor", None))


# --------------------------------------------------------------------------------------------
# permissions (what manifests/rbac/clusterrole.yaml grants; draconf.permissions)
# --------------------------------------------------------------------------------------------

@check("permissions")
def check_permissions(api, profile) -> CheckResult:
    from draconf import permissions
    from draconf.errors import DraconfError
    try:
        wanted = permissions.needed()
    except DraconfError as err:
        raise Inconclusive(str(err)) from None
    denied = _read(Access("create", "selfsubjectaccessreviews", "authorization.k8s.io"),
                   lambda _request_timeout=None: permissions.review(api, wanted))
    return permissions.evaluate(wanted, denied, permissions.whoami(api) if denied else None)


# --------------------------------------------------------------------------------------------
# resource-api
# --------------------------------------------------------------------------------------------

def evaluate_resource_api(resources: Iterable[str] | None,
                          served_versions: Iterable[str] = ()) -> CheckResult:
    """``resources``: what /apis/resource.k8s.io/v1 lists (None when it is not served).

    >>> evaluate_resource_api(None, ["v1beta1"]).summary.split(";")[0]
    'the API server does not serve resource.k8s.io/v1 (the group serves: v1beta1)'
    """
    served = sorted(served_versions)
    group = f" (the group serves: {', '.join(served)})" if served else (
        " (the resource.k8s.io group is not served at all)")
    if resources is None:
        return _result(False, f"the API server does not serve resource.k8s.io/v1{group}; "
                              "enable it (Kubernetes 1.34+, or --runtime-config="
                              "resource.k8s.io/v1=true) and check `kubectl api-resources "
                              "--api-group=resource.k8s.io`", "api-unavailable",
                       {"served versions": ", ".join(served) or "none"})
    listed = {r for r in resources if "/" not in r}
    missing = [r for r in REQUIRED_RESOURCES if r not in listed]
    evidence = {"kubectl api-resources --api-group=resource.k8s.io": ", ".join(sorted(listed))}
    if missing:
        return _result(False, f"resource.k8s.io/v1 is served but lacks {', '.join(missing)}; "
                              "check the API server's --runtime-config and feature gates",
                       "api-unavailable", evidence)
    return _result(True, f"resource.k8s.io/v1 serves {', '.join(REQUIRED_RESOURCES)}",
                   evidence=evidence)


@check("resource-api")
def check_resource_api(api, profile) -> CheckResult:
    from kubernetes import client
    listing = _read(Access("get", "/apis/resource.k8s.io/v1 (discovery)"),
                    api.resource.get_api_resources, not_found_ok=True)
    if listing is not None:
        return evaluate_resource_api([r.name for r in listing.resources or []])
    group = _read(Access("get", "/apis/resource.k8s.io (discovery)"),
                  client.ResourceApi(api.api_client).get_api_group, not_found_ok=True)
    versions = []
    for v in (group.versions if group else None) or []:
        versions.append(v["version"] if isinstance(v, dict) else v.version)
    return evaluate_resource_api(None, versions)


# --------------------------------------------------------------------------------------------
# device-class, optional-device-classes
# --------------------------------------------------------------------------------------------

def evaluate_device_class(existing: Iterable[str], device_class: str) -> CheckResult:
    existing = sorted(existing)
    evidence = {"kubectl get deviceclass": "\n".join(existing) or "(none)"}
    if device_class in existing:
        return _result(True, f"DeviceClass {device_class} exists", evidence=evidence)
    hint = " (NVIDIA chart: resources.gpus.enabled=true)" if device_class.endswith("nvidia.com") else ""
    return _result(False, f"DeviceClass {device_class} does not exist, so every claim requesting it "
                          f"stays Pending ('device class {device_class} does not exist'). It is "
                          f"created by the DRA driver's Helm values{hint}, not by the workload: "
                          "fix the driver's Helm values and upgrade the release, then check "
                          "`kubectl get deviceclass`", "missing-deviceclass", evidence)


def evaluate_optional_classes(existing: Iterable[str], optional: Iterable[str]) -> CheckResult:
    """Information: ok when every optional DeviceClass exists, a WARN naming the absent ones
    (workloads of those device types would stay Pending) otherwise; never blocking.

    >>> evaluate_optional_classes(["gpu.nvidia.com"], ["mig.nvidia.com"]).ok
    False
    >>> evaluate_optional_classes(["mig.nvidia.com"], ["mig.nvidia.com"]).ok
    True
    """
    existing = set(existing)
    optional = list(optional)
    present = [c for c in optional if c in existing]
    absent = [c for c in optional if c not in existing]
    if not optional:
        return _result(True, "the profile names no optional DeviceClasses", applicable=False)
    parts = []
    if present:
        parts.append(f"present: {', '.join(present)}")
    if absent:
        parts.append(f"absent: {', '.join(absent)} (only needed for those device types)")
    return _result(not absent, "optional DeviceClasses " + "; ".join(parts),
                   evidence={"optional DeviceClasses": "\n".join(
                       f"{c}: {'present' if c in existing else 'absent'}" for c in optional)})


def _device_class_names(api) -> list[str]:
    items = _read(Access("list", "deviceclasses", "resource.k8s.io"),
                  api.resource.list_device_class).items
    return [c.metadata.name for c in items]


@check("device-class")
def check_device_class(api, profile) -> CheckResult:
    return evaluate_device_class(_device_class_names(api), profile.device_class)


@check("optional-device-classes", INFO)
def check_optional_device_classes(api, profile) -> CheckResult:
    return evaluate_optional_classes(_device_class_names(api), profile.optional_device_classes)


# --------------------------------------------------------------------------------------------
# GPU nodes and the kubelet plugin's pods
# --------------------------------------------------------------------------------------------

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


def _plugin_pods(api, plugin=None) -> tuple[list[PluginDaemonSet], list[PluginPod]]:
    """The kubelet-plugin DaemonSets of every known install (``plugin``: a profile's
    :class:`~draconf.profile.Plugin`; None: the NVIDIA ones), and their pods."""
    daemonsets, pods = [], {}
    known = plugin.daemonsets if plugin else PLUGIN_DAEMONSETS
    selectors = plugin.pod_selectors if plugin else PLUGIN_POD_SELECTORS
    for namespace, name in known:
        ds = _read(Access("get", "daemonsets", "apps", namespace),
                   api.apps.read_namespaced_daemon_set, name, namespace, not_found_ok=True)
        if ds is None:
            continue
        st = ds.status
        daemonsets.append(PluginDaemonSet(namespace, name, st.desired_number_scheduled or 0,
                                          st.number_ready or 0, st.number_available or 0))
        labels = (ds.spec.selector.match_labels or {}) if ds.spec and ds.spec.selector else {}
        if labels:
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            for p in _read(Access("list", "pods", "", namespace), api.core.list_namespaced_pod,
                           namespace, label_selector=selector).items:
                pods[(p.metadata.namespace, p.metadata.name)] = p
    for selector in selectors:
        for p in _read(Access("list", "pods"), api.core.list_pod_for_all_namespaces,
                       label_selector=selector).items:
            pods[(p.metadata.namespace, p.metadata.name)] = p
    return daemonsets, [plugin_pod(p) for _, p in sorted(pods.items())]


def _gpu_nodes(api, plugin_pods: list[PluginPod],
               gpu_labels: Mapping[str, str] = GPU_NODE_LABELS) -> tuple[list[str], list[str]]:
    """(GPU node names, all node names)."""
    nodes = _read(Access("list", "nodes"), api.core.list_node).items
    pairs = [(n.metadata.name, n.metadata.labels) for n in nodes]
    return gpu_node_names(pairs, [p.node for p in plugin_pods], gpu_labels), sorted(n for n, _ in pairs)


# --------------------------------------------------------------------------------------------
# resource-slices
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SliceInfo:
    name: str
    driver: str
    node: str | None
    pool: str
    devices: int


def slice_info(s) -> SliceInfo:
    """A :class:`SliceInfo` from a V1ResourceSlice of the Python client."""
    return SliceInfo(s.metadata.name, s.spec.driver, s.spec.node_name,
                     s.spec.pool.name if s.spec.pool else "", len(s.spec.devices or []))


def evaluate_resource_slices(gpu_nodes: Iterable[str], slices: Iterable[SliceInfo],
                             driver: str) -> CheckResult:
    """Every GPU node publishes a pool of ``driver`` with at least one device.

    Slices without devices (the shared-counter slice of 1.35+, or an empty pool) are skipped.
    """
    gpu_nodes = sorted(set(gpu_nodes))
    slices = [s for s in slices if s.driver == driver]
    devices_by_node: dict[str, int] = {}
    for s in slices:
        if s.node and s.devices:
            devices_by_node[s.node] = devices_by_node.get(s.node, 0) + s.devices
    total = sum(s.devices for s in slices)
    evidence = {"kubectl get resourceslice": _table(
        [(s.name, s.node or "-", s.driver, s.pool, s.devices) for s in slices],
        ("NAME", "NODE", "DRIVER", "POOL", "DEVICES")) if slices else "(no ResourceSlices of "
        f"driver {driver})", "GPU nodes": ", ".join(gpu_nodes) or "(none)"}
    without = [n for n in gpu_nodes if not devices_by_node.get(n)]
    if total == 0:
        where = (f"; GPU nodes without devices: {_names(without)}" if gpu_nodes else
                 "; no node is labelled as a GPU node or runs the kubelet plugin either")
        return _result(False, f"no ResourceSlice of driver {driver} has any device, so the "
                              f"scheduler sees no GPUs{where}. Creating claims will not fix "
                              "this: check that the kubelet plugin runs on each GPU node and "
                              "can discover its GPUs (its logs), then `kubectl get resourceslice`",
                       "no-resourceslices", evidence)
    if without:
        return _result(False, f"{len(without)} of {len(gpu_nodes)} GPU node(s) publish no "
                              f"devices of driver {driver}: {_names(without)}; check the kubelet "
                              "plugin pod and GPU driver on those nodes", "no-resourceslices",
                       evidence, nodes=without)
    nodes = sorted(devices_by_node)
    return _result(True, f"{total} device(s) of driver {driver} published by {len(nodes)} "
                         f"node(s); every GPU node has a pool", evidence=evidence)


def _slices(api, driver: str) -> list:
    return _read(Access("list", "resourceslices", "resource.k8s.io"),
                 api.resource.list_resource_slice, field_selector=f"spec.driver={driver}").items


@check("resource-slices")
def check_resource_slices(api, profile) -> CheckResult:
    note = None
    try:
        _, pods = _plugin_pods(api, profile.plugin)
    except Inconclusive as err:
        if err.unreachable:
            raise
        # Plugin pods only widen the set of GPU nodes; the node labels still answer.
        pods, note = [], err.summary
    gpu_nodes, _ = _gpu_nodes(api, pods, dict(profile.plugin.gpu_node_labels))
    result = evaluate_resource_slices(gpu_nodes, [slice_info(s) for s in _slices(api, profile.driver)],
                                      profile.driver)
    if note:
        result.evidence["GPU nodes found by label only"] = f"kubelet-plugin pods not read: {note}"
    return result


# --------------------------------------------------------------------------------------------
# device-attributes
# --------------------------------------------------------------------------------------------

def evaluate_attributes(devices: Iterable[Device], required: Iterable[str],
                        memory_capacity: str | None) -> CheckResult:
    """Every device publishes the minimum attribute set (extras are fine) and its memory."""
    devices = list(devices)
    required = list(required)
    if not devices:
        return _result(True, "no devices are published, so there are no attributes to check "
                             "(see resource-slices)", applicable=False)
    lacking: dict[str, list[Device]] = {}
    for name in required:
        missing = [d for d in devices if not d.has_attribute(name)]
        if missing:
            lacking[f"attribute {name}"] = missing
    if memory_capacity:
        missing = [d for d in devices if d.memory(memory_capacity) is None]
        if missing:
            lacking[f"capacity {memory_capacity}"] = missing
    evidence = {f"devices without {what}": "\n".join(str(d) for d in devs[:50])
                + (f"\n... and {len(devs) - 50} more" if len(devs) > 50 else "")
                for what, devs in lacking.items()}
    wanted = ", ".join(required + ([f"capacity {memory_capacity}"] if memory_capacity else []))
    if lacking:
        parts = [f"{what} is missing on {len(devs)} of {len(devices)} device(s) "
                 f"({_names(sorted({str(d) for d in devs}), limit=3)})"
                 for what, devs in lacking.items()]
        lacking_devices = [d for devs in lacking.values() for d in devs]
        # Confined to the nodes of those devices, unless one of them belongs to no node.
        nodes = () if any(d.node is None for d in lacking_devices) else {d.node for d in lacking_devices}
        return _result(False, "; ".join(parts) + ". Selectors using it will leave pods Pending "
                              "(CEL runtime error: no such key); check the driver version and "
                              "the attribute names in `kubectl get resourceslice -o yaml`",
                       "attribute-missing", evidence, nodes=nodes)
    return _result(True, f"all {len(devices)} device(s) publish {wanted}")


@check("device-attributes")
def check_device_attributes(api, profile) -> CheckResult:
    devices = devices_from_slices(_slices(api, profile.driver))
    return evaluate_attributes(devices, profile.required_attributes(), profile.memory_capacity)


# --------------------------------------------------------------------------------------------
# device-class-selectors
# --------------------------------------------------------------------------------------------

def evaluate_class_selectors(device_class: str, selectors: list[str] | None,
                             devices: Iterable[Device]) -> CheckResult:
    """The class's own CEL selectors, evaluated by :mod:`draconf.cel` on every published
    device: a class that selects none of them leaves every claim of it unallocatable.

    >>> d = Device("gpu.nvidia.com", "n", "gpu-0", "n", {"gpu.nvidia.com/type": "gpu"})
    >>> r = evaluate_class_selectors("gpu.nvidia.com", ["device.attributes['gpu.nvidia.com'].type == 'tpu'"], [d])
    >>> r.ok, r.diagnosis
    (False, 'selector-unmatched')
    >>> print(r.summary.split(":")[0])
    gpu.nvidia.com selects 0 of 1 published devices
    >>> evaluate_class_selectors("gpu.nvidia.com", [], [d]).summary
    'gpu.nvidia.com has no selector: all 1 published devices are eligible'
    """
    from draconf import cel

    devices = list(devices)
    if selectors is None:
        return _result(True, f"DeviceClass {device_class} does not exist (see device-class)",
                       applicable=False)
    if not devices:
        return _result(True, "no devices are published, so no selector to check (see resource-slices)",
                       applicable=False)
    expression = " && ".join(" ".join(s.split()) for s in selectors)
    if not selectors:
        return _result(True, f"{device_class} has no selector: all {len(devices)} published devices "
                             "are eligible")
    verdicts = {str(d): cel.evaluate_all(selectors, d) for d in devices}
    chosen = [k for k, v in verdicts.items() if v.matched]
    failed = {k: v for k, v in verdicts.items() if v.failed}
    evidence = {"DeviceClass selectors": "\n".join(selectors),
                "per published device": "\n".join(f"{k}: {v}" for k, v in list(verdicts.items())[:50])}
    if chosen:
        extra = f" ({len(failed)} fail with a CEL error)" if failed else ""
        return _result(True, f"{device_class} selects {len(chosen)} of {len(devices)} published "
                             f"devices{extra}: {expression}", evidence=evidence)
    summary = f"{device_class} selects 0 of {len(devices)} published devices: {expression}"
    if failed:
        first = next(iter(failed.values()))
        missing = next((v.missing for v in failed.values() if v.missing), None)
        return _result(False, f"{summary} ({len(failed)} fail with {first}). Every claim of this "
                              "class stays Pending: fix the class's selector or the published "
                              "attributes (`kubectl get deviceclass -o yaml`)",
                       "attribute-missing" if missing else "selector-unmatched", evidence)
    return _result(False, f"{summary}. Every claim of this class stays Pending ('cannot allocate "
                          "all claims'): fix the DeviceClass's selector (the driver's Helm values) to "
                          "match the published attributes (`kubectl get resourceslice -o yaml`)",
                   "selector-unmatched", evidence)


@check("device-class-selectors")
def check_class_selectors(api, profile) -> CheckResult:
    item = _read(Access("get", "deviceclasses", "resource.k8s.io"), api.resource.read_device_class,
                 profile.device_class, not_found_ok=True)
    selectors = None if item is None else [
        s.cel.expression for s in item.spec.selectors or [] if s.cel and s.cel.expression]
    devices = devices_from_slices(_slices(api, profile.driver))
    return evaluate_class_selectors(profile.device_class, selectors, devices)


# --------------------------------------------------------------------------------------------
# kubelet-plugin
# --------------------------------------------------------------------------------------------

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
        return _result(False, "no DRA kubelet plugin found (none of the DaemonSets "
                              f"{known}, no pod labelled {' or '.join(pod_selectors)}): "
                              "install the DRA driver, or check its release namespace",
                       "plugin-unhealthy", evidence)
    if not gpu_nodes and not ready_pods:
        # Nothing marks a GPU node and no plugin pod runs: "Ready on all 0 nodes" would be a
        # pass without evidence.  A DaemonSet whose selector matches no node looks like this.
        wanted = ", ".join(f"{d.namespace}/{d.name} (desired {d.desired})" for d in daemonsets) or "none"
        return _result(False, f"no kubelet-plugin pod runs on any node (DaemonSets: {wanted}) and no node "
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
                         f"kubelet-plugin pod: {_names(uncovered)}")
        if not_ready:
            parts.append(f"{len(not_ready)} plugin pod(s) not Ready"
                         + (f" ({', '.join(reasons)})" if reasons else ""))
        if daemonsets:
            logs = f"kubectl logs -n {daemonsets[0].namespace} daemonset/{daemonsets[0].name}"
        elif not_ready:
            logs = f"kubectl logs -n {not_ready[0].namespace} {not_ready[0].name}"
        else:
            logs = "kubectl logs <kubelet-plugin pod>"
        return _result(False, "; ".join(parts) + ". Claims on those nodes cannot be prepared: "
                              f"check the plugin's logs (`{logs} --all-containers --tail=200`) "
                              "and the node's GPU driver", "plugin-unhealthy", evidence,
                       nodes=() if any(p.node is None for p in not_ready)
                       else set(uncovered) | {p.node for p in not_ready})
    return _result(True, f"kubelet plugin Ready on all {len(gpu_nodes)} GPU node(s)"
                         + (f" ({', '.join(d.namespace + '/' + d.name for d in daemonsets)})"
                            if daemonsets else ""), evidence=evidence)


@check("kubelet-plugin")
def check_kubelet_plugin(api, profile) -> CheckResult:
    daemonsets, pods = _plugin_pods(api, profile.plugin)
    gpu_nodes, _ = _gpu_nodes(api, pods, dict(profile.plugin.gpu_node_labels))
    return evaluate_kubelet_plugin(gpu_nodes, daemonsets, pods, profile.plugin.daemonsets,
                                   profile.plugin.pod_selectors)


# --------------------------------------------------------------------------------------------
# gpu-cluster, policy-conflict
# --------------------------------------------------------------------------------------------

def evaluate_gpu_cluster(gpuclusters: list[Mapping] | None) -> CheckResult:
    """``gpuclusters``: the GPUCluster objects, or None when the CRD is not installed."""
    if gpuclusters is None:
        return _result(True, "GPUCluster CRD (nvidia.com/v1alpha1) not installed: the driver is "
                             "not managed by GPU Operator's DRA path; nothing to check",
                       applicable=False)
    by_name = {(o.get("metadata") or {}).get("name"): o for o in gpuclusters}
    obj = by_name.get(GPUCLUSTER_NAME)
    if obj is None:
        return _result(True, f"GPUCluster CRD installed but no `{GPUCLUSTER_NAME}` object: GPU "
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
        return _result(True, f"GPUCluster {GPUCLUSTER_NAME} is ready", evidence=evidence)
    return _result(False, f"GPUCluster {GPUCLUSTER_NAME} reports "
                          f"{'state ' + state if state else 'no state yet'} (expected ready): "
                          "GPU Operator has not brought up the DRA components; see "
                          "`kubectl describe gpucluster gpu-cluster` and `kubectl get pods -n "
                          "gpu-operator`", "plugin-unhealthy", evidence)


def evaluate_policy_conflict(clusterpolicies: list[Mapping] | None,
                             gpuclusters: list[Mapping] | None) -> CheckResult:
    """A cluster has a GPUCluster (DRA) or a ClusterPolicy (device plugin), never both."""
    policies = sorted((o.get("metadata") or {}).get("name", "?") for o in clusterpolicies or [])
    clusters = sorted((o.get("metadata") or {}).get("name", "?") for o in gpuclusters or [])
    evidence = {"kubectl get clusterpolicy": "\n".join(policies) or (
                    "(CRD not installed)" if clusterpolicies is None else "(none)"),
                "kubectl get gpucluster": "\n".join(clusters) or (
                    "(CRD not installed)" if gpuclusters is None else "(none)")}
    if policies and clusters:
        return _result(False, f"ClusterPolicy {', '.join(policies)} exists beside GPUCluster "
                              f"{', '.join(clusters)}: a cluster uses the device plugin "
                              "(ClusterPolicy) or DRA (GPUCluster), not both. Do not convert a "
                              "ClusterPolicy cluster in place: NVIDIA documents GPUCluster as a "
                              "new-installation workflow (clusterPolicy.deployCR=false, "
                              "gpuCluster.deployCR=true), not a migration; keep one allocation "
                              "path and reinstall for the other",
                       "policy-conflict", evidence)
    if policies:
        return _result(True, f"only a ClusterPolicy ({', '.join(policies)}) exists, no GPUCluster; "
                             "no conflict, but the GPU Operator DRA path expects a fresh install "
                             "without one", evidence=evidence)
    return _result(True, "no ClusterPolicy beside the GPUCluster" if clusters else
                   "neither ClusterPolicy nor GPUCluster present; no conflict", evidence=evidence)


def _list_cluster_objects(api, gvp: tuple[str, str, str]) -> list[dict] | None:
    group, version, plural = gvp
    listing = _read(Access("list", plural, group), api.custom.list_cluster_custom_object,
                    group, version, plural, not_found_ok=True)
    return None if listing is None else list(listing.get("items") or [])


@check("gpu-cluster", requires="gpu_cluster")
def check_gpu_cluster(api, profile) -> CheckResult:
    return evaluate_gpu_cluster(_list_cluster_objects(api, GPUCLUSTER))


@check("policy-conflict", requires="cluster_policy")
def check_policy_conflict(api, profile) -> CheckResult:
    return evaluate_policy_conflict(_list_cluster_objects(api, CLUSTERPOLICY),
                                    _list_cluster_objects(api, GPUCLUSTER))


# --------------------------------------------------------------------------------------------
# Running them all
# --------------------------------------------------------------------------------------------

def probe(api) -> str | None:
    """None when the API server answers; otherwise one line saying why it cannot be used
    (unreachable, untrusted certificate, credentials rejected). For a session's first contact::

        reason = probe(api)
        if reason:
            raise DraconfError(reason)
    """
    try:
        _read(Access("get", "/version"), api.version.get_code)
    except Inconclusive as err:
        return err.summary if err.unreachable else None
    return None


def run_check(name: str, api, profile) -> CheckResult:
    """One check by name (see :data:`CHECKS`)."""
    try:
        fn = CHECKS[name]
    except KeyError:
        raise ValueError(f"unknown preflight check {name!r}; known: {', '.join(CHECKS)}") from None
    return fn(api, profile)


def run_all(api, profile) -> list[CheckResult]:
    """Every check, in :data:`CHECKS` order.

    Once the API server turns out unreachable, the remaining checks are not attempted: they
    get the same inconclusive verdict at once instead of each waiting on the network.
    """
    results = []
    unreachable: CheckResult | None = None
    for name, fn in CHECKS.items():
        if unreachable is not None:
            results.append(CheckResult(name, False, SEVERITY[name], unreachable.summary,
                                       None, {}, inconclusive=True, unreachable=True))
            continue
        result = fn(api, profile)
        results.append(result)
        if result.unreachable:
            unreachable = result
    return results


def blocking_failures(results: Iterable[CheckResult]) -> list[CheckResult]:
    """Definitive failures of blocking checks (inconclusive results are not included)."""
    return [r for r in results if r.blocking]


def describe(results: Iterable[CheckResult], width: int | None = None) -> str:
    """A compact table for the terminal: one line per check (summary cut to ``width`` if given).

    >>> print(describe([CheckResult("server-version", True, BLOCKING, "Kubernetes v1.36.3"),
    ...                 CheckResult("device-class", False, BLOCKING, "DeviceClass x does not exist",
    ...                             "missing-deviceclass")]))
    CHECK           RESULT  DIAGNOSIS            SUMMARY
    server-version  PASS    -                    Kubernetes v1.36.3
    device-class    FAIL    missing-deviceclass  DeviceClass x does not exist
    """
    rows = [("CHECK", "RESULT", "DIAGNOSIS", "SUMMARY")]
    rows += [(r.name, r.status, r.diagnosis or "-", r.summary) for r in results]
    lines = tabulate(rows, tablefmt="plain", disable_numparse=True).splitlines()
    if not width:
        return "\n".join(line.rstrip() for line in lines)
    start = lines[0].index("SUMMARY")
    room = max(20, width - start)
    return "\n".join((line if len(line) - start <= room else line[:start + room - 3] + "...").rstrip()
                     for line in lines)


# --------------------------------------------------------------------------------------------
# device-taints (informational): which devices the driver tainted, and why
# --------------------------------------------------------------------------------------------

def evaluate_device_taints(tainted, driver: str) -> CheckResult:
    """Passes either way: a tainted device is the driver reporting an unhealthy GPU, which the
    report names (node/device, key=value:effect) so an operator sees why capacity is missing.

    >>> from draconf.taints import TaintedDevice
    >>> r = evaluate_device_taints([TaintedDevice("d", "gpu-h100-0", "gpu-4", "gpu-h100-0",
    ...     ({"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"},), {})], "d")
    >>> r.ok, r.summary
    (True, '1 device(s) of driver d tainted: gpu-h100-0/gpu-4 (gpu.nvidia.com/xid=79:NoSchedule); 1 kept from claims that do not tolerate it')
    >>> evaluate_device_taints([], "d").summary
    'no device of driver d carries a taint'
    """
    if not tainted:
        return _result(True, f"no device of driver {driver} carries a taint")
    blocked = [d for d in tainted if d.blocking]
    evidence = {"tainted devices": _table([(d.node or "-", d.name, ", ".join(
        f"{t.get('key')}={t.get('value') or ''}:{t.get('effect')}" for t in d.taints)) for d in tainted],
        ("NODE", "DEVICE", "TAINTS"))}
    return _result(True, f"{len(tainted)} device(s) of driver {driver} tainted: "
                         f"{'; '.join(d.summary() for d in tainted)}; {len(blocked)} kept from claims "
                         "that do not tolerate it", evidence=evidence)


@check("device-taints", INFO)
def check_device_taints(api, profile) -> CheckResult:
    from draconf.taints import tainted_devices
    slices = [api.api_client.sanitize_for_serialization(s) for s in _slices(api, profile.driver)]
    return evaluate_device_taints(tainted_devices(slices), profile.driver)
