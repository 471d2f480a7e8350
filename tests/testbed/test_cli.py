"""The draconf command as a user meets it: lifecycle of a bed, and bad input that must give one
clear error and change nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from draconf import namespaces, waits
from draconf.errors import EXIT_BAD_INPUT, EXIT_TARGET_UNUSABLE
from draconf.kube import connect
from draconf.testbed import inventory
from draconf.testbed.cluster import Testbed

REPO = Path(__file__).resolve().parents[2]
#: The shared healthy bed's fleet (tests/testbed/conftest.py): `up` names it to find that bed up.
SELFTEST_FLEET = ("--inventory", str(inventory.GUIDE_INVENTORY))


def draconf(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "draconf.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def test_up_is_idempotent_and_status_env_report_it(healthy_bed):
    again = draconf("testbed", "up", "--name", healthy_bed.name, *SELFTEST_FLEET)
    assert again.returncode == 0 and "already up" in again.stdout
    assert f"export KUBECONFIG={healthy_bed.kubeconfig}" in again.stdout
    status = draconf("testbed", "status", "--name", healthy_bed.name)
    assert status.returncode == 0 and "state: up" in status.stdout
    env = draconf("testbed", "env", "--name", healthy_bed.name)
    assert env.stdout.strip() == f"export KUBECONFIG={healthy_bed.kubeconfig}"


def test_up_with_other_faults_than_the_running_bed_is_refused(healthy_bed):
    result = draconf("testbed", "up", "--name", healthy_bed.name, *SELFTEST_FLEET, "--fault", "cdi-wrong-device")
    assert result.returncode == EXIT_BAD_INPUT and "already up with faults none" in result.stderr
    assert "Traceback" not in result.stderr
    assert healthy_bed.is_up


@pytest.mark.parametrize("args, message", [
    (["testbed", "up", "--name", "bad-input", "--fault", "no-such-fault"], "invalid choice"),
    (["testbed", "up", "--name", "bad-input", "--inventory", "/nonexistent.yaml"], "cannot read inventory"),
    (["testbed", "up", "--name", "bad input!"], "letters, digits and dashes"),
    (["testbed", "env", "--name", "never-started"], "is not up"),
])
def test_bad_input_is_one_clear_error_and_starts_nothing(args, message):
    result = draconf(*args)
    assert result.returncode == EXIT_BAD_INPUT and message in result.stderr
    assert "Traceback" not in result.stderr
    assert not Testbed.named("bad-input").dir.exists()


def test_malformed_inventory_names_the_problem(tmp_path):
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text("nodes:\n  - name: gpu-0\n    gpus: 2\n    model: b300\n")
    result = draconf("testbed", "up", "--name", "bad-input", "--inventory", str(inventory))
    assert result.returncode == EXIT_BAD_INPUT and "model 'b300' is not under `models`" in result.stderr
    assert not Testbed.named("bad-input").dir.exists()


def test_a_taken_port_is_reported_before_anything_starts():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = draconf("testbed", "up", "--name", "bad-input", "--port", str(port))
    assert result.returncode == EXIT_BAD_INPUT and f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert not Testbed.named("bad-input").dir.exists()


def test_a_half_up_bed_is_named_as_such_and_down_clears_it():
    bed = Testbed.named("half-up")
    assert draconf("testbed", "up", "--name", bed.name).returncode == 0
    try:
        scheduler = bed.state()["processes"]["kube-scheduler"]["pid"]
        os.kill(scheduler, signal.SIGKILL)
        status = waits.wait_until("status to see the killed scheduler",
                                  lambda: draconf("testbed", "status", "--name", bed.name),
                                  lambda result: "kube-scheduler STOPPED" in result.stdout, timeout=10,
                                  interval=0.2, describe=lambda result: result.stdout.strip())
        assert status.returncode == 1 and "half-up" in status.stdout and "kube-scheduler STOPPED" in status.stdout
        again = draconf("testbed", "up", "--name", bed.name)
        assert again.returncode == EXIT_BAD_INPUT and "half up (kube-scheduler not running)" in again.stderr
    finally:
        down = draconf("testbed", "down", "--name", bed.name)
    assert down.returncode == 0 and not bed.dir.exists()
    assert not any(p["marker"] in _cmdlines() for p in [])  # state is gone; processes checked below
    for proc in ("kube-apiserver", "etcd", "kwok"):
        assert str(bed.dir) not in _cmdlines(), f"{proc} of {bed.name} still running"


def _cmdlines() -> str:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                pass
    return "\n".join(out)


def test_invalid_profile_is_one_clear_error_before_anything_is_created(tmp_path, healthy_bed):
    profile = tmp_path / "profile.yaml"
    profile.write_text("image: 42\nflavour: vanilla\n")
    api = connect(healthy_bed.kubeconfig)
    before = namespaces.leftovers(api)
    result = draconf("run", "--testbed-name", healthy_bed.name, "--profile", str(profile),
                     "--reports", str(tmp_path / "reports"))
    assert result.returncode != 0 and "unknown key(s) flavour" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert namespaces.leftovers(api) == before


def bad_kubeconfig(bed, kind: str, path: Path, server_url: str | None = None) -> Path:
    """The bed's kubeconfig made bad one way (``kind``), written to ``path``; ``server_url``:
    the address for ``silent`` (a server that accepts and never answers).  Also what
    benchmarks/hostile_clusters.py runs against."""
    text, server = bed.kubeconfig.read_text(), bed.state()["server"]
    config = yaml.safe_load(text)
    if kind == "does-not-exist":
        return path.with_name("does-not-exist")
    if kind == "malformed":
        path.write_text("clusters: [unclosed\n")
    elif kind == "not-a-kubeconfig":
        path.write_text("just some text\n")
    elif kind in ("unreachable", "silent"):
        path.write_text(text.replace(server, server_url if kind == "silent" else "https://127.0.0.1:1"))
    elif kind == "untrusted":
        del config["clusters"][0]["cluster"]["certificate-authority"]
        path.write_text(yaml.safe_dump(config))
    elif kind == "wrong-token":
        config["users"][0]["user"] = {"token": "not-a-token"}
        path.write_text(yaml.safe_dump(config))
    else:
        raise ValueError(kind)
    return path


@pytest.mark.parametrize("kubeconfig, message, code", [
    ("does-not-exist", "does not exist", EXIT_BAD_INPUT),
    ("malformed", "not valid YAML", EXIT_BAD_INPUT),
    ("not-a-kubeconfig", "is not a kubeconfig", EXIT_BAD_INPUT),
    ("unreachable", "cannot reach the API server", EXIT_TARGET_UNUSABLE),
    ("untrusted", "TLS certificate the kubeconfig does not trust", EXIT_TARGET_UNUSABLE),
    ("wrong-token", "rejected the credentials", EXIT_TARGET_UNUSABLE),
])
def test_bad_kubeconfig_is_one_clear_line_and_its_exit_code(tmp_path, healthy_bed, kubeconfig, message, code):
    path = bad_kubeconfig(healthy_bed, kubeconfig, tmp_path / "kubeconfig")
    result = draconf("run", "--target", "kubeconfig", "--reports", str(tmp_path / "reports"),
                     "-k", "single-gpu", env={"KUBECONFIG": str(path)})
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    # The target line comes first whenever a kubeconfig could be read (so a user sees which
    # cluster was refused); after it, exactly one line says what is wrong.
    lines = output.strip().splitlines()
    if lines and lines[0].startswith("draconf: target: "):
        lines = lines[1:]
    assert len(lines) == 1 and message in lines[0], output
    # How long the one line takes is a figure of benchmarks/hostile_clusters.py, not asserted.
    assert "Traceback" not in output and "_pytest" not in output and "Retrying" not in output


@pytest.mark.parametrize("parallel", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_sigterm_mid_run_leaves_no_namespace_behind(tmp_path, healthy_bed, parallel):
    """Under pytest-xdist the workers are stopped mid-test and never reach their own session
    end: the controller sweeps the run's namespaces by its label."""
    api = connect(healthy_bed.kubeconfig)
    proc = subprocess.Popen([sys.executable, "-m", "draconf.cli", "run", "--testbed-name", healthy_bed.name,
                             "--reports", str(tmp_path / "reports"), "-k", "TestWorkload", *parallel],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    waits.wait_until("the run to create a namespace", lambda: namespaces.leftovers(api), bool,
                     timeout=120, interval=0.2, describe=lambda left: ", ".join(left) or "none")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    waits.wait_until("the interrupted run's namespaces to be gone", lambda: namespaces.leftovers(api),
                     lambda left: not left, timeout=60, describe=lambda left: ", ".join(left))
    assert namespaces.leftovers(api) == []
    # The reports say the run was interrupted, and no check reads as passed that did not finish.
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    interrupted = summary["run"]["interrupted"]
    assert interrupted["while_running"] and interrupted["never_ran"], interrupted
    outcomes = {t["id"]: t["outcome"] for t in summary["tests"]}
    assert outcomes[interrupted["while_running"]] in ("not-run", "failed", "error", "broken"), outcomes
    assert all(outcomes[n] == "not-run" for n in interrupted["never_ran"])
    assert proc.returncode != 0
    assert 'name="draconf.interrupted"' in (tmp_path / "reports" / "junit.xml").read_text()


def test_a_parallel_run_has_waited_out_its_namespaces_when_it_exits(tmp_path, healthy_bed):
    """Under pytest-xdist the workers delete their namespaces without waiting; the controller
    waits for all of them before the run ends (nothing is left behind after a pass)."""
    api = connect(healthy_bed.kubeconfig)
    result = draconf("run", "--testbed-name", healthy_bed.name, "--reports", str(tmp_path / "reports"),
                     "-k", "single-gpu or two-gpu or claim_count_quota", "-n", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert summary["totals"]["passed"] >= 7, summary["totals"]
    assert namespaces.leftovers(api) == []


def test_sweep_removes_only_what_draconf_labelled(healthy_bed):
    api = connect(healthy_bed.kubeconfig)
    run = namespaces.RunId("sweeptest")
    mine = namespaces.create(api, run, "left-behind")
    api.core.create_namespace({"metadata": {"name": "not-draconfs"}})
    try:
        result = draconf("sweep", "--name", healthy_bed.name, "--run-id", "sweeptest")
        assert result.returncode == 0 and "removed 1 namespace" in result.stdout
        assert mine not in namespaces.leftovers(api)
        assert api.core.read_namespace("not-draconfs").status.phase == "Active"
    finally:
        api.core.delete_namespace("not-draconfs")
