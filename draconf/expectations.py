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

The driver's release counts too (:func:`release_word`): its version, read off the cluster (the
kubelet plugin's DaemonSet labels, else its image tag), says whether the release has a feature
at all and behind which of its gates (:data:`DRIVER_RELEASES`).  A feature the release has, with
its gate on in the plugin's pods, is promised: missing, it fails; a feature the release lacks,
or has behind a gate the plugin runs without, is a skip that says so.  An unknown release adds
nothing.

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


@dataclass(frozen=True)
class ReleaseFeature:
    """What one NVIDIA DRA driver release does about one feature the suite checks."""
    #: what the release does, as a phrase after "NVIDIA DRA driver <version>" (with the file that
    #: shows it, in the release's source)
    does: str
    #: the release's own feature gate it takes (None: none, or the release lacks the feature)
    gate: str | None = None
    #: that gate's maturity and default in the release (pkg/featuregates/featuregates.go)
    stage: str = ""
    #: False: the release lacks the feature (``does`` says what it does instead)
    has: bool = True


#: NVIDIA's DRA driver releases by major.minor (the release's gates are versioned so,
#: pkg/featuregates/featuregates.go; a patch release changes no feature), from their sources:
#: 0.4 is sigs.k8s.io/dra-driver-nvidia-gpu v0.4.0, 25.12 github.com/NVIDIA/k8s-dra-driver-gpu
#: v25.12.0 (the older line: NVIDIA's calendar versions came before the move to kubernetes-sigs).
#: Only what the suite checks and the release's own code decides is here; the cluster's side
#: (the API server's and scheduler's gates) is probed, never assumed.
DRIVER_RELEASES: dict[tuple[int, int], dict[str, ReleaseFeature]] = {
    (0, 4): {
        "device-taints": ReleaseFeature(
            "taints a GPU NVML reports a critical Xid for (gpu.nvidia.com/xid=<code>) or lost "
            "(gpu.nvidia.com/gpu-lost) in its ResourceSlice (cmd/gpu-kubelet-plugin/device_health.go)",
            gate="NVMLDeviceHealthCheck", stage="Alpha, off by default"),
        "mig": ReleaseFeature(
            "publishes MIG devices (cmd/gpu-kubelet-plugin/nvlib.go)", gate="DynamicMIG",
            stage="Alpha, off by default"),
    },
    (25, 12): {
        "device-taints": ReleaseFeature(
            "publishes no device taint: with NVMLDeviceHealthCheck on it takes a GPU with a critical "
            "Xid out of its ResourceSlice instead (cmd/gpu-kubelet-plugin/driver.go, deviceHealthEvents)",
            has=False),
        "mig": ReleaseFeature(
            "publishes MIG devices (cmd/gpu-kubelet-plugin/nvlib.go)", gate="DynamicMIG",
            stage="Alpha, off by default"),
    },
}

_RELEASE_MINOR = re.compile(r"^v?(\d+)\.(\d+)\.")


@dataclass(frozen=True)
class ReleaseWord:
    """What the driver's release says of a feature: ``note`` for a skip's reason, and
    ``promised`` when the release has the feature switched on (then its absence is a failure)."""
    note: str | None = None
    promised: str | None = None


