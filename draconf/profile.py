"""How the suite talks to a DRA driver: its DeviceClass, attribute names, how injection shows.

A profile is a data file.  The built-in ones live beside this module in ``profiles/``:
``nvidia`` (the NVIDIA DRA driver for GPUs, the default) and ``example``
(kubernetes-sigs/dra-example-driver).  A YAML file of your own describes another driver, or
the same one with an air-gapped image; every key is optional and defaults to the profile named
by ``extends`` (``nvidia`` when absent)::

    name: nvidia-airgapped
    image: registry.internal/ubuntu:24.04
    timeouts: {running: 300}

The keys, and what the suite does with each, are documented in docs/profiles.md.

>>> p = builtin("nvidia")
>>> p.device_class, p.attributes["model"]
('gpu.nvidia.com', 'productName')
>>> from_dict({"image": "mirror/ubuntu:24.04"}).image
'mirror/ubuntu:24.04'
>>> e = builtin("example")
>>> e.driver, e.attributes.get("architecture"), e.injection.describe()
('gpu.example.com', None, 'env')
>>> e.injection.parse("GPU_DEVICE_3=gpu-3\\nGPU_DEVICE_3_RESOURCE_CLAIM=9f1c\\nHOME=/root\\n")
['gpu-3']
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from draconf.errors import DraconfError, yaml_problem

#: Attribute roles the suite relies on, and the NVIDIA driver's names for them.  A profile may
#: leave out every role but ``uuid`` (the cleanup probe selects freed devices by it); what needs
#: a role the profile lacks is skipped, naming the role.
NVIDIA_ATTRIBUTES = {"model": "productName", "uuid": "uuid", "architecture": "architecture",
                     "type": "type"}
ROLES = tuple(NVIDIA_ATTRIBUTES)
REQUIRED_ROLES = ("uuid",)
#: How a command's output becomes device identities (see Injection.parse).
INJECTION_FORMATS = ("nvidia-smi-L", "env", "lines")
#: What a container's identities are compared with: a device's name, or an attribute role.
IDENTITY_NAME = "name"
#: Pod Security Standards levels, strictest first.
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
#: Where the profiles shipped with draconf live.
PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait before giving up when no definitive signal arrives."""
    schedule: float = 60
    running: float = 180
    exec: float = 30
    cleanup: float = 120


_NVIDIA_SMI_LINE = re.compile(r"^\s*GPU \d+: .* \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")


@dataclass(frozen=True)
class Injection:
    """How to read what a container received from its claims: run ``command`` in it and parse
    the output into device identities, which are compared with the allocated devices'
    ``identity`` (an attribute role such as ``uuid``, or ``name``: the device's name).

    Formats:

    * ``nvidia-smi-L``: the UUIDs of ``nvidia-smi -L`` lines (MIG lines are not full GPUs);
    * ``env``: ``KEY=VALUE`` lines (``env``'s output); the values of the variables whose whole
      name matches the regular expression ``variable``;
    * ``lines``: each line matching the regular expression ``pattern``; its first group (or the
      whole match when it has none).

    >>> Injection().parse("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\\n")
    ['GPU-1234']
    >>> Injection(("ls", "/dev/dri"), "lines", pattern=r"renderD\\d+").parse("card0\\nrenderD128\\n")
    ['renderD128']
    """
    command: tuple[str, ...] = ("nvidia-smi", "-L")
    format: str = "nvidia-smi-L"
    #: ``env``: a regular expression the whole variable name must match
    variable: str | None = None
    #: ``lines``: a regular expression a line must match (searched, not anchored)
    pattern: str | None = None
    identity: str = "uuid"

    def describe(self) -> str:
        """The command as an operator would type it (``nvidia-smi -L``)."""
        return " ".join(self.command)

    def parse(self, text: str) -> list[str]:
        if self.format == "nvidia-smi-L":
            return [m.group(1) for line in text.splitlines() if (m := _NVIDIA_SMI_LINE.match(line))]
        if self.format == "env":
            names = re.compile(self.variable or ".*")
            found = []
            for line in text.splitlines():
                key, sep, value = line.partition("=")
                if sep and names.fullmatch(key):
                    found.append(value.strip())
            return found
        if self.format == "lines":
            rx = re.compile(self.pattern or ".+")
            found = []
            for line in text.splitlines():
                m = rx.search(line)
                if m:
                    found.append((m.group(1) if rx.groups else m.group(0)).strip())
            return found
        raise ValueError(f"unknown injection format {self.format!r}")


