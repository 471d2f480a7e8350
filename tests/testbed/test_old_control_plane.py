"""A cluster too old for resource.k8s.io/v1: the run stops at preflight with one clear verdict.

The bed builds v1.36.3 only, so the old cluster is the same real kube-apiserver started with
``--emulated-version=1.33`` (its range is 1.33..1.36): it serves Kubernetes 1.33's APIs, and so
no resource.k8s.io/v1 (1.33 has DRA as v1beta1/v1beta2, off by default), and says so in
``/version`` (``emulationMajor``/``emulationMinor``).  Preflight needs nothing else of a
cluster to judge this, so the test starts only etcd and that API server (about 10 s), and runs
``draconf run`` against it as a user would.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import urllib.request

import pytest
import yaml

from draconf import waits
from draconf.testbed import build, pki as pki_mod
from draconf.testbed.processes import free_ports

from .test_cli import draconf

EMULATED = "1.33"
#: Checks that read no DRA object, and so may pass on an old cluster.
NOT_DRA = {("preflight", "permissions"), ("preflight", "policy-conflict"), ("audit", "gpu-quota")}


def _ready(url: str, pki) -> str:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {pki.token('admin')}"})
    try:
        with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(pki.ca_cert)),
                                    timeout=2) as answer:
            return answer.read().decode()
    except OSError as err:
        return f"not ready: {err}"


@contextlib.contextmanager
def bare_control_plane(work, *apiserver_args: str, label: str = "kube-apiserver"):
    """etcd and one real kube-apiserver v1.36.3 started with ``apiserver_args`` (nothing else of
    a cluster): (kubeconfig, pki, server) while it runs."""
    bindir = build.ensure_built(log=lambda *_: None)
    pki = pki_mod.create(work / "pki")
    client, peer, secure = free_ports(3)
    logs = open(work / "components.log", "w")
    procs = [subprocess.Popen([
        str(bindir / "etcd"), "--name", "old", "--data-dir", str(work / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"old=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level", "warn"],
        stdout=logs, stderr=subprocess.STDOUT)]
    procs.append(subprocess.Popen([
        str(bindir / "kube-apiserver"), *apiserver_args,
        f"--etcd-servers=http://127.0.0.1:{client}", "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1", f"--secure-port={secure}",
        f"--tls-cert-file={pki.server_cert}", f"--tls-private-key-file={pki.server_key}",
        f"--client-ca-file={pki.ca_cert}", f"--token-auth-file={pki.token_file}",
        "--authorization-mode=Node,RBAC", f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/16", "--profiling=false", "--v=1"],
        stdout=logs, stderr=subprocess.STDOUT))
    server = f"https://127.0.0.1:{secure}"
    kubeconfig = work / "admin.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "old",
        "clusters": [{"name": "old", "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)}}],
        "users": [{"name": "admin", "user": {"token": pki.token("admin")}}],
        "contexts": [{"name": "old", "context": {"cluster": "old", "user": "admin"}}]}))
    try:
        waits.wait_until(f"{label} to be ready", lambda: _ready(f"{server}/readyz", pki),
                         lambda answer: answer == "ok", timeout=90, describe=lambda answer: answer[:300])
        yield kubeconfig, pki, server
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        logs.close()


@pytest.fixture(scope="module")
def old_control_plane(tmp_path_factory):
    """(kubeconfig, server): etcd and a kube-apiserver emulating Kubernetes 1.33."""
    with bare_control_plane(tmp_path_factory.mktemp("old-control-plane"), f"--emulated-version={EMULATED}",
                            label=f"kube-apiserver (emulating {EMULATED})") as plane:
        yield plane


def test_the_server_really_is_old(old_control_plane):
    """The premise, read from the server: 1.33's version and APIs, not 1.36's."""
    _, pki, server = old_control_plane
    version = json.loads(_ready(f"{server}/version", pki))
    assert (version["emulationMajor"], version["emulationMinor"]) == ("1", "33"), version
    group = _ready(f"{server}/apis/resource.k8s.io", pki)
    assert '"v1"' not in group, group


def test_run_stops_at_preflight_naming_the_version(old_control_plane, tmp_path):
    """The whole suite, as a user runs it: one preflight verdict that says what to upgrade, no
    PASS anywhere, no traceback, a non-zero exit."""
    kubeconfig, _, _ = old_control_plane
    reports = tmp_path / "reports"
    run = draconf("run", "--target", "kubeconfig", "--reports", str(reports),
                  env={"KUBECONFIG": str(kubeconfig)}, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "Traceback" not in out, out
    results = json.loads((reports / "summary.json").read_text())["tests"]
    (version,) = [r for r in results if r["workload"] == "preflight" and r["check"] == "server-version"]
    assert version["outcome"] == "failed" and version["diagnosis"] == "api-unavailable", version
    assert f"v1.36.3 (emulating {EMULATED}) is too old for resource.k8s.io/v1" in version["message"], version
    (api,) = [r for r in results if r["workload"] == "preflight" and r["check"] == "resource-api"]
    assert api["outcome"] == "failed" and "does not serve resource.k8s.io/v1" in api["message"], api
    # What does not need DRA may pass on its own evidence (the credentials' permissions, no
    # conflicting ClusterPolicy, no quota to audit); no DRA check may.
    passed = [r["id"] for r in results if r["outcome"] == "passed"
              and (r["workload"], r["check"]) not in NOT_DRA]
    assert not passed, f"DRA checks passed on a cluster without resource.k8s.io/v1: {passed}"
    gated = [r for r in results if r["workload"] == "single-gpu"]
    assert gated and all(r["outcome"] == "no-verdict" and "server-version" in r["message"] for r in gated), gated
    assert "too old for resource.k8s.io/v1" in out
