"""The fault-detection matrix: run the whole suite against a bed broken in one way and judge it.

A test harness, not part of the library: tests/matrix and benchmarks/fault_matrix.py import it
(``from tests.matrix.faultmatrix import ...``, with the repository root on ``sys.path``).

A conformance suite is only worth the failures it catches.  For every test bed fault this
module knows which checks must catch it and with which diagnosis, and which other checks may
be dragged into failure with it; ``run_against`` runs ``draconf run`` on such a bed and
``judge`` compares the outcome with that expectation.

Example::

    result = run_against("cdi-wrong-device", reports_dir)
    verdict = judge(result)
    assert verdict.ok, verdict.problems
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from draconf import namespaces, waits
from draconf.kube import connect
from draconf.testbed import external_faults, inventory
from draconf.testbed.nvidia import ONE_NODE, PLUGIN_FAULTS
from draconf.testbed.faults import GPU_NODE_TAINT
from draconf.testbed.cluster import Testbed
from draconf.scenarios.walkthrough import WORKLOADS

REPO = Path(__file__).resolve().parents[2]
#: The walkthrough's workloads, as draconf/scenarios/walkthrough.py declares them: one list, so a workload
#: added there is expected here too.
GPU_WORKLOADS = list(WORKLOADS)
#: Checks that need containers that really run (and exit; gpu-sharing reads nvidia-smi in them):
#: on KWOK GPU nodes they are skipped,
#: so there they cannot catch a fault (and a skip is never a failure the matrix could count).
REAL_NODES_ONLY = ("job/", "gpu-sharing/")
#: Faults that act in the real nodes' runtime (CDI-injected environment, exec): nothing to
#: catch on KWOK nodes.
REAL_NODE_FAULTS = ("exec-flaky", "sharing-config-ignored", "sharing-gates-off", "mps-daemon-fails",
                    "mig-counters-ignored", "mig-caps-missing", "mig-parent-mislabelled", "mig-unpublished")
#: Faults that act on the node side: in the runtime, or in the driver's kubelet plugin (which
#: real nodes run as the real plugin binary, KWOK nodes as the bed's agent).
NODE_SIDE_FAULTS = (*REAL_NODE_FAULTS, *PLUGIN_FAULTS)


def node_kind(fault: str | None) -> str:
    """The kind of node a row runs on: DRACONF_MATRIX_NODE_KIND (default ``real``), or with
    ``mixed`` real nodes for the healthy rows and the node-side faults and KWOK nodes for the
    faults that act in the control plane, whose symptoms do not depend on the node."""
    kind = os.environ.get("DRACONF_MATRIX_NODE_KIND") or "real"
    if kind == "mixed":
        return "real" if fault is None or fault in NODE_SIDE_FAULTS else "kwok"
    return kind


#: A fault whose subject is one part of the suite runs that part (and preflight) only: the rest
#: cannot catch it, and a whole run per row would cost CI minutes it does not have.  So do the
#: faults whose expectation drags every other part along (claims-not-released, tainted nodes):
#: those parts could only fail or give no verdict there, which tells nothing.
WALKTHROUGH = "test_preflight or TestWorkload"
#: claims-not-released catches single-gpu's cleanup; every later workload then only waits for
#: GPUs that never come back (195 s of CI for nothing the row judges).
SINGLE_GPU = "test_preflight or (TestWorkload and single-gpu)"
FEATURES_ONLY = ("-k", "test_preflight or test_features")
#: The MIG checks (suites/test_mig.py): only a bed with DynamicMIG on real nodes publishes MIG
#: devices (faults.NEED_DYNAMIC_MIG turns it on), and only these checks read them.
MIG_ONLY = ("-k", "test_preflight or test_mig")
#: What CDI injection reaches: every workload whose containers get devices (the walkthrough's,
#: the job, the feature workloads and GPU sharing), not the quota and failure-mode scenarios.
CDI_SCOPE = ("-k", WALKTHROUGH + " or test_jobs or TestFeatureWorkload or TestGpuSharing")
#: The sweep over every GPU node (suites/test_every_node.py), and preflight.
EVERY_NODE = ("--every-node", "-k", "test_preflight or test_every_node")
#: The sweep over every GPU (``--every-gpu``), and preflight.
EVERY_GPU = ("--every-gpu", "-k", "test_preflight or test_every_node")
#: The quota scenarios and the extended-resource quota check (suites/test_features.py).
QUOTA_SCOPE = ("-k", "test_preflight or test_quota or test_extended_resource_pod_is_charged_once_and_capped")


@dataclass(frozen=True)
class Expectation:
    """What a run against one fault must show.

    ``catch``: (workload, check) patterns that must fail, each with ``diagnosis``.
    ``dragged``: patterns that may also fail or give no verdict (a consequence, not a miss).
    ``no_verdict``: patterns that must give no verdict (the fault blocks them: they must not
    pass, and failing would blame the wrong check).
    ``verdict_seconds``: the longest a catching test may take (a definitive signal is quick).
    ``flaky``: patterns that must fail, be run again and pass then (reported flaky), the failed
    attempt diagnosed as ``diagnosis`` says; ``run_args``: what the run needs for that
    (``--reruns``).  ``reason_names``: what each catching row's reason must name.
    """
    catch: tuple[str, ...]
    diagnosis: dict[str, str]
    dragged: tuple[str, ...] = ()
    no_verdict: tuple[str, ...] = ()
    verdict_seconds: float = 45
    flaky: tuple[str, ...] = ()
    run_args: tuple[str, ...] = ()
    #: words every catching row's reason (its diagnosis's sentence in summary.json) must hold:
    #: what the operator has to act on, e.g. the taint to tolerate or remove
    reason_names: tuple[str, ...] = ()


#: The feature workloads of suites/test_features.py (same three checks; admin-access adds
#: unlabelled-namespace, gpu-sharing adds sharing and invalid-config).
FEATURE_WORKLOADS = ["extended-resource", "prioritized-list", "admin-access", "gpu-sharing"]
#: gpu-sharing's own check reads the GPU state through nvidia-smi in the containers: a container
#: given no GPU, or the wrong one, cannot show its request's config either.
SHARING_DRAGGED = ("gpu-sharing/sharing",)


def _all(check: str) -> tuple[str, ...]:
    return tuple(f"{w}/{check}" for w in GPU_WORKLOADS)


def _features(check: str = "*") -> tuple[str, ...]:
    return tuple(f"{w}/{check}" for w in FEATURE_WORKLOADS)


FAILURE_MODES = ("failure-modes/missing-deviceclass", "failure-modes/selector-unmatched",
                 "failure-modes/capacity-exhausted")

#: What the preflight gate holds back when a blocking check fails: no verdict, with the reason.
GATED = tuple(f"{w}/*" for w in GPU_WORKLOADS) + ("job/*", "quota/*", "failure-modes/*") + _features() \
    + ("device-taints/*", "device-taint-rule/*", "mig/*")


EXPECTED: dict[str, Expectation] = {
    "missing-deviceclass": Expectation(
        ("preflight/device-class",), {"preflight/device-class": "missing-deviceclass"},
        no_verdict=GATED),
    "no-resourceslices": Expectation(
        ("preflight/resource-slices",), {"preflight/resource-slices": "no-resourceslices"},
        no_verdict=GATED),
    "attribute-drift": Expectation(
        ("preflight/device-attributes",), {"preflight/device-attributes": "attribute-missing"},
        no_verdict=GATED),
    # On real nodes a crashing plugin never publishes, so the nodes have no slices either.
    "plugin-unhealthy": Expectation(
        ("preflight/kubelet-plugin",), {"preflight/kubelet-plugin": "plugin-unhealthy"},
        dragged=("preflight/gpu-cluster", "preflight/resource-slices"), no_verdict=GATED),
    # An API server serving only part of resource.k8s.io/v1 (here: no resourceclaimtemplates).
    "resource-api-partial": Expectation(
        ("preflight/resource-api",), {"preflight/resource-api": "api-unavailable"}, no_verdict=GATED),
    # The plugin runs everywhere, yet the operator reports the GPUCluster not ready: its own
    # verdict, not the plugin's.
    "gpu-cluster-not-ready": Expectation(
        ("preflight/gpu-cluster",), {"preflight/gpu-cluster": "gpu-operator-not-ready"}, no_verdict=GATED),
    "clusterpolicy-conflict": Expectation(
        ("preflight/policy-conflict",), {"preflight/policy-conflict": "policy-conflict"},
        run_args=("-k", WALKTHROUGH)),
    # The job's container has no nvidia-smi to run, so the job fails.
    "cdi-not-injected": Expectation(
        _all("cdi-injection") + ("job/completion",) + _features("cdi-injection"),
        {p: "cdi-not-injected" for p in _all("cdi-injection") + ("job/completion",)
         + _features("cdi-injection")}, dragged=SHARING_DRAGGED, run_args=CDI_SCOPE),
    # two-gpu may land on a 2-GPU node: holding every GPU there, it cannot be given a wrong
    # one, so it is allowed to pass; every single-device workload must catch the fault.
    "cdi-wrong-device": Expectation(
        tuple(p for p in _all("cdi-injection") if not p.startswith("two-gpu/")) + ("job/completion",)
        + _features("cdi-injection"),
        {p: "cdi-wrong-device" for p in _all("cdi-injection") + ("job/completion",) + _features("cdi-injection")},
        dragged=("two-gpu/cdi-injection",) + SHARING_DRAGGED, run_args=CDI_SCOPE),
    # On real nodes the driver keeps the devices of claims it never unprepared and refuses them to
    # later claims ("device gpu-N is held by claim <uid>"): after the first workload, which
    # must catch it, later ones may not start at all (their injection and cleanup then give no
    # verdict).
    # The cleanup check names a node that never finishes a deleted pod STUCK_CLAIM_AFTER (20 s)
    # past its grace period (draconf/workload.py): its verdict comes some 40 s after it starts.
    "claims-not-released": Expectation(
        ("single-gpu/cleanup",), {"single-gpu/cleanup": "claim-not-released"},
        dragged=_all("cleanup") + _all("cdi-injection") + ("job/*", "quota/*", "failure-modes/*")
        + _features(), verdict_seconds=60, run_args=("-k", SINGLE_GPU)),
    # The plugin refuses every NodePrepareResources: every pod is allocated its GPUs (allocation
    # passes: the scheduler did its part) and never starts, so no container gets one.  The
    # kubelet's FailedPrepareDynamicResources event names the node, the driver and its error.
    "prepare-refused": Expectation(
        _all("cdi-injection"), {p: "plugin-unhealthy" for p in _all("cdi-injection")},
        no_verdict=_all("cleanup"), run_args=("-k", WALKTHROUGH)),
    # Unprepare says done and keeps the device: the claims are released and the freed GPU is
    # allocated to the cleanup probe, whose pod the node then refuses ("device gpu-N is held by
    # claim <uid>"): only the probe running proves the GPU reusable.
    "unprepare-keeps-device": Expectation(
        ("single-gpu/cleanup",), {"single-gpu/cleanup": "claim-not-released"},
        run_args=("-k", SINGLE_GPU)),
    # One node broken among healthy ones (nvidia.ONE_NODE): the sweep over every node names
    # exactly it and proves the others; the walkthrough's sample need not land there at all.
    "one-node-refuses-prepare": Expectation(
        (f"every-node/{ONE_NODE}",), {f"every-node/{ONE_NODE}": "plugin-unhealthy"},
        run_args=EVERY_NODE),
    "one-node-wrong-device": Expectation(
        (f"every-node/{ONE_NODE}",), {f"every-node/{ONE_NODE}": "cdi-wrong-device"},
        run_args=EVERY_NODE),
    # One bad GPU beside a healthy one on the same node: the sweep over every GPU names exactly
    # it (its node's FailedPrepareDynamicResources event) and proves every other GPU.
    "one-gpu-bad": Expectation(
        (f"every-node/{ONE_NODE}/gpu-1",), {f"every-node/{ONE_NODE}/gpu-1": "plugin-unhealthy"},
        run_args=EVERY_GPU),
    # An admin's MutatingAdmissionPolicy strips the claims from the suite's pods: they run,
    # without GPUs, and prove nothing.  Both checks compare the live pods with what was applied;
    # with nothing allocated, cleanup has nothing to release.
    "claims-stripped": Expectation(
        _all("allocation") + _all("cdi-injection"),
        {p: "spec-altered" for p in _all("allocation") + _all("cdi-injection")},
        no_verdict=_all("cleanup"), run_args=("-k", WALKTHROUGH),
        reason_names=("strip-gpu-claims-from-test-namespaces",)),
    # An admin's MutatingAdmissionPolicy lowers the suite's claims to one device per request:
    # two-gpu's pod runs on one GPU, allocated exactly what its rewritten claim asks.  Only the
    # comparison with the applied template catches it, naming the policy.
    "claim-count-lowered": Expectation(
        ("two-gpu/allocation", "two-gpu/cdi-injection"),
        {"two-gpu/allocation": "spec-altered", "two-gpu/cdi-injection": "spec-altered"},
        run_args=("-k", "test_preflight or (TestWorkload and two-gpu)"),
        reason_names=("lower-gpu-count-in-test-namespaces", "count 1 (applied 2)")),
    # The bed's DeviceClass maps nvidia.com/gpu, so the extended-resource quota must hold too.
    # The templated pod beyond the quota gets its claim and runs (2.9 s to the verdict).
    "quota-not-enforced": Expectation(
        ("quota/deviceclass-quota", "quota/claim-count", "quota/extended-resource-trap",
         "quota/generated-claim", "extended-resource/quota"),
        {"quota/deviceclass-quota": "quota-not-enforced", "quota/claim-count": "quota-not-enforced",
         "quota/extended-resource-trap": "quota-not-enforced", "quota/generated-claim": "quota-not-enforced",
         "extended-resource/quota": "quota-not-enforced"}, run_args=QUOTA_SCOPE),
    # The first nvidia-smi exec'd into each container fails NVML initialisation; the diagnosis,
    # reading the containers again, finds them right (intermittent), and --reruns runs the
    # check again, which passes: flaky, never plain passed, and --fail-on-flaky fails the run.
    "exec-flaky": Expectation(
        (), {p: "intermittent" for p in _all("cdi-injection")}, flaky=_all("cdi-injection"),
        run_args=("--reruns", "1", "--fail-on-flaky", "-k", WALKTHROUGH)),
    # Every GPU node closed to the suite's pods: preflight says so once, naming the taint, and
    # the gate gives every workload no verdict at once (no pod could be placed anywhere).
    "gpu-nodes-tainted": Expectation(
        ("preflight/gpu-node-taints",), {"preflight/gpu-node-taints": "node-excluded"},
        no_verdict=GATED, run_args=("-k", WALKTHROUGH),
        reason_names=("untolerated taint {key}={value}:{effect}".format(**GPU_NODE_TAINT),)),
    # kube-scheduler with a DRA gate off: the feature's pod is never placed, with the
    # scheduler's own words; nothing was allocated, so injection and cleanup have nothing to judge.
    "extended-resource-off": Expectation(
        ("extended-resource/allocation",), {"extended-resource/allocation": "feature-disabled"},
        dragged=("extended-resource/quota",),
        no_verdict=("extended-resource/cdi-injection", "extended-resource/cleanup"), run_args=FEATURES_ONLY),
    "prioritized-list-off": Expectation(
        ("prioritized-list/allocation",), {"prioritized-list/allocation": "feature-disabled"},
        no_verdict=("prioritized-list/cdi-injection", "prioritized-list/cleanup"), run_args=FEATURES_ONLY),
    # A scheduler whose profile lacks DRA binds every GPU pod with its claims unallocated (on
    # any node, cpu-0 too): no node prepares them, so the workloads never start, and the failure
    # modes see their pods bound where the scheduler must refuse them.
    "scheduler-without-dra": Expectation(
        _all("allocation") + FAILURE_MODES,
        {p: "scheduler-without-dra" for p in _all("allocation") + FAILURE_MODES},
        no_verdict=_all("cdi-injection") + _all("cleanup"),
        run_args=("-k", WALKTHROUGH + " or test_failure_modes")),
    # The monitor is allocated the held GPU (allocation passes: the scheduler did its part), but
    # its node never prepares it: its container never sees it.
    "admin-access-exclusive": Expectation(
        ("admin-access/cdi-injection",), {"admin-access/cdi-injection": "admin-access-unsupported"},
        no_verdict=("admin-access/cleanup",), run_args=FEATURES_ONLY),
    "admin-access-everywhere": Expectation(
        ("admin-access/unlabelled-namespace",),
        {"admin-access/unlabelled-namespace": "admin-access-unrestricted"}, run_args=FEATURES_ONLY),
    # kube-scheduler with DRADeviceTaints off, and an unhealthy H100 the plugin taints
    # gpu.nvidia.com/xid=79:NoSchedule (the bed adds it): the claim without a toleration is
    # allocated that GPU at once.  The tolerating workload gets it as on a healthy cluster.
    # (device-taints is not in FEATURE_WORKLOADS: on beds without a tainted GPU it is skipped,
    # so the walkthrough faults' feature expectations leave it out.)
    # The plugin reads no opaque claim config: gpu-test5's pod runs (allocation and injection
    # pass) but its containers show no time slice and no MPS daemon; the invalid configs'
    # pods run too.  Measured on a one-node real bed: 21 s for the features run.
    "sharing-config-ignored": Expectation(
        ("gpu-sharing/sharing", "gpu-sharing/invalid-config"),
        {"gpu-sharing/sharing": "config-ignored", "gpu-sharing/invalid-config": "config-ignored"},
        run_args=FEATURES_ONLY),
    # The chart's default featureGates: the plugin runs without TimeSlicingSettings and
    # MPSSupport (Alpha, off by default), so the cluster does not offer GPU sharing.  Unasked,
    # gpu-test5 is skipped naming the gates (tests/testbed/test_faults.py); a run that expects
    # sharing (--expect-feature gpu-sharing) fails feature-disabled, naming them.  The invalid
    # configs are refused as on a healthy bed.
    "sharing-gates-off": Expectation(
        ("gpu-sharing/allocation",), {"gpu-sharing/allocation": "feature-disabled"},
        no_verdict=("gpu-sharing/cdi-injection", "gpu-sharing/cleanup", "gpu-sharing/sharing"),
        run_args=FEATURES_ONLY + ("--expect-feature", "gpu-sharing"),
        reason_names=("TimeSlicingSettings", "MPSSupport")),
    # The MPS control daemon the plugin starts for gpu-test5's MPS request exits at once: the
    # plugin refuses to prepare the claim (the daemon "is not ready"), the pod never
    # starts; the diagnosis points at the daemon, not the config (plugin-unhealthy).  The
    # invalid configs carry no MPS: refused as on a healthy bed.
    "mps-daemon-fails": Expectation(
        ("gpu-sharing/sharing",), {"gpu-sharing/sharing": "plugin-unhealthy"},
        dragged=("gpu-sharing/cdi-injection",),
        no_verdict=("gpu-sharing/cleanup",), run_args=FEATURES_ONLY),
    # A scheduler without DRADeviceTaints has DRADeviceTaintRules off too (the gate needs it),
    # so it ignores a rule's taint as well: the claim asking for the GPU a rule tainted is
    # allocated it.
    "device-taints-ignored": Expectation(
        ("device-taints/untolerated", "device-taint-rule/no-schedule"),
        {"device-taints/untolerated": "device-tainted", "device-taint-rule/no-schedule": "device-tainted"},
        run_args=FEATURES_ONLY),
    # kube-scheduler with DRADeviceTaintRules off while the API server serves DeviceTaintRules
    # (and kube-controller-manager writes their status): the claim asking for the GPU a rule
    # tainted NoSchedule is allocated it at once.  Driver taints still hold (device-taints).
    "device-taint-rules-ignored": Expectation(
        ("device-taint-rule/no-schedule",), {"device-taint-rule/no-schedule": "device-tainted"},
        run_args=FEATURES_ONLY),
    # kube-controller-manager without its device-taint-eviction-controller: the pod on the GPU a
    # NoExecute rule drains still runs when the check's wait (30 s) ends; the rule gets no
    # status.  The verdict includes starting the two pods.
    "device-taint-eviction-off": Expectation(
        ("device-taint-rule/no-execute",), {"device-taint-rule/no-execute": "device-tainted"},
        verdict_seconds=75, run_args=FEATURES_ONLY),
    # MIG (real nodes only: the KWOK agent publishes no MIG device, REAL_NODE_FAULTS).
    "mig-counters-ignored": Expectation(
        ("mig/exclusive",), {"mig/exclusive": "partition-overlap"}, run_args=MIG_ONLY),
    "mig-caps-missing": Expectation(
        ("mig/by-profile", "mig/same-parent"),
        {"mig/by-profile": "plugin-unhealthy", "mig/same-parent": "plugin-unhealthy"},
        dragged=("mig/exclusive",), run_args=MIG_ONLY),
    # Only the 2g-and-larger MIG devices name the next GPU as parent: gpu-test4's claim is
    # allocated across two GPUs under one published parentUUID, and its containers list two
    # GPUs.  A lone 1g device (by-profile; exclusive asks for the smallest profile) is labelled
    # right, so those two pass.
    "mig-parent-mislabelled": Expectation(
        ("mig/same-parent",), {"mig/same-parent": "inventory-mismatch"}, run_args=MIG_ONLY),
    # The plugin runs with DynamicMIG on and publishes its partitionable GPUs whole, with no MIG
    # device: MIG is promised by the cluster's own driver, so every MIG check fails, naming the
    # gate, where a skip ("no MIG device published") would have let the run pass.
    "mig-unpublished": Expectation(
        ("mig/by-profile", "mig/same-parent", "mig/exclusive"),
        {p: "feature-disabled" for p in ("mig/by-profile", "mig/same-parent", "mig/exclusive")},
        run_args=MIG_ONLY, reason_names=("DynamicMIG=true",)),
}


#: The faults an admin can produce from outside a driver this project did not write
#: (dra-example-driver; ``draconf.testbed.external_faults``), and what each must show there.
#: The same checks catch them as on the NVIDIA bed, except: the example driver maps no extended
#: resource, so quota extended-resource-trap is skipped, not a catch; and with the plugin's pods
#: gone (a DaemonSet that matches no node) kubelet-plugin fails too: no plugin runs anywhere.
EXPECTED_EXAMPLE: dict[str, Expectation] = {
    "missing-deviceclass": EXPECTED["missing-deviceclass"],
    "no-resourceslices": Expectation(
        ("preflight/resource-slices", "preflight/kubelet-plugin"),
        {"preflight/resource-slices": "no-resourceslices", "preflight/kubelet-plugin": "plugin-unhealthy"},
        no_verdict=GATED),
    "quota-not-enforced": Expectation(
        ("quota/deviceclass-quota", "quota/claim-count"),
        {"quota/deviceclass-quota": "quota-not-enforced", "quota/claim-count": "quota-not-enforced"},
        dragged=("quota/generated-claim",)),
    "gpu-nodes-tainted": EXPECTED["gpu-nodes-tainted"],
}

#: NVIDIA's own release (``--driver nvidia-v0.4.0``), broken from outside it: the example
#: driver's four, a chart upgrade with a bad value, and a GPU falling off the bus under it
#: (NVIDIA's mock NVML told so at run time).  That GPU (the last of gpu-a100-0, as one-gpu-bad's) takes a claim, but the release
#: cannot prepare it (it sets the GPU's compute mode through nvidia-smi, which finds it lost):
#: only --every-gpu is sure to ask for it, and must name it and pass its neighbours.
#: Its DaemonSet's pods gone, no plugin runs anywhere: kubelet-plugin fails as on the example bed.
UPSTREAM_RELEASE = "nvidia-v0.4.0"
EXPECTED_UPSTREAM: dict[str, Expectation] = {
    "missing-deviceclass": EXPECTED["missing-deviceclass"],
    "no-resourceslices": EXPECTED_EXAMPLE["no-resourceslices"],
    "quota-not-enforced": EXPECTED["quota-not-enforced"],
    "gpu-nodes-tainted": EXPECTED["gpu-nodes-tainted"],
    # A misspelt feature gate in a chart upgrade: every new plugin pod crash-loops, as the
    # simulated bed's plugin-unhealthy; the nodes' slices go too, a while after the old pods.
    "plugin-crashloop": EXPECTED["plugin-unhealthy"],
    # The release's plugin told its sharing gates are false: the suite reads that from its pods,
    # as on the simulated bed's fault of that name.
    "sharing-gates-off": EXPECTED["sharing-gates-off"],
    "gpu-fallen-off-bus": Expectation(
        (f"every-node/{ONE_NODE}/gpu-1",), {f"every-node/{ONE_NODE}/gpu-1": "plugin-unhealthy"},
        run_args=EVERY_GPU),
    # An admin's containerd config on one node that looks for CDI specs where the driver does
    # not write them: the release prepares the claim and writes its spec, the kubelet names the
    # CDI device, and containerd cannot resolve it.  Only the sweep is sure to land there.
    "cdi-spec-dirs-wrong": Expectation(
        (f"every-node/{ONE_NODE}",), {f"every-node/{ONE_NODE}": "cdi-not-injected"}, run_args=EVERY_NODE),
    # Something on that node deletes each claim's CDI spec once the release has written it: the
    # same refusal from containerd, for another reason; or rewrites it with the neighbouring
    # GPU's device node: the container starts, with the wrong GPU.
    "cdi-spec-removed": Expectation(
        (f"every-node/{ONE_NODE}",), {f"every-node/{ONE_NODE}": "cdi-not-injected"}, run_args=EVERY_NODE),
    "cdi-spec-edited": Expectation(
        (f"every-node/{ONE_NODE}",), {f"every-node/{ONE_NODE}": "cdi-wrong-device"}, run_args=EVERY_NODE),
}

#: The driver a bed runs -> the expectations of its faults.
EXPECTATIONS = {"nvidia": EXPECTED, "example": EXPECTED_EXAMPLE, UPSTREAM_RELEASE: EXPECTED_UPSTREAM}
#: The profile ``draconf run`` is given for a bed of that driver.
PROFILES = {"nvidia": "nvidia", "example": "example", UPSTREAM_RELEASE: "nvidia"}


def matrix_driver() -> str:
    """The driver the matrix runs against: DRACONF_MATRIX_DRIVER (``nvidia``, the default,
    ``example`` or ``nvidia-v0.4.0``)."""
    driver = os.environ.get("DRACONF_MATRIX_DRIVER") or "nvidia"
    if driver not in EXPECTATIONS:
        raise ValueError(f"DRACONF_MATRIX_DRIVER must be one of {', '.join(EXPECTATIONS)}, not {driver!r}")
    return driver


@dataclass
class RunResult:
    fault: str | None
    exit_code: int
    seconds: float
    rows: list[dict]
    leftovers: list[str]
    output_tail: str = ""
    #: What the bed's GPU nodes were: "real" (the default fleet) or "kwok".
    node_kind: str = "real"
    #: The driver the bed ran: "nvidia" (simulated, faults built in) or "example" (faults
    #: made from outside it).
    driver: str = "nvidia"

    def failed(self) -> list[dict]:
        return [r for r in self.rows if r["outcome"] in ("failed", "broken", "error")]

    def no_verdict(self) -> list[dict]:
        """Rows that reached no verdict: neither a pass nor a catch."""
        return [r for r in self.rows if r["outcome"] == "no-verdict"]


@dataclass
class Verdict:
    fault: str | None
    ok: bool
    detected_by: list[str] = field(default_factory=list)
    diagnoses: list[str] = field(default_factory=list)
    seconds_to_verdict: float = 0.0
    problems: list[str] = field(default_factory=list)


def _key(row: dict) -> str:
    return f"{row.get('workload')}/{row.get('check')}"


def healthy_run_args(attempt: int) -> list[str]:
    """The healthy runs alternate ``-n 4`` (pytest-xdist) and serial, ``-n 4`` first: CI's one
    healthy run is parallel, beside its own serial run of the suite on the default bed, so both
    modes meet real nodes in every CI run.

    >>> [healthy_run_args(n) for n in (1, 2, 3)]
    [['-n', '4'], [], ['-n', '4']]
    """
    return ["-n", "4"] if attempt % 2 else []


def run_against(fault: str | None, reports: Path, bed_name: str | None = None,
                extra_args: list[str] | None = None, driver: str | None = None) -> RunResult:
    """Start a bed with ``fault`` (None: healthy), run the whole suite on it, stop the bed.

    On the NVIDIA bed the fault is the bed's own (``up --fault``); on an example-driver bed it
    is made from outside the driver once the healthy bed is up (``external_faults.apply``)."""
    driver = driver or matrix_driver()
    bed = Testbed.named(bed_name or f"matrix-{'' if driver == 'nvidia' else driver + '-'}{fault or 'healthy'}")
    bed.down(log=lambda *_: None)
    fleet = inventory.load(inventory.GUIDE_INVENTORY)
    if os.environ.get("DRACONF_MATRIX_NODE_KIND"):
        fleet = inventory.with_node_kind(fleet, node_kind(fault))
    builtin = [fault] if fault and driver == "nvidia" else []
    bed.up(fleet, faults=builtin, log=lambda *_: None, driver=driver)
    try:
        if fault and driver != "nvidia":
            external_faults.apply(bed, fault)
        return run_suite(bed, fault, reports, extra_args, driver)
    finally:
        bed.down(log=lambda *_: None)


def run_suite(bed: Testbed, fault: str | None, reports: Path, extra_args: list[str] | None = None,
              driver: str = "nvidia") -> RunResult:
    """Run ``draconf run`` (with the driver's profile) on a bed that is up, already broken by
    ``fault`` or healthy; wait for the run's namespaces to go; read its summary."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "draconf.cli", "run", "--testbed-name", bed.name,
         "--profile", PROFILES[driver], "--reports", str(reports),
         *(EXPECTATIONS[driver][fault].run_args if fault else ()), *(extra_args or [])],
        cwd=REPO, capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - started
    api = connect(bed.kubeconfig)
    leftovers = _wait_no_leftovers(api)
    summary = json.loads((reports / "summary.json").read_text()) if (reports / "summary.json").exists() \
        else {"tests": []}
    return RunResult(fault, proc.returncode, seconds, summary["tests"], leftovers,
                     "\n".join((proc.stdout + proc.stderr).splitlines()[-40:]),
                     node_kind=_node_kind_of(bed), driver=driver)