@dataclass(frozen=True)
class Plugin:
    """Where the driver's kubelet plugin runs, and which nodes are GPU nodes.

    A GPU node is one carrying any of ``gpu_node_labels`` (exact values) or hosting a plugin
    pod; every GPU node must publish devices and run a Ready plugin pod.
    """
    #: (namespace, name) of the kubelet-plugin DaemonSet in each known install
    daemonsets: tuple[tuple[str, str], ...] = (
        ("dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu-kubelet-plugin"),
        ("nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"),
        ("gpu-operator", "nvidia-dra-driver-kubelet-plugin"))
    #: label selectors of the plugin's pods, in any namespace
    pod_selectors: tuple[str, ...] = ("dra-driver-nvidia-gpu-component=kubelet-plugin",
                                      "nvidia-dra-driver-gpu-component=kubelet-plugin")
    #: node labels marking a GPU node (Node Feature Discovery's PCI vendor, GPU Feature Discovery)
    gpu_node_labels: tuple[tuple[str, str], ...] = (
        ("feature.node.kubernetes.io/pci-10de.present", "true"), ("nvidia.com/gpu.present", "true"))

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(ns for ns, _ in self.daemonsets))


@dataclass(frozen=True)
class Capabilities:
    """What exists around this driver, beyond DRA itself: checks that need what is absent are
    not applicable (preflight N/A) or skipped, naming the capability."""
    #: GPU Operator's GPUCluster object manages the driver (preflight gpu-cluster)
    gpu_cluster: bool = True
    #: GPU Operator's ClusterPolicy may exist beside it (preflight policy-conflict)
    cluster_policy: bool = True
    #: the device plugin's extended resource for these devices (quota extended-resource-trap,
    #: the quota audit); None: the driver has no device-plugin predecessor
    extended_resource: str | None = "nvidia.com/gpu"
    #: the driver takes an opaque GpuConfig (resource.nvidia.com/v1beta1) with a TimeSlicing or
    #: MPS sharing strategy (the gpu-sharing workload); a driver without it skips them
    gpu_sharing: bool = True
    #: the driver's feature gates the gpu-sharing workload needs, each with its default (what
    #: a plugin pod that names no value runs with): NVIDIA's TimeSlicingSettings and MPSSupport
    #: are Alpha, off unless the chart's featureGates turn them on.  A plugin running with one
    #: off does not offer GPU sharing: the workload is skipped, or fails where the run expects
    #: it (``--expect-feature gpu-sharing``)
    sharing_gates: tuple[tuple[str, bool], ...] = (("TimeSlicingSettings", False), ("MPSSupport", False))


