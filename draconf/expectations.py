"""Which DRA features a cluster must have, from what it is, and what a missing one means.

A feature scenario probes the cluster (:mod:`draconf.capabilities`).  Whether "not there" is a
skip or a failure depends on the cluster, not on the probe: a feature that is GA in the API
server's version cannot be switched off (its gate is locked on), so finding it missing is a
regression, and the check FAILS with ``feature-disabled``; a beta or alpha feature an admin may
leave off is skipped, with the probe's evidence.  A user states more by flag:
``--expect-feature NAME`` (the platform promises it, e.g. DRAExtendedResource, beta in 1.36)
turns its absence into a failure too; ``--waive-feature NAME`` accepts its absence (a skip).
A probe the cluster refused (admission, validation) shows nothing about the feature: no
verdict, with the refusal, never "not available".

>>> expected = Expectations.of("v1.36.3")
>>> expected.why("prioritized-list")
'GA since Kubernetes 1.36 (DRAPrioritizedList), and the API server is v1.36.3'
>>> expected.why("device-taints") is None
True
>>> Expectations.of("v1.35.2").why("admin-access") is None
True
>>> Expectations.of("v1.36.3", expect=["device-taints"]).why("device-taints")
'expected by --expect-feature device-taints'
>>> Expectations.of("v1.36.3", waive=["admin-access"]).why("admin-access") is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from draconf.admission import denial_in_text
from draconf.errors import CheckFailed, DraconfError, NoVerdict

#: The diagnosis code of an expected feature that is missing (the diagnosis records it).
FEATURE_DISABLED = "feature-disabled"

#: Feature (as the suite names it) -> (gate, the minor version from which it is GA and locked on).
#: dra-facts §7 (the upstream versioned gate table): both beta and on in 1.34 and 1.35, GA in 1.36.
GA_SINCE: dict[str, tuple[str, int]] = {
    "prioritized-list": ("DRAPrioritizedList", 36),
    "admin-access": ("DRAAdminAccess", 36),
}
#: Every feature a scenario probes; the names ``--expect-feature``/``--waive-feature`` take.
FEATURES = ("prioritized-list", "admin-access", "device-taints", "device-taint-rules", "extended-resource",
            "gpu-sharing", "mig")

_MINOR = re.compile(r"^v?1\.(\d+)")


class FeatureMissing(CheckFailed):
    """A feature the cluster must have is not there (``feature-disabled``): a failure."""

    def __init__(self, reason: str):
        super().__init__(reason, code=FEATURE_DISABLED)


def validate(names) -> list[str]:
    """The feature names a user gave, checked (a clear error for a typo).

    >>> validate(["mig"])
    ['mig']
    >>> validate(["migs"])
    Traceback (most recent call last):
    ...
    draconf.errors.DraconfError: unknown feature 'migs' (--expect-feature/--waive-feature take: prioritized-list, admin-access, device-taints, device-taint-rules, extended-resource, gpu-sharing, mig)
    """
    names = list(names or [])
    for name in names:
        if name not in FEATURES:
            raise DraconfError(f"unknown feature {name!r} (--expect-feature/--waive-feature take: "
                               f"{', '.join(FEATURES)})")
    return names


def refusal_code(answer) -> str | None:
    """The diagnosis of a probe refused with ``answer`` (a :class:`~draconf.answers.ServerAnswer`):
    ``admission-denied`` when an admission control named itself, ``permission-denied`` for any
    other 403 (RBAC: the credentials may not create the probe), else none (a validation answer
    says nothing of who refused).

    >>> from draconf.answers import ServerAnswer
    >>> refusal_code(ServerAnswer(403, 'admission webhook "deny.example.com" denied the request: no'))
    'admission-denied'
    >>> refusal_code(ServerAnswer(403, 'resourceclaims is forbidden: User "ci" cannot create resource "resourceclaims"'))
    'permission-denied'
    >>> refusal_code(ServerAnswer(422, "spec.devices: Invalid value")) is None
    True
    """
    if denial_in_text(answer.message):
        return "admission-denied"
    return "permission-denied" if answer.status == 403 else None


@dataclass(frozen=True)
class Expectations:
    """The features a run holds the cluster to: GA in its server version, or named by flag."""
    server_version: str
    minor: int | None
    expect: frozenset = field(default_factory=frozenset)
    waive: frozenset = field(default_factory=frozenset)

    @classmethod
    def of(cls, server_version: str | None, expect=(), waive=()) -> "Expectations":
        match = _MINOR.match(server_version or "")
        both = set(validate(expect)) & set(validate(waive))
        if both:
            raise DraconfError(f"feature {', '.join(sorted(both))} is both expected and waived")
        return cls(server_version or "unknown", int(match.group(1)) if match else None,
                   frozenset(expect), frozenset(waive))

    def why(self, feature: str) -> str | None:
        """Why the cluster must have ``feature``, or None when its absence is a skip."""
        if feature in self.waive:
            return None
        if feature in self.expect:
            return f"expected by --expect-feature {feature}"
        gate, since = GA_SINCE.get(feature, (None, None))
        if gate and since is not None and self.minor is not None and self.minor >= since:
            return f"GA since Kubernetes 1.{since} ({gate}), and the API server is {self.server_version}"
        return None

    def require(self, feature: str, capability) -> None:
        """Nothing when ``capability`` (a :class:`draconf.capabilities.Capability`) is there.
        Else: refused probe -> :class:`NoVerdict`; expected -> :class:`FeatureMissing`
        (``feature-disabled``); otherwise a pytest skip with the probe's evidence."""
        if capability.available:
            return
        if capability.refused:
            denial = denial_in_text(capability.evidence)
            raise NoVerdict(f"{capability.name} could not be probed: "
                            + (f"{denial} refused the probe: " if denial else "")
                            + capability.evidence, code=refusal_code(capability.refusal))
        why = self.why(feature) or (capability.promised if feature not in self.waive else None)
        if why:
            raise FeatureMissing(f"{capability.name} must be available on this cluster ({why}), but "
                                 f"{capability.evidence}")
        import pytest
        pytest.skip(capability.skip_reason)