def _node_kind_of(bed: Testbed) -> str:
    """``real`` if the bed runs any real node, else ``kwok``: what the judgement may expect."""
    nodes = json.loads((bed.dir / "inventory.json").read_text())["nodes"]
    return "real" if any(n["kind"] == "real" for n in nodes) else "kwok"


def _wait_no_leftovers(api, timeout: float = 90) -> list[str]:
    """The run's namespaces still there after ``timeout`` (none, on a healthy cleanup); the
    judgement names them."""
    try:
        waits.wait_until("the run's namespaces to be gone", lambda: namespaces.leftovers(api),
                         lambda left: not left, timeout=timeout, interval=1,
                         describe=lambda left: ", ".join(left))
        return []
    except waits.WaitTimeout:
        return namespaces.leftovers(api)


def judge(result: RunResult) -> Verdict:
    """Compare a run with what its fault must show (a healthy run: no failure and no
    check without a verdict).  A no-verdict row never counts as a catch; on a fault bed it is
    expected where the fault blocks the check (``no_verdict``, which must then not pass) and
    tolerated where the check is ``dragged``, and a problem anywhere else."""
    verdict = Verdict(result.fault, ok=True)
    problems = verdict.problems
    if result.leftovers:
        problems.append(f"left behind: {', '.join(result.leftovers)}")
    if not result.rows:
        problems.append("the run produced no test results:\n" + result.output_tail)
    failed = {(_key(r), r["id"]): r for r in result.failed()}
    blocked = {(_key(r), r["id"]): r for r in result.no_verdict()}
    if result.fault is None:
        if result.exit_code != 0 or failed:
            problems.append(f"healthy run failed (exit {result.exit_code}): "
                            + "; ".join(f"{k[1]}: {r.get('message')}" for k, r in failed.items()))
        if blocked:
            problems.append("healthy run left checks without a verdict: "
                            + "; ".join(f"{k[1]}: {r.get('message')}" for k, r in blocked.items()))
        verdict.ok = not problems
        return verdict
    expected = EXPECTATIONS[result.driver][result.fault]
    if result.exit_code == 0:
        problems.append("the run passed: the fault went undetected")
    catch = tuple(p for p in expected.catch
                  if result.node_kind == "real" or not p.startswith(REAL_NODES_ONLY))
    for pattern in catch:
        hits = [r for (key, _), r in failed.items() if fnmatch(key, pattern)]
        if not hits:
            problems.append(f"{pattern} did not fail")
            continue
        for row in hits:
            verdict.detected_by.append(_key(row))
            verdict.diagnoses.append(row.get("diagnosis") or "none")
            want = expected.diagnosis.get(pattern)
            if want and row.get("diagnosis") != want:
                problems.append(f"{row['id']}: diagnosis {row.get('diagnosis')}, expected {want}")
            for words in expected.reason_names:
                if words not in (row.get("reason") or ""):
                    problems.append(f"{row['id']}: its reason does not name {words!r}: {row.get('reason')}")
            if row.get("duration", 0) > expected.verdict_seconds:
                problems.append(f"{row['id']}: verdict took {row['duration']:.0f}s "
                                f"(bound {expected.verdict_seconds:.0f}s)")
    for pattern in expected.flaky:
        hits = [r for r in result.rows if fnmatch(_key(r), pattern)]
        if not hits or any(r["outcome"] != "flaky" for r in hits):
            problems.append(f"{pattern} was not reported flaky: "
                            + "; ".join(f"{r['outcome']} {r.get('message')}" for r in hits))
            continue
        for row in hits:
            first = (row.get("failed_attempts") or [{}])[0].get("diagnosis")
            verdict.detected_by.append(_key(row))
            verdict.diagnoses.append(first or "none")
            want = expected.diagnosis.get(pattern)
            if want and first != want:
                problems.append(f"{row['id']}: its failed attempt was diagnosed {first}, expected {want}")
    for row in result.rows:
        if row["outcome"] == "flaky" and not any(fnmatch(_key(row), p) for p in expected.flaky):
            problems.append(f"unexpected flaky: {row['id']}: {row.get('message')}")
    allowed = expected.catch + expected.dragged
    for (key, nodeid), row in failed.items():
        if not any(fnmatch(key, p) for p in allowed):
            problems.append(f"unrelated check failed: {nodeid} [{row.get('diagnosis')}] {row.get('message')}")
    for row in result.rows:
        key = _key(row)
        if row["outcome"] == "passed" and any(fnmatch(key, p) for p in expected.no_verdict):
            problems.append(f"{row['id']} passed, but this fault leaves it nothing to judge")
    for (key, nodeid), row in blocked.items():
        if not any(fnmatch(key, p) for p in expected.dragged + expected.no_verdict):
            problems.append(f"unexpected no verdict: {nodeid}: {row.get('message')}")
    catching = [r.get("duration", 0) for (key, _), r in failed.items()
                if any(fnmatch(key, p) for p in catch)]
    verdict.seconds_to_verdict = max(catching, default=0.0)
    verdict.detected_by = sorted(set(verdict.detected_by))
    verdict.diagnoses = sorted(set(verdict.diagnoses))
    verdict.ok = not problems
    return verdict
