"""Preflight: is the cluster ready for DRA GPU workloads at all? Read-only.

One test per check of :mod:`draconf.preflight` (server version, resource.k8s.io/v1 API,
DeviceClasses, ResourceSlices per GPU node, minimum attribute set, kubelet plugin health,
GPUCluster state, ClusterPolicy conflict). Run them alone with ``pytest -m preflight``.

Outcomes:

* a blocking check the cluster fails -> **failed**, with the check's diagnosis code and
  evidence (``[code] summary``);
* a check that could not reach a verdict (e.g. RBAC forbids a read) -> **broken**: the message
  names the missing permission;
* a check with nothing to look at (no GPUCluster CRD on a standalone driver install) is
  **skipped** with the reason;
* info checks (optional DeviceClasses) are not tests: they cannot fail a run, so a test of them
  could only pass; their PASS/WARN is in the preflight table and summary.json's ``preflight``;
* an unreachable API server ends the run with one message and draconf's exit code for a
  target that cannot be used (12, :data:`draconf.errors.EXIT_TARGET_UNUSABLE`), not pytest's
  3 (internal error).
"""

from __future__ import annotations

import pytest

from draconf import preflight as checks
from draconf.errors import EXIT_TARGET_UNUSABLE
from draconf.reporting import diagnosis_prefix, record_diagnosis

pytestmark = pytest.mark.preflight


@pytest.mark.parametrize("check_name", [
    pytest.param(name, id=name, marks=pytest.mark.draconf(workload="preflight", check=name))
    for name in checks.CHECKS if checks.SEVERITY[name] == checks.BLOCKING])
def test_preflight(request, preflight, check_name):
    # The run's one reading (the gate judges the same): not the cluster read again per row.
    result = next(r for r in preflight if r.name == check_name)
    if result.unreachable:
        pytest.exit(f"draconf: {result.summary}", returncode=EXIT_TARGET_UNUSABLE)
    if result.inconclusive:
        if "403 Forbidden" in result.evidence:
            # Forbidden, not slow: the row says which permission (permission-denied).
            record_diagnosis(request.node, "permission-denied", result.evidence)
        raise checks.Inconclusive(f"{check_name} could not be evaluated: {result.summary}",
                                     result.evidence)
    if not result.applicable:
        pytest.skip(result.summary)
    if result.ok:
        return
    record_diagnosis(request.node, result.diagnosis, result.evidence)
    # The verdict is the row itself: one line, no test source or traceback around it.
    pytest.fail(diagnosis_prefix(result.diagnosis) + result.summary, pytrace=False)
