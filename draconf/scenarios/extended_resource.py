"""extended-resource (``manifests/features/40-extended-resource.yaml``): a pod asking for the
resource a DeviceClass maps (``nvidia.com/gpu: 1`` in its limits, no claim) gets a claim the
scheduler creates, one request per container mapping of the container's count."""

from __future__ import annotations

import time

import pytest

from draconf import capabilities, startup
from draconf.claims import Claim
from draconf.startup import VERDICT_AFTER
from draconf.pytest_plugin import make_namespace
from draconf.workload import DeployedWorkload, Start, Workload

class ExtendedResourceWorkload(DeployedWorkload):
    """A workload whose pods ask for an extended resource: the scheduler's ``Insufficient
    nvidia.com/gpu``, standing while the DeviceClass maps that resource, is its verdict (the
    scheduler does not serve the resource through DRA), not a wait for the timeout."""

    def verdict(self, pods):
        found = super().verdict(pods)
        if found:
            return found
        resource = self.profile.capabilities.extended_resource
        now = time.monotonic()
        for pod in pods:
            message = pod.unschedulable_message or ""
            if resource and f"Insufficient {resource}" in message and "cannot allocate" not in message:
                first = self._unschedulable_since.setdefault((pod.uid, "insufficient"), now)
                if now - first >= VERDICT_AFTER:
                    return self._cause(startup.UNSCHEDULABLE, (
                        f"the scheduler cannot place pod {pod.name}: {message} (DeviceClass "
                        f"{self.profile.device_class} maps {resource}, but the scheduler does not "
                        "serve it through DRA: is DRAExtendedResource on in kube-scheduler?)"))
        return None


def start_extended_resource(request, cluster, profile, run_id, avoid=frozenset()) -> Start:
    capability = capabilities.extended_resource(cluster, profile.device_class,
                                                profile.capabilities.extended_resource)
    request.getfixturevalue("expected_features").require("extended-resource", capability)
    resource = profile.capabilities.extended_resource
    plugin_nodes = capabilities.device_plugin_nodes(cluster, resource)
    if plugin_nodes:
        # Where a node advertises the resource itself, the scheduler gives the device plugin's
        # GPUs there, and DRA serves only the other nodes (KEP-5004).
        pytest.skip(f"{resource} is also advertised by a device plugin on {', '.join(plugin_nodes)}: "
                    "pods asking for it are not served through DRA there")
    ns = make_namespace(request, cluster, run_id, "extended-resource")
    workload = Workload("extended-resource", ["features/40-extended-resource.yaml"], expected_pods=1,
                        extended_resources=True, avoid_nodes=avoid)
    return ExtendedResourceWorkload.start(cluster, ns, workload, profile, run_id.labels)


def extended_claim_problems(pod, claim: Claim, resource: str, device_class: str) -> list[str]:
    """What the scheduler's claim must say about the pod's request: one request per
    (container, resource) mapping, of the container's count, in the mapped class.

    >>> from draconf.pods import Pod
    >>> pod = Pod({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "w", "resources": {
    ...   "limits": {"nvidia.com/gpu": 1}}}]}, "status": {"extendedResourceClaimStatus": {
    ...   "resourceClaimName": "c", "requestMappings": [{"containerName": "w",
    ...   "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}]}}})
    >>> claim = Claim({"spec": {"devices": {"requests": [{"name": "container-0-request-0",
    ...   "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}]}}})
    >>> extended_claim_problems(pod, claim, "nvidia.com/gpu", "gpu.nvidia.com")
    []
    >>> claim.requests[0]["exactly"]["count"] = 2
    >>> extended_claim_problems(pod, claim, "nvidia.com/gpu", "gpu.nvidia.com")
    ['container w asks for nvidia.com/gpu=1, its request container-0-request-0 is for 2 device(s)']
    >>> extended_claim_problems(pod, claim, "nvidia.com/gpu", "mig.nvidia.com")[0]
    'request container-0-request-0 is for DeviceClass gpu.nvidia.com, not mig.nvidia.com, which maps nvidia.com/gpu'
    """
    requests = {r["name"]: r.get("exactly") or {} for r in claim.requests}
    mappings = {(m.get("containerName"), m.get("resourceName")): m.get("requestName")
                for m in pod.extended_request_mappings}
    problems = []
    for container in pod.spec.get("containers") or []:
        asked = ((container.get("resources") or {}).get("limits") or {}).get(resource)
        if asked is None:
            continue
        name = mappings.get((container["name"], resource))
        if name is None:
            problems.append(f"container {container['name']} asks for {resource}={asked}, but "
                            "status.extendedResourceClaimStatus.requestMappings maps none of it")
            continue
        if name not in requests:
            problems.append(f"request {name} mapped for container {container['name']} is not in "
                            f"claim {claim.name}")
            continue
        if requests[name].get("deviceClassName") != device_class:
            problems.append(f"request {name} is for DeviceClass {requests[name].get('deviceClassName')}, "
                            f"not {device_class}, which maps {resource}")
        count = requests[name].get("count", 1)
        if str(count) != str(asked):
            problems.append(f"container {container['name']} asks for {resource}={asked}, its request "
                            f"{name} is for {count} device(s)")
    return problems
