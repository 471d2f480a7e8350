"""Rules for a pod placed on its node that never runs right there: its image, the driver's
kubelet plugin, admin access, and the GPUs CDI put (or did not put) in its containers."""

from __future__ import annotations

import re

from draconf.diagnosis.analysis import stuck_pods
from draconf.diagnosis.facts import Facts
from draconf.startup import CDI_INJECTION_FAILED



def rule_image_pull(facts: Facts):
    for pod in facts.pods:
        if pod.image_pull_failures and not pod.is_deleting:
            return ("image-pull-failed",
                    f"Pod {pod.name} on {pod.node} cannot pull its image: {pod.image_pull_failures[0]}. The "
                    "node cannot reach the registry or the image does not exist there: point the "
                    "profile's `image` at an image the GPU nodes can pull (a mirror for air-gapped "
                    "clusters) and check `kubectl describe pod`.")
    return None


#: A Kubernetes object's UID standing on its own: not the tail of a GPU or MIG UUID
#: (``GPU-<uuid>``) nor part of a name made from one (``mps-control-daemon-<uid>-...``).
_OBJECT_UID = re.compile(r"(?<![\w-])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![\w-])")


def held_by_another_claim(message: str, claims) -> bool:
    """True when a driver's refusal to prepare ``claims`` (a pod's) names one of the devices
    allocated to them and the UID of a claim that is none of them: the node holds that device
    for the other claim.

    Keyed on those two facts, which a driver saying so has to give, not on its wording: the
    NVIDIA driver's "requested device gpu-0 is already allocated to different claim <uid>"
    (upstream device_state.go validateNoOverlappingPreparedDevices) and the bed's simulated
    driver's own sentence (gomod/gpu-driver/internal/plugin/preparer.go refuseHeld) carry both.

    >>> from draconf.claims import Claim
    >>> mine = Claim({"metadata": {"uid": "0e1b2c3d-0000-4000-8000-000000000001"}, "status": {
    ...     "allocation": {"devices": {"results": [
    ...         {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-1"}]}}}})
    >>> other = "5a6b7c8d-1111-4111-8111-111111111111"
    >>> held_by_another_claim(f"device gpu-1 is held by claim {other}", [mine])
    True
    >>> held_by_another_claim(f"device gpu-10 is held by claim {other}", [mine])  # not its device
    False
    >>> held_by_another_claim(f"claim {mine.uid}: device gpu-1 is busy", [mine])  # its own UID
    False
    """
    devices = {r.device for c in claims for r in c.results}
    own = {c.uid for c in claims if c.uid}
    named = any(re.search(rf"(?<![\w.-]){re.escape(d)}(?![\w-])", message) for d in devices)
    return named and bool(set(_OBJECT_UID.findall(message)) - own)


def rule_admin_access_unsupported(facts: Facts):
    """The driver refuses to prepare a device allocated with adminAccess because another claim
    holds it: it treats admin access as exclusive (KEP-5018 says such devices are shared)."""
    for pod in stuck_pods(facts):
        failed = facts.events_for(pod.name, "FailedPrepareDynamicResources")
        claims = facts.pod_claims(pod)
        refused = [e for e in failed if held_by_another_claim(e.message, claims)]
        admin = [d for c in claims for d in c.admin_device_keys]
        if refused and admin:
            return ("admin-access-unsupported",
                    f"Pod {pod.name} cannot start on {pod.node}: its claim was allocated {', '.join(admin)} "
                    f"with adminAccess, but the driver refuses to prepare it because another claim holds "
                    f"it ({refused[-1].message[:300]}): the DRA driver does not support admin access; "
                    "upgrade it to a release that does.")
    return None


#: What marks a driver's refusal of a claim's opaque config: short fragments of the NVIDIA
#: driver's own messages (upstream cmd/gpu-kubelet-plugin device_state.go GetOpaqueDeviceConfigs
#: and applySharingConfig, api/.../validate.go; dra-example-driver words its decoding errors the
#: same), apimachinery's strict decoding (any driver that decodes strictly), and the config kind,
#: GpuConfig, which the bed's simulated driver names in each of its refusals.
CONFIG_REFUSALS = ("error decoding config parameters", "error validating GPU config",
                   "strict decoding error", "error getting opaque device configs",
                   "unknown GPU sharing strategy", "feature gate is not enabled",
                   "error applying config", "is not a recognized configuration", "GpuConfig")


