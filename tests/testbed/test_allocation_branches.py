"""Each promise the allocation check keeps, broken through the real API: the check must fail
with that branch's words.

The real scheduler allocates right, so the wrong allocations here come from where they do in
real clusters: a misbehaving allocator (an external controller writing ``status.allocation``,
which the API server accepts, as it did for classic DRA's controllers), a controller that
rewrites ``reservedFor``, and a driver that publishes one GPU twice (under a second pool).  The
consumer pods are real pods; the real scheduler binds them to the allocation's node and adds
them to ``reservedFor``, as it does for any pre-allocated claim.  The check then reads the
cluster and judges, through ``DeployedWorkload.check_allocation`` as the suite calls it.

One bed test on the shared healthy bed (about a minute), not fault-matrix rows: each branch
needs one claim written wrong, not a bed started broken.  Unit tests over recorded objects:
``tests/unit/test_allocation.py``.
"""

from __future__ import annotations

import copy
import datetime

import pytest

from draconf import manifests, podsecurity, waits
from draconf.claims import Claim
from draconf.diagnosis import diagnose
from draconf.devices import PublishedDevices
from draconf.pods import Pod
from draconf.profile import builtin, for_target
from draconf.workload import DeployedWorkload, Workload

from .test_stalled_control_plane import stopped

PROFILE = for_target(builtin("nvidia"), "testbed")
DRIVER = PROFILE.driver
NODE, OTHER_NODE = "gpu-a100-0", "gpu-h100-0"


def claim_doc(name: str, count: int = 1, device_class: str | None = None, selectors=()) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": device_class or PROFILE.device_class, "count": count,
                "selectors": [{"cel": {"expression": s}} for s in selectors]}}]}}}


def pod_doc(name: str, claim: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": podsecurity.conform({
                "restartPolicy": "Never", "tolerations": [dict(t) for t in PROFILE.tolerations],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                "containers": [{"name": "workload", "image": PROFILE.image, "command": ["sleep", "3600"],
                                "resources": {"claims": [{"name": "gpu"}]}}]}, PROFILE.pod_security)}


