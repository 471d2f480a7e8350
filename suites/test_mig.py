"""MIG: the NVIDIA driver's MIG devices, published as partitionable devices (issue 12, item 5).

Three checks of workload ``mig``, mirroring gpu-test4 of the NVIDIA DRA driver's quickstart
(kubernetes-sigs/dra-driver-nvidia-gpu, demo/specs/quickstart):

* **by-profile** (``60-mig-by-profile.yaml``) - a claim asking DeviceClass ``mig.nvidia.com``
  for one profile gets a MIG device of that profile, and the container's ``nvidia-smi -L``
  lists that MIG device, and nothing else, under its parent GPU;
* **same-parent** (``61-mig-same-parent.yaml``, gpu-test4 itself) - four MIG devices of one
  claim (1g, 1g, 2g, 3g) under ``matchAttribute: gpu.nvidia.com/parentUUID`` come from one GPU,
  and each of the pod's four containers sees its own under that GPU;
* **exclusive** (``62-mig-whole-gpu.yaml``, ``63-mig-on-whole-gpu.yaml``) - while one claim
  holds a GPU whole, a MIG device of that GPU is not allocated to another (the GPU and its MIG
  devices consume one counter set: KEP-4815, DRAPartitionableDevices, beta and on in 1.36).

Capability-gated (:func:`draconf.capabilities.mig`): skipped, with the reason, where no
published device of the validated nodes matches DeviceClass ``mig.nvidia.com`` (DynamicMIG
off, GPUs without MIG, KWOK nodes, another driver profile).
"""

from __future__ import annotations

import pytest

from draconf import allocation, capabilities, manifests, mig, waits
from draconf import selectors as sel
from draconf.claims import device_holders
from draconf.devices import PublishedDevices
from draconf.errors import NoVerdict
from draconf.pods import exec_in_container
from draconf.reporting import note
from draconf.scenarios.mig import MigWorkload
from draconf.startup import allocated_once_freed, wait_scheduler_answer
from draconf.workload import DeployedWorkload

#: How long the MIG claim on a held GPU is watched for the scheduler's verdict.
VERDICT_TIMEOUT = 40
WHOLE_CLAIM = "gpu-whole"
MIG_ON_WHOLE = "mig-on-whole-gpu"


@pytest.fixture
def mig_devices(request, cluster, profile, published_devices, validated_nodes) -> list:
    """The published MIG devices of the validated nodes, or a skip with the reason (a failure
    where the run expects MIG: ``--expect-feature mig``).  Tests ask for it before
    ``namespace``: a test skipped for want of MIG creates nothing."""
    capability, found = capabilities.mig(cluster, profile, validated_nodes.devices(published_devices))
    request.getfixturevalue("expected_features").require("mig", capability)
    return found


def judged_allocation(deployed: DeployedWorkload, profile):
    """The one pod of a MIG workload, its generated claim and, per request, the published device
    allocated for it, once :func:`draconf.allocation.judge` finds the allocation right (MIG
    devices and their parents included)."""
    published = PublishedDevices.read(deployed.api, profile.driver)
    judgement = allocation.judge(deployed.allocation_snapshot(published), expected_pods=1,
                                 identity_attribute=profile.attributes.get("uuid"),
                                 parent_attribute=mig.PARENT_ATTRIBUTE)
    assert judgement.right, f"the allocation is wrong: {judgement}"
    (pod,) = deployed.pods()
    (claim,) = [c for c in deployed.claims().values() if c.is_generated]
    return pod, claim, {r.request: published.lookup(r.driver, r.pool, r.device) for r in claim.results}


def smi_list(cluster, profile, ns: str, pod: str, container: str):
    return exec_in_container(cluster, ns, pod, container, ["nvidia-smi", "-L"], timeout=profile.timeouts.exec)


