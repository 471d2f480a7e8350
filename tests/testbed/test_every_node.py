"""The every-node sweep (suites/test_every_node.py) on the shared healthy bed: one verdict per
GPU node, and a node an admin cordoned named as such while the others are proven."""

from __future__ import annotations

import json

from .test_cli import draconf


def _sweep(bed, reports):
    result = draconf("run", "--testbed-name", bed.name, "--every-node", "-m", "every_node",
                     "--reports", str(reports), timeout=600)
    rows = {r["check"]: r for r in json.loads((reports / "summary.json").read_text())["tests"]}
    return result, rows


def gpu_nodes(api) -> list[str]:
    return sorted({s.spec.node_name for s in api.resource.list_resource_slice().items if s.spec.node_name})


def test_every_gpu_node_is_one_verdict(healthy_bed, api, tmp_path):
    result, rows = _sweep(healthy_bed, tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert sorted(rows) == gpu_nodes(api) and len(rows) >= 3
    assert all(r["workload"] == "every-node" and r["outcome"] == "passed" for r in rows.values()), rows


def test_a_cordoned_node_is_named_and_the_others_are_still_proven(healthy_bed, api, tmp_path):
    nodes = gpu_nodes(api)
    cordoned = nodes[0]
    api.core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    try:
        result, rows = _sweep(healthy_bed, tmp_path)
    finally:
        api.core.patch_node(cordoned, {"spec": {"unschedulable": None}})
    out = result.stdout + result.stderr
    assert result.returncode == 10, out[-3000:]  # nothing failed, one node unproven: never green
    assert rows[cordoned]["outcome"] == "no-verdict" and "is cordoned" in rows[cordoned]["message"], rows[cordoned]
    assert all(rows[n]["outcome"] == "passed" for n in nodes[1:]), rows
    assert "Traceback" not in out
