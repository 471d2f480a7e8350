"""The in-cluster runner's path on the bed: draconf as the runner's ServiceAccount.

manifests/runner/serviceaccount.yaml and manifests/rbac/clusterrole.yaml are applied unchanged;
draconf then runs with exactly what a pod of manifests/runner/job.yaml would have: the
``kubernetes`` Service's address in KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount's token,
CA and namespace at /var/run/secrets/kubernetes.io/serviceaccount, mounted there in a mount
namespace of its own (the host's /run is not touched).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from urllib.parse import urlsplit

import yaml

from draconf import namespaces
from draconf.kube import SERVICE_ACCOUNT_DIR
from draconf.profile import TESTBED_IMAGE

from . import kubectl
from .test_cli import REPO

RUNNER = [d for path in ("rbac/clusterrole.yaml", "runner/serviceaccount.yaml")
          for d in kubectl.docs(REPO / "manifests" / path)]


def test_the_runner_passes_in_cluster_as_its_service_account(tmp_path, healthy_bed, api):
    kubectl.apply(api, RUNNER)
    try:
        token = api.core.create_namespaced_service_account_token(
            "draconf", "draconf-runner", {"spec": {"expirationSeconds": 3600}}).status.token
        secrets = tmp_path / "serviceaccount"
        secrets.mkdir()
        (secrets / "token").write_text(token)
        (secrets / "ca.crt").write_bytes((healthy_bed.dir / "pki" / "ca.crt").read_bytes())
        (secrets / "namespace").write_text("draconf-runner")
        profile = tmp_path / "profile.yaml"
        profile.write_text(yaml.safe_dump({"name": "testbed-mirror", "image": TESTBED_IMAGE}))
        reports = tmp_path / "reports"
        draconf = [sys.executable, "-m", "draconf.cli", "run", "--target", "in-cluster",
                   "--profile", str(profile), "--reports", str(reports), "-k", "preflight or single-gpu"]
        inside = (f"mount -t tmpfs tmpfs /run && mkdir -p {SERVICE_ACCOUNT_DIR} && "
                  f"mount --bind {shlex.quote(str(secrets))} {SERVICE_ACCOUNT_DIR} && exec {shlex.join(draconf)}")
        server = urlsplit(healthy_bed.state()["server"])
        before = namespaces.leftovers(api)
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", inside],
            capture_output=True, text=True, cwd=REPO, timeout=600,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                 "KUBERNETES_SERVICE_HOST": server.hostname, "KUBERNETES_SERVICE_PORT": str(server.port)})
    finally:
        kubectl.delete(api, RUNNER[1:])  # the ClusterRole may be the RBAC test's too; leave it
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["totals"]["passed"] >= 12 and summary["totals"]["failed"] == 0, summary["totals"]
    assert summary["run"]["target"] == "in-cluster"
    assert namespaces.leftovers(api) == before
