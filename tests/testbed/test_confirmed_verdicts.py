"""The scheduler's "cannot allocate all claims" as a verdict at once when the cluster's state
confirms it, and never while a GPU the pod could use is being released (issue 13: a faster
verdict must not make a false one under contention more likely).

Both A100s of the default fleet are held by one running pod; then one more pod asks for an A100:

- the holder stays: the verdict comes on the scheduler's first answer, naming the count the
  cluster confirms (before, the message had to stand VERDICT_AFTER seconds);
- the holder is being deleted with a grace period longer than VERDICT_AFTER: the pod must run
  once the GPU is free.  A message that merely stood VERDICT_AFTER seconds was a verdict here
  before, although the GPU was on its way back.
"""

from __future__ import annotations

import pytest

from draconf import manifests, waits
from draconf.startup import VERDICT_AFTER
from draconf.workload import DeployedWorkload, Workload

from .test_allocation_branches import PROFILE, claim_doc, pod_doc

A100 = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100')"
#: Longer than VERDICT_AFTER: the holder's busybox ignores SIGTERM, so it ends when this ends.
GRACE = int(VERDICT_AFTER) + 3


@pytest.fixture
def a100s_held(api, ns):
    """Both A100s allocated by the real scheduler to a running pod's claim."""
    docs = [claim_doc("both-a100s", count=2, selectors=[A100]), pod_doc("holder", "both-a100s")]
    manifests.create(api, ns, docs)
    holder = DeployedWorkload(api, ns, Workload("holder", [], 1), PROFILE, docs)
    holder.wait_running(timeout=60)
    return holder


def one_more_a100(api, ns) -> DeployedWorkload:
    docs = [claim_doc("one-a100", selectors=[A100]), pod_doc("wants-an-a100", "one-a100")]
    manifests.create(api, ns, docs)
    return DeployedWorkload(api, ns, Workload("wants-an-a100", [], 1), PROFILE, docs)


def test_a_shortage_the_cluster_confirms_is_a_verdict_at_once(api, ns, a100s_held):
    deployed = one_more_a100(api, ns)
    with pytest.raises(waits.WaitFailed) as failed:
        deployed.wait_running(timeout=60)
    message = str(failed.value)
    assert "the scheduler cannot place pod wants-an-a100" in message and "cannot allocate all claims" in message
    assert ("the cluster confirms: claim one-a100, request gpu: 1 device(s) wanted; 2 published device(s) "
            "pass its selectors, 0 free") in message, message


def test_a_gpu_being_released_is_waited_for(api, ns, a100s_held):
    api.core.delete_namespaced_pod("holder", ns, grace_period_seconds=GRACE)
    deployed = one_more_a100(api, ns)
    (pod,) = deployed.wait_running(timeout=60)
    assert pod.is_running
