"""How draconf writes a quantity back: the canonical binary-SI form the API server prints.

Parsing is ``kubernetes.utils.parse_quantity`` (every suffix Kubernetes accepts, ``100m``
included; a :class:`~decimal.Decimal`); this module only adds the inverse draconf needs when it
writes a device's memory into a ResourceSlice or a CEL ``quantity("...")`` literal: the largest
binary suffix that divides the value exactly, as ``resource.Quantity`` canonicalises it.

>>> from kubernetes.utils import parse_quantity
>>> format_binary(85899345920)
'80Gi'
>>> format_binary(parse_quantity("81559Mi"))
'81559Mi'
>>> format_binary(parse_quantity("1e3"))
'1000'
>>> format_binary(parse_quantity("100m"))
'100m'
"""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils.quantity import format_quantity

_BINARY = [(suffix, Decimal(1024) ** power)
           for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki"))]


def format_binary(value: int | Decimal) -> str:
    """``value`` with the largest binary suffix that divides it, else as a plain number
    (milli-units when it is not whole)."""
    value = Decimal(value)
    for suffix, unit in _BINARY:
        if value and value % unit == 0:
            return format_quantity(value, suffix)
    if value == value.to_integral_value():
        return format(value.quantize(Decimal(1)), "f")
    return format_quantity(value, "m")
