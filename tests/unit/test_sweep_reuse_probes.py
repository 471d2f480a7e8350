"""draconf.sweep.ReuseProbes: a node's freed GPUs proven reusable by one probe, each GPU alone
when that fails, and no deferred target ever left passing on a probe that did not pass.

The probe here is a recorder standing in for prove_allocatable (what it would be asked, and
what it answers); the probe itself is judged against real beds (tests/testbed/
test_every_node.py, and the fault matrix's unprepare-keeps-device and one-gpu-bad rows)."""

from __future__ import annotations

import threading

import pytest

from draconf.errors import NoVerdict
from draconf.sweep import ReuseProbes, Target, run

NODE = [Target("n1", f"gpu-{i}") for i in range(3)]


class Recorder:
    """The calls a ReuseProbes made, and a GPU whose probe fails (as a node that says
    "unprepared" but keeps it would)."""

    def __init__(self, bad: set[str] = frozenset(), raises: BaseException | None = None):
        self.calls: list[list[str]] = []
        self.bad, self.raises = bad, raises
        self.lock = threading.Lock()

    def __call__(self, target: Target, devices: list) -> list[str]:
        with self.lock:
            self.calls.append(sorted(devices))
        if self.raises is not None:
            raise self.raises
        if self.bad & set(devices):
            raise AssertionError(f"freed devices are not reusable: {sorted(self.bad & set(devices))}")
        return [f"re-allocated {', '.join(sorted(devices))}"]


def sweep(targets, probe, fails_before_release=frozenset(), at_once=2):
    """sweep.run as the suite runs it, each target releasing its one GPU unless listed."""
    probes = ReuseProbes(targets, probe)

    def prove_one(target, proof):
        if target in fails_before_release:
            raise AssertionError(f"{target.id}: the container never got its GPU")
        proof.notes += probes.released(target, [target.device or target.node])

    return run(targets, at_once, prove_one, probes=probes)


def test_a_nodes_freed_gpus_are_probed_once_together():
    probe = Recorder()
    proofs = sweep(NODE, probe)
    assert probe.calls == [["gpu-0", "gpu-1", "gpu-2"]]
    assert all(p.outcome is None for p in proofs.values())
    assert all("re-allocated gpu-0, gpu-1, gpu-2" in p.notes for p in proofs.values()), proofs


def test_a_failed_node_probe_is_retried_per_gpu_and_names_only_the_bad_one():
    probe = Recorder(bad={"gpu-1"})
    proofs = sweep(NODE, probe)
    assert probe.calls[0] == ["gpu-0", "gpu-1", "gpu-2"] and sorted(probe.calls[1:]) == [["gpu-0"], ["gpu-1"], ["gpu-2"]]
    failed = {t.id for t, p in proofs.items() if p.outcome is not None}
    assert failed == {"n1/gpu-1"}
    assert "not reusable" in str(proofs[Target("n1", "gpu-1")].outcome)


def test_a_target_that_fails_before_release_still_lets_its_neighbours_be_probed():
    probe = Recorder()
    broken = Target("n1", "gpu-2")
    proofs = sweep(NODE, probe, fails_before_release={broken})
    assert probe.calls == [["gpu-0", "gpu-1"]]
    assert "never got its GPU" in str(proofs[broken].outcome)
    assert proofs[Target("n1", "gpu-0")].outcome is None and proofs[Target("n1", "gpu-1")].outcome is None


@pytest.mark.parametrize("at_once", [1, 3])
def test_a_probe_without_verdict_is_every_deferred_targets_outcome(at_once):
    probe = Recorder(raises=NoVerdict("the probe's pod never ran: image pull"))
    proofs = sweep(NODE, probe, at_once=at_once)
    assert all(isinstance(p.outcome, NoVerdict) for p in proofs.values()), proofs


def test_nodes_are_probed_apart_and_a_node_of_one_target_at_once():
    targets = [Target("a"), Target("b", "gpu-0"), Target("b", "gpu-1")]
    probe = Recorder()
    proofs = sweep(targets, probe, at_once=1)
    assert probe.calls == [["a"], ["gpu-0", "gpu-1"]] or sorted(probe.calls) == [["a"], ["gpu-0", "gpu-1"]]
    assert all(p.outcome is None for p in proofs.values())
