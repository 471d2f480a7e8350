"""The injection judge over recorded readings: what nvidia-smi -L showed in each container of a
workload, against the GPUs allocated to the claims it lists (draconf.injection)."""

from draconf.injection import Seen, judge
from draconf.pods import ExecResult
from draconf.profile import Profile

H100 = "GPU-5f0b1c3e-8f6a-4d4e-9a51-1a2b3c4d5e60"
H100_NEXT = "GPU-5f0b1c3e-8f6a-4d4e-9a51-1a2b3c4d5e61"
#: What the bed's nvidia-smi printed in a single-gpu container (recorded).
LISTED = f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {H100})\n"


def shown(stdout: str, code: int = 0, stderr: str = "") -> tuple[list[str], ExecResult]:
    return sorted(Profile().injection.parse(stdout)), ExecResult(stdout, stderr, code)


def test_the_allocated_gpu_seen_is_right():
    seen, result = shown(LISTED)
    verdict = judge([Seen("gpu-pod", "ctr", [H100], seen=seen, result=result)])
    assert verdict.right and verdict.given_a_gpu == 1
    assert verdict.evidence == [f"gpu-pod/ctr: expected ['{H100}']; nvidia-smi -L: exit 0; stdout: {LISTED.strip()}"]


def test_another_gpu_of_the_node_is_cdi_wrong_device():
    seen, result = shown(LISTED.replace(H100, H100_NEXT))
    verdict = judge([Seen("gpu-pod", "ctr", [H100], seen=seen, result=result)])
    assert verdict.problems == [f"gpu-pod/ctr sees ['{H100_NEXT}'], allocated ['{H100}']; missing ['{H100}']; "
                                f"not allocated to it ['{H100_NEXT}']"]


def test_no_nvidia_smi_in_the_container_is_no_gpu_seen():
    seen, result = shown("", 127, "exec: nvidia-smi: executable file not found in $PATH")
    (problem,) = judge([Seen("gpu-pod", "ctr", [H100], seen=seen, result=result)]).problems
    assert problem.startswith("gpu-pod/ctr sees no GPU: nvidia-smi -L exit 127") and H100 in problem


def test_pods_stripped_of_their_claims_show_nothing_and_cannot_pass():
    """Every container 'expects no GPU and sees none' (an admission policy removed the claims)."""
    seen, result = shown("", 127, "not found")
    verdict = judge([Seen("gpu-pod", "ctr", [], seen=seen, result=result)])
    assert not verdict.problems and verdict.nothing_shown and not verdict.right


def test_a_container_without_a_claim_that_sees_a_gpu_is_wrong():
    seen, result = shown(LISTED)
    verdict = judge([Seen("pod-a", "gpu", [H100], seen=seen, result=result),
                     Seen("pod-a", "sidecar", [], seen=seen, result=result)])
    assert verdict.problems == [f"pod-a/sidecar lists no claim but sees ['{H100}']"]


def test_an_allocation_that_cannot_be_named_leaves_the_container_unjudged():
    verdict = judge([Seen("gpu-pod", "ctr", [], unknown=["claim gpu-pod-gpu-x has no allocation"])])
    assert verdict.unjudged == ["gpu-pod/ctr: claim gpu-pod-gpu-x has no allocation"]
    assert not verdict.right and not verdict.nothing_shown
