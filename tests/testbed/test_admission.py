"""Hostile clusters, applied from outside as an admin would (issue 15): the suite's verdict is
named, in every channel, with no traceback and nothing left behind; each check ends on the
cluster's refusal, never on a wait running out (how long a run takes is a figure of
benchmarks/hostile_clusters.py, not asserted here).

- a ValidatingAdmissionPolicy + Binding denying pods (or ResourceClaims) in draconf's
  namespaces (label ``app.kubernetes.io/managed-by=draconf``): every check that creates them
  fails at the refusal with ``admission-denied`` naming the policy;
- a validating admission webhook (a server of the test's own, like a cluster's Gatekeeper or
  Kyverno) refusing pods there: the same, naming the webhook and quoting its message;
- the DeviceClass's selector patched to select nothing: preflight's ``device-class-selectors``
  row names the class, its expression and "0 of N published devices".
Each restores the bed afterwards.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from draconf.kube import label_selector

from . import kubectl

REPO = Path(__file__).resolve().parents[2]
MANAGED = {"app.kubernetes.io/managed-by": "draconf"}


def deny(group: str, resource: str) -> tuple[str, list[dict]]:
    """A ValidatingAdmissionPolicy + Binding refusing every create of ``resource`` in draconf's
    namespaces, as an admin would apply it."""
    name = f"draconf-selftest-deny-{resource}"
    return name, [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                                                          "operations": ["CREATE"], "resources": [resource]}]},
                  "validations": [{"expression": "false",
                                   "message": f"{resource} are not allowed in these namespaces (self-test)"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": MANAGED}}}},
    ]


def run(bed, reports: Path, *pytest_args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "draconf.cli", "run", "--testbed-name", bed.name,
                           "--reports", str(reports), *pytest_args], capture_output=True, text=True,
                          cwd=REPO, env=os.environ.copy(), timeout=timeout)


#: What a check's message says when it ended on the refusal itself: the API server's answer to
#: its create (draconf.admission.AdmissionDenied), or the controller's or scheduler's event
#: about the objects it makes (draconf.startup's verdicts).
REFUSAL_SEEN = ("the API server refused to create ", "cannot be created: ", "admission refused ")


def waited_out(row: dict) -> bool:
    """Whether a summary.json row's test ended on a wait's deadline (a draconf.waits.WaitTimeout,
    whatever its diagnosis, or the diagnosis ``timeout``) rather than on a verdict of the cluster."""
    return row.get("diagnosis") == "timeout" or "timed out after " in (row.get("message") or "")


def ended_at_the_refusal(row: dict) -> bool:
    """Whether a row's check ended on the refusal (its message is the refusal), not by waiting."""
    return any(seen in (row.get("message") or "") for seen in REFUSAL_SEEN) and not waited_out(row)


@contextmanager
def namespaces_made(api):
    """The draconf namespaces created while the block runs (a set, filled in as it runs): a watch
    from the list's resourceVersion, resumed where it stopped, so a namespace made and deleted
    between two polls is seen too.  A watch that fails fails the test (an empty set must mean
    that nothing was made)."""
    selector = label_selector(MANAGED)
    listed = api.core.list_namespace(label_selector=selector)
    existing = {n.metadata.name for n in listed.items}
    made: set[str] = set()
    failures: list[str] = []
    stop = threading.Event()

    def follow(version):
        try:
            while not stop.is_set():
                for event in watch.Watch().stream(api.core.list_namespace, label_selector=selector,
                                                  resource_version=version, timeout_seconds=2):
                    if event["type"] == "ERROR":
                        failures.append(str(event["raw_object"]))
                        return
                    version = event["object"].metadata.resource_version
                    if event["type"] == "ADDED" and event["object"].metadata.name not in existing:
                        made.add(event["object"].metadata.name)
        except Exception as err:  # noqa: BLE001 - reported by the block's end
            failures.append(repr(err))

    thread = threading.Thread(target=follow, args=(listed.metadata.resource_version,), daemon=True)
    thread.start()
    try:
        yield made
    finally:
        stop.set()  # the watch's current poll still ends with what was made before this
        thread.join(timeout=10)
    assert not failures, f"the namespace watch failed: {failures}"


def leftovers(api) -> list[str]:
    selector = label_selector(MANAGED)
    return [n.metadata.name for n in api.core.list_namespace(label_selector=selector).items
            if not n.metadata.deletion_timestamp]


