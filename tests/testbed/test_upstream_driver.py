"""NVIDIA's own DRA driver release on the bed (``draconf testbed up --driver nvidia-v0.4.0``):
its kubelet plugin built from the release's source archive, installed from its own chart over
NVIDIA's mock NVML on the real nodes; the whole suite run against it unchanged (``draconf run``,
the ``nvidia`` profile) must pass every check the release and the mock NVML can have, and skip
the rest saying which (the release's version, read off the cluster, and the mock's limits).
Then, on the same bed, faults made
from outside NVIDIA's code (``draconf.testbed.external_faults``), each caught with the fault
matrix's expectation (``EXPECTED_UPSTREAM``) and mended before the next; the matrix's own rows
for them (``DRACONF_MATRIX_DRIVER=nvidia-v0.4.0``) start a bed per fault.

Needs the archives (../shared/upstream, or $DRACONF_UPSTREAM_SOURCES); builds are cached by
archive hash (cold: about 12 minutes on 2 cores; warm: seconds)."""

from __future__ import annotations

import json

import pytest

from draconf import namespaces, waits
from draconf.kube import connect
from draconf.testbed import external_faults, upstream_chart
from draconf.testbed.nvidia import ONE_NODE
from draconf.testbed.upstream_nvidia import sources_dir
from tests.matrix.faultmatrix import UPSTREAM_RELEASE, judge, run_suite

from . import kubectl
from .conftest import _start, _stop
from .test_cli import draconf

RELEASE = UPSTREAM_RELEASE
#: Where the bed installs the release (its chart's own default, as its docs install it).
RELEASE_NAMESPACE = "dra-driver-nvidia-gpu"
ARCHIVE = "dra-driver-nvidia-gpu-v0.4.0.tar.xz"


@pytest.fixture(scope="module")
def upstream_bed():
    if not (sources_dir() / ARCHIVE).is_file():
        pytest.skip(f"NVIDIA's release archive {ARCHIVE} is not in {sources_dir()} (set $DRACONF_UPSTREAM_SOURCES)")
    bed = _start("upstream-v040", [], driver=RELEASE)
    yield bed
    _stop(bed)


#: Why a check may not pass on this bed, by workload, as the skip a user reads must say it: what
#: the cluster is (no GPU Operator: no GPUCluster), the release's version as the suite read it off
#: the plugin's DaemonSet (the chart's app.kubernetes.io/version label), and the mock NVML's
#: limits (upstream_nvidia.MOCK_NVML_LIMITS: no MIG; no Xid reaches the release's health monitor).
RELEASE_LABEL = f"app.kubernetes.io/version={RELEASE.removeprefix('nvidia-v')}"
EXPLAINED = {("preflight", "gpu-cluster"): ("not managed by GPU Operator",),
             ("device-taints", None): (RELEASE_LABEL, "NVMLDeviceHealthCheck, which its kubelet plugin runs with",
                                       "mock NVML", "no Xid reaches it"),
             ("mig", None): (RELEASE_LABEL, "DynamicMIG", "mock NVML", "no MIG")}


def unexplained(rows) -> list[dict]:
    """The rows that neither passed nor skipped for a reason :data:`EXPLAINED` names."""
    def explained(row) -> bool:
        why = EXPLAINED.get((row["workload"], row["check"])) or EXPLAINED.get((row["workload"], None))
        return row["outcome"] == "skipped" and why is not None and all(w in (row["message"] or "") for w in why)
    return [r for r in rows if r["outcome"] != "passed" and not explained(r)]


def test_the_suite_passes_unchanged_against_nvidias_released_driver(upstream_bed, tmp_path):
    """The whole suite, as a user runs it: every check passes, but those whose skip names the
    release's version or the mock NVML's limit (a bed problem would fail, or skip unexplained)."""
    result = draconf("run", "--testbed-name", upstream_bed.name, "--reports", str(tmp_path), timeout=1500)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    walkthrough = [r for r in rows if r["workload"] in ("single-gpu", "model-selected", "memory-selected",
                                                         "two-gpu", "shared-claim", "deployment")]
    assert len(walkthrough) == 18 and all(r["outcome"] == "passed" for r in walkthrough), walkthrough
    assert unexplained(rows) == [], unexplained(rows)
    # Every feature the release has over the mock passed, each with its own checks.
    passed = {r["workload"] for r in rows if r["outcome"] == "passed"}
    assert {"job", "gpu-sharing", "extended-resource", "prioritized-list", "admin-access", "device-taint-rule",
            "quota", "failure-modes", "audit"} <= passed, sorted(passed)


