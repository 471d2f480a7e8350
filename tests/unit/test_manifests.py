"""``manifests.changes``: what the suite set in a file before applying it, field by field."""

from __future__ import annotations

import copy

from draconf import manifests
from draconf import selectors as sel
from draconf.profile import builtin
from draconf.workload import Workload


def test_as_written_is_empty():
    for name in ["01-single-gpu.yaml", "06-shared-claim.yaml", "features/43-admin-access-monitor.yaml"]:
        assert manifests.changes([name], manifests.load(name)) == []


def test_nvidia_profile_changes_nothing_but_selectors_and_node():
    """Off the bed the nvidia profile's class, image, tolerations and Pod Security equal the
    files'; what a Workload changes is what its scenario templated, and nothing else."""
    profile = builtin("nvidia")
    plain = Workload("single-gpu", ["01-single-gpu.yaml"], 1).documents(profile)
    assert manifests.changes(["01-single-gpu.yaml"], plain) == []
    model = sel.model(profile.domain, profile.attributes["model"], "NVIDIA H200")
    docs = Workload("model", ["02-model-selected.yaml"], 1, selectors={"h100-gpu": [model]},
                    node="gpu-h200-0").documents(profile)
    lines = manifests.changes(["02-model-selected.yaml"], docs)
    assert len(lines) == 2, lines
    assert "ResourceClaimTemplate/h100-gpu spec.spec.devices.requests[0].exactly.selectors[0].cel.expression" in lines[0]
    assert "nvidia h200" in lines[0]
    assert lines[1].endswith("spec.nodeSelector: (absent) -> {'kubernetes.io/hostname': 'gpu-h200-0'}")


def test_dropped_and_added_objects():
    docs = manifests.load("32-capacity-exhausted.yaml")
    extra = copy.deepcopy(manifests.find(docs, "Pod", "gpu-holder-0"))
    extra["metadata"]["name"] = "gpu-holder-2"
    kept = [d for d in docs if d["metadata"]["name"] != "gpu-holder-1"] + [extra]
    assert manifests.changes(["32-capacity-exhausted.yaml"], kept) == [
        "32-capacity-exhausted.yaml: Pod/gpu-holder-1: not applied",
        "Pod/gpu-holder-2: added (not in 32-capacity-exhausted.yaml)",
    ]


def test_long_values_are_cut():
    docs = manifests.load("01-single-gpu.yaml")
    docs[1]["spec"]["containers"][0]["args"] = ["x" * 500]
    (line,) = manifests.changes(["01-single-gpu.yaml"], docs, limit=40)
    assert line.endswith("...") and len(line.split(" -> ")[1]) == 40
