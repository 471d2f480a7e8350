"""The walkthrough's six workloads: the suite against the same work done by hand with kubectl
(``benchmarks/kubectl_workloads.sh``), interleaved on one bed (issue 13's "≤ 1.0×").

    python benchmarks/workloads_vs_kubectl.py [--testbed-name default] [--times 3]

Each round runs ``draconf run --testbed-name NAME -k TestWorkload`` (the six workloads'
allocation, injection and cleanup, with the session's preflight) and then the kubectl script,
with the bed's kubectl and image.  Prints each run's seconds and load average, then min/median
per side and the ratio suite/kubectl (medians).  Exits 1 when a suite run fails (its timings
would mean nothing).  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict | None = None) -> tuple[float, int, str]:
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env={**os.environ, **(env or {})}, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return time.monotonic() - started, proc.returncode, proc.stdout


def figures(label: str, values: list[float]) -> str:
    """``label: min X s, median Y s (n runs)``.

    >>> figures("kubectl", [3.0, 1.0, 2.0])
    'kubectl: min 1.00 s, median 2.00 s (3 runs)'
    """
    return f"{label}: min {min(values):.2f} s, median {statistics.median(values):.2f} s ({len(values)} runs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testbed-name", default="default")
    parser.add_argument("--times", type=int, default=3)
    args = parser.parse_args(argv)
    from draconf.profile import TESTBED_IMAGE
    from draconf.testbed import pins
    from _bed import running_bed

    bed = running_bed(args.testbed_name)
    if bed is None:
        return 2
    env = {"KUBECONFIG": str(bed.kubeconfig), "IMAGE": TESTBED_IMAGE,
           "PATH": f"{pins.bin_dir()}:{os.environ['PATH']}"}
    reports = Path(tempfile.mkdtemp(prefix="draconf-vs-kubectl-"))
    suite, kubectl = [], []
    print(f"six workloads on bed {args.testbed_name!r}, {os.cpu_count()} CPUs, {args.times} rounds")
    for i in range(args.times):
        seconds, code, out = timed([sys.executable, "-m", "draconf.cli", "run", f"--testbed-name={args.testbed_name}",
                                    f"--reports={reports / str(i)}", "-k", "TestWorkload"])
        print(f"  suite    {seconds:6.2f} s  exit {code}  load {os.getloadavg()[0]:.2f}")
        if code != 0:
            print(out[-3000:])
            return 1
        suite.append(seconds)
        seconds, code, out = timed(["bash", "benchmarks/kubectl_workloads.sh"], env={**env, "RUN": f"r{i}"})
        print(f"  kubectl  {seconds:6.2f} s  exit {code}  load {os.getloadavg()[0]:.2f}")
        if code != 0:
            print(out[-3000:])
            return 1
        kubectl.append(seconds)
    print(figures("suite", suite))
    print(figures("kubectl", kubectl))
    print(f"ratio suite/kubectl (medians): {statistics.median(suite) / statistics.median(kubectl):.2f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
