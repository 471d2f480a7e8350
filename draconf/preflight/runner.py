"""The registry of checks and the runner: :func:`check` registers a function in :data:`CHECKS`
(in the order the check modules are imported, which is the order :func:`run_all` runs them),
:func:`probe` tells whether the API server can be used at all, and :func:`describe` prints the
results as a table."""

from __future__ import annotations

import functools
from typing import Callable, Iterable

from draconf.preflight.reading import Access, Inconclusive, read
from draconf.preflight.result import BLOCKING, CheckResult, check_result
from draconf.tables import plain_lines


def check(name: str, severity: str = BLOCKING, requires: str | None = None):
    """Register a check function under ``name``; turns :class:`Inconclusive` into a result.

    ``requires`` names a field of the profile's :class:`~draconf.profile.Capabilities`: when the
    profile says the driver lacks it, the check is not applicable and reads nothing.
    """

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(api, profile) -> CheckResult:
            try:
                if requires and not getattr(profile.capabilities, requires):
                    result = check_result(True, not_applicable_by_profile(profile, requires),
                                          applicable=False)
                else:
                    result = fn(api, profile)
            except Inconclusive as err:
                result = CheckResult(name, False, severity, err.summary, None, err.evidence,
                                     inconclusive=True, unreachable=err.unreachable, answers=err.answers)
            result.name, result.severity = name, severity
            return result

        run.check_name = name  # type: ignore[attr-defined]
        CHECKS[name] = run
        SEVERITY[name] = severity
        return run

    return wrap


#: Capability -> (profile key, what it means), for the N/A line of a check that needs it.
CAPABILITY_MEANING = {
    "gpu_cluster": ("gpuCluster", "the driver is not managed by GPU Operator's GPUCluster"),
    "cluster_policy": ("clusterPolicy", "the driver has no GPU Operator ClusterPolicy to conflict with"),
}


def not_applicable_by_profile(profile, capability: str) -> str:
    """Why a check needing ``capability`` does not apply to the profile's driver.

    >>> from draconf.profile import builtin
    >>> not_applicable_by_profile(builtin("example"), "gpu_cluster")
    "profile example (driver gpu.example.com): the driver is not managed by GPU Operator's GPUCluster (capabilities.gpuCluster: false); nothing to check"
    """
    key, meaning = CAPABILITY_MEANING.get(capability, (capability, f"the driver lacks {capability}"))
    return (f"profile {profile.name} (driver {profile.driver}): {meaning} "
            f"(capabilities.{key}: false); nothing to check")


#: Every check in the order run_all() runs them: name -> function(api, profile).
CHECKS: dict[str, Callable] = {}
#: name -> severity of every registered check.
SEVERITY: dict[str, str] = {}


#: (connect, read) seconds for the first contact: /version answers in milliseconds; a server
#: that accepts connections but never answers is unusable, said in seconds (the client tries
#: up to four times: about 20 s at most, where REQUEST_TIMEOUT took 81 s).
PROBE_TIMEOUT = (3.0, 5.0)


def probe(api) -> str | None:
    """None when the API server answers; otherwise one line saying why it cannot be used
    (unreachable, untrusted certificate, credentials rejected). For a session's first contact::

        reason = probe(api)
        if reason:
            raise DraconfError(reason)
    """
    try:
        read(Access("get", "/version"), api.version.get_code, request_timeout=PROBE_TIMEOUT)
    except Inconclusive as err:
        return err.summary if err.unreachable else None
    return None


def run_check(name: str, api, profile) -> CheckResult:
    """One check by name (see :data:`CHECKS`)."""
    try:
        fn = CHECKS[name]
    except KeyError:
        raise ValueError(f"unknown preflight check {name!r}; known: {', '.join(CHECKS)}") from None
    return fn(api, profile)


def run_all(api, profile) -> list[CheckResult]:
    """Every check, in :data:`CHECKS` order.

    Once the API server turns out unreachable, the remaining checks are not attempted: they
    get the same inconclusive verdict at once instead of each waiting on the network.
    """
    results = []
    unreachable: CheckResult | None = None
    for name, fn in CHECKS.items():
        if unreachable is not None:
            results.append(CheckResult(name, False, SEVERITY[name], unreachable.summary,
                                       None, {}, inconclusive=True, unreachable=True))
            continue
        result = fn(api, profile)
        results.append(result)
        if result.unreachable:
            unreachable = result
    return results


def blocking_failures(results: Iterable[CheckResult]) -> list[CheckResult]:
    """Definitive failures of blocking checks (inconclusive results are not included)."""
    return [r for r in results if r.blocking]


def describe(results: Iterable[CheckResult], width: int | None = None) -> str:
    """A compact table for the terminal: one line per check (summary cut to ``width`` if given).

    >>> print(describe([CheckResult("server-version", True, BLOCKING, "Kubernetes v1.36.3"),
    ...                 CheckResult("device-class", False, BLOCKING, "DeviceClass x does not exist",
    ...                             "missing-deviceclass")]))
    CHECK           RESULT  DIAGNOSIS            SUMMARY
    server-version  PASS    -                    Kubernetes v1.36.3
    device-class    FAIL    missing-deviceclass  DeviceClass x does not exist
    """
    rows = [("CHECK", "RESULT", "DIAGNOSIS", "SUMMARY")]
    rows += [(r.name, r.status, r.diagnosis or "-", r.summary) for r in results]
    lines = plain_lines(rows)
    if not width:
        return "\n".join(lines)
    start = lines[0].index("SUMMARY")
    room = max(20, width - start)
    return "\n".join((line if len(line) - start <= room else line[:start + room - 3] + "...").rstrip()
                     for line in lines)