def started(cluster, ns, workload, profile, run_id) -> DeployedWorkload:
    start = DeployedWorkload.start(cluster, ns, workload, profile, run_id.labels)
    if start.never_started:
        raise start.failed(f"the MIG workload never ran: {start.failure}")
    return start.deployed


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="mig", check="by-profile")
def test_mig_device_by_profile(request, cluster, profile, run_id, mig_devices, namespace, validated_nodes):
    """60-mig-by-profile.yaml with the smallest published profile: the claim gets a MIG device
    of it, and ``nvidia-smi -L`` in the container lists that device under its parent GPU."""
    found = mig_devices
    wanted = mig.smallest_profiles(found)[0]
    workload = MigWorkload("mig", ["features/60-mig-by-profile.yaml"], expected_pods=1,
                               avoid_nodes=validated_nodes.avoid, profiles={"mig": wanted})
    deployed = started(cluster, namespace, workload, profile, run_id)
    pod, claim, devices = judged_allocation(deployed, profile)
    device = devices.get("mig")
    assert device is not None and mig.is_mig(device) and mig.profile_of(device) == wanted, (
        f"claim {claim.name} asked for a {wanted} MIG device and got {claim.summary()}")
    result = smi_list(cluster, profile, namespace, pod.name, pod.containers[0])
    wrong = mig.sees_mig(result.stdout, mig.parent_of(device), wanted)
    assert wrong is None, (f"{pod.name} was allocated {device} ({wanted} of GPU {mig.parent_of(device)}), but "
                           f"nvidia-smi -L {wrong}: {result.describe()}")
    note(request.node, f"{claim.name} got {device} ({wanted}); nvidia-smi -L: {result.stdout.strip()}")


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="mig", check="same-parent")
def test_mig_devices_share_their_parent(request, cluster, profile, run_id, mig_devices, namespace,
                                        validated_nodes):
    """61-mig-same-parent.yaml (gpu-test4): four MIG devices under matchAttribute parentUUID are
    on one GPU, and each container sees its own there."""
    found = mig_devices
    sizes = {"mig-1g-0": 1, "mig-1g-1": 1, "mig-2g": 2, "mig-3g": 3}
    profiles = {r: mig.profile_with_slices(found, n) for r, n in sizes.items()}
    if missing := sorted({f"{n}g" for r, n in sizes.items() if profiles[r] is None}):
        pytest.skip(f"gpu-test4 asks for 1g, 1g, 2g and 3g MIG devices; no {', '.join(missing)} profile "
                    f"is published (published: {', '.join(mig.smallest_profiles(found))})")
    workload = MigWorkload("mig", ["features/61-mig-same-parent.yaml"], expected_pods=1,
                               avoid_nodes=validated_nodes.avoid, profiles=profiles)
    deployed = started(cluster, namespace, workload, profile, run_id)
    pod, claim, devices = judged_allocation(deployed, profile)
    parents = {r: mig.parent_of(d) if d else None for r, d in devices.items()}
    assert len(set(parents.values())) == 1 and None not in parents.values(), (
        f"matchAttribute gpu.nvidia.com/parentUUID must keep the claim's MIG devices on one GPU; "
        f"their parents: {parents}")
    parent = next(iter(parents.values()))
    containers = {c["name"]: c["resources"]["claims"][0]["request"] for c in pod.spec["containers"]}
    problems, seen, under = [], [], {}
    for container, req in containers.items():
        result = smi_list(cluster, profile, namespace, pod.name, container)
        if wrong := mig.sees_mig(result.stdout, parent, mig.profile_of(devices[req])):
            problems.append(f"{container} (request {req}: {devices[req]}): nvidia-smi -L {wrong}: {result.describe()}")
        seen.append(f"{container}: {mig.profile_of(devices[req])}")
        for gpu in mig.parse_list(result.stdout):
            under.setdefault(gpu.uuid, []).append(container)
    # The promise is one physical GPU: the published parentUUID is only how the claim asks for it.
    # GPUs the containers list besides it say the devices are not where the slices say they are.
    elsewhere = "" if set(under) <= {parent} else (
        f"the claim's MIG devices all publish parentUUID {parent} (matchAttribute kept that), but the "
        f"containers' nvidia-smi -L lists them under {len(under)} GPU(s): "
        + "; ".join(f"{gpu} ({', '.join(cs)})" for gpu, cs in under.items())
        + " (compare the devices' parentUUID in `kubectl get resourceslices -o yaml` with nvidia-smi -L); ")
    assert not problems, elsewhere + "the containers do not see their MIG devices: " + "; ".join(problems)
    note(request.node, f"{claim.name}: {', '.join(str(d) for d in devices.values())}, all on GPU {parent}; "
                       f"each container sees its own ({', '.join(seen)})")


