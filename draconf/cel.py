"""DRA device selectors evaluated as CEL, the way the scheduler evaluates them.

A selector (``spec.devices.requests[].exactly.selectors[].cel.expression`` of a claim, or
``spec.selectors[].cel.expression`` of a DeviceClass) is CEL over one variable, ``device``, with
the fields of Kubernetes' ``k8s.io/dynamic-resource-allocation/cel`` environment (v0.36):

- ``device.driver`` (string) and ``device.allowMultipleAllocations`` (bool);
- ``device.attributes[domain][name]`` / ``device.attributes[domain].name``: the published value,
  typed as published (``int``, ``bool``, ``string``, or ``version``, a semantic version);
  an unqualified attribute name is in the driver's own domain;
- ``device.capacity[domain].name``: a ``Quantity``.

A domain nobody publishes reads as an empty map; a name the device lacks is the runtime error
``no such key: NAME``, which the scheduler reports (``CEL runtime error``) instead of skipping
the device.  ``&&`` and ``||`` are CEL's: ``false && error`` is false, ``true || error`` is true.

Expressions are parsed and evaluated by `cel-python` (a maintained CEL implementation whose
``matches`` uses RE2, as cel-go does); this module registers the Kubernetes libraries selectors
use: ``quantity()`` with ``isGreaterThan``/``isLessThan``/``compareTo``/``add``/``sub``/
``isInteger``/``asInteger``/``asApproximateFloat``/``sign``, ``isQuantity``; ``semver()`` with
``major``/``minor``/``patch``/``isGreaterThan``/``isLessThan``/``compareTo``, ``isSemver``; the
strings extension (``lowerAscii``, ``upperAscii``, ``trim``, ``replace``, ``split``,
``substring``, ``charAt``, ``indexOf``, ``lastIndexOf``, ``join``); regex ``find``/``findAll``;
lists ``isSorted``/``sum``/``min``/``max``.  Not registered (a selector using them is reported
as a compile error, never guessed): ``ip``/``cidr``/``url``, ``format``, ``sets.*``.

Each judgement is a :class:`Verdict`: matched, not matched, or the error.

>>> from draconf.devices import Device, Version
>>> h100 = Device("gpu.nvidia.com", "n1", "gpu-0", "n1",
...               {"gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3",
...                "gpu.nvidia.com/driverVersion": Version("580.95.5")},
...               {"gpu.nvidia.com/memory": 81559 * 2**20})
>>> evaluate("device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')", h100)
Verdict(match)
>>> evaluate('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80Gi"))', h100).matched
False
>>> evaluate("device.attributes['gpu.nvidia.com'].driverVersion.isLessThan(semver('1000.0.0'))", h100).matched
True
>>> v = evaluate("device.attributes['gpu.nvidia.com'].index == 0", h100)
>>> v.failed, v.error, v.missing
(True, 'no such key: index', 'gpu.nvidia.com/index')
>>> evaluate("device.driver == 'x' && device.attributes['gpu.nvidia.com'].index == 0", h100)
Verdict(no match)
>>> evaluate("device.attributes['gpu.nvidia.com'].productName.", h100).compile_error
True
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable

import celpy
import celpy.celtypes as ct
import re2
import semver as _semver
from kubernetes.utils import parse_quantity as _parse_quantity

__all__ = ["Verdict", "Quantity", "Semver", "evaluate", "evaluate_all", "check", "device_variable"]

# cel-python logs every evaluation error it raises; the verdict carries them instead.
logging.getLogger("celpy").setLevel(logging.CRITICAL)
logging.getLogger("Evaluator").setLevel(logging.CRITICAL)


# =============================================================================================
# The verdict
# =============================================================================================

@dataclass(frozen=True)
class Verdict:
    """One selector (or a list of them) judged on one device.

    Exactly one of :attr:`matched`, :attr:`unmatched` and :attr:`failed` holds.  ``error`` is
    the message the scheduler would give after ``CEL runtime error:`` (or ``CEL compile
    error:`` when :attr:`compile_error`); ``missing`` is the qualified attribute or capacity
    name (``domain/name``) when the error is ``no such key``.

    >>> Verdict(True).matched, Verdict(False).unmatched, Verdict(False, "no such key: x", "d/x").failed
    (True, True, True)
    """

    matched: bool
    error: str | None = None
    missing: str | None = None
    compile_error: bool = False

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def unmatched(self) -> bool:
        return not self.matched and self.error is None

    @property
    def outcome(self) -> str:
        """``match``, ``no match`` or ``error``: the three values, for tables and comparisons."""
        return "error" if self.failed else ("match" if self.matched else "no match")

    def __str__(self) -> str:
        if self.compile_error:
            return f"CEL compile error: {self.error}"
        return f"CEL runtime error: {self.error}" if self.failed else self.outcome

    def __repr__(self) -> str:
        return f"Verdict({self})"


MATCH = Verdict(True)
NO_MATCH = Verdict(False)


# =============================================================================================
# Kubernetes' CEL types: Quantity and Semver
# =============================================================================================

class Quantity:
    """A ``resource.Quantity`` in CEL: ordered only through its methods, like the real one.

    >>> Quantity.parse("81559Mi").compare(Quantity.parse("80Gi"))
    -1
    >>> Quantity.parse("40Gi") == Quantity.parse("40960Mi")
    True
    """

    __slots__ = ("value", "text")

    def __init__(self, value: Decimal, text: str = ""):
        self.value = Decimal(value)
        self.text = text or str(value)

    @classmethod
    def parse(cls, text: str) -> "Quantity":
        try:
            return cls(_parse_quantity(str(text)), str(text))
        except ValueError as err:
            raise ValueError(f"quantities must match the regular expression: {text!r} ({err})") from None

    def compare(self, other: "Quantity") -> int:
        return (self.value > other.value) - (self.value < other.value)

    def __eq__(self, other):
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.text})"


class Semver:
    """A semantic version (``version`` attributes and ``semver(...)``), compared by precedence."""

    __slots__ = ("version",)

    def __init__(self, version: _semver.Version):
        self.version = version

    @classmethod
    def parse(cls, text: str, normalize: bool = False) -> "Semver":
        """``semver(text)`` (strict, as blang/semver's Parse) or ``semver(text, true)``
        (leading ``v`` and zeros dropped, missing minor/patch filled in)."""
        text = str(text)
        if normalize:
            text = text[1:] if text.startswith("v") else text
            core = re.match(r"^[0-9.]*", text).group(0)  # type: ignore[union-attr]  # * matches always
            rest = text[len(core):]
            parts = [p.lstrip("0") or "0" for p in core.split(".") if p != ""]
            parts += ["0"] * (3 - len(parts))
            text = ".".join(parts) + rest
        try:
            return cls(_semver.Version.parse(text))
        except (ValueError, TypeError) as err:
            raise ValueError(f"could not parse {text!r} as semver: {err}") from None

    def compare(self, other: "Semver") -> int:
        return self.version.compare(other.version)

    def __eq__(self, other):
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self):
        return hash(self.version.finalize_version())

    def __repr__(self) -> str:
        return f"Semver({self.version})"


def _overload(name, *args):
    return TypeError(f"found no matching overload for '{name}' applied to "
                     f"'({', '.join(type(a).__name__ for a in args)})'")


def _ordered(name):
    def fn(a, b):
        if type(a) is type(b) and isinstance(a, (Quantity, Semver)):
            c = a.compare(b)
            return ct.BoolType(c > 0) if name == "isGreaterThan" else \
                ct.BoolType(c < 0) if name == "isLessThan" else ct.IntType(c)
        raise _overload(name, a, b)
    return fn


def _quantity_fn(name):
    def fn(q, *args):
        if not isinstance(q, Quantity):
            raise _overload(name, q, *args)
        if name == "sign":
            return ct.IntType((q.value > 0) - (q.value < 0))
        if name == "isInteger":
            return ct.BoolType(q.value == q.value.to_integral_value() and abs(q.value) < 2**63)
        if name == "asInteger":
            if q.value != q.value.to_integral_value() or abs(q.value) >= 2**63:
                raise ValueError("cannot convert value to integer")
            return ct.IntType(int(q.value))
        if name == "asApproximateFloat":
            return ct.DoubleType(float(q.value))
        other = args[0]
        other = other.value if isinstance(other, Quantity) else Decimal(int(other))
        return Quantity(q.value + other if name == "add" else q.value - other)
    return fn


def _semver_part(name):
    def fn(v):
        if not isinstance(v, Semver):
            raise _overload(name, v)
        return ct.IntType(getattr(v.version, name))
    return fn


def _is(parser):
    def fn(text, *normalize):
        try:
            parser(str(text), *[bool(n) for n in normalize])
        except ValueError:
            return ct.BoolType(False)
        return ct.BoolType(True)
    return fn


# =============================================================================================
# Strings, regex and lists extensions (cel-go ext.Strings v2, k8s Regex and Lists libraries)
# =============================================================================================

def _string(name, fn):
    def wrapped(s, *args):
        if not isinstance(s, str):
            raise _overload(name, s, *args)
        return fn(s, *args)
    return wrapped


def _index_of(name):
    def fn(target, item, *start):
        if isinstance(target, str):
            if name == "indexOf":
                return ct.IntType(target.find(item, *[int(x) for x in start]))
            return ct.IntType(target.rfind(item))
        if isinstance(target, list):
            hits = [i for i, x in enumerate(target) if _equal(x, item)]
            return ct.IntType((hits[0] if name == "indexOf" else hits[-1]) if hits else -1)
        raise _overload(name, target, item)
    return fn


def _list_fn(name):
    def fn(items):
        if not isinstance(items, list):
            raise _overload(name, items)
        if name == "isSorted":
            return ct.BoolType(all(a <= b for a, b in zip(items, items[1:])))
        if name == "sum":
            return functools.reduce(lambda a, b: a + b, items, ct.IntType(0))
        if not items:
            raise ValueError(f"{name} called on empty list")
        return min(items) if name == "min" else max(items)
    return fn


def _equal(a, b) -> bool:
    """CEL's heterogeneous equality: values of different kinds are unequal, not an error."""
    numbers = (int, float, Decimal)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, numbers) and isinstance(b, numbers):
        return a == b
    if isinstance(a, (Quantity, Semver)) or isinstance(b, (Quantity, Semver)):
        return a == b
    if isinstance(a, str) != isinstance(b, str) or isinstance(a, list) != isinstance(b, list) \
            or isinstance(a, dict) != isinstance(b, dict):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _in(item, container):
    if isinstance(container, list):
        return ct.BoolType(any(_equal(item, x) for x in container))
    if isinstance(container, dict):
        return ct.BoolType(any(_equal(item, k) for k in container))
    raise _overload("@in", item, container)


