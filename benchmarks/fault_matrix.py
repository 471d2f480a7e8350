"""Print the fault-detection matrix: fault -> detected -> by which checks -> diagnosis -> seconds.

    python benchmarks/fault_matrix.py                 # every fault, then 3 healthy runs (-n 4, serial, -n 4)
    python benchmarks/fault_matrix.py cdi-wrong-device gpu-nodes-tainted

Each row starts a bed with the fault, runs ``draconf run`` on it and judges the result with
``tests/matrix/faultmatrix.py``; the table is what tests/matrix/test_fault_matrix.py asserts.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.matrix.faultmatrix import healthy_run_args, judge, run_against  # noqa: E402
from draconf.testbed.faults import FAULTS  # noqa: E402


def main(faults: list[str]) -> int:
    rows, healthy, ok = [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        for fault in faults:
            result = run_against(fault, Path(tmp) / fault)
            verdict = judge(result)
            ok &= verdict.ok
            rows.append((fault, "yes" if result.exit_code else "NO", ", ".join(verdict.detected_by) or "-",
                         ", ".join(verdict.diagnoses) or "-", f"{verdict.seconds_to_verdict:.1f}",
                         f"{result.seconds:.0f}", "ok" if verdict.ok else "; ".join(verdict.problems)))
            print(" | ".join(rows[-1]), flush=True)
        for attempt in range(1, 4):
            args = healthy_run_args(attempt)
            result = run_against(None, Path(tmp) / f"healthy-{attempt}", bed_name="matrix-healthy",
                                 extra_args=args)
            verdict = judge(result)
            ok &= verdict.ok
            healthy.append((f"healthy #{attempt} ({' '.join(args) or 'serial'})", f"{result.seconds:.0f}",
                            f"{len(result.failed())} failed", "ok" if verdict.ok else "; ".join(verdict.problems)))
            print(" | ".join(healthy[-1]), flush=True)
    print()
    print(tabulate(rows, headers=("fault", "detected", "by checks", "diagnosis", "seconds to verdict",
                                  "run seconds", "judgement"), tablefmt="github", disable_numparse=True))
    print()
    print(tabulate(healthy, headers=("healthy run", "seconds", "failures", "judgement"),
                   tablefmt="github", disable_numparse=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main(sys.argv[1:] or list(FAULTS))))
