"""Rules for what the cluster publishes and serves: DeviceClasses, ResourceSlices, device
attributes and taints, and the DRA features the scheduler acts on."""

from __future__ import annotations

import re

from draconf import mig
from draconf.diagnosis.analysis import analyse, pending_pods, pending_requests
from draconf.diagnosis.facts import Facts
from draconf.preflight.slices import lacking_attributes

_MISSING_CLASS = re.compile(r"device class (\S+?)[,:]? does not exist")
_NO_SUCH_KEY = re.compile(r"no such key:? ?([\w./-]+)")


def rule_missing_class(facts: Facts):
    if facts.device_classes is None:
        return None
    referenced: dict[str, str] = {}
    for c in facts.claims:
        for name in c.device_classes:
            referenced.setdefault(name, f"Claim {c.name}")
    for t in facts.templates:
        for name in t.device_classes:
            referenced.setdefault(name, f"ResourceClaimTemplate {t.name}")
    for message in facts.scheduler_messages():
        for name in _MISSING_CLASS.findall(message):
            referenced.setdefault(name, "The scheduler")
    if not referenced and not facts.pods:
        referenced[facts.device_class] = "The driver profile"  # nothing deployed: the suite's own class
    missing = {n: who for n, who in referenced.items() if n not in facts.device_classes}
    if not missing:
        return None
    name, who = sorted(missing.items())[0]
    existing = ", ".join(sorted(facts.device_classes)) or "none"
    return ("missing-deviceclass",
            f"{who} names DeviceClass {name}, which does not exist (existing: {existing}): "
            f"install it, e.g. enable the GPU part of the {facts.driver} driver chart "
            "(resources.gpus.enabled), and check `kubectl get deviceclasses`.")


def rule_no_slices(facts: Facts):
    if facts.devices:
        return None
    if "resourceslices" in facts.errors:
        return None
    slices = (f"{facts.slice_count} ResourceSlice(s) of {facts.driver} hold no devices"
              if facts.slice_count else f"No ResourceSlice of driver {facts.driver} exists")
    plugins = ""
    if facts.plugin_pods:
        ready = sum(p.ready for p in facts.plugin_pods)
        plugins = f" ({ready} of {len(facts.plugin_pods)} kubelet-plugin pod(s) ready)"
        if not ready:
            # Nothing publishes because the publisher is down: that is the cause to fix.
            return ("plugin-unhealthy",
                    f"{slices} because no kubelet-plugin pod is ready ({facts.plugin_pods[0].summary()}): "
                    "the plugin publishes a node's GPUs only once it runs; check the plugin pods' "
                    "logs and the kubelet's plugin registration.")
    return ("no-resourceslices",
            f"{slices}, so the scheduler sees no GPUs{plugins}: check the kubelet-plugin pods' logs "
            "and the nodes' GPU driver, then `kubectl get resourceslices`.")


def rule_attribute_missing(facts: Facts):
    cel_errors = [m for m in facts.scheduler_messages() if "CEL runtime error" in m]
    if cel_errors:
        keys = sorted({k.rstrip(".,") for m in cel_errors for k in _NO_SUCH_KEY.findall(m)})
        what = f" (no such key: {', '.join(keys)})" if keys else ""
        return ("attribute-missing",
                f"The scheduler reports a CEL runtime error{what}: a selector reads a device "
                "attribute the driver does not publish; compare the claim's selectors with "
                "`kubectl get resourceslices -o yaml`.")
    for label, alternatives in pending_requests(facts, pods=[p for p in facts.pods if not p.is_running]):
        for req in alternatives:
            if not req.selectors:
                continue
            analysis = analyse(facts, label, req)
            lacking = analysis.missing()
            if lacking:
                names = sorted({m.missing for _, m in lacking if m.missing})
                devices = [str(d) for d, _ in lacking]
                return ("attribute-missing",
                        f"{label} request {req.name} selects on {', '.join(names)}, which "
                        f"{len(devices)} of {len(analysis.devices)} device(s) eligible after class "
                        f"{req.device_class}'s selector ({len(facts.devices)} published) lack "
                        f"(e.g. {', '.join(devices[:3])}): fix the selector or the driver version; "
                        "see `kubectl get resourceslices -o yaml`.")
    if not facts.pods and not facts.claims and facts.required_attributes:
        lacking_by_name = lacking_attributes(facts.devices, facts.required_attributes)
        if lacking_by_name:
            name, lacking_devices = sorted(lacking_by_name.items())[0]
            devices = [str(d) for d in lacking_devices]
            return ("attribute-missing",
                    f"{len(devices)} of {len(facts.devices)} published device(s) lack the attribute "
                    f"{name} (e.g. {', '.join(devices[:3])}), which selectors rely on: check the "
                    "driver version's attribute names in `kubectl get resourceslices -o yaml`.")
    return None