def allocate(api, namespace: str, claim: str, devices: list[tuple[str, str]], node: str = NODE,
             admin_access: bool = False) -> None:
    """Write ``status.allocation`` as an external allocator would: ``devices`` as (pool,
    device), usable on ``node``.  With an ``allocationTimestamp``, as the scheduler writes one:
    seen on v1.36.3, the scheduler takes a claim allocated without one for unallocated,
    allocates it again and has its write refused (``status.allocation ... field is immutable``)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.resource.patch_namespaced_resource_claim_status(claim, namespace, {"status": {"allocation": {
        "allocationTimestamp": now,
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": device,
                                 **({"adminAccess": True} if admin_access else {})}
                                for pool, device in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})


def consume(api, namespace: str, claims: list[str], workload: str = "misallocated") -> DeployedWorkload:
    """One pod per claim, bound by the real scheduler: the workload the check judges."""
    docs = [pod_doc(f"consumer-{i}", claim) for i, claim in enumerate(claims)]
    manifests.create(api, namespace, docs)
    deployed = DeployedWorkload(api, namespace, Workload(workload, [], len(docs)), PROFILE, docs)
    waits.wait_until("the consumers to be bound", deployed.pods,
                     lambda pods: len(pods) == len(docs) and all(p.node for p in pods),
                     timeout=30, describe=lambda pods: deployed.describe(pods))
    return deployed


def allocation_verdict(api, deployed: DeployedWorkload) -> str:
    """The check's failure; its diagnosis, read from the cluster alone, must be
    ``allocation-invalid`` and name the same broken promise."""
    with pytest.raises(AssertionError) as failed:
        deployed.check_allocation(PublishedDevices.read(api, DRIVER))
    diagnosis = diagnose(api, PROFILE, deployed.namespace, "")
    assert diagnosis.code == "allocation-invalid", diagnosis
    first = str(failed.value).removeprefix("allocation is wrong: ").split("; ")[0]
    assert first in diagnosis.reason, (first, diagnosis.reason)
    return str(failed.value)


def test_a_right_external_allocation_passes(api, ns):
    """The control: the same path with a right allocation gives no problem."""
    manifests.create(api, ns, [claim_doc("right")])
    allocate(api, ns, "right", [(NODE, "gpu-0")])
    deployed = consume(api, ns, ["right"])
    evidence = deployed.check_allocation(PublishedDevices.read(api, DRIVER))
    assert evidence and "gpu-a100-0/gpu-0" in evidence[0]


def test_fewer_devices_than_requested(api, ns):
    manifests.create(api, ns, [claim_doc("two", count=2)])
    allocate(api, ns, "two", [(NODE, "gpu-0")])
    verdict = allocation_verdict(api, consume(api, ns, ["two"]))
    assert "claim two: 1 device(s) allocated for request gpu, 2 requested" in verdict


def test_a_device_no_slice_publishes(api, ns):
    manifests.create(api, ns, [claim_doc("ghost")])
    allocate(api, ns, "ghost", [(NODE, "gpu-99")])
    verdict = allocation_verdict(api, consume(api, ns, ["ghost"]))
    assert f"device {DRIVER}/{NODE}/gpu-99 is not in any published ResourceSlice" in verdict


def test_a_device_on_another_node_than_its_pod(api, ns):
    manifests.create(api, ns, [claim_doc("far")])
    allocate(api, ns, "far", [(OTHER_NODE, "gpu-0")], node=NODE)
    verdict = allocation_verdict(api, consume(api, ns, ["far"]))
    assert f"pod consumer-0 runs on {NODE} but its device {DRIVER}/{OTHER_NODE}/gpu-0 is on {OTHER_NODE}" \
        in verdict


def test_one_device_in_two_claims(api, ns):
    manifests.create(api, ns, [claim_doc("first"), claim_doc("second")])
    for name in ("first", "second"):
        allocate(api, ns, name, [(NODE, "gpu-1")])
    verdict = allocation_verdict(api, consume(api, ns, ["first", "second"]))
    assert f"device {DRIVER}/{NODE}/gpu-1 is allocated to both first and second" in verdict


def test_a_device_the_request_selectors_refuse(api, ns):
    h100 = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('h100')"
    manifests.create(api, ns, [claim_doc("wants-h100", selectors=[h100])])
    allocate(api, ns, "wants-h100", [(NODE, "gpu-0")])
    verdict = allocation_verdict(api, consume(api, ns, ["wants-h100"]))
    assert f"claim wants-h100: device {DRIVER}/{NODE}/gpu-0 does not satisfy the request's selector {h100!r}" \
        in verdict and "A100" in verdict


def test_a_device_the_device_class_refuses_and_a_class_that_does_not_exist(api, ns):
    """The live DeviceClass is what judges: ``mig.nvidia.com`` selects ``type == 'mig'``."""
    manifests.create(api, ns, [claim_doc("mig", device_class="mig.nvidia.com"),
                               claim_doc("classless", device_class="no-such-class.nvidia.com")])
    allocate(api, ns, "mig", [(NODE, "gpu-0")])
    allocate(api, ns, "classless", [(NODE, "gpu-1")])
    verdict = allocation_verdict(api, consume(api, ns, ["mig", "classless"]))
    assert f"claim mig: device {DRIVER}/{NODE}/gpu-0 fails the DeviceClass mig.nvidia.com selectors" in verdict
    assert "claim classless: its DeviceClass no-such-class.nvidia.com does not exist" in verdict


def test_reserved_for_rewritten_without_the_consumer(healthy_bed, api, ns):
    """A controller that drops the running consumer from ``reservedFor``.  The real
    controller-manager puts a scheduled consumer back within about a second (seen on v1.36.3),
    so the branch is shown while it is stopped: the state a node meets when the repair is late
    (its kubelet then refuses to prepare the claim)."""
    manifests.create(api, ns, [claim_doc("dropped")])
    allocate(api, ns, "dropped", [(NODE, "gpu-0")])
    deployed = consume(api, ns, ["dropped"])
    waits.wait_until("the scheduler to reserve the claim", lambda: Claim.read(api, ns, "dropped"),
                     lambda c: c.reserved_for_uids, timeout=30, describe=lambda c: c.summary())
    with stopped(healthy_bed, "kube-controller-manager"):
        api.resource.patch_namespaced_resource_claim_status("dropped", ns, {"status": {"reservedFor": None}})
        claim = Claim.read(api, ns, "dropped")
        assert claim.is_allocated and not claim.reserved_for_uids
        verdict = allocation_verdict(api, deployed)
    assert "claim dropped: reservedFor does not hold pod consumer-0" in verdict
    waits.wait_until("the controller-manager to reserve the claim again", lambda: Claim.read(api, ns, "dropped"),
                     lambda c: c.reserved_for_uids, timeout=30, describe=lambda c: c.summary())


def test_one_gpu_published_twice_is_allocated_twice_by_the_real_scheduler(api, ns):
    """A driver that publishes a GPU in a second pool too: two claims asking for that GPU by
    UUID each get one of its two names from the real scheduler, and hold the same GPU."""
    slices = api.resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
    original = api.api_client.sanitize_for_serialization(slices[0])
    device = original["spec"]["devices"][0]
    uuid = device["attributes"]["uuid"]["string"]
    copy_pool = f"{NODE}-copy-{ns}"
    twin = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": copy_pool, "labels": {"draconf.test/twin": ns}},
            # A node selector, not nodeName: the plugin's own slice controller deletes slices
            # under its driver and node name that it did not write.
            "spec": {"driver": DRIVER, "devices": [copy.deepcopy(device)], "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]},
                     "pool": {"name": copy_pool, "generation": 1, "resourceSliceCount": 1}}}
    api.resource.create_resource_slice(twin)
    try:
        by_uuid = f"device.attributes['gpu.nvidia.com'].uuid == '{uuid}'"
        manifests.create(api, ns, [claim_doc("one", selectors=[by_uuid]), claim_doc("other", selectors=[by_uuid])])
        deployed = consume(api, ns, ["one", "other"])
        claims = [Claim.read(api, ns, name) for name in ("one", "other")]
        assert sorted(r.pool for c in claims for r in c.results) == sorted([NODE, copy_pool])
        verdict = allocation_verdict(api, deployed)
        assert f"GPU uuid={uuid} is allocated twice" in verdict
        assert "the driver publishes one GPU as two devices" in verdict
    finally:
        pods = Pod.list(api, ns)
        for pod in pods:
            api.core.delete_namespaced_pod(pod.name, ns, grace_period_seconds=0)
        api.resource.delete_resource_slice(copy_pool)
