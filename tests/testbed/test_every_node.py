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
    # Each node's row says how many GPUs it proved: the picture draws a square for each.
    published = {}
    for s in api.resource.list_resource_slice().items:
        for d in s.spec.devices or []:
            if ((d.attributes or {}).get("type") or {}).string == "gpu":
                published[s.spec.node_name] = published.get(s.spec.node_name, 0) + 1
    assert {n: r.get("gpus") for n, r in rows.items()} == published, rows


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


def test_gpus_others_hold_are_busy_never_taken(healthy_bed, api, tmp_path):
    """--every-gpu while both A100s are held by a pod of another namespace: the sweep lists
    them busy, naming the holder, leaves them alone and proves every other GPU, one verdict per
    GPU, at most --sweep-max-gpus at a time; busy is not a failure, and, those GPUs unproven,
    not a green run either."""
    from draconf import manifests, namespaces
    from draconf.builder import Workload
    from draconf.profile import builtin
    from draconf.workload import DeployedWorkload
    from .test_allocation_branches import claim_doc, pod_doc
    ns = namespaces.create(api, namespaces.RunId("selftest"), "gpu-tenant")
    try:
        a100 = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100')"
        held = [claim_doc("both-a100s", count=2, selectors=[a100]), pod_doc("tenant", "both-a100s")]
        manifests.create(api, ns, held)
        DeployedWorkload(api, ns, Workload("tenant", [], 1), builtin("nvidia"), held).wait_running(timeout=60)
        result = draconf("run", "--testbed-name", healthy_bed.name, "--every-gpu", "--sweep-max-gpus", "4",
                         "-m", "every_node", "--reports", str(tmp_path), timeout=600)
    finally:
        namespaces.delete(api, ns, wait=60)
    out = result.stdout + result.stderr
    assert result.returncode == 10, out[-3000:]  # nothing failed, two GPUs unproven: INCONCLUSIVE
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {r["check"]: r for r in summary["tests"]}
    busy = {k: r for k, r in rows.items() if k.startswith("gpu-a100-0/")}
    assert len(busy) == 2 and all(r["outcome"] == "no-verdict" and r["message"].startswith("busy, not tested")
                                  and ns in r["message"] for r in busy.values()), busy
    assert summary["verdict"]["reasons"] == {"busy, not tested": 2}, summary["verdict"]
    assert all(r["outcome"] == "passed" for k, r in rows.items() if k not in busy), rows
    # One verdict per whole GPU (MIG devices are no targets), a bounded number in flight.
    whole = sorted(f"{s.spec.node_name}/{d.name}" for s in api.resource.list_resource_slice().items
                   for d in s.spec.devices if s.spec.node_name and d.attributes["type"].string == "gpu")
    assert sorted(rows) == whole and len(whole) >= 8, (sorted(rows), whole)
    assert "at most 4 at a time" in out, out[-3000:]


def test_a_gpu_node_that_publishes_nothing_is_named_not_left_out(healthy_bed, api, tmp_path):
    """One GPU node's kubelet plugin taken off (its nvidia.com/gpu.present label turned false, as
    in test_node_gating.py): the node withdraws its slices, yet NFD's label still makes it a GPU
    node. The sweep gives it a row of its own, no verdict "not published", and the picture and
    the terminal name it; the other nodes are proven."""
    from draconf.devices import PublishedDevices
    from draconf import waits
    from .test_node_gating import DRIVER, plugin_taken_off
    nodes = gpu_nodes(api)
    silent = nodes[0]
    with plugin_taken_off(api, silent):
        waits.wait_until(f"{silent} to withdraw its slices",
                         lambda: PublishedDevices.read(api, DRIVER).devices_per_node().get(silent, 0),
                         lambda count: count == 0, timeout=120)
        result, rows = _sweep(healthy_bed, tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 10, out[-3000:]  # nothing failed, one node unproven: never green
    row = rows[silent]
    assert row["outcome"] == "no-verdict" and row["message"].startswith("not published") and row["gpus"] == 0, row
    assert all(rows[n]["outcome"] == "passed" for n in nodes[1:]), rows
    assert f"{silent}  not published" in out, out[-3000:]
    assert (tmp_path / "fleet.png").is_file()
