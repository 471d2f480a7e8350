"""Which bed fault fails each conformance check: the proof that no check is one that cannot fail.

Every check the suites collect (``workload/check``, from the ``draconf`` marker) must be failed
by something broken on a bed:

- a **fault-matrix row** (``faultmatrix.EXPECTED`` / ``EXPECTED_EXAMPLE``) whose ``catch`` or
  ``flaky`` names it;
- or a **bed test** that breaks the shared healthy bed from outside and requires that check's
  failure (``BED_TESTS``: hostile clusters, cheaper than a matrix row);
- or it is the **same assertion** as a check a row fails (``SAME_ASSERTION``: every workload's
  cleanup is ``DeployedWorkload.check_cleanup``; the matrix fails it on single-gpu, where a
  broken node leaves later workloads unable to start at all);
- or it is a **known gap** (``KNOWN_GAPS``), with the reason no bed can fail it yet.

``python benchmarks/fault_coverage.py`` prints the table; ``tests/unit/test_fault_coverage.py``
holds the lists to the suites, so a new check without a fault, or a gap a new fault closed,
fails there.

>>> catching_faults("failure-modes/selector-unmatched")
['scheduler-without-dra']
>>> explain("preflight/permissions")
'bed test: tests/testbed/test_rbac.py (a role without create on pods and resourceclaims)'
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from tests.matrix.faultmatrix import EXPECTED, EXPECTED_EXAMPLE

REPO = Path(__file__).resolve().parents[2]

#: Checks a bed test fails by breaking the healthy bed from outside (what it breaks).
BED_TESTS: dict[str, str] = {
    "preflight/permissions":
        "tests/testbed/test_rbac.py (a role without create on pods and resourceclaims)",
    "preflight/device-class-selectors":
        "tests/testbed/test_admission.py (the DeviceClass's selector patched to select nothing)",
    "audit/gpu-quota":
        "tests/testbed/test_quota_audit.py (a namespace capped only by requests.nvidia.com/gpu)",
    "preflight/server-version":
        "tests/testbed/test_old_control_plane.py (kube-apiserver v1.36.3 with --emulated-version=1.33)",
    # No v1.36.3 scheduler breaks these two features' own promises (DRAAdminAccess is locked on;
    # one ignoring device taints still gives the tolerating claim the device it selects): an
    # external allocator writes the wrong allocation, as in test_allocation_branches.py.
    "admin-access/allocation":
        "tests/testbed/test_feature_promises.py (an external allocator gives the adminAccess claim a GPU "
        "nobody holds)",
    "device-taints/allocation":
        "tests/testbed/test_feature_promises.py (an external allocator gives the tolerating claim an "
        "untainted GPU)",
}

#: Checks that run the same assertion (the same function, on another workload) as a check a
#: matrix row fails.
SAME_ASSERTION: dict[str, str] = {
    "*/cleanup": "single-gpu/cleanup",
    # The device-taints workload runs only where a GPU is tainted (not on the faults' fleet).
    "*/cdi-injection": "single-gpu/cdi-injection",
    # --all-models: a class's allocation is DeployedWorkload.check_allocation with that class's
    # selector, as the workload's own (the default collection, which this table is held to, has
    # no class checks; tests/unit/test_fault_coverage.py explains them all the same).
    "model-selected/*/allocation": "model-selected/allocation",
    "memory-selected/*/allocation": "memory-selected/allocation",
}

#: Checks no bed can fail yet, and why.
KNOWN_GAPS: dict[str, str] = {
}


def catching_faults(check: str) -> list[str]:
    """The matrix faults that fail ``check`` (``example:`` for dra-example-driver rows)."""
    found = [fault for fault, e in EXPECTED.items() if any(fnmatch(check, p) for p in e.catch + e.flaky)]
    found += [f"example:{fault}" for fault, e in EXPECTED_EXAMPLE.items()
              if any(fnmatch(check, p) for p in e.catch + e.flaky)]
    return found


def _lookup(table: dict[str, str], check: str) -> str | None:
    return next((value for pattern, value in table.items() if fnmatch(check, pattern)), None)


def explain(check: str) -> str:
    """What fails ``check`` on a bed, in one line ("GAP: ..." when nothing does)."""
    faults = catching_faults(check)
    if faults:
        return "fault: " + ", ".join(faults)
    if (bed_test := _lookup(BED_TESTS, check)):
        return "bed test: " + bed_test
    if (same := _lookup(SAME_ASSERTION, check)) and catching_faults(same):
        return f"same assertion as {same}: " + ", ".join(catching_faults(same))
    if (gap := _lookup(KNOWN_GAPS, check)):
        return "GAP: " + gap
    return "GAP: nothing fails it"


@dataclass(frozen=True)
class Row:
    check: str
    failed_by: str

    @property
    def is_gap(self) -> bool:
        return self.failed_by.startswith("GAP")


def collected_checks(paths=("suites",)) -> list[str]:
    """``workload/check`` of every test the suites collect (no cluster needed)."""
    import pytest

    from draconf.reporting.rows import marker_fields

    class Collect:
        def __init__(self):
            self.checks: set[str] = set()

        def pytest_collection_finish(self, session):
            for item in session.items:
                workload, check = marker_fields(item)
                if workload:
                    self.checks.add(f"{workload}/{check}")

    collector = Collect()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                        "--import-mode=importlib", *(str(REPO / p) for p in paths)],
                       plugins=[collector])
    if code not in (0, 5):
        raise RuntimeError(f"collecting {paths} failed (pytest exit {code})")
    return sorted(collector.checks)


def table(checks: list[str]) -> list[Row]:
    return [Row(check, explain(check)) for check in checks]
