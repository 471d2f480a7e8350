"""The devices a cluster publishes, read from its ResourceSlices.

>>> d = Device(driver="gpu.nvidia.com", pool="node-a", name="gpu-0", node="node-a",
...            attributes={"gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3"},
...            capacity={"gpu.nvidia.com/memory": 85899345920})
>>> d.attribute("productName")
'NVIDIA H100 80GB HBM3'
>>> d.memory("memory") > 40 * 2**30
True
>>> d.key
'gpu.nvidia.com/node-a/gpu-0'
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

from kubernetes.utils import parse_quantity

from draconf.kube import raw_items

log = logging.getLogger("draconf")


class Version(str):
    """A ``version`` attribute's value: a string that remembers it was published as a semantic
    version (CEL compares it with ``semver(...)``, not as text).

    >>> Version("580.95.5") == "580.95.5"
    True
    """

    __slots__ = ()


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str | None
    attributes: dict = field(default_factory=dict, hash=False, compare=False)
    capacity: dict = field(default_factory=dict, hash=False, compare=False)
    #: the counter sets it consumes (consumesCounters[].counterSet; KEP-4815 partitionable
    #: devices): a MIG device and the GPU it is carved from consume the same one
    counter_sets: tuple = field(default=(), hash=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"

    def _qualified(self, name: str) -> str:
        return name if "/" in name else f"{self.driver}/{name}"

    def attribute(self, name: str, default=None):
        """An attribute value by name; unqualified names are in the driver's own domain."""
        return self.attributes.get(self._qualified(name), default)

    def has_attribute(self, name: str) -> bool:
        return self._qualified(name) in self.attributes

    def memory(self, capacity_name: str) -> Decimal | None:
        return self.capacity.get(self._qualified(capacity_name))

    def __str__(self) -> str:
        return f"{self.pool}/{self.name}"


def _attribute_value(attr: dict) -> object:
    for kind in ("string", "int", "bool", "version"):
        value = (attr or {}).get(kind)
        if value is not None:
            return Version(value) if kind == "version" else value
    return None


@functools.lru_cache(maxsize=1)
def _serializer():
    from kubernetes.client import ApiClient
    return ApiClient().sanitize_for_serialization


def devices_from_slices(slices) -> list[Device]:
    """Flatten ResourceSlices into devices: objects of the Python client, or the same as the
    API's dicts (recorded evidence, ``sanitize_for_serialization`` output).

    Slices without devices (e.g. the shared-counter slice of 1.35+) contribute nothing.

    >>> [str(d) for d in devices_from_slices([{"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
    ...     "pool": {"name": "n1"}, "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}}]}}])]
    ['n1/gpu-0']
    >>> devices_from_slices([{"spec": {"driver": "d", "pool": {"name": "n1"}, "devices": [{"name": "gpu-0",
    ...     "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {}}]}]}}])[0].counter_sets
    ('gpu-0-counter-set',)
    """
    devices = []
    for s in slices:
        spec = (s if isinstance(s, dict) else _serializer()(s)).get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for dev in spec.get("devices") or []:
            attrs = {(k if "/" in k else f"{driver}/{k}"): _attribute_value(v)
                     for k, v in (dev.get("attributes") or {}).items()}
            caps = {}
            for k, v in (dev.get("capacity") or {}).items():
                try:
                    caps[k if "/" in k else f"{driver}/{k}"] = parse_quantity((v or {}).get("value"))
                except (ValueError, TypeError) as err:  # the API server validates quantities: not expected
                    log.warning("device %s/%s: capacity %s left out: %s", pool, dev.get("name"), k, err)
            sets = tuple(c.get("counterSet") for c in dev.get("consumesCounters") or [] if c.get("counterSet"))
            devices.append(Device(driver, pool, dev.get("name", ""), spec.get("nodeName"), attrs, caps, sets))
    return devices


def class_selectors(api, name: str) -> list[str] | None:
    """The CEL selectors of the live DeviceClass ``name`` (None: it does not exist)."""
    from kubernetes.client.exceptions import ApiException
    try:
        obj = api.resource.read_device_class(name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return [s.cel.expression for s in obj.spec.selectors or [] if s.cel and s.cel.expression]


@dataclass
class PublishedDevices:
    """Every device of one driver, as published right now."""

    driver: str
    devices: list[Device]

    @classmethod
    def read(cls, api, driver: str) -> "PublishedDevices":
        return cls(driver, devices_from_slices(raw_items(api.resource.list_resource_slice,
                                                         field_selector=f"spec.driver={driver}")))

    def __len__(self) -> int:
        return len(self.devices)

    def __iter__(self):
        return iter(self.devices)

    def lookup(self, driver: str, pool: str, name: str) -> Device | None:
        for d in self.devices:
            if (d.driver, d.pool, d.name) == (driver, pool, name):
                return d
        return None

    def by_uuid(self, uuid_attribute: str) -> dict[str, Device]:
        return {d.attribute(uuid_attribute): d for d in self.devices if d.has_attribute(uuid_attribute)}

    def values_of(self, attribute: str) -> Counter:
        """How many devices publish each value of ``attribute``."""
        return Counter(d.attribute(attribute) for d in self.devices if d.has_attribute(attribute))

    def matching(self, predicate) -> list[Device]:
        return [d for d in self.devices if predicate(d)]

    def devices_per_node(self) -> dict[str, int]:
        return dict(Counter(d.node for d in self.devices if d.node))
