"""The whole suite serial against ``-n N`` (pytest-xdist) on one bed, and whether their verdicts agree
(docs/parallel.md); with ``--all``, every figure of issue 13 in one run.

    python benchmarks/suite_speed.py [--testbed-name default] [-n 4] [--times 3] [--serial-times K]
                                     [--all] [-- extra draconf run arguments]

Runs ``python -m draconf.cli run --testbed-name NAME`` serial and with ``-n N``, interleaved
(serial, parallel, serial, ...), ``--times`` times each (``--serial-times`` overrides the serial
count), each into its own reports directory.  Prints each run's seconds, exit status, outcome
counts and load average, then min/median seconds per mode and the ratio parallel/serial
(medians).  Exits 1 when any run's verdicts (outcome per test id, from summary.json) differ
from the first serial run's, naming the tests that differ.  Timings are never asserted.

``--all`` interleaves, round by round (``--times`` rounds): the serial suite, the suite with
``-n N``, the six walkthrough workloads through the suite and through
``benchmarks/kubectl_workloads.sh`` (:mod:`workloads_vs_kubectl`), the verdict after the
scheduler's first Unschedulable for selector-unmatched and capacity-exhausted
(:mod:`verdict_latency`), and one round of 800 claims on a 100 x 8 KWOK bed of its own
(:mod:`claims_at_scale`, ``bench-scale``, up for the whole run), with kube-apiserver's CPU
seconds for those 800 to Running: the same requests every round, so a gauge of the machine's
speed in that window, to compare figures taken on different days.  Then min/median of each
figure, the ratios, and the load.
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
    parser.add_argument("--all", action="store_true",
                        help="every figure of issue 13, interleaved round by round (see the module docstring)")
    parser.add_argument("extra", nargs="*", help="after --: more `draconf run` arguments")
    args = parser.parse_args(argv)
    if args.all:
        return run_everything(args)
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
        run = run_suite(args.testbed_name, workers, root / f"{i:02d}-{run_label(workers)}", args.extra)
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


def run_everything(args) -> int:
    """``--all``: issue 13's figures, interleaved round by round on the bed and a scale bed."""
    import claims_at_scale
    import verdict_latency
    import workloads_vs_kubectl
    from _bed import running_bed
    from draconf.kube import connect
    from draconf.profile import TESTBED_IMAGE, builtin, for_target
    from draconf.testbed import pins

    bed = running_bed(args.testbed_name)
    if bed is None:
        return 2
    api, profile = connect(bed.kubeconfig), for_target(builtin("nvidia"), "testbed")
    kubectl_env = {"KUBECONFIG": str(bed.kubeconfig), "IMAGE": TESTBED_IMAGE,
                   "PATH": f"{pins.bin_dir()}:{os.environ['PATH']}"}
    root = Path(args.reports_root or tempfile.mkdtemp(prefix="draconf-suite-speed-"))
    print(f"issue 13's figures on bed {args.testbed_name!r} and a 100 x 8 KWOK bed (bench-scale), {os.cpu_count()} CPUs, "
          f"{args.times} round(s); reports under {root}", flush=True)
    nodes, gpus = 100, 8
    claims = nodes * gpus
    scale = claims_at_scale.scale_bed(nodes, gpus)
    figures: dict[str, list[float]] = {}
    loads, bad = [], 0

    def note(name: str, value: float, unit: str) -> None:
        figures.setdefault(name, []).append(value)
        loads.append(os.getloadavg()[0])
        print(f"  {name:34} {value:7.2f} {unit}  (load {loads[-1]:.2f})", flush=True)

    try:
        scale_api = connect(scale.kubeconfig)
        reference = None
        for i in range(args.times):
            print(f"round {i + 1}", flush=True)
            for workers in (None, args.workers):
                run = run_suite(args.testbed_name, workers, root / f"{i:02d}-{run_label(workers)}", args.extra)
                note(f"suite, {run['mode']} (s)", run["seconds"], f"s  exit {run['exit']}  {counts(run['verdicts'])}")
                reference = reference or run["verdicts"]
                if run["exit"] != 0 or differences(reference, run["verdicts"]):
                    bad += 1
                    print(f"    differs from the first serial run: {differences(reference, run['verdicts'])} "
                          f"[{run['reports']}]")
            seconds, code, _ = workloads_vs_kubectl.timed(
                [sys.executable, "-m", "draconf.cli", "run", f"--testbed-name={args.testbed_name}",
                 f"--reports={root / f'{i:02d}-workloads'}", "-k", "TestWorkload"])
            note("six workloads, suite (s)", seconds, f"s  exit {code}")
            seconds, kubectl_code, _ = workloads_vs_kubectl.timed(["bash", "benchmarks/kubectl_workloads.sh"],
                                                                env={**kubectl_env, "RUN": f"all{i}"})
            note("six workloads, kubectl (s)", seconds, f"s  exit {kubectl_code}")
            bad += bool(code) + bool(kubectl_code)
            for scenario in ("selector-unmatched", "capacity-exhausted"):
                note(f"verdict after Unschedulable, {scenario} (s)", verdict_latency.one_round(api, profile, scenario), "s")
            sent, up, down, apiserver_cpu = claims_at_scale.one_round(
                scale_api, claims, i, claims_at_scale.apiserver_pid(scale))
            note(f"{claims} claims -> Running (claims/s)", claims / up, "claims/s")
            note(f"{claims} claims -> released (claims/s)", claims / down, "claims/s")
            # The same requests every round: its CPU time gauges the machine in this window.
            note(f"kube-apiserver CPU for {claims} -> Running (s)", apiserver_cpu, "CPU-s")
    finally:
        scale.down(log=lambda *_: None)
    print("figures (min / median):")
    for name, values in figures.items():
        print(f"  {name:50} {min(values):7.2f} / {statistics.median(values):7.2f}")
    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f"  ratio -n {args.workers} / serial (medians): "
          f"{median[f'suite, -n {args.workers} (s)'] / median['suite, serial (s)']:.2f}")
    print(f"  ratio suite / kubectl, six workloads (medians): "
          f"{median['six workloads, suite (s)'] / median['six workloads, kubectl (s)']:.2f}")
    print(f"  load: {min(loads):.2f}-{max(loads):.2f}")
    print("verdicts: " + (f"{bad} run(s) failed or differ from the serial run" if bad else
                          "every suite run agrees with the first serial run, every run passed"))
    return 1 if bad else 0


def run_label(workers: int | None) -> str:
    return "serial" if workers is None else f"n{workers}"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
