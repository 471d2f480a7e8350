"""The conformance suite against dra-example-driver, a driver this project did not write.

``draconf run --profile example`` on a bed whose real nodes run the driver from its own chart
must pass: every check that makes sense for it, the others skipped by capability with the
reason.  And the injection check must judge by what the driver really injected: the device
names it reads from a container's environment are the ones the driver's own CDI spec for that
claim sets, on the node, next to the claim's allocation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from draconf import namespaces
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.kube import connect
from draconf.pods import exec_in_container
from draconf.profile import builtin, for_target
from draconf.workload import DeployedWorkload, Workload
from draconf.scenarios import walkthrough

REPO = Path(__file__).resolve().parents[2]
RUN = namespaces.RunId("selftest")
PROFILE = for_target(builtin("example"), "testbed")
#: Checks that do not apply to the example driver, and the capability each one needs (or why
#: there is nothing to check).
NOT_APPLICABLE = {("preflight", "gpu-cluster"): "capabilities.gpuCluster",
                  ("preflight", "policy-conflict"): "capabilities.clusterPolicy",
                  ("audit", "gpu-quota"): "capabilities.extendedResource",
                  ("quota", "extended-resource-trap"): "capabilities.extendedResource",
                  # the feature workloads (suites/test_features.py): no extended resource to ask for
                  **{("extended-resource", check): "capabilities.extendedResource"
                     for check in ("allocation", "cdi-injection", "cleanup", "quota")},
                  # gpu-sharing (suites/test_features.py): the example driver takes no GpuConfig
                  **{("gpu-sharing", check): "capabilities.gpuSharing"
                     for check in ("allocation", "cdi-injection", "sharing", "cleanup", "invalid-config")},
                  # the device-taints workload: the bed's example driver taints no device
                  **{("device-taints", check): "no tainted device published"
                     for check in ("allocation", "cdi-injection", "cleanup", "untolerated")},
                  # the MIG checks (suites/test_mig.py): MIG devices are the NVIDIA driver's
                  **{("mig", check): "has no mig.nvidia.com DeviceClass"
                     for check in ("by-profile", "same-parent", "exclusive")}}


@pytest.fixture(scope="module")
def api(example_driver_bed):
    return connect(example_driver_bed.kubeconfig)


def test_the_suite_passes_on_the_example_driver(example_driver_bed, tmp_path):
    reports = tmp_path / "reports"
    result = subprocess.run(
        [sys.executable, "-m", "draconf.cli", "run", "--profile", "example", "--testbed-name",
         example_driver_bed.name, "--reports", str(reports)],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    summary = json.loads((reports / "summary.json").read_text())
    rows = {(t["workload"], t["check"]): t for t in summary["tests"]}
    out = result.stdout[-3000:]
    assert result.returncode == 0, out
    bad = {k: (t["outcome"], t.get("message")) for k, t in rows.items()
           if t["outcome"] not in ("passed", "skipped")}
    assert not bad, bad
    skipped = {k: t.get("message") or "" for k, t in rows.items() if t["outcome"] == "skipped"}
    assert set(skipped) == set(NOT_APPLICABLE), skipped
    for key, capability in NOT_APPLICABLE.items():
        assert capability in skipped[key], (key, skipped[key])
    # Every workload got all three verdicts, on this driver.
    for workload in walkthrough.WORKLOADS:
        for check in ("allocation", "cdi-injection", "cleanup"):
            assert rows[(workload, check)]["outcome"] == "passed", (workload, check)
    assert rows[("job", "completion")]["outcome"] == "passed"


def _cdi_injected(node_dir: Path, claim_uid: str) -> list[str]:
    """The device names the driver's CDI spec for the claim injects (GPU_DEVICE_<n>=...)."""
    (path,) = (node_dir / "cdi").glob(f"*{claim_uid}*")
    spec = yaml.safe_load(path.read_text())
    assert spec["kind"] == "k8s.gpu.example.com/gpu", spec
    env = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
    return PROFILE.injection.parse("\n".join(env))


def test_the_injection_check_reads_what_the_drivers_cdi_spec_injected(example_driver_bed, api):
    ns = namespaces.create(api, RUN, "example-cdi")
    try:
        start = DeployedWorkload.start(api, ns, Workload("two-gpu", ["05-two-gpus.yaml"], 1), PROFILE,
                                       RUN.labels)
        assert not start.never_started, start.failure
        deployed = start.deployed
        published = PublishedDevices.read(api, PROFILE.driver)
        evidence = deployed.check_injection(published)
        (pod,) = deployed.pods()
        (claim_name,) = pod.generated_claim_names()
        claim = Claim.read(api, ns, claim_name)
        allocated = sorted(r.device for r in claim.results)
        node_dir = Path(example_driver_bed.state()["real_nodes"][pod.node]["dir"])
        injected = sorted(_cdi_injected(node_dir, claim.uid))
        # The driver's spec, the allocation and what the container shows agree...
        assert injected == allocated and len(allocated) == 2, (injected, allocated)
        env = exec_in_container(api, ns, pod.name, "trainer", ["env"]).stdout
        assert sorted(PROFILE.injection.parse(env)) == injected
        # ...and the check's verdict was made on exactly those names.
        assert evidence == [e for e in evidence if f"expected {injected}; sees {injected}" in e], evidence
    finally:
        namespaces.delete(api, ns, wait=60)
