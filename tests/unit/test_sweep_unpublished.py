"""A GPU node that publishes no device is a sweep target of its own: named, never left out of the
fleet, and never a pass (draconf.sweep.unpublished_targets, prove)."""

import pytest

from draconf import sweep
from draconf.errors import NoVerdict
from draconf.nodescope import NodeScope
from draconf.profile import builtin


def test_only_gpu_nodes_without_a_published_device_become_such_targets():
    found = sweep.unpublished_targets(["gpu-a", "gpu-b"], {"gpu-a": 8})
    assert [(t.id, t.gpus, t.publishes_nothing) for t in found] == [("gpu-b", 0, True)]
    assert not sweep.Target("gpu-a", gpus=8).publishes_nothing
    assert not sweep.Target("gpu-a", "gpu-0").publishes_nothing


def test_its_proof_is_no_verdict_naming_the_node_and_what_preflight_found_there():
    target = sweep.Target("gpu-b", gpus=0)
    scope = NodeScope(("gpu-a",), {"gpu-b": ("resource-slices [no-resourceslices]",)})
    with pytest.raises(NoVerdict) as outcome:
        # Nothing of the cluster is read for it: no API, no namespace.
        sweep.prove(None, builtin("nvidia"), "r1", [], scope, target, sweep.Proof(target), None, {}, [])
    said = str(outcome.value)
    assert said.startswith(f"{sweep.NOT_PUBLISHED}: gpu-b is a GPU node") and "publishes no gpu.nvidia.com device" in said
    assert "preflight: resource-slices [no-resourceslices]" in said
    assert sweep.verdict_word(sweep.Proof(target, outcome=outcome.value)) == "not published"
