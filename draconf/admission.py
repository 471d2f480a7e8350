"""The API server's refusal of an object the suite creates: a verdict, never a wait or a traceback.

A ValidatingAdmissionPolicy, an admission webhook, a ResourceQuota or a LimitRange that the
cluster's admins set up may refuse what the suite creates.  The server answers at once (400,
403 or 422) with a message naming the policy or webhook; the suite quotes it and fails the check
right there (:class:`AdmissionDenied`, no traceback), and the diagnosis is ``admission-denied``.
A 403 that is the credentials' (``User "x" cannot create resource ...``) is not a denial here:
it stays the permission gate's (:mod:`draconf.permissions`, diagnosis ``permission-denied``).

The same refusal reaches a controller's objects later (a Job's or ReplicaSet's pods): the
controller records it as a ``FailedCreate`` event, which :func:`denial_in_text` recognises.

>>> vap = ('pods "single-gpu" is forbidden: ValidatingAdmissionPolicy \\'no-gpu-pods\\' with '
...        "binding 'no-gpu-pods' denied request: GPU pods are not allowed here")
>>> denial_in_text(vap)
"ValidatingAdmissionPolicy 'no-gpu-pods' (binding 'no-gpu-pods')"
>>> denial_in_text('admission webhook "deny.example.com" denied the request: no')
'admission webhook "deny.example.com"'
>>> denial_in_text('pods "p" is forbidden: User "ci" cannot create resource "pods"') is None
True
"""

from __future__ import annotations

import re
from typing import Iterable

from draconf.errors import server_message  # noqa: F401  (re-exported: the refusal's words)
from _pytest.outcomes import Failed  # pytest.fail.Exception, by a name a type checker follows

#: HTTP statuses of an admission or validation refusal of a create.
REFUSAL_STATUSES = frozenset({400, 403, 422})

_VAP = re.compile(r"ValidatingAdmissionPolicy '([^']+)' with binding '([^']+)' denied request")
_WEBHOOK = re.compile(r'admission webhook \\?"([^"\\]+)\\?" denied the request')
_LIMITRANGE = re.compile(r"(?:maximum|minimum) \S+ usage per (?:Container|Pod) is|"
                         r"must be less than or equal to \S+ limit|LimitRange")
_QUOTA = re.compile(r"exceeded quota: ([\w.-]+)")
#: The credentials' 403 (apiserver endpoints/handlers/responsewriters: forbiddenMessage), also
#: as it appears JSON-escaped in a body: the permission gate's, not admission's.  Its groups:
#: user, verb, resource, API group (draconf.answers.ServerAnswer.forbidden).
FORBIDDEN = re.compile(r'User \\?"([^"\\]*)\\?" cannot (\w+) resource \\?"([^"\\]+)\\?"'
                       r'(?: in API group \\?"([^"\\]*)\\?")?')


def denial_in_text(text: str) -> str | None:
    """The admission control named by a server message (policy with binding, webhook, quota,
    LimitRange), or None when ``text`` holds no admission denial.

    >>> denial_in_text('pods "p" is forbidden: exceeded quota: gpu-quota, requested: ...')
    'ResourceQuota gpu-quota'
    """
    text = text or ""
    if m := _VAP.search(text):
        return f"ValidatingAdmissionPolicy '{m.group(1)}' (binding '{m.group(2)}')"
    if m := _WEBHOOK.search(text):
        return f'admission webhook "{m.group(1)}"'
    if m := _QUOTA.search(text):
        return f"ResourceQuota {m.group(1)}"
    if _LIMITRANGE.search(text):
        return "a LimitRange"
    return None


def is_refusal(err) -> bool:
    """True for a create the server refused on validation or admission (not for the
    credentials' 403, a conflict, a missing API or a transient error)."""
    status = getattr(err, "status", None)
    if status not in REFUSAL_STATUSES:
        return False
    message = server_message(err)
    if status == 403 and (FORBIDDEN.search(message) or not denial_in_text(message)):
        return False
    return True


class AdmissionDenied(Failed):
    """The server refused an object the suite created; a test failure whose message is the
    server's answer (pytest prints no traceback for it)."""

    def __init__(self, kind: str, name: str, status: int, message: str):
        by = denial_in_text(message)
        self.kind, self.name, self.status, self.server_message = kind, name, status, message
        text = (f"the API server refused to create {kind} {name} (HTTP {status})"
                f"{' by ' + by if by else ''}: {message}")
        super().__init__(msg=text, pytrace=False)


AdmissionDenied.__module__ = "builtins"  # as NoVerdict: the message, no module path


def acts_on_create(rules: list[dict] | None, group: str, resource: str) -> bool:
    """Whether admission rules (a policy's ``matchConstraints.resourceRules``, a webhook's
    ``rules``) cover creating ``resource`` of API ``group`` ("" for the core group).

    >>> acts_on_create([{"apiGroups": [""], "resources": ["pods"], "operations": ["CREATE"]}], "", "pods")
    True
    >>> acts_on_create([{"apiGroups": ["*"], "resources": ["*"], "operations": ["*"]}], "resource.k8s.io", "resourceclaims")
    True
    >>> acts_on_create([{"apiGroups": [""], "resources": ["namespaces"], "operations": ["CREATE"]}], "", "pods")
    False
    """
    for rule in rules or []:
        if ({group, "*"} & set(rule.get("apiGroups") or [])) and ({resource, "*"} & set(rule.get("resources") or [])) \
                and ({"CREATE", "*"} & set(rule.get("operations") or [])):
            return True
    return False


