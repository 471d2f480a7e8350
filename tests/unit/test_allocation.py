"""Every branch of draconf.allocation.judge, over objects shaped as the API server returns them.

Each test starts from a right allocation (one pod, one claim, one device on the pod's node) and
breaks one promise the way a misbehaving scheduler, controller or driver would.
"""

import pytest

from draconf.allocation import Snapshot, judge
from draconf.claims import Claim
from draconf.devices import Device, PublishedDevices
from draconf.pods import Pod

DRIVER = "gpu.nvidia.com"
UUID = f"{DRIVER}/uuid"
CLASS = {DRIVER: ["device.driver == 'gpu.nvidia.com'"]}


def device(name="gpu-0", node="n1", pool=None, uuid=None, product="NVIDIA A100"):
    return Device(DRIVER, pool or node, name, node,
                  {UUID: uuid or f"GPU-{node}-{name}", f"{DRIVER}/productName": product})


def pod(name="p", uid="u1", node="n1", claims=None, template=False, statuses=None):
    refs = [{"name": ref, ("resourceClaimTemplateName" if template else "resourceClaimName"): claim}
            for ref, claim in (claims or {"gpu": "c"}).items()]
    status = {"phase": "Running"}
    if template:
        status["resourceClaimStatuses"] = [{"name": ref, "resourceClaimName": claim}
                                           for ref, claim in (statuses or {}).items()]
    return Pod({"metadata": {"name": name, "uid": uid},
                "spec": {"nodeName": node, "resourceClaims": refs}, "status": status})


def claim(name="c", results=(("gpu", "n1", "gpu-0"),), reserved=("u1",), count=1, selectors=(),
          owner=None, requests=None):
    requests = requests or [{"name": "gpu", "exactly": {
        "deviceClassName": DRIVER, "count": count,
        "selectors": [{"cel": {"expression": s}} for s in selectors]}}]
    meta = {"name": name, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    status = {"reservedFor": [{"resource": "pods", "uid": u} for u in reserved]}
    if results is not None:
        status["allocation"] = {"devices": {"results": [
            {"request": r, "driver": DRIVER, "pool": pool, "device": dev} for r, pool, dev in results]}}
    return Claim({"metadata": meta, "spec": {"devices": {"requests": requests}}, "status": status})


def kinds(pods, claims, devices=None, classes=CLASS, expected=None, **kw):
    snapshot = Snapshot(pods, {c.name: c for c in claims},
                        PublishedDevices(DRIVER, devices if devices is not None else [device()]), classes)
    return judge(snapshot, expected_pods=len(pods) if expected is None else expected,
                 identity_attribute="uuid", **kw).kinds()


def test_a_right_allocation_has_no_problem_and_names_its_claim_as_evidence():
    snapshot = Snapshot([pod()], {"c": claim()}, PublishedDevices(DRIVER, [device()]), CLASS)
    judgement = judge(snapshot, expected_pods=1, identity_attribute="uuid")
    assert judgement.right
    assert judgement.evidence == [claim().summary()]


def test_pods_missing():
    assert kinds([pod()], [claim()], expected=2) == ["pod-count"]


def test_an_unscheduled_pod():
    unscheduled = Pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {}, "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                            "reason": "Unschedulable", "message": "0/3 nodes"}]}})
    assert kinds([unscheduled], [claim()]) == ["unscheduled"]


def test_a_generated_claim_the_pod_status_does_not_name():
    assert kinds([pod(template=True, claims={"gpu": "t"})], [claim()]) == ["claim-unnamed"]


def test_an_extended_resource_pod_without_its_claim_status():
    assert kinds([pod()], [claim()], extended_resources=True) == ["claim-unnamed"]


def test_a_claim_that_does_not_exist():
    assert kinds([pod(claims={"gpu": "gone"})], [claim()]) == ["claim-missing"]


def test_a_generated_claim_owned_by_another_pod():
    generated = pod(template=True, claims={"gpu": "t"}, statuses={"gpu": "c"})
    assert kinds([generated], [claim(owner="someone-else")]) == ["not-owned"]
    assert kinds([generated], [claim(owner="u1")]) == []


def test_an_extended_resource_claim_without_its_annotation():
    extended = Pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {"nodeName": "n1"},
                    "status": {"phase": "Running", "extendedResourceClaimStatus": {
                        "resourceClaimName": "c", "requestMappings": []}}})
    assert kinds([extended], [claim(owner="u1")], extended_resources=True) == ["not-extended"]


def test_a_claim_not_allocated():
    assert kinds([pod()], [claim(results=None)]) == ["not-allocated"]


def test_reserved_for_lacks_the_consumer():
    assert kinds([pod()], [claim(reserved=())]) == ["not-reserved"]


def test_fewer_devices_than_requested():
    assert kinds([pod()], [claim(count=2)]) == ["wrong-count"]


def test_more_devices_than_requested():
    results = (("gpu", "n1", "gpu-0"), ("gpu", "n1", "gpu-1"))
    assert kinds([pod()], [claim(results=results)], devices=[device(), device("gpu-1")]) == ["wrong-count"]


