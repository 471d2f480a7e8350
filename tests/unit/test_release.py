"""The cleanup check's judgement of a release (draconf.release.ReleaseJudge), over recorded
objects: pods and claims as the API server returns them after the suite deleted the consumers,
replayed poll by poll with the clock the judge is given."""

from datetime import datetime, timedelta, timezone

from draconf.claims import POD_CLAIM_ANNOTATION, Claim
from draconf.pods import Pod
from draconf.release import CONTROLLER, NODE, STUCK_CLAIM_AFTER, ReleaseJudge


def ago(seconds: float) -> str:
    """An RFC 3339 timestamp ``seconds`` in the past, as deletionTimestamp is written."""
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(deleted_ago: float | None = None, uid="pod-uid") -> Pod:
    meta = {"name": "gpu-pod", "uid": uid}
    if deleted_ago is not None:
        meta["deletionTimestamp"] = ago(deleted_ago)  # the grace period ended then
    return Pod({"metadata": meta, "spec": {}, "status": {"phase": "Running"}})


def claim(name="gpu-pod-gpu-x1", generated=True, allocated=True, reserved=("pod-uid",),
          deleting=False, finalizers=()) -> Claim:
    meta = {"name": name, "namespace": "ns", "finalizers": list(finalizers)}
    if generated:
        meta["annotations"] = {POD_CLAIM_ANNOTATION: "gpu"}
    if deleting:
        meta["deletionTimestamp"] = ago(1)
    status = {}
    if allocated:
        status["allocation"] = {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
                                                         "pool": "n1", "device": "gpu-0"}]}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "gpu-pod", "uid": u} for u in reserved]
    return Claim({"metadata": meta, "spec": {}, "status": status})


def test_released_only_when_the_pod_and_the_generated_claim_are_gone():
    judge = ReleaseJudge(stall_after=15)
    assert not judge.released([pod(0)], [])
    assert not judge.released([], [claim()])
    assert not judge.released([], [claim(generated=False, allocated=False, reserved=("pod-uid",))])
    assert judge.released([], [claim(generated=False, allocated=False, reserved=())])
    assert judge.released([], [])


def test_a_pod_within_its_grace_period_or_just_past_it_is_under_way():
    judge = ReleaseJudge(stall_after=15)
    assert judge.stuck([pod(-5)], [claim()], now=0) is None      # still in its grace period
    assert judge.stuck([pod(STUCK_CLAIM_AFTER - 5)], [claim()], now=0) is None  # a busy node is slow


def test_a_pod_its_node_never_finishes_is_the_node_naming_the_claims_it_keeps_reserved():
    stuck = ReleaseJudge(stall_after=15).stuck([pod(STUCK_CLAIM_AFTER + 5)], [claim()], now=0)
    assert stuck is not None and stuck.where == NODE
    assert "pod gpu-pod was deleted" in stuck.observed and "['gpu-pod-gpu-x1'] stay reserved" in stuck.observed


def test_claims_nobody_deletes_after_the_last_consumer_are_the_controller_once_it_has_stood():
    judge = ReleaseJudge(stall_after=15)
    left = [claim(reserved=())]  # the pod is gone; the generated claim was never deleted
    assert judge.stuck([], left, now=100) is None
    assert judge.stuck([], left, now=110) is None
    stuck = judge.stuck([], left, now=115)
    assert stuck is not None and stuck.where == CONTROLLER
    assert "gpu-pod-gpu-x1 were neither deleted nor released 15s after" in stuck.observed


def test_the_controller_clock_starts_again_once_it_acted():
    judge = ReleaseJudge(stall_after=15)
    assert judge.stuck([], [claim(reserved=())], now=100) is None
    assert judge.stuck([], [], now=105) is None                 # it deleted the claim
    assert judge.stuck([], [claim(reserved=())], now=115) is None  # a new state, a new clock


def test_a_claim_a_drivers_finalizer_keeps_after_its_deletion_is_the_node():
    judge = ReleaseJudge(stall_after=15)
    held = [claim(reserved=(), deleting=True, finalizers=("gpu.nvidia.com/deletion-protection",))]
    assert judge.stuck([], held, now=0) is None
    stuck = judge.stuck([], held, now=STUCK_CLAIM_AFTER)
    assert stuck is not None and stuck.where == NODE and "gpu.nvidia.com/deletion-protection" in stuck.observed
    # Kubernetes' own finalizer is the controller's to remove, not a driver holding on
    own = [claim(reserved=(), deleting=True, finalizers=("resource.kubernetes.io/delete-protection",))]
    assert ReleaseJudge(stall_after=15).stuck([], own, now=STUCK_CLAIM_AFTER) is None
