"""Print which bed fault (or bed test) fails each conformance check, and the known gaps.

    python benchmarks/fault_coverage.py

No bed is started: the table is read from the suites' collected checks and the fault matrix's
expectations (``tests/matrix/coverage.py``); the matrix run itself proves each row
(``python -m pytest tests/matrix``).
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.matrix.coverage import collected_checks, table  # noqa: E402


def main() -> int:
    with contextlib.redirect_stdout(io.StringIO()):  # pytest's collection report
        rows = table(collected_checks())
    print(tabulate([(r.check, r.failed_by) for r in rows], headers=["check", "failed on a bed by"],
                   tablefmt="github", maxcolwidths=[None, 100]))
    gaps = [r for r in rows if r.is_gap]
    print(f"\n{len(rows) - len(gaps)} of {len(rows)} checks are failed by a bed fault or bed test; "
          f"{len(gaps)} known gap(s)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
