"""Read-only audits of a cluster's configuration that a workload run cannot see.

:func:`audit_quotas` finds the migration trap from device plugin to DRA: a namespace whose
ResourceQuotas cap the ``nvidia.com/gpu`` extended resource but no DeviceClass.  Such a cap
does not bind claims: ``requests.nvidia.com/gpu`` counts the extended resource in
``resources.requests`` only, while a pod that gets its GPU through a ResourceClaim requests
none of it (dra-facts §2; upstream ``pkg/quota/v1/evaluator/core/resource_claims.go`` charges
claims to ``<class>.deviceclass.resource.k8s.io/devices``).  The namespace therefore has no
GPU cap at all once its workloads move to claims.

Measured on Kubernetes 1.36.3 (the bed): when the DeviceClass maps the extended resource
(``extendedResourceName: nvidia.com/gpu``, DRAExtendedResource), a claim of that class *is*
charged to ``requests.nvidia.com/gpu`` and refused beyond it.  This audit does not read
DeviceClasses yet, so on such a cluster its findings for ``requests.nvidia.com/gpu`` are
conservative (the suite's quota test reports which behaviour the cluster has).

Example::

    findings = audit_quotas(api, device_class="gpu.nvidia.com",
                            exclude_selector="app.kubernetes.io/managed-by=draconf")
    print(format_findings(findings))

Only ``list`` calls are made (ResourceQuotas in all namespaces, and Namespaces when an exclusion
selector is given), so it is safe to run against production clusters.

>>> q = {"metadata": {"name": "gpu-cap", "namespace": "team-a"},
...      "spec": {"hard": {"requests.nvidia.com/gpu": "8", "pods": "20"}}}
>>> [f.namespace for f in findings_from_quotas([q], device_class="gpu.nvidia.com")]
['team-a']
>>> f = findings_from_quotas([q], device_class="gpu.nvidia.com")[0]
>>> f.keys
{'requests.nvidia.com/gpu': '8'}
>>> print(f.message.splitlines()[-1])
  fix: add `gpu.nvidia.com.deviceclass.resource.k8s.io/devices: "8"` to ResourceQuota team-a/gpu-cap (kubectl edit resourcequota -n team-a gpu-cap)
>>> capped = {"metadata": {"name": "dra-cap", "namespace": "team-a"},
...           "spec": {"hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "8"}}}
>>> findings_from_quotas([q, capped], device_class="gpu.nvidia.com")
[]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from kubernetes.utils import parse_quantity

#: Extended-resource quota keys that cap device-plugin GPUs (requests.* and the bare name mean
#: the same for extended resources; limits.* is accepted by the API too).
GPU_EXTENDED_KEYS = ("requests.nvidia.com/gpu", "nvidia.com/gpu", "limits.nvidia.com/gpu")
#: The suffix of a per-DeviceClass device quota key: ``<class>.deviceclass.resource.k8s.io/devices``.
DEVICECLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"
#: Caps the number of claims, not devices (a claim may ask for many): reported, not a fix.
CLAIM_COUNT_KEY = "count/resourceclaims.resource.k8s.io"
DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"


def deviceclass_key(device_class: str) -> str:
    """The quota key capping devices of one DeviceClass.

    >>> deviceclass_key("gpu.nvidia.com")
    'gpu.nvidia.com.deviceclass.resource.k8s.io/devices'
    """
    return device_class + DEVICECLASS_SUFFIX


@dataclass
class Finding:
    """One namespace whose GPU quota does not bind DRA claims."""

    namespace: str
    #: names of the ResourceQuotas in the namespace that cap the extended resource
    quotas: list[str]
    #: the GPU-related hard limits found, key -> value as written (e.g. requests.nvidia.com/gpu: 8)
    keys: dict[str, str]
    #: operator-facing explanation and fix
    message: str
    #: other DRA-related keys the namespace has (count/resourceclaims), for context
    other_dra_keys: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


def _quota_dict(quota) -> dict:
    """A ResourceQuota as a plain dict, from either the typed client or a dict."""
    if isinstance(quota, dict):
        return quota
    meta, spec = quota.metadata, quota.spec
    return {"metadata": {"name": meta.name, "namespace": meta.namespace},
            "spec": {"hard": dict((spec.hard if spec else None) or {}),
                     "scopes": list((spec.scopes if spec else None) or []),
                     "scopeSelector": bool(spec and spec.scope_selector)}}


def findings_from_quotas(quotas: Iterable, device_class: str = DEFAULT_DEVICE_CLASS,
                         extended_keys: Iterable[str] = GPU_EXTENDED_KEYS) -> list[Finding]:
    """The namespaces among ``quotas`` that cap the GPU extended resource but no DeviceClass.

    A DeviceClass cap on *any* class counts as "DRA-aware" (the operator chose which classes
    to cap); the fix names ``device_class``.
    """
    extended_keys = tuple(extended_keys)
    by_namespace: dict[str, list[dict]] = {}
    for quota in quotas:
        q = _quota_dict(quota)
        by_namespace.setdefault(q["metadata"]["namespace"], []).append(q)
    findings = []
    for namespace, items in sorted(by_namespace.items()):
        gpu_keys: dict[str, str] = {}
        capping: list[str] = []
        scoped: list[str] = []
        has_deviceclass_cap = False
        other: dict[str, str] = {}
        for q in sorted(items, key=lambda q: q["metadata"]["name"]):
            hard = {str(k): str(v) for k, v in ((q.get("spec") or {}).get("hard") or {}).items()}
            name = q["metadata"]["name"]
            found = {k: v for k, v in hard.items() if k in extended_keys}
            if found:
                capping.append(name)
                gpu_keys.update(found)
                spec = q.get("spec") or {}
                if spec.get("scopes") or spec.get("scopeSelector"):
                    scoped.append(name)
            if any(k.endswith(DEVICECLASS_SUFFIX) for k in hard):
                has_deviceclass_cap = True
            if CLAIM_COUNT_KEY in hard:
                other[CLAIM_COUNT_KEY] = hard[CLAIM_COUNT_KEY]
        if not capping or has_deviceclass_cap:
            continue
        findings.append(Finding(namespace, capping, gpu_keys,
                                _message(namespace, capping, gpu_keys, other, scoped, device_class),
                                other))
    return findings


def _message(namespace: str, quotas: list[str], keys: dict[str, str], other: dict[str, str],
             scoped: list[str], device_class: str) -> str:
    limits = ", ".join(f"{k}: {v}" for k, v in sorted(keys.items()))
    value = min(keys.values(), key=_as_number)
    target = quotas[0]
    lines = [
        f"namespace {namespace}: ResourceQuota {', '.join(quotas)} caps GPUs with {limits}, "
        f"but no ResourceQuota caps a DeviceClass; pods that get GPUs through ResourceClaims "
        f"(DRA) are not counted against {', '.join(sorted(keys))}, so this namespace has no "
        f"effective GPU limit for DRA workloads."]
    if other:
        lines.append(f"  note: {CLAIM_COUNT_KEY}: {other[CLAIM_COUNT_KEY]} limits the number of "
                     "claims, not the devices each claim requests.")
    if scoped:
        lines.append(f"  note: {', '.join(scoped)} {'is' if len(scoped) == 1 else 'are'} scoped; "
                     "give the DeviceClass limit the same scope.")
    lines.append(f"  fix: add `{deviceclass_key(device_class)}: \"{value}\"` to ResourceQuota "
                 f"{namespace}/{target} (kubectl edit resourcequota -n {namespace} {target})")
    return "\n".join(lines)


def _as_number(value: str) -> float:
    try:
        return float(parse_quantity(value))
    except (ValueError, TypeError):
        return float("inf")


def audit_quotas(api, device_class: str = DEFAULT_DEVICE_CLASS,
                 extended_keys: Iterable[str] = GPU_EXTENDED_KEYS,
                 exclude_selector: str | None = None) -> list[Finding]:
    """Namespaces whose ResourceQuotas cap ``nvidia.com/gpu`` but no DeviceClass (read-only).

    ``exclude_selector`` is a namespace label selector (e.g. the suite's own
    ``app.kubernetes.io/managed-by=draconf``); matching namespaces are left out.
    """
    quotas = api.core.list_resource_quota_for_all_namespaces().items
    excluded: set[str] = set()
    if exclude_selector:
        excluded = {n.metadata.name
                    for n in api.core.list_namespace(label_selector=exclude_selector).items}
    return [f for f in findings_from_quotas(quotas, device_class, extended_keys)
            if f.namespace not in excluded]


def format_findings(findings: list[Finding]) -> str:
    """A report for operators: one block per namespace, or a one-line all-clear.

    >>> format_findings([])
    'quota audit: no namespace caps nvidia.com/gpu without a DeviceClass quota'
    """
    if not findings:
        return "quota audit: no namespace caps nvidia.com/gpu without a DeviceClass quota"
    head = (f"quota audit: {len(findings)} namespace(s) cap GPUs only through the extended "
            "resource, which DRA claims bypass:")
    return "\n".join([head] + [f.message for f in findings])
