"""Checks of the cluster itself: ``server-version`` (resource.k8s.io/v1 needs Kubernetes 1.34),
``permissions`` (what manifests/rbac/clusterrole.yaml grants, see :mod:`draconf.permissions`)
and ``resource-api`` (the four DRA resources served)."""

from __future__ import annotations

import re
from typing import Iterable

from draconf.preflight.reading import Access, Inconclusive, read
from draconf.preflight.result import CheckResult, check_result
from draconf.preflight.runner import check

#: The lowest Kubernetes release serving resource.k8s.io/v1 (DRA GA).
MIN_VERSION = (1, 34)
#: The GPU Operator-managed DRA workflow asks for at least this patch release (the guide).
OPERATOR_MIN_VERSION = (1, 34, 2)
#: Resources the resource.k8s.io/v1 group must serve (`kubectl api-resources`).
REQUIRED_RESOURCES = ("deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices")

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_server_version(git_version: str | None, major: str | None = None,
                         minor: str | None = None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a server, from ``gitVersion`` or else ``major``/``minor``.

    Managed clusters decorate both: ``v1.30.2-eks-1a2b3c``, minor ``30+``.

    >>> parse_server_version("v1.36.3")
    (1, 36, 3)
    >>> parse_server_version("v1.33.1-gke.1200", "1", "33+")
    (1, 33, 1)
    >>> parse_server_version("", "1", "34+")
    (1, 34, 0)
    >>> parse_server_version("garbage", "x", "y") is None
    True
    """
    match = _VERSION.match((git_version or "").strip())
    if match:
        return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    major_digits, minor_digits = (re.match(r"\d+", (v or "").strip()) for v in (major, minor))
    if major_digits and minor_digits:
        return int(major_digits.group()), int(minor_digits.group()), 0
    return None


def evaluate_server_version(git_version: str | None, major: str | None = None,
                            minor: str | None = None, emulation_major: str | None = None,
                            emulation_minor: str | None = None) -> CheckResult:
    """Kubernetes 1.34+ serves resource.k8s.io/v1; say what older releases would need.

    An API server started with ``--emulated-version`` serves the APIs of the emulated release,
    so that one decides.
    """
    evidence = {"server version": f"gitVersion={git_version} major={major} minor={minor}"
                + (f" emulationMajor={emulation_major} emulationMinor={emulation_minor}"
                   if emulation_minor else "")}
    version = parse_server_version(git_version, major, minor)
    if version is None:
        return check_result(False, f"cannot tell the Kubernetes version from the server's /version "
                                   f"({git_version!r}); check `kubectl version`", "api-unavailable",
                            evidence)
    label = f"v{version[0]}.{version[1]}.{version[2]}"
    effective = version[:2]
    emulated = parse_server_version(None, emulation_major, emulation_minor) if emulation_minor else None
    if emulated and emulated[:2] != effective:
        effective = emulated[:2]
        label += f" (emulating {emulated[0]}.{emulated[1]})"
    if effective >= MIN_VERSION:
        summary = f"Kubernetes {label} serves resource.k8s.io/v1 (needs 1.34 or later)"
        if version[:2] == OPERATOR_MIN_VERSION[:2] and version < OPERATOR_MIN_VERSION:
            summary += ("; note: the GPU Operator-managed DRA workflow asks for 1.34.2 or later")
        return check_result(True, summary, evidence=evidence)
    if effective == (1, 33):
        need = ("it serves DRA as resource.k8s.io/v1beta2 at most, so the driver and workloads "
                "would need v1beta2; this suite tests resource.k8s.io/v1")
    elif effective == (1, 32):
        need = ("it serves DRA only as resource.k8s.io/v1beta1 (v1beta2 arrives in 1.33), behind "
                "the DynamicResourceAllocation feature gate; this suite tests resource.k8s.io/v1")
    else:
        need = "it has no stable DRA API; this suite tests resource.k8s.io/v1"
    return check_result(False, f"Kubernetes {label} is too old for resource.k8s.io/v1 (GA in 1.34): "
                               f"{need}. Upgrade the control plane to 1.34 or later "
                               "(1.34.2+ for the GPU Operator workflow)", "api-unavailable", evidence)


@check("server-version")
def check_server_version(api, profile) -> CheckResult:
    info = read(Access("get", "/version"), api.version.get_code)
    return evaluate_server_version(info.git_version, info.major, info.minor,
                                   getattr(info, "emulation_major", None),
                                   getattr(info, "emulation_minor", None))


@check("permissions")
def check_permissions(api, profile) -> CheckResult:
    from draconf import permissions
    from draconf.errors import DraconfError
    try:
        wanted = permissions.needed()
    except DraconfError as err:
        raise Inconclusive(str(err)) from None
    denied = read(Access("create", "selfsubjectaccessreviews", "authorization.k8s.io"),
                  lambda _request_timeout=None: permissions.review(api, wanted))
    return permissions.evaluate(wanted, denied, permissions.whoami(api) if denied else None)


def evaluate_resource_api(resources: Iterable[str] | None,
                          served_versions: Iterable[str] = ()) -> CheckResult:
    """``resources``: what /apis/resource.k8s.io/v1 lists (None when it is not served).

    >>> evaluate_resource_api(None, ["v1beta1"]).summary.split(";")[0]
    'the API server does not serve resource.k8s.io/v1 (the group serves: v1beta1)'
    """
    served = sorted(served_versions)
    group = f" (the group serves: {', '.join(served)})" if served else (
        " (the resource.k8s.io group is not served at all)")
    if resources is None:
        return check_result(False, f"the API server does not serve resource.k8s.io/v1{group}; "
                                   "enable it (Kubernetes 1.34+, or --runtime-config="
                                   "resource.k8s.io/v1=true) and check `kubectl api-resources "
                                   "--api-group=resource.k8s.io`", "api-unavailable",
                            {"served versions": ", ".join(served) or "none"})
    listed = {r for r in resources if "/" not in r}
    missing = [r for r in REQUIRED_RESOURCES if r not in listed]
    evidence = {"kubectl api-resources --api-group=resource.k8s.io": ", ".join(sorted(listed))}
    if missing:
        return check_result(False, f"resource.k8s.io/v1 is served but lacks {', '.join(missing)}; "
                                   "check the API server's --runtime-config and feature gates",
                            "api-unavailable", evidence)
    return check_result(True, f"resource.k8s.io/v1 serves {', '.join(REQUIRED_RESOURCES)}",
                        evidence=evidence)


@check("resource-api")
def check_resource_api(api, profile) -> CheckResult:
    from kubernetes import client
    listing = read(Access("get", "/apis/resource.k8s.io/v1 (discovery)"),
                   api.resource.get_api_resources, not_found_ok=True)
    if listing is not None:
        return evaluate_resource_api([r.name for r in listing.resources or []])
    group = read(Access("get", "/apis/resource.k8s.io (discovery)"),
                 client.ResourceApi(api.api_client).get_api_group, not_found_ok=True)
    versions = []
    for v in (group.versions if group else None) or []:
        versions.append(v["version"] if isinstance(v, dict) else v.version)
    return evaluate_resource_api(None, versions)
