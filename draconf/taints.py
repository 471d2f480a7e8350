"""Device taints (KEP-5055, DRADeviceTaints: beta and on in Kubernetes 1.36): which published
devices a driver tainted, and whether a request tolerates a taint.

A taint is ``key=value:effect`` on a device in its ResourceSlice.  ``NoSchedule`` keeps the
scheduler from allocating the device to a claim whose request does not tolerate it,
``NoExecute`` also evicts pods already using it, ``None`` only informs.  The NVIDIA DRA driver
taints unhealthy GPUs this way (``gpu.nvidia.com/xid=<code>:NoSchedule`` for a fatal XID,
``gpu.nvidia.com/gpu-lost:NoSchedule``).

>>> taint = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
>>> describe(taint)
'gpu.nvidia.com/xid=79:NoSchedule'
>>> blocks(taint), blocks({"key": "gpu.nvidia.com/xid", "value": "43", "effect": "None"})
(True, False)
>>> tolerates([{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}], taint)
True
>>> tolerates([{"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "48"}], taint)
False
>>> tolerates([{"operator": "Exists"}], taint)
True
>>> tolerates([], taint)
False

An administrator taints devices by selector with a ``DeviceTaintRule`` (resource.k8s.io/v1beta2,
DRADeviceTaintRules: beta and off by default in 1.36).  Its taint is not written into the
ResourceSlice: kube-scheduler and kube-controller-manager apply it to the devices it selects as
they read the slices, so a judgement over slices takes the rules in (:func:`with_rule_taints`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from draconf.kube import raw_items

#: The effects that keep a device from claims which do not tolerate them.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def describe(taint: dict) -> str:
    """``key=value:effect``, as ``kubectl`` writes node taints."""
    return f"{taint.get('key', '')}={taint.get('value') or ''}:{taint.get('effect', '')}"


def blocks(taint: dict) -> bool:
    return taint.get("effect") in BLOCKING_EFFECTS


def tolerates(tolerations: list[dict] | None, taint: dict) -> bool:
    """Whether one of ``tolerations`` (a request's, resource.k8s.io/v1 DeviceToleration)
    tolerates ``taint``: the rules of the scheduler's allocator (as for node taints)."""
    for tol in tolerations or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


@dataclass(frozen=True)
class TaintedDevice:
    """One published device carrying taints: ``driver/pool/name`` and where it is."""
    driver: str
    pool: str
    name: str
    node: str | None
    taints: tuple[dict, ...]
    attributes: dict

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"

    @property
    def blocking(self) -> tuple[dict, ...]:
        return tuple(t for t in self.taints if blocks(t))

    def summary(self) -> str:
        """``gpu-h100-0/gpu-4 (gpu.nvidia.com/xid=79:NoSchedule)``"""
        return f"{self.pool}/{self.name} ({', '.join(describe(t) for t in self.taints)})"


def tainted_devices(slices) -> list[TaintedDevice]:
    """The devices of ``slices`` (API dicts, e.g. recorded evidence) that carry any taint.

    >>> slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1"},
    ...   "devices": [{"name": "gpu-0"}, {"name": "gpu-4", "attributes": {"uuid": {"string": "GPU-4"}},
    ...     "taints": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]}]}}]
    >>> [d.summary() for d in tainted_devices(slices)]
    ['n1/gpu-4 (gpu.nvidia.com/xid=79:NoSchedule)']
    >>> tainted_devices(slices)[0].attributes["gpu.nvidia.com/uuid"]
    'GPU-4'
    """
    found = []
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for dev in spec.get("devices") or []:
            taints = tuple({k: v for k, v in t.items() if k in ("key", "value", "effect")}
                           for t in dev.get("taints") or [])
            if taints:
                attrs = {(k if "/" in k else f"{driver}/{k}"): next(iter((v or {}).values()), None)
                         for k, v in (dev.get("attributes") or {}).items()}
                found.append(TaintedDevice(driver, pool, dev.get("name", ""), spec.get("nodeName"),
                                           taints, attrs))
    return found


def read_slices(api, driver: str) -> list[dict]:
    """The driver's ResourceSlices as API dicts."""
    return raw_items(api.resource.list_resource_slice, field_selector=f"spec.driver={driver}")


def untolerated(claim_raw: dict, slices) -> list[str]:
    """The allocation results of a claim (API dict) whose device carries a NoSchedule/NoExecute
    taint that the result's request does not tolerate, each as ``request: pool/device
    (key=value:effect)``: what the scheduler must never do while DRADeviceTaints is on.

    >>> slices = [{"spec": {"driver": "d", "pool": {"name": "p"}, "devices": [{"name": "gpu-4",
    ...   "taints": [{"key": "d/xid", "value": "79", "effect": "NoSchedule"}]}]}}]
    >>> claim = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {}}]}},
    ...   "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "d",
    ...   "pool": "p", "device": "gpu-4"}]}}}}
    >>> untolerated(claim, slices)
    ['gpu: p/gpu-4 (d/xid=79:NoSchedule)']
    >>> claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [{"key": "d/xid", "operator": "Exists"}]
    >>> untolerated(claim, slices)
    []
    """
    tainted = {d.key: d for d in tainted_devices(slices)}
    tolerations = {}
    for request in ((claim_raw.get("spec") or {}).get("devices") or {}).get("requests") or []:
        tolerations[request.get("name")] = (request.get("exactly") or {}).get("tolerations") or []
        for sub in request.get("firstAvailable") or []:
            tolerations[f"{request.get('name')}/{sub.get('name')}"] = sub.get("tolerations") or []
    results = ((((claim_raw.get("status") or {}).get("allocation") or {}).get("devices") or {})
               .get("results") or [])
    problems = []
    for r in results:
        device = tainted.get(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}")
        if device is None:
            continue
        # A result's own tolerations (copied by the scheduler) count as well as the request's.
        tols = (r.get("tolerations") or []) + tolerations.get(r.get("request"), [])
        bad = [t for t in device.blocking if not tolerates(tols, t)]
        if bad:
            problems.append(f"{r.get('request')}: {device.pool}/{device.name} "
                            f"({', '.join(describe(t) for t in bad)})")
    return problems


def rule_selects(rule: dict, driver: str, pool: str, device: str) -> bool:
    """Whether a DeviceTaintRule (API dict) selects the device: every selector field that is set
    matches; no ``deviceSelector`` selects nothing (the API's own rule).

    >>> rule = {"spec": {"deviceSelector": {"driver": "d", "device": "gpu-1"}}}
    >>> rule_selects(rule, "d", "node-a", "gpu-1"), rule_selects(rule, "d", "node-a", "gpu-0")
    (True, False)
    >>> rule_selects({"spec": {}}, "d", "p", "gpu-1")
    False
    """
    selector = (rule.get("spec") or {}).get("deviceSelector")
    if selector is None:
        return False
    wanted = {"driver": driver, "pool": pool, "device": device}
    return all(selector.get(k) in (None, v) for k, v in wanted.items())


def with_rule_taints(slices, rules) -> list[dict]:
    """``slices`` (API dicts) with each DeviceTaintRule's taint added to the devices it selects,
    as kube-scheduler and the eviction controller see them (the stored slices are unchanged).

    >>> slices = [{"spec": {"driver": "d", "pool": {"name": "p"}, "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}]
    >>> rule = {"spec": {"deviceSelector": {"driver": "d", "pool": "p", "device": "gpu-1"},
    ...                  "taint": {"key": "example.com/maintenance", "effect": "NoSchedule", "timeAdded": "t"}}}
    >>> [d.summary() for d in tainted_devices(with_rule_taints(slices, [rule]))]
    ['p/gpu-1 (example.com/maintenance=:NoSchedule)']
    >>> tainted_devices(slices)
    []
    >>> with_rule_taints(slices, [])[0] is slices[0]  # untouched by any rule: not copied
    True
    """
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        names = [dev.get("name", "") for dev in spec.get("devices") or []]
        if not any(rule_selects(rule, driver, pool, name) for rule in rules for name in names):
            out.append(s)  # no rule adds to it: the stored slice as it is (a copy of every
            continue       # slice of a 1,000-node fleet was most of a diagnosis's time)
        s = copy.deepcopy(s)
        for dev in (s.get("spec") or {}).get("devices") or []:
            for rule in rules:
                if rule_selects(rule, driver, pool, dev.get("name", "")):
                    dev.setdefault("taints", []).append(dict((rule.get("spec") or {}).get("taint") or {}))
        out.append(s)
    return out


def only_effect(slices, effect: str) -> list[dict]:
    """``slices`` (API dicts) with only the device taints of ``effect``.

    >>> slices = [{"spec": {"devices": [{"name": "gpu-0", "taints": [
    ...     {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]}]}}]
    >>> only_effect(slices, "NoExecute")[0]["spec"]["devices"][0]["taints"]
    [{'key': 'b', 'effect': 'NoExecute'}]
    >>> len(slices[0]["spec"]["devices"][0]["taints"])  # the slices given are unchanged
    2
    """
    out = []
    for s in slices:
        if any("taints" in dev for dev in (s.get("spec") or {}).get("devices") or []):
            s = copy.deepcopy(s)  # only a slice with taints to filter is copied
            for dev in (s.get("spec") or {}).get("devices") or []:
                if "taints" in dev:
                    dev["taints"] = [t for t in dev["taints"] if t.get("effect") == effect]
        out.append(s)
    return out


#: The condition kube-controller-manager's device-taint-eviction controller writes on a rule.
EVICTION_CONDITION = "EvictionInProgress"


def rule_condition(rule: dict) -> dict | None:
    """The rule's ``EvictionInProgress`` condition (None until the controller wrote one).

    >>> rule_condition({"status": {"conditions": [{"type": "EvictionInProgress", "status": "False",
    ...     "reason": "OtherEffect"}]}})["reason"]
    'OtherEffect'
    >>> rule_condition({}) is None
    True
    """
    return next((c for c in ((rule.get("status") or {}).get("conditions") or [])
                 if c.get("type") == EVICTION_CONDITION), None)


def describe_rule(rule: dict) -> str:
    """``DeviceTaintRule r: driver=d pool=p device=gpu-1 -> k=v:NoSchedule; EvictionInProgress=False
    (OtherEffect: ...)``

    >>> describe_rule({"metadata": {"name": "r"}, "spec": {"deviceSelector": {"driver": "d", "device": "gpu-1"},
    ...     "taint": {"key": "k", "value": "v", "effect": "NoExecute"}}, "status": {"conditions": [
    ...     {"type": "EvictionInProgress", "status": "False", "reason": "Completed",
    ...      "message": "1 pod evicted since starting the controller."}]}})
    'DeviceTaintRule r: driver=d device=gpu-1 -> k=v:NoExecute; EvictionInProgress=False (Completed: 1 pod evicted since starting the controller.)'
    """
    spec = rule.get("spec") or {}
    selector = " ".join(f"{k}={v}" for k, v in (spec.get("deviceSelector") or {}).items() if v)
    condition = rule_condition(rule)
    status = (f"{EVICTION_CONDITION}={condition.get('status')} ({condition.get('reason')}: "
              f"{condition.get('message') or ''})" if condition else "no status yet")
    return (f"DeviceTaintRule {(rule.get('metadata') or {}).get('name', '?')}: {selector or 'no selector'} -> "
            f"{describe(spec.get('taint') or {})}; {status}")


def tolerations_for_devices(api, driver: str, keys, tainted: list[TaintedDevice] | None = None) -> list[dict]:
    """Tolerations (key, effect, any value) for every NoSchedule/NoExecute taint on the devices
    ``keys`` (driver/pool/device): what a claim needs to be allocated them again.  ``tainted``:
    the driver's tainted devices as already read (the fleet sweep reads them once, not once
    per GPU); else they are read now."""
    wanted = set(keys)
    if tainted is None:
        tainted = tainted_devices(read_slices(api, driver))
    found = {(t["key"], t["effect"]) for d in tainted if d.key in wanted for t in d.blocking}
    return [{"key": k, "operator": "Exists", "effect": e} for k, e in sorted(found)]
