"""What the suite may do with the credentials in use, asked of the server before anything runs.

The permissions the suite needs are defined once, in ``manifests/rbac/clusterrole.yaml`` (the
ClusterRole users bind); :func:`needed` reads them from there.  :func:`review` asks the API
server, with one SelfSubjectAccessReview per verb and resource (the server's own authorizer
answers, whatever it is: RBAC, webhook, ...), which of them the credentials lack, and
:func:`evaluate` turns the answer into one preflight row naming every missing permission
(diagnosis ``permission-denied``).

The run is gated on it: a test that creates anything needs every permission of the role, so
with any missing it is skipped naming them (:func:`gate_reason`), before it creates a thing;
the read-only checks (preflight, audit) still run.

>>> role = {"kind": "ClusterRole", "rules": [
...     {"apiGroups": [""], "resources": ["pods", "pods/exec"], "verbs": ["get", "create"]}]}
>>> [str(p) for p in permissions_of(role)]
['`get` on pods', '`create` on pods', '`get` on pods/exec', '`create` on pods/exec']
>>> r = evaluate(permissions_of(role), [Permission("create", "pods")], user="ci")
>>> r.ok, r.diagnosis
(False, 'permission-denied')
>>> print(r.summary.split(";")[0])
user ci lacks 1 of 4 permission(s) the suite needs: `create` on pods
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pytest
import yaml

from draconf import bundle
from draconf.errors import DraconfError

#: The ClusterRole users bind: the one definition of what the suite needs (in the checkout or
#: the installed package, draconf.bundle).
CLUSTERROLE_FILE = bundle.CLUSTERROLE
#: Verbs that only read; a role missing only these still lets nothing be created by mistake.
READ_VERBS = frozenset({"get", "list", "watch"})
#: Seconds each review may take.
REQUEST_TIMEOUT = 10


@dataclass(frozen=True)
class Permission:
    """``verb`` on ``resource`` (``pods``, ``pods/exec``) in API ``group`` (``""`` = core)."""

    verb: str
    resource: str
    group: str = ""

    @property
    def is_write(self) -> bool:
        return self.verb not in READ_VERBS

    @property
    def qualified(self) -> str:
        """``resourceclaims.resource.k8s.io``, ``pods/exec`` (as ``kubectl auth can-i`` names it)."""
        base, _, sub = self.resource.partition("/")
        name = f"{base}.{self.group}" if self.group else base
        return f"{name}/{sub}" if sub else name

    def __str__(self) -> str:
        return f"`{self.verb}` on {self.qualified}"


def permissions_of(role: dict) -> list[Permission]:
    """Every (verb, resource, group) a ClusterRole grants, in the role's order; bad shapes
    raise :class:`DraconfError`.  Wildcards and resourceNames are refused: the shipped role
    is least privilege, so it names each one."""
    if not isinstance(role, dict) or role.get("kind") != "ClusterRole":
        raise DraconfError("the RBAC file must hold one ClusterRole")
    out: list[Permission] = []
    for i, rule in enumerate(role.get("rules") or []):
        try:
            groups, resources, verbs = rule["apiGroups"], rule["resources"], rule["verbs"]
        except (KeyError, TypeError):
            raise DraconfError(f"rule {i} of the ClusterRole needs apiGroups, resources and verbs") from None
        if "*" in [*groups, *resources, *verbs] or rule.get("resourceNames"):
            raise DraconfError(f"rule {i} of the ClusterRole uses a wildcard or resourceNames; "
                               "name each verb and resource")
        for group in groups:
            for resource in resources:
                for verb in verbs:
                    permission = Permission(verb, resource, group)
                    if permission not in out:
                        out.append(permission)
    if not out:
        raise DraconfError("the ClusterRole grants nothing")
    return out


def needed(path: Path = CLUSTERROLE_FILE) -> list[Permission]:
    """What the suite needs: the rules of ``manifests/rbac/clusterrole.yaml``."""
    try:
        role = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise DraconfError(f"cannot read the suite's ClusterRole {path}: {err}") from None
    try:
        return permissions_of(role)
    except DraconfError as err:
        raise DraconfError(f"{path}: {err}") from None


def _review_body(permission: Permission):
    from kubernetes import client
    resource, _, subresource = permission.resource.partition("/")
    return client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(
            verb=permission.verb, group=permission.group, resource=resource,
            subresource=subresource or None)))


def review(api, permissions: Iterable[Permission]) -> list[Permission]:
    """The ``permissions`` the server says the credentials lack, cluster-wide (no namespace:
    the suite creates namespaces of its own, so a grant in some namespaces is not enough).

    API errors propagate (ApiException, urllib3 errors): the caller decides what a review
    that cannot be made means."""
    from kubernetes import client
    authz = client.AuthorizationV1Api(api.api_client)
    denied = []
    for permission in permissions:
        answer = authz.create_self_subject_access_review(_review_body(permission),
                                                         _request_timeout=REQUEST_TIMEOUT)
        if not (answer.status and answer.status.allowed):
            denied.append(permission)
    return denied


def whoami(api) -> str | None:
    """The user name the server sees (SelfSubjectReview, ``kubectl auth whoami``); None if it
    cannot say."""
    from kubernetes import client
    try:
        answer = client.AuthenticationV1Api(api.api_client).create_self_subject_review(
            client.V1SelfSubjectReview(), _request_timeout=REQUEST_TIMEOUT)
        return answer.status.user_info.username
    except Exception:  # noqa: BLE001 - the name is a courtesy in the message
        return None


def evaluate(wanted: Iterable[Permission], denied: Iterable[Permission], user: str | None = None):
    """The preflight row: every needed permission granted, or one failure naming all missing."""
    from draconf.preflight.result import check_result
    wanted, denied = list(wanted), list(denied)
    who = f"user {user}" if user else "the credentials in use"
    evidence = {"needed (manifests/rbac/clusterrole.yaml)": "\n".join(str(p) for p in wanted)}
    if not denied:
        return check_result(True, f"{who} may do all {len(wanted)} things the suite needs "
                                  "(SelfSubjectAccessReview per verb and resource)", evidence=evidence)
    evidence[MISSING] = "\n".join(str(p) for p in denied)
    writes_only = all(p.is_write for p in denied)
    then = ("the tests that create objects are skipped; read-only checks run" if writes_only else
            "the tests that create objects are skipped; read-only checks that need a missing "
            "read cannot be evaluated")
    return check_result(False, f"{who} lacks {len(denied)} of {len(wanted)} permission(s) the suite "
                               f"needs: {', '.join(str(p) for p in denied)}; {then}. Bind the "
                               f"ClusterRole in manifests/rbac/clusterrole.yaml to this identity "
                               "(manifests/rbac/clusterrolebinding.yaml) and rerun",
                        "permission-denied", evidence)


def gate_text(denied: Iterable[Permission | str]) -> str | None:
    """Why a test that creates objects cannot run (None: it can).

    >>> gate_text([Permission("create", "resourceclaims", "resource.k8s.io")])
    'the credentials in use lack `create` on resourceclaims.resource.k8s.io (preflight permissions [permission-denied]); nothing was created'
    """
    denied = list(denied)
    if not denied:
        return None
    return (f"the credentials in use lack {', '.join(str(p) for p in denied)} (preflight "
            "permissions [permission-denied]); nothing was created")


#: The evidence entry of the preflight ``permissions`` row that lists what is missing, one
#: permission per line (:func:`evaluate`).
MISSING = "missing"


def gate_from_reading(results) -> tuple[bool, str | None]:
    """The gate as the run's preflight reading (:class:`~draconf.preflight.result.CheckResult`
    list, shared by every pytest-xdist worker) says it: (whether the reading has a verdict on
    the permissions, and the gate's text).  A row that could not be evaluated gives no verdict
    on them, and the gate then reviews them itself.

    >>> from draconf.preflight.result import CheckResult
    >>> row = CheckResult("permissions", False, "blocking", "lacks 1", "permission-denied",
    ...                   {MISSING: "`create` on pods"})
    >>> gate_from_reading([row])
    (True, 'the credentials in use lack `create` on pods (preflight permissions [permission-denied]); nothing was created')
    >>> gate_from_reading([CheckResult("permissions", True, "blocking", "may do all")])
    (True, None)
    >>> gate_from_reading([CheckResult("permissions", False, "blocking", "refused", inconclusive=True)])
    (False, None)
    """
    row = next((r for r in results if r.name == "permissions"), None)
    if row is None or row.inconclusive or not row.applicable:
        return False, None
    if row.ok:
        return True, None
    return True, gate_text(line for line in row.evidence.get(MISSING, "").splitlines() if line.strip())


def remember_gate(config, results) -> None:
    """Keep the gate the run's preflight reading decided (:func:`gate_from_reading`) for
    :func:`gate_reason`: the gate, the preflight row and every worker then judge the
    credentials on one review."""
    judged, text = gate_from_reading(results)
    if judged:
        config.stash[GATE_KEY] = text


def gate_reason(config, api) -> str | None:
    """For a pytest session: why tests that create objects must be skipped, or None.

    As the run's preflight reading decided it where the session has read it
    (:func:`remember_gate`), else reviewed once per process; kept in ``config.stash``.  A
    review that cannot be made (the server refuses SelfSubjectAccessReview, or errs) blocks
    nothing: the tests then meet the server's own answers."""
    if GATE_KEY not in config.stash:
        wanted = needed()  # a broken role file is a DraconfError, never "nothing missing"
        try:
            config.stash[GATE_KEY] = gate_text(review(api, wanted))
        except Exception:  # noqa: BLE001 - see the docstring
            config.stash[GATE_KEY] = None
    return config.stash[GATE_KEY]


#: Where :func:`gate_reason` keeps its answer for the session.
GATE_KEY = pytest.StashKey["str | None"]()
