"""The standing proof that the suite catches broken clusters.

For each test bed fault: start a bed with it, run the whole conformance suite (``draconf run``)
against it, and require that the run fails, that the checks which should catch the fault fail
with the expected diagnosis, that nothing unrelated fails beyond the fault's explicit list,
that a definitive signal gives a verdict quickly, and that nothing the suite created is left.
A healthy bed must pass three runs in a row with no failure and no leftovers, with ``-n 4``
and serial alternating.

Which faults run is set by DRACONF_MATRIX: ``full`` (the default, and what CI runs: every
fault), ``subset`` (one fault per kind of check, for a quicker local run) or a
comma-separated list of fault names.  DRACONF_MATRIX_HEALTHY sets how many healthy runs
follow (default 3; CI runs 1, beside the suite's own run on the default bed), and
DRACONF_MATRIX_NODE_KIND=kwok runs the matrix on KWOK nodes instead of the default fleet's
real ones; ``mixed`` (what CI runs) keeps real nodes for the healthy rows and the faults that
act on the node side (runtime or kubelet plugin) and runs the control-plane faults on KWOK
nodes.  DRACONF_MATRIX_DRIVER=example runs the faults that can be made from outside a
driver (``draconf.testbed.external_faults``) against beds running dra-example-driver instead:
each row starts a healthy example bed, breaks it as an admin would, and runs the suite with
``--profile example``; DRACONF_MATRIX_DRIVER=nvidia-v0.4.0 does the same on beds running
NVIDIA's own release over its mock NVML, and adds a GPU falling off the bus (needs the release
archives, docs/testbed.md).  DRACONF_MATRIX_LOCAL_ONLY (a comma-separated list) skips those rows,
naming the variable: CI's time budget leaves rows a stricter row covers to local runs.
"""

from __future__ import annotations

import os

import pytest

from tests.matrix.faultmatrix import (EXPECTATIONS, REAL_NODE_FAULTS, UPSTREAM_RELEASE, healthy_run_args, judge,
                                      matrix_driver, node_kind, run_against)
from draconf.testbed.external_faults import EXTERNAL, faults_for
from draconf.testbed.faults import FAULTS

#: One fault per detecting check family: preflight, allocation, injection, cleanup, quota.
SUBSET = ["missing-deviceclass", "gpu-nodes-tainted", "cdi-wrong-device", "claims-not-released",
          "quota-not-enforced"]


#: The driver -> the faults its beds can be given.
FAULTS_OF = {"nvidia": list(FAULTS), "example": list(EXTERNAL),
             UPSTREAM_RELEASE: list(faults_for(UPSTREAM_RELEASE))}


def selected_faults() -> list[str]:
    available = FAULTS_OF[matrix_driver()]
    choice = os.environ.get("DRACONF_MATRIX", "full")
    if choice == "full":
        return available
    if choice == "subset":
        return [f for f in SUBSET if f in available]
    return [f.strip() for f in choice.split(",") if f.strip()]


@pytest.mark.parametrize("driver", sorted(FAULTS_OF))
def test_every_fault_has_an_expectation(driver):
    assert set(EXPECTATIONS[driver]) == set(FAULTS_OF[driver])


@pytest.mark.parametrize("fault", selected_faults())
def test_fault_is_detected_with_the_right_diagnosis(fault, tmp_path):
    if fault in REAL_NODE_FAULTS and node_kind(fault) != "real":
        pytest.skip(f"{fault} acts in the real nodes' runtime; KWOK nodes have none")
    if fault in os.environ.get("DRACONF_MATRIX_LOCAL_ONLY", "").split(","):
        pytest.skip(f"DRACONF_MATRIX_LOCAL_ONLY (CI): {fault}'s row runs in the full matrix "
                    "(docs/fault-matrix.md), a stricter row covers it here")
    result = run_against(fault, tmp_path / "reports")
    verdict = judge(result)
    assert verdict.ok, f"{fault}: " + "; ".join(verdict.problems)


@pytest.mark.parametrize("attempt", range(1, int(os.environ.get("DRACONF_MATRIX_HEALTHY", "3")) + 1))
def test_healthy_bed_passes_with_no_failure_and_no_leftovers(attempt, tmp_path):
    args = healthy_run_args(attempt)
    result = run_against(None, tmp_path / "reports", bed_name="matrix-healthy", extra_args=args)
    verdict = judge(result)
    assert verdict.ok, f"healthy run {attempt} ({' '.join(args) or 'serial'}): " + "; ".join(verdict.problems)
