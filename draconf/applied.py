"""What the suite applied, held against what the cluster runs: a pod's claims, requests and
GPU limits as the manifest declared them, each claim's device requests as its ResourceClaim or
ResourceClaimTemplate declared them, and where the live objects differ.

An admission webhook or policy may rewrite the suite's pods (strip ``resourceClaims``, drop a
container's ``resources.claims``, change a limit) or its claims (a count of 2 made 1, another
DeviceClass, a selector dropped); the pod then runs without the GPUs it was written to have,
and a check that judges only the live objects would judge them against the rewritten request
and pass.  The checks compare first (:func:`differences`, :func:`claim_differences`), so such
a cluster fails with ``spec-altered``.  Pure: documents, pods and claims in, sentences out.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping


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


def _toleration(t: Mapping[str, Any]) -> tuple:
    return (t.get("key"), t.get("operator") or "Equal", t.get("value"), t.get("effect"),
            t.get("tolerationSeconds"))


def _exactly(e: Mapping[str, Any]) -> dict[str, Any]:
    """One device request's promise, with the API server's defaults written out (allocationMode
    ExactCount, count 1, a toleration's operator Equal), so a request is compared by what it
    asks, not by how it was spelt."""
    mode = e.get("allocationMode") or "ExactCount"
    return {"deviceClassName": e.get("deviceClassName"), "allocationMode": mode,
            "count": (e.get("count") or 1) if mode == "ExactCount" else None,
            "selectors": sorted(((s.get("cel") or {}).get("expression") or "").strip()
                                for s in e.get("selectors") or []),
            "adminAccess": bool(e.get("adminAccess")),
            "tolerations": sorted(map(_toleration, e.get("tolerations") or []), key=repr),
            "capacity": (e.get("capacity") or {}).get("requests") or {}}


def requested(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a ResourceClaim spec asks for: each request (its alternatives for ``firstAvailable``)
    by name, its constraints and its configuration, comparable across defaulting.

    >>> applied = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
    ...                                                                    "count": 2}}]}}
    >>> requested(applied)["requests"]["gpus"]["count"], requested(applied)["requests"]["gpus"]["allocationMode"]
    (2, 'ExactCount')
    """
    devices = spec.get("devices") or {}
    requests: dict[str, Any] = {}
    for request in devices.get("requests") or []:
        if request.get("firstAvailable"):
            requests[request["name"]] = [dict(_exactly(sub), name=sub.get("name"))
                                         for sub in request["firstAvailable"]]
        else:
            requests[request["name"]] = _exactly(request.get("exactly") or {})
    constraints = sorted((sorted(c.get("requests") or []), c.get("matchAttribute"), c.get("distinctAttribute"))
                         for c in devices.get("constraints") or [])
    config = sorted(json.dumps(c, sort_keys=True) for c in devices.get("config") or [])
    return {"requests": requests, "constraints": constraints, "config": config}


def _request_change(name: str, want: Any, have: Any) -> str:
    """How the live request ``name`` differs from the applied one, field by field."""
    if isinstance(want, list) or isinstance(have, list):
        return f"request {name} is {json.dumps(have, default=str)}, applied as {json.dumps(want, default=str)}"
    changed = [f"{field} {have.get(field)!r} (applied {want.get(field)!r})"
               for field in want if want.get(field) != have.get(field)]
    return f"request {name}: " + ", ".join(changed)


def claim_difference(applied_spec: Mapping[str, Any], live_spec: Mapping[str, Any], what: str) -> list[str]:
    """Where the live claim ``what`` asks for other devices than the spec the suite applied
    (its own ResourceClaim, or the ResourceClaimTemplate it was made from); empty when the same.

    >>> applied = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
    ...                                                                    "count": 2}}]}}
    >>> live = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
    ...                                                                 "allocationMode": "ExactCount", "count": 1}}]}}
    >>> claim_difference(applied, applied, "claim c")
    []
    >>> claim_difference(applied, live, "claim c")
    ['claim c: request gpus: count 1 (applied 2)']
    >>> claim_difference(applied, {"devices": {"requests": []}}, "claim c")
    ['claim c: request gpus is gone']
    """
    want, have = requested(applied_spec), requested(live_spec)
    found = []
    for name, asked in want["requests"].items():
        if name not in have["requests"]:
            found.append(f"{what}: request {name} is gone")
        elif have["requests"][name] != asked:
            found.append(f"{what}: {_request_change(name, asked, have['requests'][name])}")
    for name in sorted(set(have["requests"]) - set(want["requests"])):
        found.append(f"{what}: request {name} was not applied")
    if have["constraints"] != want["constraints"]:
        found.append(f"{what}: constraints are {have['constraints']}, applied as {want['constraints']}")
    if have["config"] != want["config"]:
        found.append(f"{what}: its device configuration differs from the one applied")
    return found


def claim_differences(documents: Iterable[Mapping[str, Any]], pods: Iterable[Any],
                      claims: Mapping[str, Any]) -> list[str]:
    """Every live claim of the workload held against what the suite applied: a ResourceClaim
    document against the claim of its name, a ResourceClaimTemplate against each claim made
    from it for a pod (``pods``: :class:`draconf.pods.Pod`, ``claims``: name ->
    :class:`draconf.claims.Claim`).  A claim not made yet is not judged here (the waits and
    the allocation check say so)."""
    docs = list(documents)
    named = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ResourceClaim"}
    templates = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ResourceClaimTemplate"}
    found, judged = [], set()
    for name, doc in named.items():
        if (claim := claims.get(name)) is not None:
            judged.add(name)
            found += claim_difference(doc.get("spec") or {}, claim.raw.get("spec") or {}, f"claim {name}")
    for pod in pods:
        names = pod.claim_names()
        for ref in pod.spec.get("resourceClaims") or []:
            template = templates.get(ref.get("resourceClaimTemplateName") or "")
            claim = claims.get(names.get(ref["name"], ""))
            if template is None or claim is None or claim.name in judged:
                continue
            judged.add(claim.name)
            found += claim_difference((template.get("spec") or {}).get("spec") or {},
                                      claim.raw.get("spec") or {},
                                      f"claim {claim.name} (from template {template['metadata']['name']})")
    return found
