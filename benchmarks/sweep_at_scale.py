"""The fleet sweep at scale: ``draconf run --every-node`` and ``--every-gpu`` (``-m every_node``)
on uniform KWOK fleets (issue 32's targets on this 2-core machine: 100 nodes x 8 GPUs, every node
proven in ≤ 30 s and every GPU in ≤ 60 s; the same at 1,000 nodes, growing no worse than
linearly).

    python benchmarks/sweep_at_scale.py [--sizes 100 1000] [--gpu-sizes 100] [--sweep-max-gpus 80]
                                        [--gpus 8] [--times 3] [--keep]

For each size it brings up its own bed (``bench-sweep``: SIZE KWOK nodes of GPUS GPUs each, the
simulated driver preparing what the scheduler allocates and playing the containers' CDI
injection), then per round runs the command a user runs, in a process of its own, as the
README says: ``draconf run --testbed-name bench-sweep --every-node -m every_node``, then the
same with ``--every-gpu``.  Each at the default bound (a tenth of the published GPUs in flight),
or at ``--sweep-max-gpus`` for every size.
Per round it prints the sweep's own time (its last progress line, ``sweep: N target(s) done in
S``), the whole command's wall time (the client's start, preflight, reports), the client's peak
memory (its max RSS, from the kernel's rusage), and the run's exit status; then min/median, and
per size the seconds per target, whose ratio between sizes is the growth.  A run that is not
green (exit status not 0) is printed as such and its figures are not counted.  Timings are
never asserted.  The bed is stopped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from draconf.testbed import inventory  # noqa: E402
from draconf.testbed.cluster import Testbed  # noqa: E402

BED = "bench-sweep"
#: The sweep's last progress line (suites/test_every_node.py).
DONE = re.compile(r"sweep: (\d+) target\(s\) done in ([\d.]+)s \(([^)]*)\)")
MODES = {"every-node": ["--every-node"], "every-gpu": ["--every-gpu"]}


def sweep_run(flags: list[str], reports: Path) -> dict:
    """One ``draconf run ... -m every_node`` in a process of its own: its figures."""
    argv = [sys.executable, "-m", "draconf.cli", "run", f"--testbed-name={BED}", *flags,
            "-m", "every_node", f"--reports={reports}"]
    with tempfile.TemporaryFile("w+") as out:
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    done = DONE.search(text)
    last = text.strip().splitlines()[-1] if text.strip() else "(no output)"
    return {"exit": proc.returncode, "wall": wall, "rss_mib": usage.ru_maxrss / 1024,
            "targets": int(done.group(1)) if done else 0, "sweep": float(done.group(2)) if done else None,
            "tally": done.group(3) if done else "no sweep line", "last": last}


def growth(mode: str, by_size: dict[int, float], sizes: list[int]) -> str:
    """The linear-growth figure: seconds per target at each size (median sweep time over its
    targets) and their ratio between the smallest and the largest size (1.00: the sweep's time
    grows linearly with the fleet; above it, worse); a size with no green round has none.

    >>> print(growth("every-node", {100: 0.0995, 1000: 0.12}, [100, 1000]))
    every-node: seconds per target 0.100 at 100 nodes, 0.120 at 1000 nodes: ratio 1.21 (1.00 is linear growth, below is better)
    >>> print(growth("every-node", {100: 0.0995}, [100, 1000]))
    every-node: seconds per target 0.100 at 100 nodes, none at 1000 nodes (no green round): no growth figure
    """
    said = ", ".join(f"{by_size[size]:.3f} at {size} nodes" if size in by_size else f"none at {size} nodes (no green round)"
                     for size in sizes)
    measured = [size for size in sizes if size in by_size]
    if len(measured) < 2 or len(measured) < len(sizes):
        return f"{mode}: seconds per target {said}: no growth figure"
    small, large = min(measured), max(measured)
    return (f"{mode}: seconds per target {said}: ratio {by_size[large] / by_size[small]:.2f} "
            "(1.00 is linear growth, below is better)")


def bring_up(nodes: int, gpus: int) -> tuple[Testbed, float]:
    bed = Testbed.named(BED)
    bed.down(log=lambda *_: None)
    started = time.monotonic()
    bed.up(inventory.uniform(nodes, gpus), faults=[], log=lambda *_: None, timeout=1800)
    return bed, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="fleet sizes (nodes)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--times", type=int, default=3, help="rounds per size and mode")
    parser.add_argument("--sweep-max-gpus", type=int, default=None,
                        help="targets in flight at once, for every size (default: the suite's own, a tenth of "
                             "the published GPUs).  The bed plays every KWOK node's kubelet in one process on "
                             "this machine, which a real fleet does not: 800 in flight at 1,000 nodes is more "
                             "than it can start and finish, and the same bound at every size measures the "
                             "growth alone")
    parser.add_argument("--gpu-sizes", type=int, nargs="*", default=None,
                        help="the sizes at which --every-gpu is run too (default: every size); at 1,000 "
                             "nodes it proves 8,000 GPUs, and the every-node figures alone may be wanted")
    parser.add_argument("--keep", action="store_true",
                        help=f"leave the last bed up (`draconf testbed down --name {BED}`)")
    args = parser.parse_args(argv)
    print(f"draconf run --every-node / --every-gpu -m every_node on uniform KWOK fleets of {args.gpus} GPUs "
          f"per node, {os.cpu_count()} CPUs, {args.times} round(s) each, "
          + (f"at most {args.sweep_max_gpus} in flight" if args.sweep_max_gpus else "the default bound in flight"))
    per_target: dict[str, dict[int, float]] = {mode: {} for mode in MODES}
    not_green = 0
    bed = None
    try:
        for size in args.sizes:
            bed, up = bring_up(size, args.gpus)
            print(f"{size} nodes x {args.gpus} GPUs: bed up in {up:.0f} s")
            for mode, flags in MODES.items():
                if mode == "every-gpu" and args.gpu_sizes is not None and size not in args.gpu_sizes:
                    print(f"  {mode}: not run at {size} nodes (--gpu-sizes {' '.join(map(str, args.gpu_sizes))})")
                    continue
                figures = []
                for i in range(args.times):
                    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as reports:
                        bound = [f"--sweep-max-gpus={args.sweep_max_gpus}"] if args.sweep_max_gpus else []
                        got = sweep_run(flags + bound, Path(reports))
                    green = got["exit"] == 0 and got["sweep"] is not None
                    print(f"  {mode} round {i}: {got['targets']} targets, sweep {got['sweep'] or 0:.1f} s, "
                          f"command {got['wall']:.1f} s, client max RSS {got['rss_mib']:.0f} MiB, "
                          f"exit {got['exit']} ({got['tally']}), load {os.getloadavg()[0]:.2f}"
                          + ("" if green else f"; NOT GREEN, not counted: {got['last']}"))
                    if green:
                        figures.append(got)
                    else:
                        not_green += 1
                if not figures:
                    continue
                sweeps = [f["sweep"] for f in figures]
                walls = [f["wall"] for f in figures]
                rss = [f["rss_mib"] for f in figures]
                targets = figures[0]["targets"]
                per_target[mode][size] = statistics.median(sweeps) / max(1, targets)
                print(f"  {mode}: sweep min {min(sweeps):.1f} s, median {statistics.median(sweeps):.1f} s "
                      f"({1000 * per_target[mode][size]:.1f} ms per target); command min {min(walls):.1f} s, "
                      f"median {statistics.median(walls):.1f} s; client max RSS median "
                      f"{statistics.median(rss):.0f} MiB")
            if size != args.sizes[-1] or not args.keep:
                bed.down(log=lambda *_: None)
                bed = None
        for mode, by_size in per_target.items():
            print(growth(mode, by_size, [size for size in args.sizes
                                         if mode != "every-gpu" or args.gpu_sizes is None or size in args.gpu_sizes]))
    finally:
        if bed is not None and not args.keep:
            bed.down(log=lambda *_: None)
    return 1 if not_green else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
