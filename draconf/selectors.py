"""CEL device selectors paired with the same rule in Python.

The scheduler evaluates the CEL; the suite checks the scheduler's choice against the device's
*published* attributes with the Python twin.  Both are generated from the same parameters, so
they cannot drift apart.

>>> from draconf.devices import Device
>>> h100 = Device("gpu.nvidia.com", "n", "gpu-0", "n",
...               {"gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3",
...                "gpu.nvidia.com/architecture": "Hopper"},
...               {"gpu.nvidia.com/memory": 80 * 2**30})
>>> s = model("gpu.nvidia.com", "productName", "NVIDIA H100 80GB HBM3")
>>> s.cel
"device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*nvidia h100 80gb hbm3.*$')"
>>> s.matches(h100), memory_above("gpu.nvidia.com", "memory", 80 * 2**30).matches(h100)
(True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from draconf.quantity import format_binary


@dataclass(frozen=True)
class Selector:
    cel: str
    predicate: Callable
    description: str

    def matches(self, device) -> bool:
        try:
            return bool(self.predicate(device))
        except (KeyError, TypeError, AttributeError):
            return False  # CEL would fail on a missing attribute: the device does not match

    def __str__(self) -> str:
        return self.description


def model_token(product_name: str) -> str:
    """The seed's ``lowerAscii().matches('^.*h100.*$')`` token for a product name.

    Punctuation becomes ``.`` so the pattern means the same in RE2 and Python and needs no
    escaping inside a CEL string.
    """
    return re.sub(r"[^a-z0-9 ]", ".", product_name.lower())


def model(domain: str, attribute: str, product_name: str) -> Selector:
    token = model_token(product_name)
    pattern = re.compile(f"^.*{token}.*$")
    return Selector(
        cel=f"device.attributes['{domain}'].{attribute}.lowerAscii().matches('^.*{token}.*$')",
        predicate=lambda d: d.attribute(f"{domain}/{attribute}") is not None
        and bool(pattern.match(str(d.attribute(f"{domain}/{attribute}")).lower())),
        description=f"{attribute} matching {product_name!r}")


def memory_above(domain: str, capacity: str, threshold: int) -> Selector:
    q = format_binary(threshold)
    return Selector(
        cel=f"device.capacity['{domain}'].{capacity}.isGreaterThan(quantity(\"{q}\"))",
        predicate=lambda d: (d.memory(f"{domain}/{capacity}") or 0) > threshold,
        description=f"{capacity} > {q}")


def architecture_and_memory_above(domain: str, arch_attribute: str, architecture: str,
                                  capacity: str, threshold: int) -> Selector:
    q = format_binary(threshold)
    return Selector(
        cel=(f"device.attributes['{domain}'].{arch_attribute} == '{architecture}'\n&&\n"
             f"device.capacity['{domain}'].{capacity}.isGreaterThan(quantity(\"{q}\"))"),
        predicate=lambda d: d.attribute(f"{domain}/{arch_attribute}") == architecture
        and (d.memory(f"{domain}/{capacity}") or 0) > threshold,
        description=f"{arch_attribute} == {architecture!r} and {capacity} > {q}")


def uuid_in(domain: str, attribute: str, uuids: list[str]) -> Selector:
    listed = ", ".join(f"'{u}'" for u in uuids)
    return Selector(
        cel=f"device.attributes['{domain}'].{attribute} in [{listed}]",
        predicate=lambda d: d.attribute(f"{domain}/{attribute}") in uuids,
        description=f"{attribute} in {uuids}")


def device_class(driver: str, type_attribute: str, device_type: str) -> Selector:
    """The twin of the NVIDIA DeviceClass selector (``driver == ... && type == ...``)."""
    return Selector(
        cel=f"device.driver == '{driver}' && device.attributes['{driver}'].{type_attribute} == '{device_type}'",
        predicate=lambda d: d.driver == driver and d.attribute(f"{driver}/{type_attribute}") == device_type,
        description=f"class selector: driver {driver}, {type_attribute} == {device_type!r}")
