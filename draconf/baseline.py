"""Baselines of a cluster's DRA state and verdicts, and what changed between two of them.

The upgrade gate: take a baseline before an upgrade (``draconf run --save-baseline FILE``),
run again after it and compare (``draconf compare BEFORE AFTER`` or ``draconf run --compare
BEFORE``).  A baseline is one versioned JSON document:

- ``server``: the API server's version;
- ``driver``: the driver name, the driver versions its devices publish, the kubelet plugin's
  DaemonSets (images, desired/ready);
- ``device_classes``: each class's CEL selectors and ``extendedResourceName``;
- ``nodes``: per node with the driver's devices: GPU count, models, memory sizes, and every
  attribute key with its type;
- ``tests``: per test of the run, outcome, diagnosis and duration (absent for a snapshot taken
  without a run).

:func:`compare` lists each difference as a :class:`Change`, marked a regression when it can
break a workload that used to work (a test that passed and now does not, a node with fewer GPUs,
an attribute gone or retyped, a model or class changed, a verdict much slower).

>>> before = {"version": 1, "nodes": {"n1": {"gpus": 2, "models": ["H100"], "memory": [],
...           "attributes": {"gpu.nvidia.com/driverVersion": "version"}}}}
>>> after = {"version": 1, "nodes": {"n1": {"gpus": 1, "models": ["H100"], "memory": [],
...          "attributes": {"gpu.nvidia.com/driverVersion": "string"}}}}
>>> for change in compare(before, after):
...     print(change)
REGRESSION node n1: GPUs 2 -> 1
REGRESSION node n1: attribute gpu.nvidia.com/driverVersion type version -> string
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from kubernetes.client.exceptions import ApiException

from draconf.errors import DraconfError
from draconf.kube import raw_items

FORMAT_VERSION = 1
#: A verdict this many times slower than in the baseline (and over a second slower) regresses.
SLOWER_FACTOR = 2.0
#: Kinds of change; ``regression`` says which count against the gate by default.
KINDS = {"test": True, "node": True, "attribute": True, "model": True, "device-class": True,
         "slower": True, "server": False, "driver": False, "plugin": False, "memory": True}
PASSING = ("passed",)


@dataclass(frozen=True)
class Change:
    kind: str
    subject: str
    what: str
    regression: bool

    def __str__(self) -> str:
        return f"{'REGRESSION' if self.regression else 'change'} {self.subject}: {self.what}"


# ---------------------------------------------------------------------------------------------
# Taking a snapshot
# ---------------------------------------------------------------------------------------------

def _attribute_type(attr) -> str:
    for kind in ("string", "int", "bool", "version"):
        if getattr(attr, kind, None) is not None:
            return kind
    return "unknown"


def snapshot(api, profile, tests: Iterable[Mapping[str, Any]] = ()) -> dict:
    """The cluster's DRA state for ``profile``'s driver, and ``tests`` (summary.json rows)."""
    driver = profile.driver
    slices = [s for s in api.resource.list_resource_slice().items if s.spec.driver == driver]
    nodes: dict[str, dict] = defaultdict(lambda: {"gpus": 0, "models": set(), "memory": set(),
                                                  "attributes": {}})
    versions: set[str] = set()
    model_key = profile.attributes.get("model")
    for s in slices:
        node = nodes[s.spec.node_name or s.spec.pool.name]
        for device in s.spec.devices or []:
            node["gpus"] += 1
            for name, attr in (device.attributes or {}).items():
                qualified = name if "/" in name else f"{driver}/{name}"
                node["attributes"][qualified] = _attribute_type(attr)
                if name == model_key and attr.string:
                    node["models"].add(attr.string)
                if name == "driverVersion" and attr.version:
                    versions.add(attr.version)
            capacity = (device.capacity or {}).get(profile.memory_capacity)
            if capacity is not None:
                node["memory"].add(str(capacity.value))
    classes = {}
    for c in api.resource.list_device_class().items:
        classes[c.metadata.name] = {
            "selectors": [s.cel.expression for s in c.spec.selectors or [] if s.cel],
            "extendedResourceName": getattr(c.spec, "extended_resource_name", None)}
    return {
        "version": FORMAT_VERSION,
        "taken": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "server": api.version.get_code().git_version,
        "driver": {"name": driver, "versions": sorted(versions), "plugin": _plugin_daemonsets(api, profile)},
        "device_classes": classes,
        "nodes": {name: {"gpus": n["gpus"], "models": sorted(n["models"]), "memory": sorted(n["memory"]),
                         "attributes": dict(sorted(n["attributes"].items()))}
                  for name, n in sorted(nodes.items())},
        "tests": {t["id"]: {"outcome": t["outcome"], "diagnosis": t.get("diagnosis"),
                            "duration": t.get("duration")} for t in tests},
    }


def _plugin_daemonsets(api, profile) -> dict:
    """The driver's kubelet-plugin DaemonSets, where the profile says they are and wherever the
    plugin pods its selectors find run (a release installed under another name, or upgraded
    without the renamed chart's ``nameOverride``): images and readiness.  Read one by one
    (``get``), as the shipped ClusterRole allows."""
    found = {}
    for namespace, name in sorted(set(profile.plugin.daemonsets) | _owning_daemonsets(api, profile)):
        try:
            ds = api.apps.read_namespaced_daemon_set(name, namespace)
        except ApiException as err:
            if err.status in (403, 404):
                continue
            raise
        found[f"{namespace}/{name}"] = {
            "images": sorted(c.image for c in ds.spec.template.spec.containers),
            "desired": ds.status.desired_number_scheduled or 0, "ready": ds.status.number_ready or 0}
    return found


def _owning_daemonsets(api, profile) -> set[tuple[str, str]]:
    """(namespace, name) of the DaemonSets that own the pods the profile's plugin selectors find."""
    owners = set()
    for selector in profile.plugin.pod_selectors:
        for pod in raw_items(api.core.list_pod_for_all_namespaces, label_selector=selector):
            meta = pod["metadata"]
            owners |= {(meta["namespace"], ref["name"]) for ref in meta.get("ownerReferences") or []
                       if ref.get("kind") == "DaemonSet"}
    return owners


# ---------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------

def _plugin_changes(before: Mapping, after: Mapping, add) -> list[Change]:
    """The kubelet-plugin DaemonSets' changes (``namespace/name`` -> images and readiness):
    images changed, and DaemonSets gone or new.  One gone and one new in the same namespace is
    one rename (a chart renamed, upgraded without its ``nameOverride``): the driver is judged
    by the checks and the nodes' GPUs, but whatever refers to the old name must follow."""
    gone = {name: before[name] for name in before if name not in after}
    new = {name: after[name] for name in after if name not in before}
    changes = []
    for name in sorted(before.keys() & after.keys()):
        if before[name].get("images") != after[name].get("images"):
            add("plugin", f"daemonset {name}", f"images {before[name]['images']} -> {after[name]['images']}")
    for old in sorted(gone):
        namespace = old.split("/", 1)[0]
        renamed = sorted(n for n in new if n.split("/", 1)[0] == namespace)
        if len(renamed) == 1 and len([g for g in gone if g.split("/", 1)[0] == namespace]) == 1:
            (to,) = renamed
            del new[to]
            changes.append(Change("plugin", f"daemonset {old}", f"renamed to {to.split('/', 1)[1]} "
                                  f"(images {gone[old]['images']} -> {after[to]['images']}): whatever refers "
                                  "to the old name (monitoring, runbooks, `kubectl rollout status`) must follow",
                                  False))
        else:
            add("plugin", f"daemonset {old}", "gone")
    for name in sorted(new):
        changes.append(Change("plugin", f"daemonset {name}", f"new, images {new[name]['images']}", False))
    return changes


def compare(before: Mapping, after: Mapping, slower_factor: float = SLOWER_FACTOR,
            regressions: Mapping[str, bool] = KINDS) -> list[Change]:
    """Every difference from ``before`` to ``after``; ``regressions`` says which kinds count."""
    changes: list[Change] = []

    def add(kind: str, subject: str, what: str) -> None:
        changes.append(Change(kind, subject, what, regressions.get(kind, True)))

    if before.get("server") != after.get("server") and before.get("server"):
        add("server", "server", f"{before.get('server')} -> {after.get('server')}")
    bd, ad = before.get("driver") or {}, after.get("driver") or {}
    if bd.get("versions") != ad.get("versions") and bd.get("versions") is not None:
        add("driver", "driver", f"versions {bd.get('versions')} -> {ad.get('versions')}")
    changes += _plugin_changes(bd.get("plugin") or {}, ad.get("plugin") or {}, add)
    for name in sorted(set(before.get("device_classes") or {}) | set(after.get("device_classes") or {})):
        b, a = (before.get("device_classes") or {}).get(name), (after.get("device_classes") or {}).get(name)
        if b is None:
            changes.append(Change("device-class", f"DeviceClass {name}", "new", False))
        elif a is None:
            add("device-class", f"DeviceClass {name}", "removed")
        elif a != b:
            diffs = [f"{k} {b.get(k)!r} -> {a.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            add("device-class", f"DeviceClass {name}", "; ".join(diffs))
    for node in sorted(set(before.get("nodes") or {}) | set(after.get("nodes") or {})):
        b, a = (before.get("nodes") or {}).get(node), (after.get("nodes") or {}).get(node)
        subject = f"node {node}"
        if a is None:
            add("node", subject, f"gone (had {(b or {}).get('gpus')} GPUs)")
            continue
        if b is None:
            changes.append(Change("node", subject, f"new, {a['gpus']} GPUs", False))
            continue
        if a["gpus"] != b["gpus"]:
            changes.append(Change("node", subject, f"GPUs {b['gpus']} -> {a['gpus']}",
                                  a["gpus"] < b["gpus"] and regressions.get("node", True)))
        if a["models"] != b["models"]:
            add("model", subject, f"models {b['models']} -> {a['models']}")
        if a.get("memory") != b.get("memory"):
            add("memory", subject, f"memory {b.get('memory')} -> {a.get('memory')}")
        for key in sorted(set(a["attributes"]) | set(b["attributes"])):
            bt, at = b["attributes"].get(key), a["attributes"].get(key)
            if bt and not at:
                add("attribute", subject, f"attribute {key} removed")
            elif at and not bt:
                changes.append(Change("attribute", subject, f"attribute {key} added ({at})", False))
            elif at != bt:
                add("attribute", subject, f"attribute {key} type {bt} -> {at}")
    bt, at = before.get("tests") or {}, after.get("tests") or {}
    for test in sorted(set(bt) & set(at)):
        b, a = bt[test], at[test]
        if b["outcome"] in PASSING and a["outcome"] not in PASSING:
            add("test", test, f"{b['outcome']} -> {a['outcome']}"
                + (f" [{a['diagnosis']}]" if a.get("diagnosis") else ""))
        elif a["outcome"] in PASSING and b["outcome"] not in PASSING:
            changes.append(Change("test", test, f"{b['outcome']} -> {a['outcome']}", False))
        elif a["outcome"] in PASSING and b.get("duration") and a.get("duration") and \
                a["duration"] > b["duration"] * slower_factor and a["duration"] - b["duration"] > 1:
            add("slower", test, f"{b['duration']:.1f}s -> {a['duration']:.1f}s")
    return changes


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

def save(path: str | Path, doc: Mapping) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def load(path: str | Path) -> dict:
    """A baseline file; anything else is a clear error."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as err:
        raise DraconfError(f"cannot read baseline {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise DraconfError(f"baseline {path} is not JSON: {err.msg} at line {err.lineno}") from None
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise DraconfError(f"baseline {path} is not a draconf baseline (format version "
                           f"{FORMAT_VERSION}); take one with `draconf run --save-baseline FILE`")
    return doc