def free_parent(cluster, profile, found, published) -> tuple[str, object]:
    """A GPU whose MIG devices and whole device are published and that no claim holds.  Where
    such GPUs exist but all are in use now: no verdict, naming the holders (never green)."""
    held = device_holders(cluster)
    uuid = profile.attributes.get("uuid")
    wholes = published.by_uuid(uuid) if uuid else {}
    busy = {}
    for parent in sorted({mig.parent_of(d) for d in found}):
        whole = wholes.get(parent)
        if whole is None:
            continue
        holders = sorted({h for d in [whole, *(d for d in found if mig.parent_of(d) == parent)]
                          for h in held.get(d.key, ())})
        if not holders:
            return parent, whole
        busy[parent] = holders
    if busy:
        raise NoVerdict("every GPU published both whole and as MIG devices is in use now: "
                        + "; ".join(f"{parent} held by {', '.join(h)}" for parent, h in busy.items()))
    pytest.skip("no GPU is published both whole and as MIG devices, free of claims (a MIG-enabled "
                "Ampere GPU publishes MIG devices only): the exclusivity of a GPU and its MIG devices "
                "cannot be observed")


@pytest.mark.conformance
@pytest.mark.exclusive_capacity
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="mig", check="exclusive")
def test_whole_gpu_and_its_mig_device_are_exclusive(request, cluster, profile, run_id, mig_devices, namespace,
                                                     validated_nodes):
    """62-mig-whole-gpu.yaml holds a GPU; 63-mig-on-whole-gpu.yaml asks for a MIG device of it:
    the scheduler leaves that claim unallocated (shared counters), saying it cannot allocate;
    once the whole GPU's claim is deleted, the MIG device is allocated."""
    found = mig_devices
    published = validated_nodes.devices(PublishedDevices.read(cluster, profile.driver))
    parent, whole = free_parent(cluster, profile, found, published)
    holder = MigWorkload("mig", ["features/62-mig-whole-gpu.yaml"], expected_pods=1,
                             avoid_nodes=validated_nodes.avoid, selectors={WHOLE_CLAIM: [
                                 sel.uuid_in(profile.domain, profile.attributes["uuid"], [parent])]})
    started(cluster, namespace, holder, profile, run_id)
    smallest = mig.smallest_profiles([d for d in found if mig.parent_of(d) == parent])[0]
    asking = MigWorkload("mig", ["features/63-mig-on-whole-gpu.yaml"], expected_pods=1,
                             avoid_nodes=validated_nodes.avoid, profiles={"mig": smallest}, parent=parent)
    manifests.create(cluster, namespace, asking.documents(profile), run_id.labels)

    try:
        claim, pod = wait_scheduler_answer(cluster, namespace, MIG_ON_WHOLE, MIG_ON_WHOLE, VERDICT_TIMEOUT)
    except waits.WaitFailed as err:
        raise AssertionError(f"no verdict from the scheduler on a {smallest} MIG device of GPU {parent}, "
                             f"which {WHOLE_CLAIM} holds: {err}") from None
    given = claim.is_allocated
    assert not given, (
        f"GPU {parent} is held whole by {WHOLE_CLAIM} ({whole}), yet {MIG_ON_WHOLE} was allocated "
        f"{[str(r) for r in claim.results]}, a MIG device carved from it: the GPU and its MIG devices "
        "must consume one counter set")
    # Shared counters are the reason only if the MIG device is allocated once the whole GPU is
    # free again (a node taint or a selector matching nothing, say, would keep it Pending anyway).
    said = pod.unschedulable_message
    cluster.core.delete_namespaced_pod(WHOLE_CLAIM, namespace, grace_period_seconds=0)
    cluster.resource.delete_namespaced_resource_claim(WHOLE_CLAIM, namespace)
    claim = allocated_once_freed(cluster, namespace, MIG_ON_WHOLE, MIG_ON_WHOLE,
                                 f"{WHOLE_CLAIM}, which held GPU {parent} whole, deleted", VERDICT_TIMEOUT)
    note(request.node, f"{WHOLE_CLAIM} holds {whole} (GPU {parent}); a {smallest} MIG device of it stays "
                       f"unallocated: {said}; with {WHOLE_CLAIM} deleted it is allocated: {claim.summary()}")