#: fault -> the pytest arguments its run adds to its expectation's ``run_args`` (None: nothing;
#: a preflight fault then runs the whole suite, which the preflight gate makes quick).
#: The other external faults (no-resourceslices, quota, tainted nodes) are the matrix's.
SELECTION = {"missing-deviceclass": None, "plugin-crashloop": None, "gpu-fallen-off-bus": None, "cdi-spec-dirs-wrong": None,
             "cdi-spec-removed": None, "cdi-spec-edited": None,
             # the sharing checks alone (the expectation's -k runs every feature workload)
             "sharing-gates-off": ["-k", "test_preflight or TestGpuSharing or invalid_sharing"]}


@pytest.mark.parametrize("fault", list(SELECTION))
def test_a_fault_from_outside_nvidias_driver_is_caught_with_the_right_diagnosis(upstream_bed, fault, tmp_path):
    bed = upstream_bed
    assert external_faults.problems(bed) == []
    if fault == "gpu-fallen-off-bus":
        # The GPU the expectation names: the last of one-gpu-bad's node.
        assert external_faults.fallen_gpu(bed) == (ONE_NODE, 1)
    external_faults.apply(bed, fault)
    try:
        assert external_faults.problems(bed), f"{fault} left the bed healthy: the fault was not made"
        result = run_suite(bed, fault, tmp_path / "reports", SELECTION[fault], driver=RELEASE)
    finally:
        external_faults.restore(bed, fault)
    verdict = judge(result)
    assert verdict.ok, f"{fault}: " + "; ".join(verdict.problems) + "\n" + result.output_tail
    if fault == "plugin-crashloop":
        # The cause, quoted from the crashed plugin's previous run: what the operator must fix.
        (row,) = [r for r in result.rows if r["id"].endswith("test_preflight[kubelet-plugin]")]
        assert "last said: " in row["message"] and "unrecognized feature gate: MPSSuport" in row["message"], row
    if fault == "sharing-gates-off":
        # The release's real refusal was never needed: the suite read the gates off its pods,
        # and the invalid configs were still refused by the driver itself.
        (row,) = [r for r in result.rows if r["id"].endswith("TestGpuSharing::test_allocation[gpu-sharing]")]
        assert "MPSSupport (set false)" in row["message"] and "TimeSlicingSettings (set false)" in row["message"], row
        assert [r["outcome"] for r in result.rows if r["check"] == "invalid-config"] == ["passed"], result.rows
    if fault == "gpu-fallen-off-bus":
        # Exactly that GPU: every other one the sweep reached passed.
        sweep = [r for r in result.rows if r["workload"] == "every-node"]
        assert [r["check"] for r in sweep if r["outcome"] != "passed"] == [f"{ONE_NODE}/gpu-1"], sweep
        assert len(sweep) >= 8
    assert external_faults.problems(bed) == []


def test_a_release_installed_under_another_name_and_namespace_is_found_where_it_runs(upstream_bed, tmp_path):
    """The release uninstalled and installed again as ``gpu-dra`` in namespace ``accelerators``,
    as a platform team may name it: preflight finds its plugin by its pods' label wherever they
    run, and the sharing checks find its MPS control daemons there (they used to look only in
    the profile's namespaces: a false red).  Last in the module: the bed stays moved."""
    bed = upstream_bed
    api = connect(bed.kubeconfig)
    _, installed = upstream_chart.render_on_bed(bed, api)
    # `helm uninstall`: the release's objects (its CRDs stay, as helm keeps them), its namespace.
    kubectl.delete(api, [d for d in installed if d["kind"] != "CustomResourceDefinition"])
    namespaces.delete(api, RELEASE_NAMESPACE, wait=120)
    moved, docs = upstream_chart.render_on_bed(bed, api, release_name="gpu-dra", namespace="accelerators")
    upstream_chart.install(api, moved, docs)
    gpu_nodes = set(external_faults.gpu_nodes(bed))
    driver = external_faults.driver_objects(RELEASE).driver
    waits.wait_until("the moved release to publish every GPU node's devices",
                     lambda: external_faults.published_nodes(api, driver), lambda nodes: nodes >= gpu_nodes,
                     timeout=120, interval=1, describe=lambda nodes: f"published on {sorted(nodes)}")
    result = draconf("run", "--testbed-name", bed.name, "--reports", str(tmp_path),
                     "-k", "test_preflight or TestGpuSharing", timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    sharing = [r for r in rows if r["workload"] == "gpu-sharing"]
    assert sharing and all(r["outcome"] == "passed" for r in sharing), sharing
    plugin = [r for r in rows if r["id"].endswith("test_preflight[kubelet-plugin]")]
    assert [r["outcome"] for r in plugin] == ["passed"], plugin
    # The sharing check's evidence names the MPS control daemon it found, in the new namespace.
    assert "accelerators/mps-control-daemon-" in (tmp_path / "junit.xml").read_text()
