"""How the suite talks to a DRA driver: its DeviceClass, attribute names, how injection shows.

The built-in profile ``nvidia`` describes the NVIDIA DRA driver for GPUs.  A YAML file can
describe another driver, or the same one with an air-gapped image; every key is optional and
defaults to the ``nvidia`` value::

    name: nvidia-airgapped
    image: registry.internal/ubuntu:24.04
    timeouts: {running: 300}

>>> p = builtin("nvidia")
>>> p.device_class, p.attributes["model"]
('gpu.nvidia.com', 'productName')
>>> from_dict({"image": "mirror/ubuntu:24.04"}).image
'mirror/ubuntu:24.04'
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace, dataclass, field
from pathlib import Path

import yaml

from draconf.errors import DraconfError, yaml_problem

#: Attribute roles the suite relies on, and the NVIDIA driver's names for them.
NVIDIA_ATTRIBUTES = {"model": "productName", "uuid": "uuid", "architecture": "architecture",
                     "type": "type"}
INJECTION_METHODS = ("nvidia-smi",)


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait before giving up when no definitive signal arrives."""
    schedule: float = 60
    running: float = 180
    exec: float = 30
    cleanup: float = 120


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
    injection: str = "nvidia-smi"
    image: str = "ubuntu:24.04"
    tolerations: tuple = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
    timeouts: Timeouts = field(default_factory=Timeouts)

    @property
    def domain(self) -> str:
        """The attribute domain used in CEL, e.g. ``device.attributes['gpu.nvidia.com']``."""
        return self.driver

    def required_attributes(self) -> list[str]:
        """The minimum attribute set every device must publish (extras are fine)."""
        return sorted(set(self.attributes.values()))

    def describe(self) -> str:
        return f"{self.name} (driver {self.driver}, class {self.device_class}, image {self.image})"


BUILTIN = {"nvidia": Profile()}

#: The image the embedded test bed builds and imports into its nodes (there is no registry):
#: busybox with a `bash`, standing in for ubuntu:24.04 in the workloads.
TESTBED_IMAGE = "draconf.local/busybox:1.35.0"


def for_target(profile: Profile, target: str) -> Profile:
    """The profile as a run against ``target`` uses it: on the embedded test bed, workloads run
    the bed's own image unless the profile names one.

    >>> for_target(Profile(), "testbed").image, for_target(Profile(), "kubeconfig").image
    ('draconf.local/busybox:1.35.0', 'ubuntu:24.04')
    """
    if target == "testbed" and profile.image == Profile.image:
        return replace(profile, image=TESTBED_IMAGE)
    return profile


def builtin(name: str) -> Profile:
    try:
        return BUILTIN[name]
    except KeyError:
        raise DraconfError(f"unknown profile {name!r}: use one of {', '.join(BUILTIN)} "
                           "or the path of a profile YAML file") from None


def resolve(name_or_path: str) -> Profile:
    """A built-in profile by name, or one read from a YAML file."""
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    path = Path(name_or_path)
    if not path.exists():
        return builtin(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise DraconfError(f"profile {path} is not valid YAML: {yaml_problem(err)}") from err
    return from_dict(data, source=str(path))


_KEYS = {"name": "name", "driver": "driver", "deviceClass": "device_class",
         "optionalDeviceClasses": "optional_device_classes", "attributes": "attributes",
         "memoryCapacity": "memory_capacity", "deviceType": "device_type",
         "injection": "injection", "image": "image", "tolerations": "tolerations",
         "timeouts": "timeouts"}


def from_dict(data, source: str = "<profile>") -> Profile:
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
    values = {}
    for key, attr in _KEYS.items():
        if key not in data:
            continue
        value = data[key]
        if attr in {"name", "driver", "device_class", "memory_capacity", "device_type", "image",
                    "injection"}:
            if not isinstance(value, str) or not value.strip():
                raise fail(f"`{key}` must be a non-empty string")
        if attr == "injection" and value not in INJECTION_METHODS:
            raise fail(f"`injection` must be one of {', '.join(INJECTION_METHODS)}")
        if attr == "attributes":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise fail("`attributes` must map roles (model, uuid, architecture, type) to names")
            unknown_roles = sorted(set(value) - set(NVIDIA_ATTRIBUTES))
            if unknown_roles:
                raise fail(f"`attributes` has unknown role(s) {', '.join(unknown_roles)}")
            value = {**base.attributes, **value}
        if attr == "optional_device_classes":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail("`optionalDeviceClasses` must be a list of names")
            value = tuple(value)
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
    return dataclasses.replace(base, **values)