@dataclass(frozen=True)
class Profile:
    name: str = "nvidia"
    driver: str = "gpu.nvidia.com"
    device_class: str = "gpu.nvidia.com"
    #: DeviceClasses reported for information only (their absence is not a failure).
    optional_device_classes: tuple[str, ...] = ("mig.nvidia.com", "vfio.gpu.nvidia.com")
    #: role -> attribute name in the driver's domain (see NVIDIA_ATTRIBUTES for the roles).
    attributes: dict = field(default_factory=lambda: dict(NVIDIA_ATTRIBUTES))
    #: capacity name holding device memory in bytes.
    memory_capacity: str = "memory"
    #: value of the `type` attribute for a full GPU (matches the DeviceClass selector).
    device_type: str = "gpu"
    injection: Injection = field(default_factory=Injection)
    plugin: Plugin = field(default_factory=Plugin)
    capabilities: Capabilities = field(default_factory=Capabilities)
    image: str = "ubuntu:24.04"
    tolerations: tuple = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
    timeouts: Timeouts = field(default_factory=Timeouts)
    #: The Pod Security level the suite's namespaces enforce (``pod-security.kubernetes.io/
    #: enforce``): the suite's pods pass ``restricted`` as written.  A driver that needs more
    #: (root, privilege) relaxes it to ``baseline`` or ``privileged``; the run reports it.
    pod_security: str = "restricted"

    @property
    def domain(self) -> str:
        """The attribute domain used in CEL, e.g. ``device.attributes['gpu.nvidia.com']``."""
        return self.driver

    def required_attributes(self) -> list[str]:
        """The minimum attribute set every device must publish (extras are fine)."""
        return sorted(set(self.attributes.values()))

    def has(self, role: str) -> bool:
        """True when the profile names the driver's attribute for ``role``."""
        return bool(self.attributes.get(role))

    def lacks(self, role: str) -> str:
        """The reason a check needing ``role`` does not apply to this driver."""
        return (f"profile {self.name}: driver {self.driver} publishes no {role} attribute "
                f"(the profile's `attributes` has no `{role}`)")

    def identity(self, device) -> str | None:
        """What the injection check compares for ``device``: its name, or an attribute."""
        role = self.injection.identity
        if role == IDENTITY_NAME:
            return device.name
        return device.attribute(self.attributes[role])

    def describe(self) -> str:
        return f"{self.name} (driver {self.driver}, class {self.device_class}, image {self.image})"


#: The image the embedded test bed builds and imports into its nodes (there is no registry):
#: busybox with a `bash`, standing in for ubuntu:24.04 in the workloads.
TESTBED_IMAGE = "draconf.local/busybox:1.35.0"


def for_target(profile: Profile, target: str, image: str | None = None) -> Profile:
    """The profile as a run against ``target`` uses it: ``image`` if given (``--image``: a mirror
    an air-gapped cluster can pull), else on the embedded test bed the bed's own image unless
    the profile names one.

    >>> for_target(Profile(), "testbed").image, for_target(Profile(), "kubeconfig").image
    ('draconf.local/busybox:1.35.0', 'ubuntu:24.04')
    >>> for_target(Profile(), "kubeconfig", "mirror.example.com/ubuntu:24.04").image
    'mirror.example.com/ubuntu:24.04'
    """
    if image:
        return replace(profile, image=image)
    if target == "testbed" and profile.image == Profile.image:
        return replace(profile, image=TESTBED_IMAGE)
    return profile


def builtin_names() -> list[str]:
    """The profiles shipped with draconf (``profiles/<name>.yaml``), ``nvidia`` first."""
    names = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
    return sorted(names, key=lambda n: n != "nvidia")


_BUILTIN_CACHE: dict[str, Profile] = {}


def builtin(name: str) -> Profile:
    if name not in builtin_names():
        raise DraconfError(f"unknown profile {name!r}: use one of {', '.join(builtin_names())} "
                           "or the path of a profile YAML file")
    if name not in _BUILTIN_CACHE:
        _BUILTIN_CACHE[name] = load(PROFILE_DIR / f"{name}.yaml", _seen=(name,))
    return _BUILTIN_CACHE[name]


def resolve(name_or_path: str) -> Profile:
    """A built-in profile by name, or one read from a YAML file."""
    if name_or_path in builtin_names():
        return builtin(name_or_path)
    path = Path(name_or_path)
    if not path.exists():
        return builtin(name_or_path)
    return load(path)


def load(path: Path, _seen: tuple[str, ...] = ()) -> Profile:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as err:
        raise DraconfError(f"profile {path} is not valid YAML: {yaml_problem(err)}") from err
    return from_dict(data, source=str(path), _seen=_seen)


_KEYS = {"name": "name", "extends": None, "driver": "driver", "deviceClass": "device_class",
         "optionalDeviceClasses": "optional_device_classes", "attributes": "attributes",
         "memoryCapacity": "memory_capacity", "deviceType": "device_type",
         "injection": "injection", "plugin": "plugin", "capabilities": "capabilities",
         "image": "image", "tolerations": "tolerations", "timeouts": "timeouts",
         "podSecurity": "pod_security"}