FUNCTIONS = {
    "_==_": lambda a, b: ct.BoolType(_equal(a, b)),
    "_!=_": lambda a, b: ct.BoolType(not _equal(a, b)),
    "_in_": _in,
    "quantity": lambda text: Quantity.parse(text),
    "isQuantity": _is(Quantity.parse),
    "semver": lambda text, normalize=False: Semver.parse(text, bool(normalize)),
    "isSemver": _is(Semver.parse),
    "isGreaterThan": _ordered("isGreaterThan"),
    "isLessThan": _ordered("isLessThan"),
    "compareTo": _ordered("compareTo"),
    **{n: _quantity_fn(n) for n in ("sign", "isInteger", "asInteger", "asApproximateFloat", "add", "sub")},
    **{n: _semver_part(n) for n in ("major", "minor", "patch")},
    "lowerAscii": _string("lowerAscii", lambda s: ct.StringType(re.sub(r"[A-Z]+", lambda m: m.group().lower(), s))),
    "upperAscii": _string("upperAscii", lambda s: ct.StringType(re.sub(r"[a-z]+", lambda m: m.group().upper(), s))),
    "trim": _string("trim", lambda s: ct.StringType(s.strip())),
    "replace": _string("replace", lambda s, old, new, n=-1: ct.StringType(s.replace(old, new, int(n)))),
    "split": _string("split", lambda s, sep, n=-1: ct.ListType(
        [ct.StringType(x) for x in (s.split(sep, int(n) - 1) if int(n) > 0 else [] if int(n) == 0 else s.split(sep))])),
    "substring": _string("substring", lambda s, a, b=None: ct.StringType(s[int(a):] if b is None else s[int(a):int(b)])),
    "charAt": _string("charAt", lambda s, i: ct.StringType(s[int(i)] if int(i) < len(s) else "")),
    "indexOf": _index_of("indexOf"),
    "lastIndexOf": _index_of("lastIndexOf"),
    "join": lambda items, sep="": ct.StringType(str(sep).join(items)),
    "find": _string("find", lambda s, pattern: ct.StringType(
        (m.group(0) if (m := re2.search(pattern, s)) else ""))),
    "findAll": _string("findAll", lambda s, pattern, n=-1: ct.ListType(
        [ct.StringType(x) for x in re2.findall(pattern, s)][:None if int(n) < 0 else int(n)])),
    **{n: _list_fn(n) for n in ("isSorted", "sum", "min", "max")},
}


