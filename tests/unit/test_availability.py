"""draconf.availability: when the cluster's state confirms "cannot allocate all claims"."""

from draconf.availability import shortage
from draconf.claims import Claim
from draconf.devices import Device

DRIVER = "gpu.nvidia.com"
H100 = "device.attributes['gpu.nvidia.com'].productName == 'H100'"
CLASSES = {DRIVER: [f"device.driver == '{DRIVER}'"]}


def gpu(i: int, product: str = "H100", node: str = "n1") -> Device:
    return Device(DRIVER, node, f"gpu-{i}", node, {f"{DRIVER}/productName": product})


def want(count: int = 1, selectors=(), name: str = "want", **request) -> Claim:
    exactly = {"deviceClassName": DRIVER, "count": count, **request,
               "selectors": [{"cel": {"expression": s}} for s in selectors]}
    return Claim({"metadata": {"name": name, "uid": f"uid-{name}"},
                  "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})


def holder(*devices: int, name: str = "h", admin: bool = False, reserved=("pod-uid",), deleting=False) -> Claim:
    meta = {"name": name, "namespace": "other", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    return Claim({"metadata": meta, "status": {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": f"gpu-{i}",
             **({"adminAccess": True} if admin else {})} for i in devices]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": u} for u in reserved]}})


def read(claim, published, holders, leaving=lambda c: False, classes=CLASSES):
    return shortage(claim, published, classes, holders, consumers_leaving=leaving)


def test_every_matching_device_held_is_confirmed():
    r = read(want(selectors=[H100]), [gpu(0), gpu(1), gpu(2, "A100")], [holder(0, 1)])
    assert r.confirmed and str(r) == ("claim want, request gpu: 1 device(s) wanted; "
                                      "2 published device(s) pass its selectors, 0 free")


def test_no_device_passing_the_selectors_is_confirmed():
    r = read(want(selectors=["device.attributes['gpu.nvidia.com'].productName == 'B200'"]), [gpu(0)], [])
    assert r.confirmed and "0 published device(s) pass its selectors, 0 free" in str(r)


def test_enough_free_devices_confirm_nothing():
    """The scheduler's reason lies elsewhere (a node's affinity, a constraint): not for us to confirm."""
    r = read(want(count=2), [gpu(0), gpu(1), gpu(2)], [holder(0)])
    assert not r.shortages and not r.confirmed


def test_a_count_beyond_the_free_devices_is_confirmed():
    assert read(want(count=3), [gpu(0), gpu(1), gpu(2)], [holder(0)]).confirmed


def test_a_holder_being_released_confirms_nothing():
    """Deleted, reserved for nobody, or reserved for a pod being deleted: about to be free."""
    cases = [(holder(0, deleting=True), False), (holder(0, reserved=()), False), (holder(0), True)]
    for claim, consumer_deleting in cases:
        r = read(want(), [gpu(0)], [claim], leaving=lambda c: consumer_deleting)
        assert r.releasing == ["other/h"] and r.shortages and not r.confirmed, claim.raw


def test_a_holder_of_a_device_that_does_not_match_is_not_asked_about():
    asked = []
    r = read(want(selectors=[H100]), [gpu(0), gpu(1, "A100")], [holder(0), holder(1, name="a100")],
             leaving=lambda c: asked.append(c.name) or False)
    assert r.confirmed and asked == ["h"]


def test_admin_access_results_do_not_hold_a_device():
    r = read(want(), [gpu(0)], [holder(0, admin=True)])
    assert not r.shortages


def test_the_claims_own_results_do_not_hold_a_device():
    own = want()
    own.raw["status"] = holder(0).raw["status"]
    assert not read(own, [gpu(0)], [own]).shortages


def test_requests_that_count_no_devices_are_uncounted():
    all_mode = want(allocationMode="All")
    prioritized = Claim({"metadata": {"name": "f"}, "spec": {"devices": {"requests": [
        {"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": DRIVER}]}]}}})
    missing_class = want()
    for claim, classes in ((all_mode, CLASSES), (prioritized, CLASSES), (missing_class, {DRIVER: None})):
        r = read(claim, [], [], classes=classes)
        assert r.uncounted and not r.confirmed, claim.raw
