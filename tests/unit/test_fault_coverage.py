"""Every conformance check is failed by some bed fault or bed test, or is a listed gap with its
reason (tests/matrix/coverage.py; ``python benchmarks/fault_coverage.py`` prints the table)."""

import contextlib
import io

import pytest

from tests.matrix import coverage


@pytest.fixture(scope="module")
def checks():
    with contextlib.redirect_stdout(io.StringIO()):
        return coverage.collected_checks()


def test_the_suites_are_collected(checks):
    assert "single-gpu/allocation" in checks and "preflight/kubelet-plugin" in checks and len(checks) > 40


def test_every_check_is_failed_on_some_bed_or_is_a_listed_gap(checks):
    unexplained = [row.check for row in coverage.table(checks) if row.failed_by == "GAP: nothing fails it"]
    assert not unexplained, f"add a fault (or a bed test, or a KNOWN_GAPS entry saying why) for {unexplained}"


def test_a_listed_gap_is_still_a_gap(checks):
    closed = [gap for gap in coverage.KNOWN_GAPS if gap in checks and not coverage.explain(gap).startswith("GAP")]
    assert not closed, f"{closed} are failed by a fault now: remove them from KNOWN_GAPS"
    stale = [gap for gap in coverage.KNOWN_GAPS if gap not in checks]
    assert not stale, f"{stale} are not checks of the suites"


def test_same_assertion_points_at_a_check_a_fault_fails():
    for pattern, check in coverage.SAME_ASSERTION.items():
        assert coverage.catching_faults(check), f"{pattern} -> {check}, which no fault fails"


@pytest.mark.parametrize("workload", ["model-selected/h100-80gb-hbm3", "memory-selected/81559Mi"])
@pytest.mark.parametrize("check", ["allocation", "cdi-injection", "cleanup"])
def test_the_all_models_classes_are_failed_like_their_workload(workload, check):
    """--all-models adds checks like ``model-selected/h200/allocation`` (not collected here)."""
    assert not coverage.explain(f"{workload}/{check}").startswith("GAP")