def rule_device_tainted(facts: Facts):
    """A device tainted NoSchedule/NoExecute (by its slice or a DeviceTaintRule) was allocated to
    a claim whose request does not tolerate the taint: the scheduler ignores device taints; or a
    pod still runs on a device tainted NoExecute that it does not tolerate: nothing evicts it."""
    rules = f" (DeviceTaintRules: {'; '.join(facts.taint_rules.values())})" if facts.taint_rules else ""
    for key, problems in sorted(facts.not_evicted.items()):
        return ("device-tainted",
                f"Claim {key} holds a device tainted NoExecute that its request does not tolerate, and "
                f"a pod consuming it still runs: {'; '.join(problems)}{rules}. kube-controller-manager "
                "does not evict for device taints: its device-taint-eviction-controller is not running "
                "(see --controllers), or DRADeviceTaints (and, for rules, DRADeviceTaintRules) is off "
                "there.")
    for key, problems in sorted(facts.untolerated_taints.items()):
        return ("device-tainted",
                f"Claim {key} was allocated a device whose taint its request does not tolerate: "
                f"{'; '.join(problems)}{rules}. kube-scheduler ignores device taints: turn DRADeviceTaints "
                "on there" + (", and DRADeviceTaintRules for the rules' taints" if facts.taint_rules else "")
                + " (every control-plane component at one version and gates).")
    return None


def rule_feature_disabled(facts: Facts):
    """The API server kept a DRA field that the scheduler does not act on: its feature gate is
    off there (a scheduler behind the API server, or started with the gate off)."""
    for pod in pending_pods(facts):
        message = pod.unschedulable_message or ""
        if "feature is disabled" in message:
            said = next(part.strip() for part in message.split(":") if "feature is disabled" in part)
            return ("feature-disabled",
                    f"Pod {pod.name} is never scheduled: the scheduler says \"{said}\" although the API "
                    "server accepted the claim: turn the feature gate on in kube-scheduler (run every "
                    "control-plane component at the same version and gates).")
        for resource, device_class in facts.extended_resources.items():
            if f"Insufficient {resource}" in message and "cannot allocate" not in message:
                return ("feature-disabled",
                        f"Pod {pod.name} asks for {resource}, which DeviceClass {device_class} maps "
                        f"(extendedResourceName), but the scheduler reports \"Insufficient {resource}\" "
                        "instead of allocating a device: DRAExtendedResource is off in kube-scheduler "
                        "(turn it on there, and in the kubelets).")
    return None


def rule_inventory_mismatch(facts: Facts):
    """A container lists its MIG device under a GPU other than the one the device's published
    ``parentUUID`` names, and that GPU is the one the ResourceSlice pool itself says the device
    is carved from (they consume one counter set): the driver publishes a wrong parentUUID.
    Both readings come from the cluster (``nvidia-smi -L`` in the container, the slices), so
    a container handed another GPU by CDI (whose listed GPU shares no counter set with the
    device) is left to ``cdi-wrong-device``."""
    for seen in facts.containers:
        if not seen.seen:
            continue
        for device in facts.container_devices(seen):
            published = mig.parent_of(device)
            carver = mig.carved_from(device, facts.devices) if mig.is_mig(device) else None
            real = carver.attribute(mig.UUID_ATTRIBUTE) if carver else None
            if carver is None or real is None or real == published or published in seen.seen or real not in seen.seen:
                continue
            shared = sorted(set(device.counter_sets) & set(carver.counter_sets))
            return ("inventory-mismatch",
                    f"Container {seen.pod}/{seen.container} was allocated MIG device {device} "
                    f"({mig.profile_of(device)}), published with parentUUID {published}, but its nvidia-smi -L "
                    f"lists it under {real}, which is {carver.name}, the GPU whose counter set "
                    f"({', '.join(shared)}) the device consumes in the same ResourceSlice pool: the driver "
                    "publishes a wrong parentUUID, so a claim's matchAttribute gpu.nvidia.com/parentUUID "
                    "keeps MIG devices on one GPU on paper only. Compare `kubectl get resourceslices -o "
                    "yaml` (parentUUID, consumesCounters) with nvidia-smi -L on the node, and fix or "
                    "upgrade the driver.")
    return None
