"""The suite under RBAC, through the bed's real API server and RBAC authorizer.

* As the bed's user ``draconf-suite`` (a token identity in no group), bound only by
  ``manifests/rbac/`` applied unchanged, ``draconf run --target kubeconfig`` passes.
* As a ServiceAccount bound to that role minus ``create`` on pods and resourceclaims, the run
  says so in one preflight row (``permission-denied``, naming both), creates nothing, shows no
  traceback and exits non-zero.

Both run the workloads with the bed's own image through ``--profile`` (``image:``), as a user
of an air-gapped cluster points the suite at a mirror.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from draconf import namespaces, permissions
from draconf.profile import TESTBED_IMAGE

from . import kubectl
from .test_cli import REPO, draconf

RBAC_DIR = REPO / "manifests" / "rbac"
#: A whole suite run takes ~2.5 min on 2 cores.
RUN_TIMEOUT = 900


@pytest.fixture
def bed_profile(tmp_path) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump({"name": "testbed-mirror", "image": TESTBED_IMAGE}))
    return path


def _run(kubeconfig: Path, profile: Path, reports: Path):
    result = draconf("run", "--target", "kubeconfig", "--profile", str(profile),
                     "--reports", str(reports), env={"KUBECONFIG": str(kubeconfig)},
                     timeout=RUN_TIMEOUT)
    summary = json.loads((reports / "summary.json").read_text())
    return result, summary


def _namespaces(api) -> set[str]:
    return {n.metadata.name for n in api.core.list_namespace().items}


def test_the_whole_suite_passes_as_a_user_bound_only_to_the_shipped_role(healthy_bed, api, bed_profile,
                                                                           tmp_path):
    docs = kubectl.docs_in(RBAC_DIR)
    kubectl.apply(api, docs)
    try:
        result, summary = _run(healthy_bed.dir / "draconf-suite.kubeconfig", bed_profile, tmp_path / "reports")
    finally:
        kubectl.delete(api, docs)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    outcomes = {t["id"]: t["outcome"] for t in summary["tests"]}
    # Every check passes, but the device-taints and MIG workloads': the default fleet taints no
    # GPU and publishes no MIG device (DynamicMIG off).
    skips = {"device-taints": "no tainted device published", "mig": "no published device matches DeviceClass mig.nvidia.com"}
    assert {t["outcome"] for t in summary["tests"] if t["workload"] not in skips} == {"passed"}, outcomes
    assert all(t["outcome"] == "skipped" and skips[t["workload"]] in (t.get("message") or "")
               for t in summary["tests"] if t["workload"] in skips), outcomes
    assert outcomes["suites/test_preflight.py::test_preflight[permissions]"] == "passed"
    assert len(outcomes) >= 30
    assert not re.search(r"is forbidden: User", output), "a request was refused"
    assert not namespaces.leftovers(api)


def _narrow_role(name: str, remove: set[tuple[str, str, str]]) -> dict:
    """The shipped ClusterRole without the (group, resource, verb) in ``remove``."""
    role = yaml.safe_load(permissions.CLUSTERROLE_FILE.read_text())
    role["metadata"] = {"name": name}
    rules = []
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs = [v for v in rule["verbs"] if (group, resource, v) not in remove]
                if verbs:
                    rules.append({"apiGroups": [group], "resources": [resource], "verbs": verbs})
    role["rules"] = rules
    return role


def test_a_narrower_role_is_one_preflight_row_naming_verb_and_resource_and_creates_nothing(
        healthy_bed, api, bed_profile, tmp_path):
    ns, sa = "draconf-rbac-selftest", "narrow"
    role = _narrow_role("draconf-suite-narrow", {("", "pods", "create"),
                                                 ("resource.k8s.io", "resourceclaims", "create")})
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "draconf-suite-narrow"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "draconf-suite-narrow"},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}
    api.core.create_namespace({"metadata": {"name": ns}})
    try:
        api.core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
        kubectl.apply(api, [role, binding])
        token = api.core.create_namespaced_service_account_token(
            sa, ns, {"spec": {"expirationSeconds": 3600}}).status.token
        server = yaml.safe_load(healthy_bed.kubeconfig.read_text())["clusters"][0]["cluster"]
        kubeconfig = tmp_path / "narrow.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "narrow",
            "clusters": [{"name": "bed", "cluster": server}],
            "users": [{"name": sa, "user": {"token": token}}],
            "contexts": [{"name": "narrow", "context": {"cluster": "bed", "user": sa}}]}))
        before = _namespaces(api)
        result, summary = _run(kubeconfig, bed_profile, tmp_path / "reports")
        after = _namespaces(api)
    finally:
        kubectl.delete(api, [binding, role])
        api.core.delete_namespace(ns)
    output = result.stdout + result.stderr
    (tmp_path / "output.txt").write_text(output)  # for a reader of a failure
    assert result.returncode != 0
    # One preflight line names both, with the code.
    rows = [line for line in output.splitlines() if line.startswith("[permission-denied] ")]
    assert len(rows) == 1, output[-4000:]
    assert re.match(rf"\[permission-denied\] user system:serviceaccount:{ns}:{sa} lacks 2 of "
                    r"\d+ permission\(s\) the suite needs", rows[0]), rows[0]
    assert "`create` on pods, `create` on resourceclaims.resource.k8s.io" in rows[0]
    tests = {t["id"]: t for t in summary["tests"]}
    row = tests["suites/test_preflight.py::test_preflight[permissions]"]
    assert row["outcome"] == "failed" and row["diagnosis"] == "permission-denied"
    # Read-only checks ran; everything that would create gave no verdict, naming the permissions.
    assert tests["suites/test_audit.py::test_gpu_quotas_also_cap_deviceclasses"]["outcome"] == "passed"
    assert all(t["outcome"] == "passed" for i, t in tests.items()
               if "test_preflight" in i and not i.endswith("[permissions]"))
    writers = [t for i, t in tests.items() if not re.search(r"test_preflight|test_audit", i)]
    # A check whose capability the cluster lacks is skipped before it would create anything (MIG,
    # on a bed that publishes no MIG device); every other check that would create gave no verdict.
    lacking = [t for t in writers if t["outcome"] == "skipped"]
    assert all(t["workload"] == "mig" and "MIG (DeviceClass mig.nvidia.com) is not available" in t["message"]
               for t in lacking), lacking
    blocked = [t for t in writers if t["outcome"] != "skipped"]
    assert len(blocked) >= 20
    assert all(t["outcome"] == "no-verdict" and "`create` on pods" in t["message"] for t in blocked), blocked
    # No traceback, no Forbidden from a request, nothing created.
    for text in ("Traceback", "Error", "ApiException", "is forbidden: User"):
        assert text not in output, text
    assert after <= before, after - before  # nothing created (a namespace deleted before it may still be going)


def test_credentials_that_may_only_read_start_no_check_and_are_permission_denied(
        healthy_bed, api, bed_profile, tmp_path):
    """The bed's user ``draconf-suite`` bound only to the built-in ``view`` role: the preflight
    checks it cannot read are ``permission-denied`` naming verb and resource (never ``timeout``),
    every check that needs more never starts, and no client exception reaches any channel.
    Before, every check tried and met a ForbiddenException (40 of them); none is tried now."""
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "draconf-suite-view-only"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "name": "draconf-suite", "apiGroup": "rbac.authorization.k8s.io"}]}
    kubectl.apply(api, [binding])
    try:
        before = _namespaces(api)
        result, summary = _run(healthy_bed.dir / "draconf-suite.kubeconfig", bed_profile, tmp_path / "reports")
        after = _namespaces(api)
    finally:
        kubectl.delete(api, [binding])
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-4000:]
    for text in ("Traceback", "ForbiddenException", "ApiException", "Inconclusive:", "\nE   "):
        assert text not in output, text
    junit = (tmp_path / "reports" / "junit.xml").read_text()
    assert "ForbiddenException" not in junit and "Inconclusive:" not in junit
    rows = summary["tests"]
    assert not [r for r in rows if r.get("diagnosis") == "timeout"], rows
    unread = [r for r in rows if r["outcome"] == "broken"]
    assert unread and all(r["diagnosis"] == "permission-denied" and "lack `" in r["message"] for r in unread), unread
    held = [r for r in rows if r["outcome"] == "no-verdict"]
    assert len(held) >= 20 and all("[permission-denied]" in r["message"] for r in held), held[:3]
    # None of them was tried: none made a namespace (where everything a check creates lives) and
    # none ended on a wait's deadline; before, each met its own ForbiddenException.
    assert after <= before, after - before  # nothing created (a namespace deleted before it may still be going)
    assert not [r for r in rows if "timed out after " in (r.get("message") or "")], rows
