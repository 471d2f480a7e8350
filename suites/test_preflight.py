"""Preflight: is the cluster ready for DRA GPU workloads at all? Read-only.

One test per check of :mod:`draconf.preflight` (server version, resource.k8s.io/v1 API,
DeviceClasses, ResourceSlices per GPU node, minimum attribute set, kubelet plugin health,
GPUCluster state, ClusterPolicy conflict). Run them alone with ``pytest -m preflight``.

Outcomes:

* a blocking check the cluster fails -> **failed**, with the check's diagnosis code and
  evidence (``[code] summary``);
* a check that could not reach a verdict -> **broken**: RBAC forbids a read
  (``permission-denied``, the message names the missing permission), the API server kept
  answering 429 or 5xx after the client's retries (``api-throttled``), or another answer
  (which the diagnosis reads);
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
from draconf.errors import EXIT_TARGET_UNUSABLE, CheckFailed
from draconf.reporting import record_diagnosis

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
        # Read from the server's answer: forbidden, not slow (permission-denied, the row names
        # the permission); a 429 or 5xx that stood after the retries (api-throttled), not a
        # timeout.  The row's summary is the reason every channel gives.
        if result.no_verdict_code:
            record_diagnosis(request.node, result.no_verdict_code, result.evidence, reason=result.summary)
        # The answers go with the exception: a diagnosis of any other answer reads them.
        raise checks.Inconclusive(f"{check_name} could not be evaluated: {result.summary}",
                                  result.evidence, answers=result.answers)
    if not result.applicable:
        pytest.skip(result.summary)
    if result.ok:
        return
    record_diagnosis(request.node, result.diagnosis, result.evidence, reason=result.summary)
    # The verdict is the row itself: one line, no test source or traceback around it.
    raise CheckFailed(result.summary, code=result.diagnosis)