_INJECTION_KEYS = {"command": "command", "format": "format", "variable": "variable",
                   "pattern": "pattern", "identity": "identity"}
_PLUGIN_KEYS = {"daemonSets": "daemonsets", "podSelectors": "pod_selectors",
                "gpuNodeLabels": "gpu_node_labels"}
_CAPABILITY_KEYS = {"gpuCluster": "gpu_cluster", "clusterPolicy": "cluster_policy",
                    "extendedResource": "extended_resource", "gpuSharing": "gpu_sharing",
                    "sharingGates": "sharing_gates"}


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)


def from_dict(data, source: str = "<profile>", _seen: tuple[str, ...] = ()) -> Profile:
    def fail(msg: str) -> DraconfError:
        return DraconfError(f"profile {source}: {msg}")

    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise fail("expected a mapping of settings")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise fail(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}")
    base = Profile()
    if data.get("extends") is not None:
        parent = data["extends"]
        if not isinstance(parent, str) or parent not in builtin_names():
            raise fail(f"`extends` must name a built-in profile ({', '.join(builtin_names())})")
        if parent in _seen:
            raise fail(f"`extends` loops through {parent}")
        base = builtin(parent) if not _seen else load(PROFILE_DIR / f"{parent}.yaml", (*_seen, parent))
    values = {}
    for key, attr in _KEYS.items():
        if key not in data or attr is None:
            continue
        value = data[key]
        if attr in {"name", "driver", "device_class", "memory_capacity", "device_type", "image"}:
            if not isinstance(value, str) or not value.strip():
                raise fail(f"`{key}` must be a non-empty string")
        if attr == "pod_security" and value not in POD_SECURITY_LEVELS:
            raise fail(f"`podSecurity` must be one of {', '.join(POD_SECURITY_LEVELS)}")
        if attr == "injection":
            value = _injection(value, base.injection, fail)
        if attr == "attributes":
            if not isinstance(value, dict) or not all(v is None or isinstance(v, str)
                                                      for v in value.values()):
                raise fail("`attributes` must map roles (model, uuid, architecture, type) to "
                           "names (null: the driver has no such attribute)")
            unknown_roles = sorted(set(value) - set(ROLES))
            if unknown_roles:
                raise fail(f"`attributes` has unknown role(s) {', '.join(unknown_roles)}")
            merged = {**base.attributes, **value}
            value = {role: merged[role] for role in ROLES if merged.get(role)}
            missing = [r for r in REQUIRED_ROLES if r not in value]
            if missing:
                raise fail(f"`attributes` must name the {', '.join(missing)} attribute (the cleanup "
                           "check selects freed devices by it)")
        if attr == "optional_device_classes":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail("`optionalDeviceClasses` must be a list of names")
            value = tuple(value)
        if attr == "plugin":
            value = _plugin(value, base.plugin, fail)
        if attr == "capabilities":
            value = _capabilities(value, base.capabilities, fail)
        if attr == "tolerations":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise fail("`tolerations` must be a list of Kubernetes tolerations")
            value = tuple(value)
        if attr == "timeouts":
            if not isinstance(value, dict):
                raise fail("`timeouts` must be a mapping")
            known = {f.name for f in dataclasses.fields(Timeouts)}
            bad = sorted(set(value) - known)
            if bad:
                raise fail(f"`timeouts` has unknown key(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
            if not all(isinstance(v, (int, float)) and v > 0 for v in value.values()):
                raise fail("`timeouts` values must be positive numbers of seconds")
            value = dataclasses.replace(base.timeouts, **value)
        values[attr] = value
    profile = dataclasses.replace(base, **values)
    role = profile.injection.identity
    if role != IDENTITY_NAME and role not in profile.attributes:
        raise fail(f"`injection.identity` is {role!r}, which `attributes` does not name; use "
                   f"`{IDENTITY_NAME}` (the device's name) or one of {', '.join(profile.attributes)}")
    return profile


def _require_section(name: str, value, keys, fail) -> None:
    """A nested section is a mapping of known keys; anything else names the section's keys."""
    if not isinstance(value, dict):
        raise fail(f"`{name}` must be a mapping ({', '.join(keys)})")
    bad = sorted(set(value) - set(keys))
    if bad:
        raise fail(f"`{name}` has unknown key(s) {', '.join(bad)}; known: {', '.join(keys)}")


def _injection(value, base: Injection, fail) -> Injection:
    if value == "nvidia-smi":  # the only method of older profiles
        return Injection()
    _require_section("injection", value, _INJECTION_KEYS, fail)
    fields = {_INJECTION_KEYS[k]: v for k, v in value.items()}
    if "command" in fields:
        if not _strings(fields["command"]) or not fields["command"]:
            raise fail("`injection.command` must be a non-empty list of strings (argv)")
        fields["command"] = tuple(fields["command"])
    if fields.get("format", base.format) not in INJECTION_FORMATS:
        raise fail(f"`injection.format` must be one of {', '.join(INJECTION_FORMATS)}")
    for key in ("variable", "pattern"):
        if fields.get(key) is not None:
            try:
                re.compile(fields[key])
            except (re.error, TypeError) as err:
                raise fail(f"`injection.{key}` is not a regular expression: {err}") from None
    if "identity" in fields and (not isinstance(fields["identity"], str) or not fields["identity"]):
        raise fail("`injection.identity` must be `name` or an attribute role")
    if "format" in fields and fields["format"] != base.format:
        # A new format does not inherit the old one's parameters.
        fields.setdefault("variable", None)
        fields.setdefault("pattern", None)
    injection = dataclasses.replace(base, **fields)
    if injection.format == "env" and not injection.variable:
        raise fail("`injection.format: env` needs `variable`, the regular expression of the "
                   "variables naming the devices (e.g. GPU_DEVICE_[0-9]+)")
    if injection.format == "lines" and not injection.pattern:
        raise fail("`injection.format: lines` needs `pattern`")
    return injection


def _plugin(value, base: Plugin, fail) -> Plugin:
    _require_section("plugin", value, _PLUGIN_KEYS, fail)
    fields: dict[str, Any] = {}
    if "daemonSets" in value:
        ds = value["daemonSets"]
        if not _strings(ds) or not all(s.count("/") == 1 for s in ds):
            raise fail("`plugin.daemonSets` must be a list of `namespace/name`")
        fields["daemonsets"] = tuple(tuple(s.split("/")) for s in ds)
    if "podSelectors" in value:
        if not _strings(value["podSelectors"]):
            raise fail("`plugin.podSelectors` must be a list of label selectors")
        fields["pod_selectors"] = tuple(value["podSelectors"])
    if "gpuNodeLabels" in value:
        labels = value["gpuNodeLabels"] or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in labels.items()):
            raise fail("`plugin.gpuNodeLabels` must map label names to values (strings)")
        fields["gpu_node_labels"] = tuple(labels.items())
    return dataclasses.replace(base, **fields)


def _capabilities(value, base: Capabilities, fail) -> Capabilities:
    _require_section("capabilities", value, _CAPABILITY_KEYS, fail)
    fields: dict[str, Any] = {}
    for key in ("gpuCluster", "clusterPolicy", "gpuSharing"):
        if key in value:
            if not isinstance(value[key], bool):
                raise fail(f"`capabilities.{key}` must be true or false")
            fields[_CAPABILITY_KEYS[key]] = value[key]
    if "extendedResource" in value:
        er = value["extendedResource"]
        if er is not None and (not isinstance(er, str) or "/" not in er):
            raise fail("`capabilities.extendedResource` must be a resource name such as "
                       "nvidia.com/gpu, or null")
        fields["extended_resource"] = er
    if "sharingGates" in value:
        gates = value["sharingGates"] or {}
        if not isinstance(gates, dict) or not all(isinstance(k, str) and k.strip() and isinstance(v, bool)
                                                  for k, v in gates.items()):
            raise fail("`capabilities.sharingGates` must map the driver's feature gate names to their "
                       "default (true or false), e.g. {MPSSupport: false}")
        fields["sharing_gates"] = tuple(gates.items())
    return dataclasses.replace(base, **fields)
