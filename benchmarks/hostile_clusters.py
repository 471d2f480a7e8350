"""Seconds from ``python -m draconf.cli run`` starting to its exit against hostile clusters: the
figures the bed tests of docs/hostile-clusters.md no longer bound.

    python benchmarks/hostile_clusters.py [--testbed-name default] [--times 3]

Each round runs, in turn, on a bed that is up (each run into reports of its own):

- ``--target kubeconfig -k single-gpu`` with a bad kubeconfig made from the bed's: its server
  moved to ``127.0.0.1:1`` (unreachable), its ``certificate-authority`` removed (untrusted),
  its token replaced (rejected), or its server moved to a local port that accepts connections
  and never answers (silent); each must exit 12 (target unusable);
- the whole suite with a ValidatingAdmissionPolicy denying every ResourceClaim in draconf's
  namespaces (the blanket denial of ``tests/testbed/test_admission.py``), exit 1;
- ``-k "preflight or single-gpu"`` with the gpu.nvidia.com DeviceClass's selector matching no
  device, exit 1;
- the whole suite as the bed's user ``draconf-suite`` bound only to the built-in ``view`` role
  (credentials that may only read: ``tests/testbed/test_rbac.py``), exit 1;
- the whole suite with every GPU node tainted ``dedicated=gpu-reserved:NoSchedule`` (the
  external fault ``gpu-nodes-tainted``), exit 1;
- preflight and two walkthrough workloads as ``draconf-suite`` (bound by ``manifests/rbac/``),
  its requests in an API Priority and Fairness level of one seat that rejects what does not fit
  while a neighbour keeps the seat busy (``tests/testbed/test_throttled_server.py``): a busy
  server, exit 0, beside the same run unthrottled (``busy-server-baseline``);

and two baselines in the same window: a kubeconfig that does not exist (exit 11: the CLI's own
start, no cluster reached) for the bad kubeconfigs, and a healthy ``-k preflight`` run (exit 0:
the floor of a run that reads the bed) for the other two.  The policy and the selector are
undone after every round, even a failed one, and the round waits until the run's namespaces are
gone.  Prints each round, then min/median per scenario with the ratio of its median to its
baseline's.  A run that exits otherwise than its scenario wants is named, and the script exits
1.  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
#: What each scenario's run must exit with (draconf.errors, draconf run's table).
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_TARGET_UNUSABLE = 1, 11, 12
#: The bad kubeconfigs, each against the CLI-start baseline.
KUBECONFIGS = ("unreachable", "untrusted", "wrong-token", "silent")
#: The selector patched onto gpu.nvidia.com: no published device is a TPU.
NOTHING = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'tpu'"
CLASS = "gpu.nvidia.com"
#: The bed's driver, whose nodes the tainted scenario taints.
DRIVER = "gpu.nvidia.com"


@contextmanager
def silent_server():
    """``https://127.0.0.1:<port>`` where connections are accepted and held, never answered
    (a hung API server, a load balancer with nothing behind it)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except socket.timeout:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def draconf_run(args: list[str], env: dict | None = None) -> tuple[float, int, str]:
    """Seconds ``python -m draconf.cli run ARGS`` took to exit, its exit status, its last line."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "draconf.cli", "run", *args], cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - started
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return seconds, proc.returncode, lines[-1] if lines else ""


@contextmanager
def bound(api, docs: list[dict]):
    """``docs`` applied (the suite's RBAC) for the time of the block."""
    from tests.testbed import kubectl
    kubectl.apply(api, docs)
    try:
        yield
    finally:
        kubectl.delete(api, docs)


def run_leftovers_gone(api, before: set[str]) -> None:
    """Wait until the draconf namespaces a round made are gone (deleting any still there)."""
    from draconf import namespaces
    made = sorted(set(namespaces.leftovers(api)) - before)
    for name in made:
        namespaces.delete(api, name, wait=120)


def kubeconfig_round(bed, kind: str) -> tuple[float, int, str]:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp, \
            (silent_server() if kind == "silent" else nullcontext()) as silent:
        from tests.testbed.test_cli import bad_kubeconfig
        path = bad_kubeconfig(bed, "does-not-exist" if kind == "missing" else kind,
                              Path(tmp) / "kubeconfig", silent)
        return draconf_run(["--target", "kubeconfig", "--reports", str(Path(tmp) / "reports"),
                            "-k", "single-gpu"], {"KUBECONFIG": str(path)})


def bed_round(bed, api, scenario: str) -> tuple[float, int, str]:
    """One run on the bed itself, the cluster changed for ``scenario`` and restored after."""
    from draconf import namespaces
    from tests.testbed import kubectl
    from tests.testbed.test_admission import deny

    before = set(namespaces.leftovers(api))
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        args = ["--testbed-name", bed.name, "--reports", str(Path(tmp) / "reports")]
        if scenario == "preflight-only":
            try:
                return draconf_run([*args, "-k", "preflight"])
            finally:
                run_leftovers_gone(api, before)
        if scenario == "blanket-denial":
            _, objects = deny("resource.k8s.io", "resourceclaims")
            try:
                kubectl.apply(api, objects)
                time.sleep(2)  # the policy's informer: enforced once the server has seen the binding
                return draconf_run(args)
            finally:
                kubectl.delete(api, objects)
                run_leftovers_gone(api, before)
        if scenario == "read-only-credentials":
            from draconf.profile import TESTBED_IMAGE
            binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                       "metadata": {"name": "draconf-suite-view-only"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "User", "name": "draconf-suite",
                                     "apiGroup": "rbac.authorization.k8s.io"}]}
            profile = Path(tmp) / "profile.yaml"
            profile.write_text(f"name: testbed-mirror\nimage: {TESTBED_IMAGE}\n")
            kubectl.apply(api, [binding])
            try:
                return draconf_run(["--target", "kubeconfig", "--profile", str(profile), "--reports",
                                    str(Path(tmp) / "reports")],
                                   {"KUBECONFIG": str(bed.dir / "draconf-suite.kubeconfig")})
            finally:
                kubectl.delete(api, [binding])
                run_leftovers_gone(api, before)
        if scenario == "gpu-nodes-tainted":
            from draconf.devices import PublishedDevices
            from draconf.testbed.faults import GPU_NODE_TAINT
            nodes = sorted(PublishedDevices.read(api, DRIVER).devices_per_node())
            kept = {n: [api.api_client.sanitize_for_serialization(t) for t in api.core.read_node(n).spec.taints or []]
                    for n in nodes}
            try:
                for node in nodes:  # an admin's taint on every GPU node, as the matrix row's
                    api.core.patch_node(node, {"spec": {"taints": [*kept[node], dict(GPU_NODE_TAINT)]}})
                return draconf_run(args)
            finally:
                for node in nodes:
                    api.core.patch_node(node, {"spec": {"taints": kept[node] or None}})
                run_leftovers_gone(api, before)
        if scenario in ("busy-server", "busy-server-baseline"):
            from draconf.profile import TESTBED_IMAGE
            from tests.testbed.test_throttled_server import SELECTION, rejected_so_far, throttled
            profile = Path(tmp) / "profile.yaml"
            profile.write_text(f"name: testbed-mirror\nimage: {TESTBED_IMAGE}\n")
            run = ["--target", "kubeconfig", "--profile", str(profile), "--reports", str(Path(tmp) / "reports"),
                   "-k", SELECTION]
            rbac = kubectl.docs_in(REPO / "manifests" / "rbac")
            # The baseline: the same user and run, bound the same way, neither throttle nor neighbour.
            with (throttled(bed, api) if scenario == "busy-server" else bound(api, rbac)):
                rejected = rejected_so_far(api)
                try:
                    seconds, code, last = draconf_run(run, {"KUBECONFIG": str(bed.dir / "draconf-suite.kubeconfig")})
                finally:
                    run_leftovers_gone(api, before)
                DETAILS[scenario] = f"{rejected_so_far(api) - rejected} of its requests turned away"
                return seconds, code, last
        if scenario == "class-selects-nothing":
            spec = api.resource.read_device_class(CLASS).spec
            original = copy.deepcopy(api.api_client.sanitize_for_serialization(spec.selectors))
            try:
                api.resource.patch_device_class(CLASS, {"spec": {"selectors": [{"cel": {"expression": NOTHING}}]}})
                return draconf_run([*args, "-k", "preflight or single-gpu"])
            finally:
                api.resource.patch_device_class(CLASS, {"spec": {"selectors": original}})
                run_leftovers_gone(api, before)
    raise ValueError(scenario)


