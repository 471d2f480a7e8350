"""Kubernetes resource quantities, as far as GPU memory needs them.

>>> parse_quantity("80Gi")
85899345920
>>> parse_quantity("1.5k")
1500
>>> format_binary(85899345920)
'80Gi'
>>> format_binary(1000)
'1000'
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(text: str | int) -> int:
    """Bytes (or units) in a quantity string; raises ValueError on anything else."""
    if isinstance(text, int):
        return text
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as err:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from err
    return int(number * _SUFFIXES[match.group(2)])


def format_binary(value: int) -> str:
    """The canonical binary-SI form the API server would print for ``value``."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIXES[suffix]
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)
