"""Admission denials: the server's answer recognised, and the ``admission-denied`` rule over
recorded evidence (the messages kube-apiserver 1.36 gave on a bed with a policy denying pods)."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from draconf import admission, startup
from draconf.admission import AdmissionDenied, denial_in_text, is_refusal
from draconf.answers import ServerAnswer, carried_by
from draconf.diagnosis import EventFacts, Facts, Failure, QuotaFacts, classify
from draconf.workload import Start

#: Recorded: kube-apiserver's 403 for a pod a ValidatingAdmissionPolicy denies.
VAP_403 = ("pods \"single-gpu\" is forbidden: ValidatingAdmissionPolicy 'draconf-deny-gpu-pods' with binding "
           "'draconf-deny-gpu-pods' denied request: GPU pods are not allowed in these namespaces")
#: Recorded: the job controller's event for the same policy.
JOB_EVENT = ("Error creating: pods \"gpu-job-x7k2p\" is forbidden: ValidatingAdmissionPolicy "
             "'draconf-deny-gpu-pods' with binding 'draconf-deny-gpu-pods' denied request: GPU pods are "
             "not allowed in these namespaces")
RBAC_403 = ('pods is forbidden: User "ci" cannot create resource "pods" in API group "" in the '
            'namespace "draconf-x"')
POLICIES = {"draconf-deny-gpu-pods": "validates `false` (\"GPU pods are not allowed\"); binding "
                                     "draconf-deny-gpu-pods: Deny in namespaces app.kubernetes.io/managed-by=draconf"}


def api_error(status: int, message: str) -> ApiException:
    err = ApiException(status=status, reason="Forbidden" if status == 403 else "Invalid")
    err.body = json.dumps({"kind": "Status", "message": message, "code": status})
    return err


def test_policy_and_webhook_refusals_are_recognised_but_rbac_is_not():
    assert is_refusal(api_error(403, VAP_403))
    assert is_refusal(api_error(400, 'admission webhook "deny.example.com" denied the request: no'))
    assert is_refusal(api_error(422, 'Pod "p" is invalid: spec.containers: Required value'))
    assert not is_refusal(api_error(403, RBAC_403))
    assert not is_refusal(api_error(409, 'pods "p" already exists'))
    assert not is_refusal(api_error(500, "etcdserver: request timed out"))


def test_admission_denied_is_a_failure_without_traceback_naming_the_policy():
    err = AdmissionDenied("Pod", "single-gpu", 403, VAP_403)
    assert err.pytrace is False
    assert "ValidatingAdmissionPolicy 'draconf-deny-gpu-pods' (binding 'draconf-deny-gpu-pods')" in err.msg
    assert "GPU pods are not allowed" in err.msg
    assert not isinstance(err, Exception)  # not swallowed by the suite's `except Exception`


def test_rule_names_the_policy_from_the_servers_answer_and_reads_it():
    """The check that failed on the refused start carries the server's answer; its own wording
    ("the workload never started") says nothing to the rule."""
    start = Start(None, "refused", cause=startup.ADMISSION_DENIED,
                  answers=carried_by(AdmissionDenied("Pod", "single-gpu", 403, VAP_403)))
    failed = Failure.of(start.failed(f"found 0 pods (the workload never started: {start.failure})"))
    code, reason = classify(Facts(admission_policies=POLICIES, failure=failed))
    assert code == "admission-denied" and "these namespaces (the policy" in reason
    assert "draconf-deny-gpu-pods" in reason and "managed-by=draconf" in reason


def test_rule_reads_a_controllers_failed_create_event():
    facts = Facts(events=[EventFacts("FailedCreate", JOB_EVENT, kind="Job", name="gpu-job")])
    code, reason = classify(facts)
    assert code == "admission-denied" and "draconf-deny-gpu-pods" in reason


def test_rbac_forbidden_stays_permission_denied():
    assert classify(Facts(failure=Failure.of(api_error(403, RBAC_403))))[0] == "permission-denied"


def test_without_the_servers_answer_the_suites_words_are_not_a_denial():
    assert classify(Facts(admission_policies=POLICIES, failure=Failure.of(AssertionError(VAP_403))))[0] \
        != "admission-denied"


def test_the_suites_own_quota_is_not_an_admission_denial():
    text = 'resourceclaims "gpu-claim-b" is forbidden: exceeded quota: gpu-quota, requested: x=1'
    # The claim controller's create, refused: the check concluded on its event.
    failed = Failure(answers=(ServerAnswer(None, text, via="FailedResourceClaimCreation event"),))
    own = Facts(quotas=[QuotaFacts("gpu-quota", "ns", {"x": "1"}, {"x": "1"}, managed_by_draconf=True)],
                failure=failed)
    assert classify(own)[0] != "admission-denied"
    assert classify(Facts(failure=failed))[0] == "admission-denied"
    # The same quota in the namespace, put there by a policy engine (not labelled as draconf's).
    theirs = Facts(quotas=[QuotaFacts("gpu-quota", "ns", {"x": "1"}, {"x": "1"})], failure=failed)
    assert classify(theirs)[0] == "admission-denied"
    # Only in the events, a quota is a controller waiting for room, not a denial for good.
    waiting = Facts(events=[EventFacts("FailedResourceClaimCreation", text, kind="Pod", name="p")])
    assert classify(waiting)[0] != "admission-denied"


def test_denial_in_text_names_limitrange():
    assert denial_in_text('pods "p" is forbidden: maximum cpu usage per Container is 1, but limit is 2') \
        == "a LimitRange"


class _Listed:
    def __init__(self, items):
        self.items = items


class _Serializer:
    @staticmethod
    def sanitize_for_serialization(obj):
        return obj


class _AdmissionApi:
    """What admission.mutators reads, as the API server lists it (plain dicts)."""

    def __init__(self, policies=(), bindings=(), webhooks=()):
        self.api_client = _Serializer()
        self.admission = self
        self._policies, self._bindings, self._webhooks = list(policies), list(bindings), list(webhooks)

    def list_mutating_admission_policy(self):
        return _Listed(self._policies)

    def list_mutating_admission_policy_binding(self):
        return _Listed(self._bindings)

    def list_mutating_webhook_configuration(self):
        return _Listed(self._webhooks)


CLAIM_RULES = [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "operations": ["CREATE"]}]
SUITE_NS = {"app.kubernetes.io/managed-by": "draconf", "kubernetes.io/metadata.name": "draconf-r1-two-gpu"}


def _policy(name):
    return {"metadata": {"name": name}, "spec": {"matchConstraints": {"resourceRules": CLAIM_RULES}}}


def _binding(policy, selector=None):
    return {"metadata": {"name": policy}, "spec": {"policyName": policy,
                                                   "matchResources": {"namespaceSelector": selector or {}}}}


def test_only_the_mutators_bound_to_the_suites_namespace_are_named():
    """Three policies act on claim creates: one bound to the suite's namespaces, one bound to a
    team's, one with no binding at all (it acts nowhere); and a webhook limited to a team."""
    api = _AdmissionApi(
        policies=[_policy("lower-gpu-count"), _policy("team-quota"), _policy("unbound")],
        bindings=[_binding("lower-gpu-count", {"matchLabels": {"app.kubernetes.io/managed-by": "draconf"}}),
                  _binding("team-quota", {"matchLabels": {"team": "ml"}})],
        webhooks=[{"metadata": {"name": "inject"}, "webhooks": [
            {"name": "inject.example.com", "rules": CLAIM_RULES, "namespaceSelector": {"matchLabels": {"team": "ml"}}},
            {"name": "all.example.com", "rules": CLAIM_RULES}]}])
    assert admission.mutators(api, [("resource.k8s.io", "resourceclaims")], SUITE_NS) == [
        "MutatingAdmissionPolicy 'lower-gpu-count'", "MutatingWebhookConfiguration 'inject' (webhook all.example.com)"]
    # Where the namespace could not be read: every one acting on those creates, as before.
    assert len(admission.mutators(api, [("resource.k8s.io", "resourceclaims")])) == 5
    assert admission.mutators(api, [("", "pods")], SUITE_NS) == []