#: scenario -> what its last round measured besides the time (printed beside it).
DETAILS: dict[str, str] = {}
#: scenario -> (the exit its run must give, its baseline); baselines have none.
SCENARIOS = {
    "missing-kubeconfig": (EXIT_BAD_INPUT, None),
    **{kind: (EXIT_TARGET_UNUSABLE, "missing-kubeconfig") for kind in KUBECONFIGS},
    "preflight-only": (0, None),
    "blanket-denial": (EXIT_FAILED, "preflight-only"),
    "class-selects-nothing": (EXIT_FAILED, "preflight-only"),
    "read-only-credentials": (EXIT_FAILED, "preflight-only"),
    "gpu-nodes-tainted": (EXIT_FAILED, "preflight-only"),
    "busy-server-baseline": (0, None),
    "busy-server": (0, "busy-server-baseline"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testbed-name", default="default")
    parser.add_argument("--times", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from draconf.kube import connect
    from _bed import running_bed

    bed = running_bed(args.testbed_name)
    if bed is None:
        return 2
    api = connect(bed.kubeconfig)
    print(f"draconf run against hostile clusters on bed {args.testbed_name!r}, {os.cpu_count()} CPUs, "
          f"{args.times} rounds (scenarios interleaved)")
    figures: dict[str, list[float]] = {s: [] for s in SCENARIOS}
    unexpected = []
    for round_no in range(1, args.times + 1):
        for scenario, (wanted, _) in SCENARIOS.items():
            if scenario == "missing-kubeconfig" or scenario in KUBECONFIGS:
                seconds, code, last = kubeconfig_round(bed, "missing" if scenario == "missing-kubeconfig"
                                                       else scenario)
            else:
                seconds, code, last = bed_round(bed, api, scenario)
            figures[scenario].append(seconds)
            note = f"  ({DETAILS.pop(scenario)})" if scenario in DETAILS else ""
            if code != wanted:
                note += f"  UNEXPECTED exit (wanted {wanted}): {last[:160]}"
                unexpected.append(f"round {round_no} {scenario}")
            print(f"  {round_no} {scenario:22} {seconds:7.2f} s  exit {code:3}  "
                  f"load {os.getloadavg()[0]:.2f}{note}")
    for scenario, (_, baseline) in SCENARIOS.items():
        values = figures[scenario]
        median = statistics.median(values)
        ratio = ""
        if baseline:
            ratio = f", {median / statistics.median(figures[baseline]):.1f}x {baseline}'s median"
        print(f"{scenario:22} min {min(values):7.2f} s, median {median:7.2f} s{ratio}")
    if unexpected:
        print(f"runs that did not exit as their scenario wants: {', '.join(unexpected)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import run_recorded
    sys.exit(run_recorded(__file__, lambda: main()))