def test_all_mode_needs_at_least_one_device_and_first_available_exactly_one_alternative():
    all_mode = [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "All"}}]
    assert kinds([pod()], [claim(requests=all_mode)]) == []
    alternatives = [{"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": DRIVER, "count": 2},
                                                       {"name": "one", "deviceClassName": DRIVER}]}]
    assert kinds([pod()], [claim(requests=alternatives, results=(("gpu/one", "n1", "gpu-0"),))]) == []
    assert kinds([pod()], [claim(requests=alternatives, results=(("gpu/big", "n1", "gpu-0"),))]) \
        == ["wrong-count"]
    both = (("gpu/one", "n1", "gpu-0"), ("gpu/big", "n1", "gpu-1"))
    assert kinds([pod()], [claim(requests=alternatives, results=both)],
                 devices=[device(), device("gpu-1")]) == ["wrong-count"]


def test_one_device_twice_in_one_claim():
    results = (("gpu", "n1", "gpu-0"), ("gpu", "n1", "gpu-0"))
    assert kinds([pod()], [claim(results=results, count=2)]) == ["device-twice"]


def test_one_device_in_two_claims():
    pods = [pod(), pod("q", "u2", claims={"gpu": "d"})]
    claims = [claim(), claim("d", reserved=("u2",))]
    assert kinds(pods, claims) == ["shared-device"]


def test_admin_access_may_share_a_device():
    admin = claim("d", reserved=("u2",))
    admin.raw["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    assert kinds([pod(), pod("q", "u2", claims={"gpu": "d"})], [claim(), admin]) == []


def test_one_claim_shared_by_two_pods_is_not_a_shared_device():
    assert kinds([pod(), pod("q", "u2")], [claim(reserved=("u1", "u2"))]) == []


def test_one_gpu_published_twice_and_allocated_to_two_claims():
    twins = [device(), device(pool="n1-copy", uuid="GPU-n1-gpu-0")]
    pods = [pod(), pod("q", "u2", claims={"gpu": "d"})]
    claims = [claim(), claim("d", reserved=("u2",), results=(("gpu", "n1-copy", "gpu-0"),))]
    assert kinds(pods, claims, devices=twins) == ["shared-gpu"]


def test_a_device_in_no_published_slice():
    assert kinds([pod()], [claim(results=(("gpu", "n1", "gpu-9"),))]) == ["unpublished"]


def test_a_device_class_that_does_not_exist():
    assert kinds([pod()], [claim()], classes={DRIVER: None}) == ["missing-class"]


def test_a_device_the_class_selectors_refuse():
    assert kinds([pod()], [claim()], classes={DRIVER: ["device.driver == 'other'"]}) == ["class-selectors"]


def test_a_device_the_request_selectors_refuse():
    h100 = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('h100')"
    assert kinds([pod()], [claim(selectors=[h100])]) == ["request-selectors"]
    assert kinds([pod()], [claim(selectors=[h100])], devices=[device(product="NVIDIA H100")]) == []


@pytest.mark.parametrize("consumer", ["first", "second"])
def test_a_device_on_another_node_than_its_pod(consumer):
    pods = [pod(node="n1"), pod("q", "u2", node="n1")]
    pods[0 if consumer == "first" else 1] = pod(*(("p", "u1") if consumer == "first" else ("q", "u2")), node="n2")
    assert kinds(pods, [claim(reserved=("u1", "u2"))]) == ["other-node"]


def mig_device(name="gpu-0-mig-1g10gb-19-0", parent="GPU-n1-gpu-0", node="n1"):
    return Device(DRIVER, node, name, node, {f"{DRIVER}/type": "mig", f"{DRIVER}/parentUUID": parent,
                                             f"{DRIVER}/profile": "1g.10gb"})


@pytest.mark.parametrize("whole_first", [True, False])
def test_a_gpu_and_a_mig_device_of_it_in_two_claims(whole_first):
    """The scheduler must not give a GPU and a MIG device carved from it to two claims (their
    shared counters, KEP-4815): a driver publishing MIG devices without consumesCounters lets it."""
    whole, part = (pod("a", "ua", claims={"gpu": "a"}), claim("a", reserved=("ua",))), \
        (pod("b", "ub", claims={"gpu": "b"}), claim("b", results=(("gpu", "n1", "gpu-0-mig-1g10gb-19-0"),),
                                                    reserved=("ub",)))
    first, second = (whole, part) if whole_first else (part, whole)
    devices = [device(), mig_device()]
    assert kinds([first[0], second[0]], [first[1], second[1]], devices,
                 parent_attribute="parentUUID") == ["partition-overlap"]
    # Without the parent attribute the judgement knows nothing of partitions.
    assert kinds([first[0], second[0]], [first[1], second[1]], devices) == []


def test_a_mig_device_of_another_gpu_or_in_the_same_claim_is_fine():
    other = (pod("b", "ub", claims={"gpu": "b"}), claim("b", results=(("gpu", "n1", "gpu-1-mig-1g10gb-19-0"),),
                                                        reserved=("ub",)))
    devices = [device(), mig_device(), mig_device("gpu-1-mig-1g10gb-19-0", "GPU-n1-gpu-1")]
    assert kinds([pod(), other[0]], [claim(), other[1]], devices, parent_attribute="parentUUID") == []
