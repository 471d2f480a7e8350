"""What two feature workloads promise beyond the walkthrough's checks, broken through the real
API: ``draconf/scenarios/features.py:feature_allocation`` must fail, and the diagnosis, read from the
cluster alone, must say ``allocation-invalid``.

No scheduler on v1.36.3 breaks these promises (admin access is locked on, and a scheduler that
ignores device taints still gives the tolerating claim the device it selects), so the wrong
allocation comes from where the allocation-branch tests get theirs: an external allocator
writing ``status.allocation`` (see ``test_allocation_branches.py``).  The consumers are real
pods the real scheduler binds.

- **admin-access**: the ``adminAccess`` claim is given a GPU nobody holds, instead of the one
  ``gpu-in-use`` holds.
- **device-taints**: the tolerating claim, which selects a tainted GPU by UUID, is given an
  untainted one.  The tainted GPU is published by the test, in a pool of its own (a slice with a
  node selector, which the plugin's slice controller leaves alone), as the mixed-unhealthy fleet's
  plugin would publish an XID 79 GPU.
"""

from __future__ import annotations

import copy

import pytest

from draconf import capabilities, manifests, selectors
from draconf.devices import PublishedDevices
from draconf.diagnosis import diagnose
from draconf.scenarios.admin_access import HOLDER_CLAIM, MONITOR_CLAIM
from draconf.scenarios.device_taints import TOLERATING_CLAIM
from draconf.scenarios.features import feature_allocation

from .test_allocation_branches import DRIVER, NODE, PROFILE, allocate, consume


def claim_from(manifest: str, name: str, uuid: str | None = None) -> dict:
    """The claim of a feature manifest, with its UUID selector aimed at ``uuid`` (the suite
    templates that field the same way: docs/checks.md, "Templated fields")."""
    doc = manifests.find(manifests.load(manifest), "ResourceClaim", name)
    if uuid:
        exactly = doc["spec"]["devices"]["requests"][0]["exactly"]
        exactly["selectors"] = [{"cel": {"expression": selectors.uuid_in(
            PROFILE.domain, PROFILE.attributes["uuid"], [uuid]).cel}}]
    return doc


def node_devices(api) -> list[dict]:
    (slice_,) = api.resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
    return api.api_client.sanitize_for_serialization(slice_)["spec"]["devices"]


def feature_verdict(api, deployed) -> str:
    """``feature_allocation``'s failure, and the diagnosis it gets from the cluster alone."""
    with pytest.raises(AssertionError) as failed:
        feature_allocation(None, deployed, PublishedDevices.read(api, DRIVER), api, PROFILE)
    diagnosis = diagnose(api, PROFILE, deployed.namespace, "")
    assert diagnosis.code == "allocation-invalid", diagnosis
    return str(failed.value)


def admin_access_claims(api, ns: str, monitor_device: str):
    """gpu-in-use holds gpu-0; the monitoring claim asks for gpu-0 by UUID and is given
    ``monitor_device`` with ``adminAccess: true``."""
    api.core.patch_namespace(ns, {"metadata": {"labels": {capabilities.ADMIN_ACCESS_LABEL: "true"}}})
    held = node_devices(api)[0]
    assert held["name"] == "gpu-0"
    manifests.create(api, ns, [
        claim_from("features/42-gpu-in-use.yaml", HOLDER_CLAIM),
        claim_from("features/43-admin-access-monitor.yaml", MONITOR_CLAIM, held["attributes"]["uuid"]["string"])])
    allocate(api, ns, HOLDER_CLAIM, [(NODE, "gpu-0")])
    allocate(api, ns, MONITOR_CLAIM, [(NODE, monitor_device)], admin_access=True)
    return consume(api, ns, [HOLDER_CLAIM, MONITOR_CLAIM], "admin-access")


def test_the_control_admin_access_claim_given_the_held_gpu_passes(request, api, ns):
    """The same path with the allocation the real scheduler makes: the promise holds."""
    deployed = admin_access_claims(api, ns, "gpu-0")
    feature_allocation(request, deployed, PublishedDevices.read(api, DRIVER), api, PROFILE)


def test_admin_access_claim_given_a_gpu_nobody_holds(api, ns):
    verdict = feature_verdict(api, admin_access_claims(api, ns, "gpu-1"))
    assert (f"the admin-access claim {MONITOR_CLAIM} got ['{DRIVER}/{NODE}/gpu-1'], not the "
            f"device {HOLDER_CLAIM} holds (['{DRIVER}/{NODE}/gpu-0'])") in verdict, verdict


def test_tolerating_claim_given_an_untainted_gpu(api, ns):
    device = copy.deepcopy(node_devices(api)[0])
    uuid = "GPU-7a1e0000-0000-4000-8000-000000000079"
    device["name"] = "gpu-79"
    device["attributes"]["uuid"] = {"string": uuid}
    device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    pool = f"{NODE}-unhealthy-{ns}"
    api.resource.create_resource_slice({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": pool},
        "spec": {"driver": DRIVER, "devices": [device], "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                     {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}})
    try:
        manifests.create(api, ns, [claim_from("features/45-device-taint-tolerated.yaml",
                                              TOLERATING_CLAIM, uuid)])
        allocate(api, ns, TOLERATING_CLAIM, [(NODE, "gpu-1")])
        deployed = consume(api, ns, [TOLERATING_CLAIM], "device-taints")
        verdict = feature_verdict(api, deployed)
        assert (f"claim {TOLERATING_CLAIM} selects a tainted device and tolerates its taints, "
                f"but was allocated ['{DRIVER}/{NODE}/gpu-1']") in verdict and f"{pool}/gpu-79" in verdict, verdict
    finally:
        for pod in api.core.list_namespaced_pod(ns).items:
            api.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
        api.resource.delete_resource_slice(pool)