def _errors_propagate(fn):
    """An argument that is already an error is the result (CEL's error propagation)."""
    @functools.wraps(fn)
    def wrapped(*args):
        for a in args:
            if isinstance(a, celpy.CELEvalError):
                return a
        return fn(*args)
    return wrapped


FUNCTIONS = {name: _errors_propagate(fn) for name, fn in FUNCTIONS.items()}


# =============================================================================================
# The device variable
# =============================================================================================

class _Domain(ct.MapType):
    """``device.attributes[domain]``: a lookup of a name it lacks is recorded, then fails."""

    def __init__(self, domain: str, items: dict, misses: list):
        super().__init__(items)
        self.domain, self.misses = domain, misses

    def __getitem__(self, key):
        try:
            return super().__getitem__(key)
        except KeyError:
            self.misses.append(f"{self.domain}/{key}")
            raise


class _Domains(ct.MapType):
    """``device.attributes``: an unknown domain is an empty map (the scheduler's default)."""

    def __init__(self, items: dict, misses: list):
        super().__init__(items)
        self.misses = misses

    def __getitem__(self, key):
        try:
            return super().__getitem__(key)
        except KeyError:
            return _Domain(str(key), {}, self.misses)


def _cel_value(value):
    from draconf.devices import Version
    if isinstance(value, Version):
        return Semver.parse(str(value))
    if isinstance(value, bool):
        return ct.BoolType(value)
    if isinstance(value, int):
        return ct.IntType(value)
    return ct.StringType(str(value))


