"""The in-cluster runner's path on the bed: draconf as the runner's ServiceAccount.

manifests/runner/00-namespace.yaml, 10-serviceaccount.yaml and manifests/rbac/clusterrole.yaml
are applied unchanged; draconf then runs with exactly what a pod of the runner's CronJob
(20-cronjob.yaml) would have: the ``kubernetes`` Service's address in
KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount's token, CA and namespace at
/var/run/secrets/kubernetes.io/serviceaccount, mounted there in a mount namespace of its own
(the host's /run is not touched), and its arguments (``--html`` too).

The directory itself goes in with the real ``kubectl apply -f manifests/runner/`` in one go, as
the docs say (the apply order its file names give), creating no Job; then the volume option
(the PVC and the CronJob patch) as documented.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from urllib.parse import urlsplit

import yaml
from kubernetes.client.exceptions import ApiException

from draconf import namespaces
from draconf.kube import SERVICE_ACCOUNT_DIR
from draconf.profile import TESTBED_IMAGE
from draconf.testbed.pins import bin_dir, cache_root

from . import kubectl
from .test_cli import REPO

RUNNER = [d for path in ("rbac/clusterrole.yaml", "runner/00-namespace.yaml", "runner/10-serviceaccount.yaml")
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
                   "--profile", str(profile), "--reports", str(reports), "--html", "-k", "preflight or single-gpu"]
        inside = (f"mount -t tmpfs tmpfs /run && mkdir -p {SERVICE_ACCOUNT_DIR} && "
                  f"mount --bind {shlex.quote(str(secrets))} {SERVICE_ACCOUNT_DIR} && exec {shlex.join(draconf)}")
        server = urlsplit(healthy_bed.state()["server"])
        before = namespaces.leftovers(api)
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", inside],
            capture_output=True, text=True, cwd=REPO, timeout=600,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                 "KUBERNETES_SERVICE_HOST": server.hostname, "KUBERNETES_SERVICE_PORT": str(server.port),
                 # the image has Allure installed; here it is the cache's (npm ci once)
                 "DRACONF_CACHE_DIR": str(cache_root())})
    finally:
        kubectl.delete(api, RUNNER[:0:-1])  # the ClusterRole may be the RBAC test's too; leave it
        wait_gone(api, "draconf-runner")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["totals"]["passed"] >= 12 and summary["totals"]["failed"] == 0, summary["totals"]
    assert summary["run"]["target"] == "in-cluster"
    assert namespaces.leftovers(api) == before
    # The pod's log is the report that outlives the pod: the matrix, then the one-line summary last.
    assert "draconf conformance matrix" in result.stdout
    assert re.fullmatch(r"draconf: PASS \(\d+ passed.*\); exit 0", result.stdout.strip().splitlines()[-1])
    # --html, as the CronJob runs it: the report in the reports dir, built in the run.
    assert (reports / "html" / "index.html").is_file(), output[-3000:]


def kubectl_cli(bed, *args: str) -> subprocess.CompletedProcess:
    """The real kubectl (the bed's build), on the files as they are in the repository."""
    binary = shutil.which("kubectl") or str(bin_dir() / "kubectl")
    return subprocess.run([binary, "--kubeconfig", str(bed.kubeconfig), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_runner_directory_applies_in_one_go_and_runs_nothing_at_once(healthy_bed, api):
    applied = kubectl_cli(healthy_bed, "apply", "-f", "manifests/rbac/clusterrole.yaml", "-f", "manifests/runner/")
    try:
        assert applied.returncode == 0, applied.stderr
        cronjob = api.batch.read_namespaced_cron_job("draconf-nightly", "draconf-runner")
        assert cronjob.spec.starting_deadline_seconds and cronjob.spec.job_template.spec.active_deadline_seconds
        assert api.batch.list_namespaced_job("draconf-runner").items == []
        # The volume option, as documented: the claim, then the CronJob's reports volume on it.
        for step in (["apply", "-f", "manifests/runner/volume/reports-pvc.yaml"],
                     ["-n", "draconf-runner", "patch", "cronjob", "draconf-nightly",
                      "--patch-file", "manifests/runner/volume/cronjob-patch.yaml"]):
            done = kubectl_cli(healthy_bed, *step)
            assert done.returncode == 0, (step, done.stderr)
        volumes = api.batch.read_namespaced_cron_job("draconf-nightly", "draconf-runner") \
            .spec.job_template.spec.template.spec.volumes
        assert [(v.name, v.empty_dir, v.persistent_volume_claim.claim_name) for v in volumes] == \
            [("reports", None, "draconf-reports")]
        # A run now, with the CronJob's spec (not started: dry-run on the server).
        now = kubectl_cli(healthy_bed, "-n", "draconf-runner", "create", "job", "--from=cronjob/draconf-nightly",
                          "draconf-now", "--dry-run=server")
        assert now.returncode == 0, now.stderr
    finally:
        kubectl_cli(healthy_bed, "delete", "--ignore-not-found", "-f", "manifests/runner/")
        wait_gone(api, "draconf-runner")


def wait_gone(api, namespace: str, timeout: float = 120) -> None:
    """Until ``namespace`` is deleted for good: the next test applies the same one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            api.core.read_namespace(namespace)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        time.sleep(1)
    raise AssertionError(f"namespace {namespace} still there after {timeout:.0f}s")
