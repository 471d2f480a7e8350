"""The CEL device selectors the suite puts into its claims, built from parameters.

The scheduler evaluates the CEL; the suite judges a device by evaluating the *same CEL text*
over the device's published attributes with :mod:`draconf.cel` (a CEL engine with Kubernetes'
functions), so there is no second rule to drift from the first.

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

from draconf import cel as celeval
from draconf.quantity import format_binary


@dataclass(frozen=True)
class Selector:
    cel: str
    description: str

    def verdict(self, device) -> "celeval.Verdict":
        """Match, no match, or the CEL error the scheduler would report for this device."""
        return celeval.evaluate(self.cel, device)

    def matches(self, device) -> bool:
        """True only when the CEL evaluates to true (an error, e.g. a missing attribute, is no match)."""
        return self.verdict(device).matched

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
    return Selector(
        cel=f"device.attributes['{domain}'].{attribute}.lowerAscii().matches('^.*{token}.*$')",
        description=f"{attribute} matching {product_name!r}")


def model_exactly(domain: str, attribute: str, product_name: str) -> Selector:
    """The walkthrough's model selector anchored at both ends: this product name and no longer
    one (``--all-models``: one workload per model, so "NVIDIA H100" must not take an H100 NVL).

    >>> print(model_exactly("gpu.nvidia.com", "productName", "NVIDIA A100-SXM4-40GB").cel)
    device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^nvidia a100.sxm4.40gb$')
    """
    token = model_token(product_name)
    return Selector(
        cel=f"device.attributes['{domain}'].{attribute}.lowerAscii().matches('^{token}$')",
        description=f"{attribute} is {product_name!r}")


def memory_above(domain: str, capacity: str, threshold: int) -> Selector:
    q = format_binary(threshold)
    return Selector(
        cel=f"device.capacity['{domain}'].{capacity}.isGreaterThan(quantity(\"{q}\"))",
        description=f"{capacity} > {q}")


def memory_exactly(domain: str, capacity: str, size: int) -> Selector:
    """The memory class ``size`` and no other (``--all-models``: one workload per size).

    >>> from draconf.devices import Device
    >>> s = memory_exactly("gpu.nvidia.com", "memory", 40 * 2**30)
    >>> print(s.cel, "|", s)
    device.capacity['gpu.nvidia.com'].memory.compareTo(quantity("40Gi")) == 0 | memory == 40Gi
    >>> [s.matches(Device("gpu.nvidia.com", "n", "g", "n", {}, {"gpu.nvidia.com/memory": m * 2**30}))
    ...  for m in (40, 80)]
    [True, False]
    """
    q = format_binary(size)
    return Selector(
        cel=f"device.capacity['{domain}'].{capacity}.compareTo(quantity(\"{q}\")) == 0",
        description=f"{capacity} == {q}")


def architecture_and_memory_above(domain: str, arch_attribute: str, architecture: str,
                                  capacity: str, threshold: int) -> Selector:
    q = format_binary(threshold)
    return Selector(
        cel=(f"device.attributes['{domain}'].{arch_attribute} == '{architecture}'\n&&\n"
             f"device.capacity['{domain}'].{capacity}.isGreaterThan(quantity(\"{q}\"))"),
        description=f"{arch_attribute} == {architecture!r} and {capacity} > {q}")


def uuid_in(domain: str, attribute: str, uuids: list[str]) -> Selector:
    listed = ", ".join(f"'{u}'" for u in uuids)
    return Selector(
        cel=f"device.attributes['{domain}'].{attribute} in [{listed}]",
        description=f"{attribute} in {uuids}")


def device_class(driver: str, type_attribute: str, device_type: str) -> Selector:
    """The NVIDIA DeviceClass selector as its chart writes it (``driver == ... && type == ...``);
    checks judge by the live DeviceClass's selectors, this one is for choosing devices up front."""
    return Selector(
        cel=f"device.driver == '{driver}' && device.attributes['{driver}'].{type_attribute} == '{device_type}'",
        description=f"class selector: driver {driver}, {type_attribute} == {device_type!r}")