def device_variable(device, misses: list | None = None) -> ct.MapType:
    """The ``device`` variable the scheduler gives a selector, built from a published
    :class:`draconf.devices.Device` (qualified names split at the first ``/``)."""
    misses = misses if misses is not None else []

    def nested(table: dict, convert):
        domains: dict = {}
        for name, value in table.items():
            domain, _, short = name.partition("/") if "/" in name else (device.driver, "/", name)
            domains.setdefault(domain, {})[ct.StringType(short)] = convert(value)
        return _Domains({ct.StringType(d): _Domain(d, items, misses) for d, items in domains.items()},
                        misses)

    return ct.MapType({
        ct.StringType("driver"): ct.StringType(device.driver),
        ct.StringType("allowMultipleAllocations"): ct.BoolType(
            bool(getattr(device, "allow_multiple_allocations", False))),
        ct.StringType("attributes"): nested(device.attributes, _cel_value),
        ct.StringType("capacity"): nested(device.capacity, lambda v: Quantity(Decimal(v))),
    })


# =============================================================================================
# Compiling and evaluating
# =============================================================================================

_ENV = celpy.Environment()
_OVERLOAD = re.compile(r"<class '[\w.]*?\.(\w+)'>")
_TYPE_NAMES = {"StringType": "string", "IntType": "int", "UintType": "uint", "DoubleType": "double",
               "BoolType": "bool", "ListType": "list", "MapType": "map", "Quantity": "kubernetes.Quantity",
               "Semver": "kubernetes.Semver", "_Domain": "map", "_Domains": "map"}
_KEY = re.compile(r"no such (?:member in mapping|key): '?([^']*)'?")


