"""tests/matrix/faultmatrix.judge over recorded rows: a no-verdict row is never a pass or a catch."""

import pytest

from tests.matrix.faultmatrix import EXPECTED, GPU_WORKLOADS, RunResult, judge


def row(workload, check, outcome, diagnosis=None, duration=1.0):
    return {"id": f"suites/x.py::{workload}-{check}", "workload": workload, "check": check,
            "outcome": outcome, "diagnosis": diagnosis, "duration": duration,
            "message": f"{workload}/{check} {outcome}"}


#: The reason the allocation and injection checks give a pod whose claims an admin's policy stripped.
STRIPPED_REASON = ("the pods and claims do not ask for what the suite applied (mutating admission acting on "
                   "pod creates: MutatingAdmissionPolicy 'strip-gpu-claims-from-test-namespaces'): pod gpu-pod: "
                   "spec.resourceClaims lacks gpu (template single-gpu)")


def stripped_rows(cleanup="no-verdict", reason=STRIPPED_REASON):
    rows = []
    for w in GPU_WORKLOADS:
        rows += [dict(row(w, "allocation", "failed", "spec-altered"), reason=reason),
                 dict(row(w, "cdi-injection", "failed", "spec-altered"), reason=reason),
                 row(w, "cleanup", cleanup)]
    return rows


def test_a_stripped_bed_with_no_verdict_for_cleanup_is_as_expected():
    verdict = judge(RunResult("claims-stripped", 1, 60, stripped_rows(), []))
    assert verdict.ok, verdict.problems
    assert verdict.detected_by == sorted(f"{w}/{c}" for w in GPU_WORKLOADS for c in ("allocation", "cdi-injection"))


def test_reasons_that_do_not_name_the_culprit_are_a_problem():
    verdict = judge(RunResult("claims-stripped", 1, 60, stripped_rows(reason="the pods were changed"), []))
    assert sum("does not name 'strip-gpu-claims-from-test-namespaces'" in p
               for p in verdict.problems) == 2 * len(GPU_WORKLOADS), verdict.problems


def test_a_cleanup_pass_where_nothing_was_allocated_is_a_problem():
    verdict = judge(RunResult("claims-stripped", 1, 60, stripped_rows(cleanup="passed"), []))
    assert not verdict.ok
    assert sum("passed, but this fault leaves it nothing to judge" in p for p in verdict.problems) == len(GPU_WORKLOADS)


def test_a_failure_of_a_check_the_fault_leaves_alone_blames_the_wrong_check():
    """prepare-refused: the scheduler did its part, so an allocation failure is unrelated."""
    rows = [row("single-gpu", "allocation", "failed", "allocation-invalid"),
            row("single-gpu", "cdi-injection", "failed", "plugin-unhealthy"), row("single-gpu", "cleanup", "no-verdict")]
    verdict = judge(RunResult("prepare-refused", 1, 60, rows, []))
    assert any(p.startswith("unrelated check failed") for p in verdict.problems)


def test_a_no_verdict_is_not_a_catch():
    rows = stripped_rows()
    rows[0]["outcome"] = "no-verdict"  # single-gpu/allocation
    verdict = judge(RunResult("claims-stripped", 1, 60, rows, []))
    assert "single-gpu/allocation did not fail" in verdict.problems


def test_every_gpu_node_tainted_is_one_preflight_row_naming_the_taint_and_the_rest_held():
    taint = "untolerated taint dedicated=gpu-reserved:NoSchedule"
    rows = [dict(row("preflight", "gpu-node-taints", "failed", "node-excluded"),
                 reason=f"every GPU node (3) carries a taint the suite's pods do not tolerate: gpu-a100-0: {taint}")]
    rows += [row(w, c, "no-verdict") for w in GPU_WORKLOADS for c in ("allocation", "cdi-injection", "cleanup")]
    assert judge(RunResult("gpu-nodes-tainted", 1, 20, rows, [])).ok
    rows[1] = row("single-gpu", "allocation", "failed", "node-excluded")  # tried anyway: the gate did not hold
    assert not judge(RunResult("gpu-nodes-tainted", 1, 20, rows, [])).ok


def test_an_unexpected_no_verdict_on_a_fault_bed_is_a_problem():
    rows = [row("preflight", "policy-conflict", "failed", "policy-conflict"),
            row("single-gpu", "cleanup", "no-verdict")]
    verdict = judge(RunResult("clusterpolicy-conflict", 1, 60, rows, []))
    assert any(p.startswith("unexpected no verdict") for p in verdict.problems)


def test_preflight_faults_hold_the_gated_checks_without_a_verdict():
    rows = [row("preflight", "device-class", "failed", "missing-deviceclass"),
            row("single-gpu", "allocation", "no-verdict"), row("job", "completion", "no-verdict")]
    assert judge(RunResult("missing-deviceclass", 1, 30, rows, [])).ok
    rows[1]["outcome"] = "passed"
    assert not judge(RunResult("missing-deviceclass", 1, 30, rows, [])).ok


def test_a_healthy_run_with_a_no_verdict_row_is_not_clean():
    rows = [row("single-gpu", "allocation", "passed"), row("single-gpu", "cleanup", "no-verdict")]
    verdict = judge(RunResult(None, 0, 60, rows, []))
    assert not verdict.ok
    assert "without a verdict" in verdict.problems[0]
    rows[1]["outcome"] = "passed"
    assert judge(RunResult(None, 0, 60, rows, [])).ok


def test_every_expectation_names_disjoint_catches_and_blocked_checks():
    for fault, expected in EXPECTED.items():
        assert not set(expected.catch) & set(expected.no_verdict), fault


def test_quota_off_on_the_example_driver_is_caught_without_the_extended_resource_check():
    """dra-example-driver maps no extended resource: its trap check is skipped, not a catch."""
    rows = [row("quota", "deviceclass-quota", "failed", "quota-not-enforced"),
            row("quota", "claim-count", "failed", "quota-not-enforced"),
            row("quota", "generated-claim", "failed", "quota-not-enforced"),
            row("quota", "extended-resource-trap", "skipped")]
    assert judge(RunResult("quota-not-enforced", 1, 60, rows, [], driver="example")).ok
    # the NVIDIA bed maps nvidia.com/gpu: there the same rows miss a catch
    nvidia = judge(RunResult("quota-not-enforced", 1, 60, rows, []))
    assert "quota/extended-resource-trap did not fail" in nvidia.problems


def test_every_example_fault_is_one_made_from_outside_the_driver():
    from draconf.testbed.external_faults import EXTERNAL
    from tests.matrix.faultmatrix import EXPECTED_EXAMPLE
    assert set(EXPECTED_EXAMPLE) == set(EXTERNAL) <= set(EXPECTED)


def test_the_matrix_driver_is_named_or_refused(monkeypatch):
    from tests.matrix.faultmatrix import matrix_driver
    monkeypatch.delenv("DRACONF_MATRIX_DRIVER", raising=False)
    assert matrix_driver() == "nvidia"
    monkeypatch.setenv("DRACONF_MATRIX_DRIVER", "example")
    assert matrix_driver() == "example"
    monkeypatch.setenv("DRACONF_MATRIX_DRIVER", "amd")
    with pytest.raises(ValueError, match="must be one of nvidia, example"):
        matrix_driver()