def test_object_selectors_are_evaluated_against_the_suites_live_objects():
    """A policy bound everywhere but selecting objects labelled team=ml, and a webhook whose
    objectSelector excludes the suite's run label: neither acted on the suite's claims.  One
    with match conditions (CEL over the request, not evaluated) is named with that said."""
    everywhere = _binding("team-only")
    everywhere["spec"]["matchResources"]["objectSelector"] = {"matchLabels": {"team": "ml"}}
    conditional = _policy("conditional")
    conditional["spec"]["matchConditions"] = [{"name": "gpu", "expression": "true"}]
    api = _AdmissionApi(
        policies=[_policy("team-only"), conditional],
        bindings=[everywhere, _binding("conditional")],
        webhooks=[{"metadata": {"name": "inject"}, "webhooks": [
            {"name": "not-ours.example.com", "rules": CLAIM_RULES, "objectSelector": {"matchExpressions": [
                {"key": "draconf.dev/run", "operator": "DoesNotExist"}]}}]}])
    ours = [{"draconf.dev/run": "r1", "app.kubernetes.io/managed-by": "draconf"}]
    assert admission.mutators(api, [("resource.k8s.io", "resourceclaims", ours)], SUITE_NS) == [
        "MutatingAdmissionPolicy 'conditional' (match conditions not evaluated)"]
    # A claim the policy's selector does select, and labels not known: named.
    assert "MutatingAdmissionPolicy 'team-only'" in admission.mutators(
        api, [("resource.k8s.io", "resourceclaims", ours + [{"team": "ml"}])], SUITE_NS)
    assert len(admission.mutators(api, [("resource.k8s.io", "resourceclaims")], SUITE_NS)) == 3
