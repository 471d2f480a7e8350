"""prioritized-list on a cluster that has the GPUs its manifest prefers (B200s): the fallback is
still observed, never skipped.

``manifests/features/41-prioritized-list.yaml`` asks for "a B200, else the model this cluster
publishes most of".  Where a published device satisfies the first alternative, the suite sets
that alternative's model to one no device has (a templated field, shown in the report), so the
scheduler must still take the fallback: prioritized lists are GA in 1.36, and a cluster with
B200s is the kind the suite is for.  A KWOK fleet of two B200s and four H100s, through the real
API server and scheduler.
"""

from __future__ import annotations

import json

import pytest

from draconf.testbed import inventory

from .conftest import _start, _stop
from .test_cli import draconf

FLEET = inventory.from_dict({
    "models": {
        "b200": {"productName": "NVIDIA B200", "architecture": "Blackwell", "cudaComputeCapability": "10.0.0",
                 "memory": "183359Mi"},
        "h100-80gb-hbm3": {"productName": "NVIDIA H100 80GB HBM3", "architecture": "Hopper",
                           "cudaComputeCapability": "9.0.0", "memory": "81559Mi"},
    },
    "nodes": [{"name": "gpu-b200-0", "model": "b200", "gpus": 2, "kind": "kwok"},
              {"name": "gpu-h100-0", "model": "h100-80gb-hbm3", "gpus": 4, "kind": "kwok"}],
}, source="B200 and H100 KWOK fleet")


@pytest.fixture(scope="module")
def b200_bed():
    bed = _start("selftest-b200", [], FLEET)
    yield bed
    _stop(bed)


def test_the_fallback_is_observed_where_the_first_alternative_is_published(b200_bed, tmp_path):
    result = draconf("run", "--testbed-name", b200_bed.name, "--reports", str(tmp_path), "-k", "prioritized-list",
                     timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    rows = [r for r in json.loads((tmp_path / "summary.json").read_text())["tests"]
            if r["workload"] == "prioritized-list"]
    assert [r["outcome"] for r in rows] == ["passed"] * 3, rows
    junit = (tmp_path / "junit.xml").read_text()
    # The scheduler fell back to the H100s, the model published most, with B200s free.
    assert "firstAvailable fell back to gpu/h100" in junit and "gpu.nvidia.com/gpu-h100-0/" in junit, junit[-3000:]
    # The first alternative as the suite applied it: a model no device has.
    assert "productName == 'draconf absent model'" in junit.replace("&#39;", "'"), junit[-3000:]