@pytest.mark.parametrize("group,resource,selection", [
    ("", "pods", "workloads or quota or job"),
    # Claims: created by the suite (refused at once) and by the resourceclaim controller from
    # templates (refused in its FailedResourceClaimCreation event).
    ("resource.k8s.io", "resourceclaims", "single-gpu or shared-claim or quota"),
])
def test_a_policy_denying_the_suites_objects_is_admission_denied_at_the_refusal(
        healthy_bed, api, tmp_path, group, resource, selection):
    policy, objects = deny(group, resource)
    kubectl.apply(api, objects)
    try:
        time.sleep(2)  # the policy's informer: a binding is enforced once the server has seen it
        proc = run(healthy_bed, tmp_path, "-k", selection)
    finally:
        kubectl.delete(api, objects)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "UnprocessableEntity" not in out and "ForbiddenException" not in out
    assert f"[admission-denied] ValidatingAdmissionPolicy '{policy}'" in out, out[-3000:]
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    denied = [r for r in rows if r["outcome"] == "failed"]
    assert denied and all(r["diagnosis"] == "admission-denied" and policy in (r.get("reason") or "")
                          for r in denied), denied
    # Each ended on the refusal as the server or the controller's event gave it, and no test
    # of the run waited out a deadline (a timeout per test was once 3.5 minutes).
    assert all(ended_at_the_refusal(r) for r in denied), [(r["id"], r["message"]) for r in denied]
    assert not [r for r in rows if waited_out(r)], [(r["id"], r["message"]) for r in rows if waited_out(r)]
    assert not [r for r in rows if r["outcome"] in ("broken", "error")]
    if resource == "pods":  # the suite's own quotas keep their meaning: their rejections pass
        assert any(r["outcome"] == "passed" and r.get("check") == "claim-count" for r in rows), rows
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    failures = [f.get("message", "") + (f.text or "") for f in junit.iter("failure")]
    assert failures and all(policy in f for f in failures)
    assert not leftovers(api)


def test_a_blanket_denial_stops_the_run_creating_claims_after_two_refusals(healthy_bed, api, tmp_path):
    """Every ResourceClaim refused: the first refusals fail, naming the policy; after two, the
    run stops creating claims (draconf.refusals): the rest give no verdict at once, naming it.
    Before the breaker each workload was refused in turn and the failure modes waited out their
    60 s (benchmarks/hostile_clusters.py measures the run)."""
    from draconf.refusals import TRIES
    policy, objects = deny("resource.k8s.io", "resourceclaims")
    kubectl.apply(api, objects)
    try:
        time.sleep(2)
        proc = run(healthy_bed, tmp_path)
    finally:
        kubectl.delete(api, objects)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "WaitTimeout" not in out and "\nE   " not in out, out[-3000:]
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    held = [r for r in rows if (r.get("message") or "").startswith("[admission-denied] not tried: ")]
    assert len(held) >= 10 and all(policy in r["message"] for r in held), held[:3]
    # The breaker opened on the TRIES-th refusal of a claim (the rows are in run order): TRIES
    # checks were tried and refused, the next that would make a claim was not tried, saying so.
    first_held = rows.index(held[0])
    tried = [r for r in rows[:first_held] if r["outcome"] == "failed"]
    assert len(tried) == TRIES and all(ended_at_the_refusal(r) for r in tried), tried
    assert f"has refused the suite's ResourceClaim objects {TRIES} times" in held[0]["message"], held[0]
    # What failed after it (objects the breaker cannot tell make a claim: the scheduler's claim
    # for extended resources) failed on the refusal too; nothing waited out a deadline.
    failed = [r for r in rows if r["outcome"] == "failed"]
    assert all(r["diagnosis"] == "admission-denied" and ended_at_the_refusal(r) for r in failed), failed
    assert not [r for r in rows if waited_out(r)], [(r["id"], r["message"]) for r in rows if waited_out(r)]
    assert not leftovers(api)


def test_a_class_selecting_no_device_fails_preflight_naming_it(healthy_bed, api, tmp_path):
    cls = api.resource.read_device_class("gpu.nvidia.com")
    original = copy.deepcopy(api.api_client.sanitize_for_serialization(cls.spec.selectors))
    broken = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'tpu'"
    api.resource.patch_device_class("gpu.nvidia.com", {"spec": {"selectors": [{"cel": {"expression": broken}}]}})
    try:
        with namespaces_made(api) as made:
            proc = run(healthy_bed, tmp_path, "-k", "preflight or single-gpu")
    finally:
        api.resource.patch_device_class("gpu.nvidia.com", {"spec": {"selectors": original}})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    (row,) = [r for r in rows if "device-class-selectors" in r["id"] or r.get("check") == "device-class-selectors"]
    assert row["outcome"] == "failed", row
    text = (row.get("message") or "") + " " + (row.get("reason") or "")
    assert "gpu.nvidia.com selects 0 of 8 published devices" in text and "'tpu'" in text, row
    # The workloads are gated on it: no verdict naming the class, not a failure per workload.
    gated = [r for r in rows if r.get("workload") == "single-gpu"]
    assert gated and all(r["outcome"] == "no-verdict" and "selects 0 of 8" in (r.get("message") or "")
                         for r in gated), gated
    # ... given before anything was deployed: the run made no namespace, so nothing waited.
    assert not made, made
    assert not [r for r in rows if waited_out(r)], rows
    assert not leftovers(api)