def selects(selector: dict | None, labels: dict | None) -> bool:
    """Whether a label selector (``matchLabels``, ``matchExpressions``) selects an object with
    ``labels``; an absent or empty selector selects everything, as in admission's
    ``namespaceSelector``.

    >>> ns = {"app.kubernetes.io/managed-by": "draconf", "kubernetes.io/metadata.name": "d-1"}
    >>> selects(None, ns), selects({"matchLabels": {"app.kubernetes.io/managed-by": "draconf"}}, ns)
    (True, True)
    >>> selects({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
    ...                                "values": ["d-1"]}]}, ns)
    False
    >>> selects({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, ns)
    False
    """
    selector, labels = selector or {}, labels or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values or op == "NotIn" and key in labels and labels[key] in values \
                or op == "Exists" and key not in labels or op == "DoesNotExist" and key in labels:
            return False
    return True


def mutators(api, creates: Iterable[tuple], namespace_labels: dict | None = None) -> list[str]:
    """The mutating admission policies and webhooks of the cluster that act on creates of any of
    ``creates``: who may have rewritten what the suite applied (read when a live object differs
    from it; what could not be read is said, not guessed).

    With ``namespace_labels`` (the labels of the namespace the objects were made in), only those
    whose namespace selectors select it: a policy through a binding that does, a webhook whose
    ``namespaceSelector`` does.  ``creates`` are (API group, resource), or (API group, resource,
    the labels of each live object of it the suite made); where the labels are given, also
    only those whose object selectors select one of them (the policy's ``matchConstraints`` and
    the binding's ``matchResources`` together, a webhook's ``objectSelector``).  Match
    conditions are CEL over the whole request, which the suite does not evaluate: a mutator with
    any is named with "(match conditions not evaluated)".

    Its managed fields cannot name the mutator instead: the API server records them before
    mutating admission runs, for every verb since Kubernetes 1.18 (kubernetes/kubernetes#87672,
    the create handler made like update and patch), so a field a webhook or policy set belongs
    to whoever sent the request (here the suite itself)."""
    found: list[str] = []
    wanted: list[tuple[str, str, list[dict] | None]] = [(c[0], c[1], c[2] if len(c) > 2 else None) for c in creates]

    def selected(selector_pairs, labels_of) -> bool:
        """Whether, for some live object (labels unknown: any), every object selector of a
        pair holds."""
        if labels_of is None:
            return True
        return any(all(selects(sel, labels) for sel in selector_pairs) for labels in labels_of)

    def policies():
        bindings = [api.api_client.sanitize_for_serialization(b)
                    for b in api.admission.list_mutating_admission_policy_binding().items]
        for item in api.admission.list_mutating_admission_policy().items:
            obj = api.api_client.sanitize_for_serialization(item)
            spec = obj.get("spec") or {}
            constraints = spec.get("matchConstraints") or {}
            bound = [(b.get("spec") or {}).get("matchResources") or {} for b in bindings
                     if (b.get("spec") or {}).get("policyName") == obj["metadata"]["name"]]

            def acts(group, resource, labels_of, constraints=constraints, bound=bound):
                if not acts_on_create(constraints.get("resourceRules"), group, resource):
                    return False
                if namespace_labels is None:
                    return True
                return selects(constraints.get("namespaceSelector"), namespace_labels) and any(
                    selects(m.get("namespaceSelector"), namespace_labels)
                    and selected([constraints.get("objectSelector"), m.get("objectSelector")], labels_of)
                    for m in bound)
            yield obj, None, acts, bool(spec.get("matchConditions"))

    def webhooks():
        for item in api.admission.list_mutating_webhook_configuration().items:
            obj = api.api_client.sanitize_for_serialization(item)
            for w in obj.get("webhooks") or []:
                def acts(group, resource, labels_of, w=w):
                    return acts_on_create(w.get("rules"), group, resource) and (
                        namespace_labels is None or selects(w.get("namespaceSelector"), namespace_labels)
                        and selected([w.get("objectSelector")], labels_of))
                yield obj, w.get("name"), acts, bool(w.get("matchConditions"))

    for kind, read in (("MutatingAdmissionPolicy", policies), ("MutatingWebhookConfiguration", webhooks)):
        try:
            acting = list(read())
        except Exception as err:  # noqa: BLE001 - any failure here only leaves the culprit unnamed
            found.append(f"{kind}s could not be read ({getattr(err, 'status', None) or type(err).__name__})")
            continue
        for obj, webhook, acts, conditional in acting:
            if any(acts(g, r, labels_of) for g, r, labels_of in wanted):
                found.append(f"{kind} '{obj['metadata']['name']}'" + (f" (webhook {webhook})" if webhook else "")
                             + (" (match conditions not evaluated)" if conditional else ""))
    return found
