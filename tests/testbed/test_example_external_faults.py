"""Faults made from outside dra-example-driver, on one example bed, each caught and mended.

The fault matrix's rows for ``DRACONF_MATRIX_DRIVER=example`` start a bed per fault (about
5 minutes for the four).  This module is the CI lane's subset: one example bed, each fault
made the way an admin breaks a cluster (``draconf.testbed.external_faults``), ``draconf run
--profile example`` on it, judged by the matrix's own ``judge`` against
``EXPECTED_EXAMPLE`` (the catching checks fail with the expected diagnosis, nothing unrelated
fails, the checks the fault leaves nothing to judge give no verdict, no namespace left), then
the fault undone and the bed required healthy again before the next.

The preflight faults run the whole suite (everything else is gated, so it takes seconds); the
two that need workloads run the checks that catch them and the preflight (``-m``): quota off
the quota suite, tainted nodes the workloads and the job.  The full runs are the matrix's.
"""

from __future__ import annotations

import os

import pytest

from draconf.testbed import external_faults
from tests.matrix.faultmatrix import judge, run_suite

#: fault -> the pytest arguments its run gets (None: the whole suite).
SELECTION = {
    "missing-deviceclass": None,
    "no-resourceslices": None,
    "quota-not-enforced": ["-m", "preflight or quota"],
    "gpu-nodes-tainted": ["-m", "preflight or conformance"],
}


def test_the_bed_starts_healthy(example_driver_bed):
    assert external_faults.problems(example_driver_bed) == []


#: CI's choice (.ci/run): ``example/<fault>`` in DRACONF_MATRIX_LOCAL_ONLY leaves that row to
#: local runs, where the same fault's row on the simulated bed runs in CI and checks the same
#: thing (quota-not-enforced: the API server's admission, whatever the driver).
LOCAL_ONLY = {entry.removeprefix("example/") for entry in os.environ.get("DRACONF_MATRIX_LOCAL_ONLY", "").split(",")
              if entry.startswith("example/")}


@pytest.mark.parametrize("fault", list(SELECTION))
def test_an_external_fault_is_caught_with_the_right_diagnosis(example_driver_bed, fault, tmp_path):
    if fault in LOCAL_ONLY:
        pytest.skip(f"DRACONF_MATRIX_LOCAL_ONLY (CI): example/{fault} runs locally; the simulated bed's "
                    f"{fault} row runs here")
    bed = example_driver_bed
    external_faults.apply(bed, fault)
    try:
        broken = external_faults.problems(bed)
        assert broken, f"{fault} left the bed healthy: the fault was not made"
        result = run_suite(bed, fault, tmp_path / "reports", SELECTION[fault], driver="example")
    finally:
        external_faults.restore(bed, fault)
    verdict = judge(result)
    assert verdict.ok, f"{fault}: " + "; ".join(verdict.problems) + "\n" + result.output_tail
    if SELECTION[fault] is None:
        # Preflight faults: every gated check names the failed preflight's diagnosis.
        gated = [r for r in result.rows if r["outcome"] == "no-verdict"]
        assert len(gated) >= 20, [r["id"] for r in gated]
        assert all(fault in (r.get("message") or "") for r in gated), \
            [r["message"] for r in gated if fault not in (r.get("message") or "")]
    assert external_faults.problems(bed) == []