@dataclass(frozen=True)
class _Compiled:
    program: Any  # celpy's Runner; None when the expression did not compile
    error: str | None


#: cel-python's parser (lark) is not safe to run from two threads at once: compiled together,
#: one expression can come out holding another's literals.  The fleet sweep compiles one uuid
#: selector per GPU from 80 threads, and two of 800 GPUs were judged against a neighbour's
#: uuid ("does not satisfy the request's selectors").  Evaluating a compiled program is safe.
_COMPILING = threading.Lock()


@functools.lru_cache(maxsize=512)
def _compile(expression: str) -> _Compiled:
    with _COMPILING:
        try:
            ast = _ENV.compile(expression)
        except celpy.CELParseError as err:
            detail = " ".join(str(a) for a in err.args).strip()
            return _Compiled(None, f"syntax error: {detail}")
        return _Compiled(_ENV.program(ast, functions=FUNCTIONS), None)


def check(expression: str) -> Verdict | None:
    """The compile error of ``expression`` as a :class:`Verdict`, or None if it parses.

    >>> check("device.driver == 'gpu.nvidia.com'") is None
    True
    >>> str(check("device.driver ==")).startswith("CEL compile error: syntax error")
    True
    """
    compiled = _compile(expression)
    return Verdict(False, compiled.error, compile_error=True) if compiled.error else None


def _error_verdict(err: celpy.CELEvalError, misses: list) -> Verdict:
    message, cause, args = (list(err.args) + [None, None, None])[:3]
    message = str(message)
    if cause is KeyError and (message.startswith("no such") or args):
        key = None
        if m := _KEY.match(message):
            key = m.group(1)
        elif args:
            key = str(args[0]).rpartition("/")[2]
        if message.startswith("undeclared reference") or (key and message.startswith("undeclared")):
            return Verdict(False, message.split(" (in activation")[0], compile_error=True)
        qualified = next((q for q in reversed(misses) if q.rpartition("/")[2] == key), None)
        return Verdict(False, f"no such key: {key}", missing=qualified)
    if cause is KeyError and message.startswith("undeclared reference"):
        return Verdict(False, message.split(" (in activation")[0], compile_error=True)
    if "no matching overload" in message:
        detail = _OVERLOAD.sub(lambda m: _TYPE_NAMES.get(m.group(1), m.group(1)), message)
        detail = detail.replace("Token('RULE', ", "").replace("')", "'")
    elif args and cause in (ValueError, TypeError, re2.error):
        detail = f"{message}: {args[0].decode() if isinstance(args[0], bytes) else args[0]}" \
            if message in ("match error",) else str(args[0])
    else:
        detail = message
    return Verdict(False, detail)


def evaluate(expression: str, device) -> Verdict:
    """One selector on one device (see the module's examples)."""
    compiled = _compile(expression)
    if compiled.error:
        return Verdict(False, compiled.error, compile_error=True)
    misses: list[str] = []
    try:
        result = compiled.program.evaluate({"device": device_variable(device, misses)})
    except celpy.CELEvalError as err:
        return _error_verdict(err, misses)
    if isinstance(result, celpy.CELEvalError):
        return _error_verdict(result, misses)
    if not isinstance(result, ct.BoolType):
        return Verdict(False, f"CEL result of type {type(result).__name__.replace('Type', '').lower()} "
                              "could not be converted to bool")
    return MATCH if result else NO_MATCH


def evaluate_all(expressions: Iterable[str], device) -> Verdict:
    """Several selectors (a class's, then a request's), as the scheduler's allocator applies
    them: in order, stopping at the first that does not match or fails.

    >>> from draconf.devices import Device
    >>> d = Device("gpu.nvidia.com", "n", "gpu-0", "n", {"gpu.nvidia.com/type": "gpu"})
    >>> evaluate_all(["device.attributes['gpu.nvidia.com'].type == 'mig'",
    ...               "device.attributes['gpu.nvidia.com'].uuid == 'x'"], d)
    Verdict(no match)
    >>> evaluate_all([], d).matched
    True
    """
    for expression in expressions:
        verdict = evaluate(expression, device)
        if not verdict.matched:
            return verdict
    return MATCH
