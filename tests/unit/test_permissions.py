"""The suite's RBAC: one ClusterRole file, the code's API calls within it, the docs showing it,
and the preflight row and diagnosis that name what is missing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from draconf import permissions, preflight
from draconf.diagnosis import Facts, Failure, classify
from draconf.errors import DraconfError
from draconf.permissions import Permission, evaluate, gate_text, needed, permissions_of

REPO = Path(__file__).resolve().parents[2]

#: Python client API group attribute (draconf.kube.Api) -> API group.
GROUPS = {"core": "", "apps": "apps", "batch": "batch", "resource": "resource.k8s.io",
          "resource_beta": "resource.k8s.io", "admission": "admissionregistration.k8s.io"}
VERBS = {"read": "get", "list": "list", "create": "create", "delete": "delete", "patch": "patch",
         "replace": "update"}


def _plural(snake: str) -> str:
    word = snake.replace("_", "")
    if word.endswith("y"):
        return word[:-1] + "ies"
    return word + ("es" if word.endswith("s") else "s")


def permissions_of_call(group_attr: str, method: str) -> list[Permission]:
    """The permissions a kubernetes Python client method needs, from its name (the client is
    generated, so the names follow the API's paths); none for discovery."""
    group = GROUPS[group_attr]
    if method.startswith(("get_api_", "get_code")):
        return []
    if method == "connect_get_namespaced_pod_exec":
        # A websocket exec is a GET, authorized as get and (1.31+) also as create: a role
        # without get was refused on the bed ("cannot get resource pods/exec").
        return [Permission("get", "pods/exec"), Permission("create", "pods/exec")]
    if method == "read_namespaced_pod_log":
        return [Permission("get", "pods/log")]
    verb, _, rest = method.partition("_")
    rest = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    sub = ""
    if rest.endswith("_status"):
        rest, sub = rest.removesuffix("_status"), "/status"
    return [Permission(VERBS[verb], _plural(rest) + sub, group)]


def calls_in_code() -> set[Permission]:
    """Every API call of the suite's code (draconf/ outside the bed, suites/), and every kind
    its manifests create."""
    found: set[Permission] = set()
    files = [p for p in (REPO / "draconf").rglob("*.py") if "testbed" not in p.relative_to(REPO).parts]
    files += list((REPO / "suites").glob("*.py"))
    # api.exec_core() is the core group on a client of its own (kube.Api.exec_core)
    call = re.compile(r"\b(?:api|cluster)\.(core|exec_core\(\)|apps|batch|resource_beta|resource|admission)\.([a-z_]+)\b")
    for path in files:
        for group_attr, method in call.findall(path.read_text()):
            found.update(permissions_of_call(group_attr.replace("exec_core()", "core"), method))
    for path in (REPO / "manifests").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                group = doc["apiVersion"].rpartition("/")[0]
                found.add(Permission("create", doc["kind"].lower() + "s", group))
    # A Reflector (draconf.watched) lists what its list call reads, then watches it.
    reflected = re.compile(r"Reflector\(client\.(CoreV1Api|ResourceV1Api)\(\w+\)\.(list_[a-z_]+)")
    for path in files:
        for api_class, method in reflected.findall(path.read_text()):
            for p in permissions_of_call({"CoreV1Api": "core", "ResourceV1Api": "resource"}[api_class], method):
                found.update({p, Permission("watch", p.resource, p.group)})
    # Custom objects: the GPU Operator singletons are listed cluster-wide.
    for group, _, plural in (preflight.GPUCLUSTER, preflight.CLUSTERPOLICY):
        found.add(Permission("list", plural, group))
    return found


def test_the_shipped_role_covers_every_api_call_of_the_code():
    missing = sorted(calls_in_code() - set(needed()), key=str)
    assert not missing, f"add to manifests/rbac/clusterrole.yaml: {', '.join(map(str, missing))}"


def test_the_shipped_role_grants_nothing_the_code_does_not_use():
    # Least privilege: every grant is used (SelfSubjectAccessReview is the suite's own ask).
    unused = sorted(set(needed()) - calls_in_code(), key=str)
    assert not unused, f"granted but never used: {', '.join(map(str, unused))}"


def test_the_role_has_what_the_old_readme_lacked():
    role = set(needed())
    assert {Permission("list", "nodes"), Permission("get", "pods/log"),
            Permission("patch", "resourceclaims", "resource.k8s.io")} <= role
    # Only the fleet sweep watches (draconf.watched): the run's pods and every claim.
    assert {p for p in role if p.verb == "watch"} == {Permission("watch", "pods"),
                                                      Permission("watch", "resourceclaims", "resource.k8s.io")}


def test_the_docs_show_exactly_the_shipped_role():
    page = (REPO / "docs" / "rbac-and-runner.md").read_text()
    section = page.split("RBAC the suite needs", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    shown = permissions_of({"kind": "ClusterRole", **yaml.safe_load(block)})
    assert shown == needed()
    assert "manifests/rbac/clusterrole.yaml" in section.split("```")[0]


def test_the_binding_names_the_shipped_role():
    binding = yaml.safe_load((REPO / "manifests/rbac/clusterrolebinding.yaml").read_text())
    role = yaml.safe_load(permissions.CLUSTERROLE_FILE.read_text())
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}


@pytest.mark.parametrize("role, message", [
    ({"kind": "Role", "rules": []}, "one ClusterRole"),
    ({"kind": "ClusterRole", "rules": [{"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}]}, "wildcard"),
    ({"kind": "ClusterRole", "rules": [{"apiGroups": [""], "verbs": ["get"]}]}, "needs apiGroups"),
    ({"kind": "ClusterRole", "rules": []}, "grants nothing"),
])
def test_a_malformed_role_is_one_clear_error(role, message):
    with pytest.raises(DraconfError, match=message):
        permissions_of(role)


def test_an_unreadable_role_file_names_it(tmp_path):
    with pytest.raises(DraconfError, match="cannot read the suite's ClusterRole"):
        needed(tmp_path / "nope.yaml")


def test_every_permission_granted_is_a_pass():
    wanted = needed()
    result = evaluate(wanted, [])
    assert result.ok and result.diagnosis is None and str(len(wanted)) in result.summary


def test_missing_writes_are_named_in_one_failure_and_reads_still_run():
    wanted = needed()
    denied = [Permission("create", "resourceclaims", "resource.k8s.io"), Permission("create", "pods")]
    result = evaluate(wanted, denied, user="ci-bot")
    assert not result.ok and result.diagnosis == "permission-denied" and result.blocking
    assert result.summary.startswith(f"user ci-bot lacks 2 of {len(wanted)} permission(s)")
    assert "`create` on resourceclaims.resource.k8s.io, `create` on pods" in result.summary
    assert "read-only checks run" in result.summary
    assert result.evidence["missing"].splitlines() == ["`create` on resourceclaims.resource.k8s.io",
                                                       "`create` on pods"]


def test_a_missing_read_says_read_checks_may_not_be_evaluated():
    result = evaluate(needed(), [Permission("list", "nodes")])
    assert "read-only checks that need a missing read cannot be evaluated" in result.summary


def test_the_gate_names_every_missing_permission_or_lets_tests_run():
    assert gate_text([]) is None
    text = gate_text([Permission("create", "pods"), Permission("create", "pods/exec")])
    assert "`create` on pods, `create` on pods/exec" in text and "nothing was created" in text


def test_subresources_are_named_as_kubectl_names_them():
    assert Permission("get", "jobs/status", "batch").qualified == "jobs.batch/status"
    assert Permission("create", "pods/exec").qualified == "pods/exec"
    assert Permission("get", "pods").is_write is False and Permission("patch", "x").is_write


def test_the_permissions_check_is_registered_right_after_server_version():
    names = list(preflight.CHECKS)
    assert names.index("permissions") == names.index("server-version") + 1


def forbidden(message: str) -> Failure:
    """What a check failing on a 403 carries: the client's ApiException with the server's Status."""
    err = ApiException(status=403, reason="Forbidden")
    err.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "reason": "Forbidden",
                           "code": 403})
    return Failure.of(err)


def test_a_forbidden_request_is_diagnosed_permission_denied_with_verb_and_resource():
    code, reason = classify(Facts(failure=forbidden(
        'resourceclaims.resource.k8s.io is forbidden: User "draconf-suite" cannot create resource '
        '"resourceclaims" in API group "resource.k8s.io" in the namespace "draconf-x"')))
    assert code == "permission-denied"
    assert "user draconf-suite `create` on resourceclaims.resource.k8s.io" in reason


def test_a_forbidden_subresource_is_named():
    text = 'pods "p" is forbidden: User "u" cannot create resource "pods/exec" in API group "" in the namespace "n"'
    code, reason = classify(Facts(failure=forbidden(text)))
    assert code == "permission-denied" and "`create` on pods/exec" in reason