#: The driver saying the MPS control daemon it started for a claim never got ready: the NVIDIA
#: driver's "MPS control daemon is not yet ready" (upstream device_state.go applySharingConfig),
#: the bed's simulated driver's "MPS control daemon <its name> is not ready".
MPS_DAEMON_UNREADY = re.compile(r"MPS control daemon\b[^:]{0,120}?\bnot (?:yet )?ready")


def rule_mps_daemon_unready(facts: Facts):
    """The driver accepted a claim's MPS config but the MPS control daemon it starts for it (a
    Deployment mps-control-daemon-<claim UID>-* in the driver's namespace) never became ready,
    so it refuses to prepare the claim.  The config is not at fault (the message also carries
    what config-rejected reads as a refusal: the real driver's "error applying config", the
    simulated one's GpuConfig): the driver's own component is, hence plugin-unhealthy, pointing
    at the daemon's pod."""
    for pod in stuck_pods(facts):
        failed = [e for e in facts.events_for(pod.name, "FailedPrepareDynamicResources")
                  if MPS_DAEMON_UNREADY.search(e.message)]
        if not failed:
            continue
        message = failed[-1].message
        at = found.start() if (found := MPS_DAEMON_UNREADY.search(message)) else 0
        uids = [c.uid for c in facts.pod_claims(pod) if facts.driver in c.opaque_config_drivers and c.uid]
        names = ", ".join(f"mps-control-daemon-{u}-*" for u in uids) or "mps-control-daemon-<claim UID>-*"
        return ("plugin-unhealthy",
                f"Pod {pod.name} cannot start on {pod.node}: the driver's MPS control daemon for its claim "
                f"never became ready ({'...' if at > 60 else ''}{message[max(0, at - 60):][:300]}): check "
                f"the Deployment {names} in the driver's namespace, its pod on {pod.node} and its logs "
                "(nvidia-cuda-mps-control -d must start on the node's GPUs).")
    return None


def rule_config_rejected(facts: Facts):
    """The driver refuses to prepare a claim that carries opaque config for it, and says the
    config is why (its FailedPrepareDynamicResources message)."""
    for pod in stuck_pods(facts):
        configured = [c for c in facts.pod_claims(pod) if facts.driver in c.opaque_config_drivers]
        if not configured:
            continue
        failed = facts.events_for(pod.name, "FailedPrepareDynamicResources")
        refused = [e for e in failed if any(r in e.message for r in CONFIG_REFUSALS)]
        if refused:
            message = refused[-1].message
            # The driver's own words close the message; the kubelet's prefix says little.
            at = min(message.find(r) for r in CONFIG_REFUSALS if r in message)
            shown = ("..." if at > 60 else "") + message[max(0, at - 60):][:400]
            return ("config-rejected",
                    f"Pod {pod.name} cannot start on {pod.node}: the driver refuses the opaque config of "
                    f"claim {', '.join(c.name for c in configured)}: {shown}")
    return None


def rule_plugin_unhealthy(facts: Facts):
    for pod in stuck_pods(facts):
        failed = facts.events_for(pod.name, "FailedPrepareDynamicResources")
        leaked = [e for e in failed if held_by_another_claim(e.message, facts.pod_claims(pod))]
        if leaked:
            # The driver still holds the device for a claim its node never unprepared.
            return ("claim-not-released",
                    f"Pod {pod.name} cannot start on {pod.node}: the driver refuses its device because it "
                    f"is still prepared for another claim ({leaked[-1].message[:300]}): a claim on that "
                    "node was never unprepared; check the kubelet's log for NodeUnprepareResources "
                    "errors and the driver's kubelet plugin.")
        on_node = [p for p in facts.plugin_pods if p.node == pod.node]
        unready = [p for p in on_node if not p.ready]
        absent = facts.plugin_pods_known and facts.plugin_pods and not on_node
        if not (failed or unready or absent):
            continue
        seen = []
        if failed:
            seen.append(f"event FailedPrepareDynamicResources: {failed[-1].message[:300]}")
        if unready:
            seen.append("; ".join(p.summary() for p in unready[:2]))
        if absent:
            seen.append(f"no kubelet-plugin pod runs on {pod.node}")
        return ("plugin-unhealthy",
                f"Pod {pod.name} is bound to {pod.node} with its claims allocated and reserved but "
                f"never starts ({'; '.join(seen)}): check the kubelet-plugin DaemonSet pods, their "
                "logs and the kubelet's plugin registration on that node.")
    # Nothing deployed in the namespace: the plugin itself is the finding.
    if not facts.pods and facts.plugin_pods:
        gpu_nodes = {d.node for d in facts.devices if d.node}
        unready = [p for p in facts.plugin_pods if not p.ready and (not gpu_nodes or p.node in gpu_nodes)]
        if unready:
            return ("plugin-unhealthy",
                    f"{len(unready)} kubelet-plugin pod(s) are not ready ({unready[0].summary()}): check "
                    "their logs and the kubelet's plugin registration.")
    return None


