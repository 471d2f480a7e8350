"""``draconf lint``: what each CEL selector in a user's manifests selects on a cluster.

Read-only.  For every selector of a ResourceClaim, a ResourceClaimTemplate or a DeviceClass in
the files, and for the selectors of the DeviceClass a request names (from the files, else the
cluster's), it says which published devices the selector matches, or the error the scheduler
would give (``CEL compile error``, ``CEL runtime error: no such key: ...``, a class that does
not exist), evaluated with :mod:`draconf.cel` where the scheduler evaluates it: a request's
selector only on the devices its class's selectors and the request's earlier selectors pass,
as the allocator applies them in order.

    find_selectors(docs, file)             ->  [Found]       (pure)
    judge(found, devices, classes)         ->  [Judgement]   (pure)
    format_table(judgements)               ->  text

>>> docs = [{"kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {"devices": {"requests": [
...     {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
...      "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'H100'"}}]}}]}}}]
>>> [str(f) for f in find_selectors(docs, "claim.yaml")]
['claim.yaml: ResourceClaim c, request gpu, selector #0']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from draconf import cel
from draconf.devices import Device
from draconf.errors import DraconfError

#: Exit codes of ``draconf lint`` (bad input, or a cluster that cannot be read: draconf.errors).
EXIT_OK, EXIT_FINDINGS = 0, 1


@dataclass(frozen=True)
class Found:
    """One CEL selector in a manifest, with what the scheduler evaluates before it."""

    file: str
    kind: str
    name: str
    expression: str
    index: int
    #: the request (claims and templates) and the DeviceClass it names; None for a DeviceClass
    request: str | None = None
    device_class: str | None = None
    #: the request's selectors before this one (the allocator stops at the first non-match)
    earlier: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = f", request {self.request}" if self.request else ""
        return f"{self.file}: {self.kind} {self.name}{where}, selector #{self.index}"


@dataclass
class Judgement:
    found: Found
    #: devices the scheduler would evaluate this selector on
    candidates: list[Device] = field(default_factory=list)
    verdicts: dict[str, cel.Verdict] = field(default_factory=dict)
    #: why nothing could be evaluated (e.g. the DeviceClass does not exist)
    problem: str | None = None

    def matching(self) -> list[Device]:
        return [d for d in self.candidates if self.verdicts[d.key].matched]

    def failing(self) -> list[Device]:
        return [d for d in self.candidates if self.verdicts[d.key].failed]

    @property
    def ok(self) -> bool:
        return self.problem is None and bool(self.matching()) and not self.failing()

    def summary(self) -> str:
        if self.problem:
            return self.problem
        matching, failing = self.matching(), self.failing()
        parts = [f"matches {len(matching)} of {len(self.candidates)}"
                 + (f": {', '.join(str(d) for d in matching)}" if matching else "")]
        errors: dict[str, list[Device]] = {}
        for d in failing:
            errors.setdefault(str(self.verdicts[d.key]), []).append(d)
        for message, devices in errors.items():
            parts.append(f"{message} on {len(devices)}: {', '.join(str(d) for d in devices)}")
        return "; ".join(parts)


def _selectors(spec: dict) -> list[str]:
    return [s["cel"]["expression"] for s in spec.get("selectors") or []
            if isinstance(s, dict) and (s.get("cel") or {}).get("expression")]


def find_selectors(docs: list[dict], file: str) -> list[Found]:
    """Every CEL selector of the claims, templates and DeviceClasses in ``docs``."""
    found = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        kind, name = doc.get("kind"), (doc.get("metadata") or {}).get("name", "?")
        spec = doc.get("spec") or {}
        if kind == "DeviceClass":
            found += [Found(file, kind, name, e, i) for i, e in enumerate(_selectors(spec))]
            continue
        if kind == "ResourceClaimTemplate":
            spec = spec.get("spec") or {}
        elif kind != "ResourceClaim":
            continue
        for req in (spec.get("devices") or {}).get("requests") or []:
            alternatives = [(req.get("name", "?"), req.get("exactly") or {})] if req.get("exactly") else \
                [(f"{req.get('name', '?')}/{a.get('name', '?')}", a) for a in req.get("firstAvailable") or []]
            for request, exactly in alternatives:
                expressions = _selectors(exactly)
                found += [Found(file, kind, name, e, i, request, exactly.get("deviceClassName"),
                                tuple(expressions[:i])) for i, e in enumerate(expressions)]
                if not expressions and exactly.get("deviceClassName"):
                    # no selector of its own: its class's selectors are what it selects with
                    found.append(Found(file, kind, name, "", -1, request, exactly.get("deviceClassName")))
    return found


def load_files(paths: list[str]) -> list[Found]:
    """Selectors of YAML files; a file that cannot be read or parsed is one clear error."""
    found = []
    for path in paths:
        try:
            docs = list(yaml.safe_load_all(Path(path).read_text()))
        except OSError as err:
            raise DraconfError(f"cannot read {path}: {err.strerror or err}") from None
        except yaml.YAMLError as err:
            raise DraconfError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
        found += find_selectors(docs, path)
    return found


def classes_in(found: list[Found]) -> dict[str, list[str]]:
    """DeviceClasses defined in the files (they take precedence over the cluster's)."""
    classes: dict[str, list[str]] = {}
    for f in found:
        if f.kind == "DeviceClass":
            classes.setdefault(f.name, []).append(f.expression)
    return classes


def judge(found: list[Found], devices: list[Device], classes: dict[str, list[str] | None]) -> list[Judgement]:
    """Each selector over the devices the scheduler would evaluate it on.

    ``classes``: DeviceClass name -> its selectors (None: it does not exist).

    >>> d = Device("gpu.nvidia.com", "n", "gpu-0", "n", {"gpu.nvidia.com/type": "gpu"})
    >>> f = Found("f", "ResourceClaim", "c", "device.attributes['gpu.nvidia.com'].x == 1", 0, "gpu", "gpu.nvidia.com")
    >>> judge([f], [d], {"gpu.nvidia.com": []})[0].summary()
    'matches 0 of 1; CEL runtime error: no such key: x on 1: n/gpu-0'
    >>> judge([f], [d], {"gpu.nvidia.com": None})[0].summary()
    'device class gpu.nvidia.com does not exist'
    """
    out = []
    for f in found:
        if f.kind == "DeviceClass":
            candidates = devices
        else:
            selectors = classes.get(f.device_class or "")
            if selectors is None:
                out.append(Judgement(f, problem=f"device class {f.device_class} does not exist"))
                continue
            if not f.expression:  # a request without selectors: its class's selectors alone
                shown = Found(f.file, f.kind, f.name, " && ".join(selectors) or "true", -1,
                              f.request, f.device_class)
                errors = [e for s in selectors if (e := cel.check(s))]
                out.append(Judgement(shown, problem=str(errors[0])) if errors else
                           Judgement(shown, devices, {d.key: cel.evaluate_all(selectors, d) for d in devices}))
                continue
            gate = [*selectors, *f.earlier]
            candidates = [d for d in devices if cel.evaluate_all(gate, d).matched]
        compile_error = cel.check(f.expression)
        if compile_error:
            out.append(Judgement(f, problem=str(compile_error)))
            continue
        out.append(Judgement(f, candidates, {d.key: cel.evaluate(f.expression, d) for d in candidates}))
    return out


def format_table(judgements: list[Judgement]) -> str:
    """One row per selector: where it is, its CEL (one line), its verdict over the devices."""
    if not judgements:
        return "lint: no CEL selector found (ResourceClaim, ResourceClaimTemplate or DeviceClass)"
    rows = [("SELECTOR", "CEL", "VERDICT")]
    for j in judgements:
        where = str(j.found).replace(", selector #-1", ", its DeviceClass's selectors")
        text = " ".join(j.found.expression.split())
        rows.append((where, text if len(text) <= 90 else text[:87] + "...", j.summary()))
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2]}" for r in rows]
    bad = sum(not j.ok for j in judgements)
    lines.append(f"lint: {len(judgements)} selector(s), {bad} match no device or fail")
    return "\n".join(lines)
