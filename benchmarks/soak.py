"""The healthy suite run again and again, serial and ``-n 4`` alternating: failures, flakes and
leftovers (issue 13's soak: 20 runs, 0 of each).

    python benchmarks/soak.py [--testbed-name default] [--runs 20] [-n 4]

Each run is ``draconf run --testbed-name NAME`` (odd runs with ``-n N``) into its own reports
directory.  After each, it reads summary.json (failed, broken and error tests, flaky ones) and
the cluster: namespaces labelled ``app.kubernetes.io/managed-by=draconf`` still there 60 s after
the run ended, and claims in them.  Prints a line per run and the totals; exits 1 on any
failure or leftover.  Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BAD = ("failed", "broken", "error", "not-run")


def leftovers(api, settle: float = 60) -> list[str]:
    """draconf's namespaces still present ``settle`` seconds after a run (deletion in progress
    gets that long to finish)."""
    from draconf import waits
    from draconf.kube import label_selector
    from draconf.namespaces import MANAGED_BY
    selector = label_selector(MANAGED_BY)

    def present():
        return sorted(n.metadata.name for n in api.core.list_namespace(label_selector=selector).items)
    try:
        return waits.wait_until("the run's namespaces to be gone", present, lambda names: not names,
                                timeout=settle, describe=lambda names: ", ".join(names))
    except waits.WaitFailed:
        return present()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testbed-name", default="default")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("-n", "--workers", type=int, default=4)
    args = parser.parse_args(argv)
    from draconf.kube import connect
    from _bed import running_bed

    bed = running_bed(args.testbed_name)
    if bed is None:
        return 2
    api = connect(bed.kubeconfig)
    root = Path(tempfile.mkdtemp(prefix="draconf-soak-"))
    print(f"soak on bed {args.testbed_name!r}: {args.runs} runs, serial and -n {args.workers} alternating; "
          f"reports under {root}")
    failures = flakes = left = 0
    for i in range(args.runs):
        parallel = i % 2 == 1
        reports = root / str(i)
        argv_run = [sys.executable, "-m", "draconf.cli", "run", f"--testbed-name={args.testbed_name}",
                    f"--reports={reports}", *(["-n", str(args.workers)] if parallel else [])]
        started = time.monotonic()
        proc = subprocess.run(argv_run, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = time.monotonic() - started
        (reports / "output.log").parent.mkdir(parents=True, exist_ok=True)
        (reports / "output.log").write_text(proc.stdout)
        summary = reports / "summary.json"
        tests = json.loads(summary.read_text())["tests"] if summary.is_file() else []
        bad = [t["id"] for t in tests if t["outcome"] in BAD]
        flaky = [t["id"] for t in tests if t["outcome"] == "flaky"]
        remaining = leftovers(api)
        failures += bool(bad) or proc.returncode != 0 or not tests
        flakes += len(flaky)
        left += len(remaining)
        print(f"  run {i:2} {'-n ' + str(args.workers) if parallel else 'serial':7} {seconds:6.1f} s exit "
              f"{proc.returncode}  {len(tests)} tests, {len(bad)} failed, {len(flaky)} flaky, "
              f"{len(remaining)} namespaces left  load {os.getloadavg()[0]:.2f}")
        for name in bad + flaky + remaining:
            print(f"      {name}")
    print(f"soak: {args.runs} runs, {failures} with failures, {flakes} flaky tests, {left} namespaces left")
    return 1 if failures or left else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
