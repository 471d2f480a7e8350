"""The whole suite serial against ``-n N`` (pytest-xdist) on one bed, and whether their verdicts agree
(README, "Parallel runs").

    python benchmarks/suite_speed.py [--testbed-name default] [-n 4] [--times 3] [--serial-times K]
                                     [-- extra draconf run arguments]

Runs ``python -m draconf.cli run --testbed-name NAME`` serial and with ``-n N``, interleaved
(serial, parallel, serial, ...), ``--times`` times each (``--serial-times`` overrides the serial
count), each into its own reports directory.  Prints each run's seconds, exit status, outcome
counts and load average, then min/median seconds per mode and the ratio parallel/serial
(medians).  Exits 1 when any run's verdicts (outcome per test id, from summary.json) differ
from the first serial run's, naming the tests that differ.  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def run_suite(testbed: str, workers: int | None, reports: Path, extra: list[str]) -> dict:
    argv = [sys.executable, "-m", "draconf.cli", "run", f"--testbed-name={testbed}",
            f"--reports={reports}", *extra, *(["-n", str(workers)] if workers else [])]
    started = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.monotonic() - started
    (reports / "output.log").write_text(proc.stdout)
    summary_file = reports / "summary.json"
    tests = json.loads(summary_file.read_text())["tests"] if summary_file.is_file() else []
    return {"mode": f"-n {workers}" if workers else "serial", "seconds": seconds, "exit": proc.returncode,
            "verdicts": {t["id"]: t["outcome"] for t in tests}, "load": os.getloadavg()[0],
            "reports": str(reports)}


def differences(reference: dict[str, str], other: dict[str, str]) -> list[str]:
    """Tests whose outcome differs, or that only one of the runs has.

    >>> differences({"a": "passed", "b": "skipped"}, {"a": "failed", "b": "skipped", "c": "passed"})
    ['a: passed -> failed', 'c: missing -> passed']
    """
    return [f"{t}: {reference.get(t, 'missing')} -> {other.get(t, 'missing')}"
            for t in sorted(set(reference) | set(other)) if reference.get(t) != other.get(t)]


def counts(verdicts: dict[str, str]) -> str:
    """Outcome counts.

    >>> counts({"a": "passed", "b": "passed", "c": "skipped"})
    '2 passed, 1 skipped'
    """
    return ", ".join(f"{n} {o}" for o, n in sorted(Counter(verdicts.values()).items())) or "no tests"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testbed-name", default="default")
    parser.add_argument("-n", "--workers", type=int, default=4)
    parser.add_argument("--times", type=int, default=3, help="runs of each mode (default 3)")
    parser.add_argument("--serial-times", type=int, default=None, help="serial runs (default: --times)")
    parser.add_argument("--reports-root", default=None, help="where each run's reports go (default: a temp dir)")
    parser.add_argument("extra", nargs="*", help="after --: more `draconf run` arguments")
    args = parser.parse_args(argv)
    root = Path(args.reports_root or tempfile.mkdtemp(prefix="draconf-suite-speed-"))
    serial_times = args.times if args.serial_times is None else args.serial_times
    plan = []
    for i in range(max(serial_times, args.times)):
        if i < serial_times:
            plan.append(None)
        if i < args.times:
            plan.append(args.workers)
    runs = []
    print(f"suite speed on bed {args.testbed_name!r}, {os.cpu_count()} CPUs; reports under {root}")
    for i, workers in enumerate(plan):
        run = run_suite(args.testbed_name, workers, root / f"{i:02d}-{'serial' if workers is None else f'n{workers}'}",
                        args.extra)
        runs.append(run)
        print(f"  {run['mode']:>7}: {run['seconds']:6.1f} s  exit {run['exit']}  {counts(run['verdicts'])}  "
              f"(load {run['load']:.2f})", flush=True)
    reference = next((r for r in runs if r["mode"] == "serial"), None)
    for mode in dict.fromkeys(r["mode"] for r in runs):
        secs = [r["seconds"] for r in runs if r["mode"] == mode]
        print(f"{mode:>7}: min {min(secs):.1f} s, median {statistics.median(secs):.1f} s over {len(secs)} run(s)")
    parallel = [r["seconds"] for r in runs if r["mode"] != "serial"]
    if reference and parallel:
        serial = statistics.median(r["seconds"] for r in runs if r["mode"] == "serial")
        print(f"ratio parallel/serial (medians): {statistics.median(parallel) / serial:.2f}")
    if reference is None:
        print("no serial run: verdicts not compared")
        return 0
    bad = 0
    for i, run in enumerate(runs):
        diff = differences(reference["verdicts"], run["verdicts"])
        if diff or not run["verdicts"]:
            bad += 1
            print(f"run {i} ({run['mode']}) differs from the serial run: "
                  + ("; ".join(diff) if diff else "no summary.json") + f" [{run['reports']}]")
    print(f"verdicts: {'all runs agree with the serial run' if not bad else f'{bad} run(s) differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
