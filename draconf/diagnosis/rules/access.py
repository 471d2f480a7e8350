"""Rules for a suite or control plane that cannot act at all: the API server unavailable, the
suite's own requests refused (RBAC, admission control), or no scheduler or controller acting."""

from __future__ import annotations

import re

from draconf.admission import denial_in_text
from draconf.diagnosis.facts import Facts
from draconf.pods import Pod


def rule_api(facts: Facts):
    if facts.api_error:
        return ("api-unavailable", f"The API server did not answer ({facts.api_error}): check that "
                "it is running and reachable with this kubeconfig.")
    if not facts.resource_api:
        served = ", ".join(facts.resource_versions) or "no version"
        return ("api-unavailable", f"The API server serves resource.k8s.io {served} but not v1: "
                "use Kubernetes 1.34 or later, or enable resource.k8s.io/v1 with --runtime-config.")
    return None


def rule_api_throttled(facts: Facts):
    """The server's answer to one of the suite's requests was still "too many requests" (or a
    5xx) after the client's retries: a busy server, not a cluster failure."""
    busy = next((a for a in facts.failure.answers if a.throttled), None)
    if busy is None:
        return None
    return ("api-throttled", "The API server kept turning the suite's requests away ("
            + " ".join(str(busy).split())[:200] + ") after retries with backoff: it is "
            "overloaded or API Priority and Fairness limits this user; rerun when it is less busy.")


def rule_permission_denied(facts: Facts):
    """The server refused one of the suite's own requests (403): the credentials, not the
    cluster, stopped the check.  Read from the server's answer, which names user, verb and
    resource."""
    denied, user = [], None
    for answer in facts.failure.answers:
        for who, verb, resource, group in answer.forbidden():
            user = who  # the answers name one identity: the suite's own
            base, _, sub = resource.partition("/")
            name = (f"{base}.{group}" if group else base) + (f"/{sub}" if sub else "")
            item = f"`{verb}` on {name}"
            if item not in denied:
                denied.append(item)
    if not denied:
        return None
    return ("permission-denied", f"The API server refused user {user} {', '.join(denied)} (403 "
            "Forbidden): bind the ClusterRole in manifests/rbac/clusterrole.yaml to this identity "
            "and rerun; this says nothing about the cluster's DRA.")


def rule_admission_denied(facts: Facts):
    """The server's answer (to the suite's create, or a controller's, as an event) names the
    admission control that refused it.  A quota the suite set up in the namespace (labelled
    managed-by draconf) is the quota checks' own subject, not an admin's denial; one a policy
    engine put there is."""
    # The answers the failing check concluded on are its verdict, whoever made the request.  A
    # controller held back by a quota retries until there is room (the quota checks wait for
    # that): in the events alone, only a policy, webhook or LimitRange is a denial for good.
    texts = [(a.message, True) for a in facts.failure.answers] + [
        (e.message, False) for e in reversed(facts.events)
        if e.reason in ("FailedCreate", "FailedResourceClaimCreation")]
    own_quotas = {q.name for q in facts.quotas if q.managed_by_draconf}
    for text, concluded in texts:
        by = denial_in_text(text)
        if not by or (by.startswith("ResourceQuota ")
                      and (not concluded or by.split(" ", 1)[1] in own_quotas)):
            continue
        policy = re.search(r"ValidatingAdmissionPolicy '([^']+)'", by)
        hook = re.search(r'admission webhook "([^"]+)"', by)
        detail = ""
        if policy and policy.group(1) in facts.admission_policies:
            detail = f" (the policy {facts.admission_policies[policy.group(1)]})"
        elif hook and hook.group(1) in facts.admission_webhooks:
            detail = f" (the webhook is {facts.admission_webhooks[hook.group(1)]})"
        said = " ".join(text.split())
        quoted = said[said.find("denied"):] if "denied" in said else said
        return ("admission-denied",
                f"{by} refused the suite's objects: {quoted[:300]}{detail}: this is the cluster's "
                "admission control, set up outside draconf; exempt draconf's namespaces (label "
                "app.kubernetes.io/managed-by=draconf) from it or run where it does not apply.")
    return None


def rule_control_plane(facts: Facts):
    """Nothing acted on the workload for ``facts.stall_after`` seconds while the API server
    answered: the claim controller generated no claim (controller-manager), or no scheduler
    bound the pods or wrote their PodScheduled condition (scheduler).  Before every
    scheduling rule: a stopped scheduler leaves the pods looking like any unplaced pod."""
    live = [p for p in facts.pods if not p.is_deleting]

    def old(p: Pod) -> bool:
        age = p.age
        return age is not None and age >= facts.stall_after

    def health(component: str) -> str:
        seen = facts.control_plane.get(component)
        return f" {component}: {seen}." if seen else ""

    if facts.namespace_without_sa_for is not None and facts.namespace_without_sa_for >= facts.stall_after:
        return ("controller-manager-unavailable",
                f"Namespace {facts.namespace} has had no ServiceAccount `default` for "
                f"{facts.namespace_without_sa_for:.0f}s, so no pod can be created in it: the "
                f"serviceaccount controller of kube-controller-manager is not acting."
                f"{health('kube-controller-manager')} Check its process or pod and its logs.")
    if not live:
        return None

    ungenerated = [p for p in live if p.template_claims_not_generated and not p.node and old(p)]
    if ungenerated and not any(e.reason == "FailedResourceClaimCreation" for e in facts.events):
        names = ", ".join(f"{p.name} ({', '.join(p.template_claims_not_generated)})" for p in ungenerated)
        return ("controller-manager-unavailable",
                f"No ResourceClaim was generated for {names} in {facts.stall_after:.0f}s or more and "
                f"no FailedResourceClaimCreation event was recorded: the resourceclaim controller of "
                f"kube-controller-manager is not acting.{health('kube-controller-manager')} Check its "
                "process or pod and its logs.")
    if all(p.unseen_by_scheduler and old(p) for p in live) and not any(
            e.reason in ("Scheduled", "FailedScheduling") for e in facts.events):
        names = ", ".join(p.name for p in live)
        return ("scheduler-unavailable",
                f"No scheduler acted on {names} in {facts.stall_after:.0f}s or more: no binding, no "
                f"PodScheduled condition, no Scheduled/FailedScheduling event, while the API server "
                f"answered.{health('kube-scheduler')} Check kube-scheduler's process or pod and its logs.")
    return None