def release_word(feature: str, plugin_pods) -> ReleaseWord:
    """What the release the kubelet plugin's pods run (:class:`draconf.plugins.PluginPod`,
    ``release``) says of ``feature``; nothing for a release not in :data:`DRIVER_RELEASES`.

    >>> from draconf.plugins import PluginPod
    >>> pod = PluginPod("d", "p", "n1", "Running", True, release="0.4.0", release_from="image x:v0.4.0",
    ...                 feature_gates=(("NVMLDeviceHealthCheck", True),))
    >>> print(release_word("device-taints", [pod]).promised)
    NVIDIA DRA driver 0.4.0 (image x:v0.4.0) taints a GPU NVML reports a critical Xid for (gpu.nvidia.com/xid=<code>) or lost (gpu.nvidia.com/gpu-lost) in its ResourceSlice (cmd/gpu-kubelet-plugin/device_health.go), with NVMLDeviceHealthCheck, which its kubelet plugin runs with (pod d/p)
    >>> print(release_word("mig", [pod]).note)
    NVIDIA DRA driver 0.4.0 (image x:v0.4.0) publishes MIG devices (cmd/gpu-kubelet-plugin/nvlib.go), only with its DynamicMIG gate (Alpha, off by default), which its kubelet plugin runs without (pod d/p)
    >>> word = release_word("device-taints", [PluginPod("d", "p", "n1", "Running", True, release="25.12.0")])
    >>> word.promised is None, word.note.split(":")[0]
    (True, 'NVIDIA DRA driver 25.12.0 publishes no device taint')
    >>> release_word("mig", [PluginPod("d", "p", "n1", "Running", True, release="1.0.0")])
    ReleaseWord(note=None, promised=None)
    """
    for pod in sorted(plugin_pods, key=lambda p: (p.namespace, p.name)):
        match = _RELEASE_MINOR.match(pod.release or "")
        known = DRIVER_RELEASES.get((int(match.group(1)), int(match.group(2)))) if match else None
        if known is None:
            continue
        what = known.get(feature)
        if what is None:
            return ReleaseWord()
        release = f"NVIDIA DRA driver {pod.release}" + (f" ({pod.release_from})" if pod.release_from else "")
        if not what.has or what.gate is None:
            return ReleaseWord(note=f"{release} {what.does}")
        same = [p for p in plugin_pods if p.release == pod.release]
        on = [p for p in same if p.gate(what.gate) is True]
        if on:
            said = (f"{release} {what.does}, with {what.gate}, which its kubelet plugin runs with "
                    f"(pod {on[0].namespace}/{on[0].name})")
            return ReleaseWord(note=said, promised=said)
        if not all(p.gates_known for p in same):
            return ReleaseWord()
        return ReleaseWord(note=f"{release} {what.does}, only with its {what.gate} gate ({what.stage}), which "
                                f"its kubelet plugin runs without (pod {pod.namespace}/{pod.name})")
    return ReleaseWord()


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


def parse_limits(given) -> list[tuple[str, str]]:
    """``FEATURE=WHY`` strings (``--draconf-target-limit``) as pairs, the names checked.

    >>> parse_limits(["mig=the GPUs have no MIG"])
    [('mig', 'the GPUs have no MIG')]
    """
    pairs = [tuple(item.split("=", 1)) if isinstance(item, str) else tuple(item) for item in given or ()]
    if any(len(pair) != 2 for pair in pairs):
        raise DraconfError(f"a target limit is FEATURE=WHY, not {given!r}")
    validate([name for name, _ in pairs])
    return [(name, why) for name, why in pairs]


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
    #: (feature, why) the target cannot have it (a test bed's simulated GPUs): said in that
    #: feature's skip, never turning a failure into a skip
    limits: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, server_version: str | None, expect=(), waive=(), limits=()) -> "Expectations":
        match = _MINOR.match(server_version or "")
        both = set(validate(expect)) & set(validate(waive))
        if both:
            raise DraconfError(f"feature {', '.join(sorted(both))} is both expected and waived")
        return cls(server_version or "unknown", int(match.group(1)) if match else None,
                   frozenset(expect), frozenset(waive), tuple(parse_limits(limits)))

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
        pytest.skip(capability.skip_reason + self.limit(feature))

    def limit(self, feature: str) -> str:
        """What the target says it cannot have of ``feature``, to end a skip's reason ("" if nothing).

        >>> Expectations.of("v1.36.3", limits=["mig=the bed's GPUs have no MIG"]).limit("mig")
        "; the bed's GPUs have no MIG"
        """
        why = dict(self.limits).get(feature)
        return f"; {why}" if why else ""
