"""A busy API server makes a run slower, not red (issue 33 item 4).

An admin's API Priority and Fairness, through the bed's real API server: a
PriorityLevelConfiguration with one nominal share that lends and borrows nothing and turns away
what does not fit (``limitResponse: Reject``: 429 Too Many Requests with a Retry-After), and a
FlowSchema that puts every request of the suite's user (``draconf-suite``, bound by
``manifests/rbac/`` unchanged) in it.  Threads of the same user keep that level full while
the suite runs, as other clients of a busy cluster would: a ServiceAccount of its own, put in the
same level by a FlowSchema of its own, so that the API server's counters tell the suite's
rejected requests from theirs.

The suite must retry what it was turned away (draconf.kube.API_RETRY, the waits' transient
answers) and pass: every check passed, exit 0, no ``api-throttled`` or ``timeout`` code, no
traceback.  The API server's own counter of requests it rejected for that level proves the
throttle acted (a run the throttle never touched proves nothing).  Both objects are deleted
afterwards, whatever happened.
"""

from __future__ import annotations

import json
import re
import threading

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from draconf import namespaces
from draconf.profile import TESTBED_IMAGE

from . import kubectl
from .test_cli import REPO, draconf

NAME = "draconf-throttled"
#: The suite's user on the bed (draconf.testbed.pki), in no group: it falls in
#: global-default (precedence 9900) unless a FlowSchema of a lower precedence takes it.
SUITE_USER = "draconf-suite"
THROTTLE = [
    {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
     "metadata": {"name": NAME},
     "spec": {"type": "Limited", "limited": {
         "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
         "limitResponse": {"type": "Reject"}}}},
    # Nominal seats are the server's concurrency split by shares: a level of many shares that
    # lends all of them leaves the suite's level one seat, and every other level what it had.
    {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
     "metadata": {"name": "draconf-ballast"},
     "spec": {"type": "Limited", "limited": {
         "nominalConcurrencyShares": 1000, "lendablePercent": 100, "limitResponse": {"type": "Reject"}}}},
    {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
     "metadata": {"name": NAME},
     "spec": {"priorityLevelConfiguration": {"name": NAME}, "matchingPrecedence": 500,
              "distinguisherMethod": {"type": "ByUser"},
              "rules": [{"subjects": [{"kind": "User", "user": {"name": SUITE_USER}}],
                         "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                            "namespaces": ["*"], "clusterScope": True}],
                         "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}},
]
#: The neighbours' ServiceAccount (and its namespace), allowed to read (ClusterRole view).
NEIGHBOUR = "draconf-throttle-neighbour"
#: Threads of it that keep the suite's priority level busy during the run.
NEIGHBOURS = 2


def neighbour_objects() -> list[dict]:
    """The neighbours' namespace, ServiceAccount, its read access and its FlowSchema, into the
    suite's level."""
    subject = {"kind": "ServiceAccount", "name": NEIGHBOUR, "namespace": NEIGHBOUR}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NEIGHBOUR}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NEIGHBOUR, "namespace": NEIGHBOUR}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": NEIGHBOUR},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
         "subjects": [subject]},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": NEIGHBOUR},
         "spec": {"priorityLevelConfiguration": {"name": NAME}, "matchingPrecedence": 500,
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                      "name": NEIGHBOUR, "namespace": NEIGHBOUR}}],
                      "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                         "namespaces": ["*"], "clusterScope": True}]}]}},
    ]
#: The walkthrough's first and shared-claim workloads and preflight: every kind of request the
#: suite makes (reads, creates, deletes, watches, exec), in about a minute unthrottled.
SELECTION = "test_preflight or TestWorkload and (single-gpu or shared-claim)"
#: The API server's count of the suite's requests it turned away (its FlowSchema's, not the
#: neighbours').
REJECTED = re.compile(r'^apiserver_flowcontrol_rejected_requests_total\{flow_schema="' + NAME
                      + r'"[^}]*\} (\d+(?:\.\d+)?(?:e[+-]?\d+)?)$', re.M)


def rejected_so_far(api) -> int:
    """The suite's requests the API server turned away: its own counter."""
    config = api.api_client.configuration
    answer = api.api_client.call_api("GET", config.host + "/metrics", header_params={
        "Authorization": config.get_api_key_with_prefix("BearerToken")})
    answer.read()
    assert answer.status == 200, answer.data[:300]
    return int(sum(float(v) for v in REJECTED.findall(answer.data.decode())))


def keep_busy(kubeconfig, stop: threading.Event) -> None:
    """One client listing pods as fast as it is served (429s ignored)."""
    core = k8s.CoreV1Api(k8s_config.new_client_from_config(str(kubeconfig)))
    while not stop.is_set():
        try:
            core.list_pod_for_all_namespaces(limit=50)
        except Exception:  # noqa: BLE001 - turned away or not, it only keeps the level full
            pass


@pytest.fixture
def throttled_suite_user(healthy_bed, api):
    """The suite's user bound by the shipped role, its requests in a level with one share that
    rejects what does not fit, and neighbours of the same user keeping that level full."""
    rbac = [d for path in sorted((REPO / "manifests" / "rbac").glob("*.yaml")) for d in kubectl.docs(path)]
    kubectl.apply(api, rbac + THROTTLE)
    stop = threading.Event()
    neighbours = [threading.Thread(target=keep_busy, args=(healthy_bed.dir / "draconf-suite.kubeconfig", stop),
                                   daemon=True) for _ in range(NEIGHBOURS)]
    try:
        for thread in neighbours:
            thread.start()
        yield healthy_bed.dir / "draconf-suite.kubeconfig"
    finally:
        stop.set()
        for thread in neighbours:
            thread.join(timeout=30)
        kubectl.delete(api, THROTTLE + rbac)


def test_a_busy_api_server_makes_the_run_slower_not_red(throttled_suite_user, api, tmp_path):
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"name": "testbed-mirror", "image": TESTBED_IMAGE}))
    before = rejected_so_far(api)
    result = draconf("run", "--target", "kubeconfig", "--profile", str(profile), "--reports",
                     str(tmp_path / "reports"), "-k", SELECTION, env={"KUBECONFIG": str(throttled_suite_user)},
                     timeout=900)
    rejected = rejected_so_far(api) - before
    print(f"the API server turned away {rejected} of the suite's requests")
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{rejected} rejected\n" + output[-6000:]
    # The throttle acted: the API server turned the suite's user away, many times.
    assert rejected >= 20, f"the API server rejected only {rejected} request(s) of {SUITE_USER}: no throttle"
    rows = json.loads((tmp_path / "reports" / "summary.json").read_text())["tests"]
    assert len(rows) >= 10 and {r["outcome"] for r in rows} == {"passed"}, rows
    assert not any(r.get("diagnosis") in ("api-throttled", "timeout") for r in rows), rows
    assert "Traceback" not in output and "ApiException" not in output, output[-6000:]
    assert not namespaces.leftovers(api)