def rule_cdi_unresolved(facts: Facts):
    """The claims are allocated and reserved, and the node's container runtime cannot inject
    the CDI devices the kubelet names for them (containerd's "CDI device injection failed:
    unresolvable CDI devices ..." in the kubelet's Failed event): the driver wrote its CDI spec
    where the runtime does not look, something on the node removed it after the driver wrote
    it, or the runtime cannot read it.  The cluster cannot tell these apart; the next step names
    each."""
    for pod in stuck_pods(facts):
        failed = [e for e in facts.events_for(pod.name, "Failed") if CDI_INJECTION_FAILED in e.message]
        if failed:
            return ("cdi-not-injected",
                    f"Pod {pod.name} cannot start on {pod.node}: its claims are allocated, but the container "
                    f"runtime cannot inject their CDI devices ({failed[-1].message[:300]}): on {pod.node}, "
                    "make the runtime read the directory the driver writes its CDI specs to (containerd: "
                    "`cdi_spec_dirs`, with /var/run/cdi, then restart it), and check that the claim's spec "
                    "is still there after the driver wrote it (named after the claim's uid): nothing on "
                    "the node may remove or rewrite it.")
    return None


def rule_cdi(facts: Facts):
    """What the containers saw of their GPUs (``nvidia-smi -L`` run in them by the diagnosis,
    or a finished container's log and end state), against the UUIDs of the devices allocated
    to the claims each lists: a UUID it was not given is cdi-wrong-device; none, or fewer, is
    cdi-not-injected.  Read whatever the check, as an operator's ``kubectl exec`` would."""
    allocated = [d for c in facts.claims if c.is_allocated for d in c.device_keys]
    verified = f"; its claims are allocated ({', '.join(allocated)})" if allocated else ""
    wrong, short = [], []
    for c in facts.containers:
        who = f"{c.pod}/{c.container}"
        if not c.claims:
            if c.seen:
                wrong.append(f"{who} holds no claim but sees {c.seen}")
            continue
        expected = c.expected
        if expected is None and c.seen:
            # A finished pod's generated claim is deleted by the resourceclaim controller, so
            # the cluster no longer says which device it was given: the check's record of it,
            # handed over as data (never read back from its message).
            expected = facts.recorded_allocations.get(who)
        if expected is not None and set(c.seen) - set(expected):
            wrong.append(f"{who} sees {c.seen}, allocated {expected}")
        elif c.seen and expected is not None and set(expected) - set(c.seen):
            short.append(f"{who} sees {c.seen}, allocated {expected}")
        elif not c.seen and c.answered:
            short.append(f"{who} sees no GPU ({c.how[:300]})"
                         + (f", allocated {expected}" if expected else ""))
    if wrong:
        return ("cdi-wrong-device",
                f"Container {wrong[0]}{verified}: device isolation is broken; compare the claim's "
                "status.allocation with the driver's CDI spec for that claim and the runtime's CDI config.")
    if short:
        return ("cdi-not-injected",
                f"Container {short[0]}{verified}, although the pod ran: the runtime did not inject the "
                "claim's CDI devices; enable CDI in containerd/CRI-O and check the driver's CDI specs "
                "(e.g. /var/run/cdi).")
    return None


def rule_intermittent(facts: Facts):
    """The injection check saw a container without its GPUs, but the diagnosis, reading every
    container again moments later, found each showing exactly the devices allocated to it:
    the failure did not persist (an exec or NVML initialisation that failed once).  Only for
    what the containers show: that is the observation the diagnosis repeats.  Last before
    ``timeout``: any rule that finds a lasting cause wins."""
    if not facts.failure.compared_injection or not facts.containers:
        return None
    with_claims = [c for c in facts.containers if c.claims]
    if not with_claims or not all(c.answered and c.expected and c.seen == c.expected for c in with_claims):
        return None
    if any(c.seen for c in facts.containers if not c.claims):
        return None
    shown = "; ".join(f"{c.pod}/{c.container} sees {c.seen}" for c in with_claims)[:400]
    return ("intermittent",
            f"Read again right after the failure, every container shows exactly its allocated GPUs "
            f"({shown}): the failure did not persist. Run with `--reruns N` to tell a flake from a "
            "fault (a flaky test is reported FLAKY), and watch the node's GPU driver and runtime logs.")
