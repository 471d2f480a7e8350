"""What the suite applied, held against what the cluster runs: a pod's claims, requests and
GPU limits as the manifest declared them, and where the live pod differs.

An admission webhook or policy may rewrite the suite's pods (strip ``resourceClaims``, drop a
container's ``resources.claims``, change a limit); the pod then runs without the GPU it was
written to have, and a check that judges only the live pod would judge nothing and pass.  The
checks compare first (:func:`differences`), so such a cluster fails with ``spec-altered``.
Pure: documents and pods in, sentences out.
"""

from __future__ import annotations

from typing import Any, Mapping


def _is_extended(resource: str) -> bool:
    """A resource outside the core names (``nvidia.com/gpu``), the kind a device plugin or a
    DeviceClass's ``extendedResourceName`` serves.

    >>> _is_extended("nvidia.com/gpu"), _is_extended("cpu")
    (True, False)
    """
    return "/" in resource and not resource.startswith(("kubernetes.io/", "hugepages-"))


def declared(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a pod spec asks for: each pod-level claim with its source, and per container the
    claims (and requests) it lists and its extended-resource limits.

    >>> declared({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
    ...           "containers": [{"name": "ctr", "resources": {"claims": [{"name": "gpu"}],
    ...                                                        "limits": {"cpu": "1"}}}]})
    {'claims': {'gpu': 'template single-gpu'}, 'containers': {'ctr': {'claims': ['gpu'], 'limits': {}}}}
    """
    claims = {}
    for ref in spec.get("resourceClaims") or []:
        source = (f"claim {ref['resourceClaimName']}" if ref.get("resourceClaimName")
                  else f"template {ref.get('resourceClaimTemplateName')}")
        claims[ref["name"]] = source
    containers = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        listed = sorted(r["name"] + (f"/{r['request']}" if r.get("request") else "")
                        for r in resources.get("claims") or [])
        limits = {k: str(v) for k, v in (resources.get("limits") or {}).items() if _is_extended(k)}
        containers[container["name"]] = {"claims": listed, "limits": limits}
    return {"claims": claims, "containers": containers}


def differences(applied_spec: Mapping[str, Any], live_spec: Mapping[str, Any], pod: str) -> list[str]:
    """Where the live pod ``pod`` asks for other claims, requests or GPU limits than the spec
    the suite applied; empty when it asks for the same.

    >>> applied = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
    ...            "containers": [{"name": "ctr", "resources": {"claims": [{"name": "gpu"}]}}]}
    >>> differences(applied, applied, "p")
    []
    >>> differences(applied, {"containers": [{"name": "ctr"}]}, "p")
    ['pod p: spec.resourceClaims lacks gpu (template t)', 'pod p: container ctr lists no claim gpu']
    """
    want, have = declared(applied_spec), declared(live_spec)
    found = []
    for name, source in want["claims"].items():
        if name not in have["claims"]:
            found.append(f"pod {pod}: spec.resourceClaims lacks {name} ({source})")
        elif have["claims"][name] != source:
            found.append(f"pod {pod}: claim {name} comes from {have['claims'][name]}, applied as {source}")
    for name in sorted(set(have["claims"]) - set(want["claims"])):
        found.append(f"pod {pod}: spec.resourceClaims has {name} ({have['claims'][name]}), which was not applied")
    for container, asked in want["containers"].items():
        live = have["containers"].get(container)
        if live is None:
            found.append(f"pod {pod}: container {container} is gone")
            continue
        for claim in sorted(set(asked["claims"]) - set(live["claims"])):
            found.append(f"pod {pod}: container {container} lists no claim {claim}")
        for claim in sorted(set(live["claims"]) - set(asked["claims"])):
            found.append(f"pod {pod}: container {container} lists claim {claim}, which was not applied")
        for resource, value in sorted(asked["limits"].items()):
            if live["limits"].get(resource) != value:
                found.append(f"pod {pod}: container {container} limit {resource} is "
                             f"{live['limits'].get(resource) or 'gone'}, applied as {value}")
    return found


def asks_for_devices(spec: Mapping[str, Any]) -> bool:
    """True when a pod spec asks for any device: a claim, or an extended-resource limit.

    >>> asks_for_devices({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]})
    True
    >>> asks_for_devices({"containers": [{"name": "c"}]})
    False
    """
    shape = declared(spec)
    return bool(shape["claims"]) or any(c["claims"] or c["limits"] for c in shape["containers"].values())