@contextmanager
def refusing_webhook(bed, tmp_path: Path, message: str):
    """A validating webhook server refusing everything, started in the bed's control-plane
    network namespace (where the API server reaches it on 127.0.0.1), stopped afterwards."""
    from draconf.testbed import network, pki
    ca, cert, key = pki.serving_pair(tmp_path / "webhook-pki", "refusing-webhook", ("127.0.0.1",))
    control_plane = bed.state()["network"][0]
    with socket.socket() as probe:  # a free port; the namespace has its own, but any will do
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(network.in_netns(control_plane, [
        sys.executable, str(Path(__file__).with_name("webhook_server.py")), str(port), str(cert), str(key),
        message]), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "serving"
        yield f"https://127.0.0.1:{port}/validate", base64.b64encode(ca.read_bytes()).decode()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_webhook_denying_the_suites_pods_is_admission_denied_naming_it(healthy_bed, api, tmp_path):
    hook = "gpu-policy.selftest.draconf.io"
    message = "GPU pods must carry a cost-center label (self-test)"
    with refusing_webhook(healthy_bed, tmp_path, message) as (url, ca_bundle):
        configuration = [{
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "draconf-selftest-refusing-webhook"},
            "webhooks": [{"name": hook, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "failurePolicy": "Fail", "timeoutSeconds": 5,
                          "clientConfig": {"url": url, "caBundle": ca_bundle},
                          "namespaceSelector": {"matchLabels": MANAGED},
                          "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                     "resources": ["pods"]}]}]}]
        kubectl.apply(api, configuration)
        try:
            time.sleep(2)  # the webhook informer, as for the policy above
            proc = run(healthy_bed, tmp_path, "-k", "single-gpu or deployment")
        finally:
            kubectl.delete(api, configuration)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "ForbiddenException" not in out
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    denied = [r for r in rows if r["outcome"] == "failed"]
    # single-gpu's pod is refused at its create; the Deployment's, in its ReplicaSet's
    # FailedCreate event: both are the webhook's verdict, named, with its message.
    assert {r["workload"] for r in denied} == {"single-gpu", "deployment"}, rows
    for row in denied:
        assert row["diagnosis"] == "admission-denied", row
        assert f'admission webhook "{hook}"' in row["reason"] and message in row["reason"], row
        assert ended_at_the_refusal(row), row
    assert not [r for r in rows if waited_out(r)], rows
    assert f'admission webhook "{hook}"' in out
    junit = (tmp_path / "junit.xml").read_text()
    assert hook in junit
    assert not leftovers(api)


@contextmanager
def generated_in_each_namespace(api, docs: list[dict]):
    """``docs`` created in every draconf namespace as soon as it appears, the way a policy
    engine's "generate" rule (Kyverno, Gatekeeper mutation) gives each new namespace its
    LimitRange or ResourceQuota: a thread watching namespaces."""
    stop = threading.Event()
    selector = label_selector(MANAGED)

    def follow():
        seen = set()
        while not stop.is_set():
            for event in watch.Watch().stream(api.core.list_namespace, label_selector=selector, timeout_seconds=2):
                name = event["object"].metadata.name
                if event["type"] != "ADDED" or name in seen:
                    continue
                seen.add(name)
                for doc in docs:
                    try:
                        kubectl.apply(api, [dict(doc, metadata=dict(doc["metadata"], namespace=name))])
                    except ApiException as err:
                        if err.status not in (404, 409):  # the namespace went already
                            raise

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


#: What a policy engine might give every new namespace, and what the API server then answers a pod.
#: LimitRange: containers get a 2Mi default limit and a pod may use at most 1Mi, so every pod
#: is refused (a LimitRange's own validation only compares a default with its entry's max).
NAMESPACE_POLICIES = {
    "limitrange": ({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "tiny-pods"},
                    "spec": {"limits": [{"type": "Container", "default": {"memory": "2Mi"},
                                         "defaultRequest": {"memory": "2Mi"}},
                                        {"type": "Pod", "max": {"memory": "1Mi"}}]}},
                   "maximum memory usage per Pod is 1Mi, but limit is 2Mi"),
    "resourcequota": ({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
                       "spec": {"hard": {"pods": "0"}}},
                      "exceeded quota: no-pods"),
}


@pytest.mark.parametrize("policy", sorted(NAMESPACE_POLICIES))
def test_a_limit_or_quota_the_suite_did_not_create_is_admission_denied_not_permission_denied(
        healthy_bed, api, tmp_path, policy):
    """LimitRanger and ResourceQuota answer 403 Forbidden, as RBAC does: the verdict must still be
    the admission's (quoting the limit or the quota), never ``permission-denied``, and the
    suite's own quota checks keep their meaning only for quotas the suite made."""
    doc, quoted = NAMESPACE_POLICIES[policy]
    with generated_in_each_namespace(api, [doc]):
        proc = run(healthy_bed, tmp_path, "-k", "single-gpu")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "ForbiddenException" not in out
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    (denied,) = [r for r in rows if r["outcome"] == "failed"]
    assert denied["check"] == "allocation" and denied["diagnosis"] == "admission-denied", denied
    assert quoted in denied["reason"], denied
    assert not [r for r in rows if r["diagnosis"] in ("permission-denied", "quota-not-enforced")]
    assert ended_at_the_refusal(denied) and not [r for r in rows if waited_out(r)], rows
    assert not leftovers(api)
