"""The objects the simulated NVIDIA driver writes, built apart from the agent that writes them
(:mod:`draconf.testbed.agent`), as e2e's builders are apart from its checks: the KWOK nodes'
ResourceSlices with their health taints, the driver's identity and RBAC after its install, and
the admission policies of the admin-access-everywhere and claims-stripped faults."""

from __future__ import annotations

from draconf.namespaces import MANAGED_BY
from draconf.quantity import format_binary
from draconf.testbed import pki
from draconf.testbed.nvidia import DRIVER, PLUGIN_DAEMONSET, PLUGIN_NAMESPACE, semver


def resource_slice(node: dict, drift: bool) -> dict:
    """The one-slice pool the NVIDIA kubelet plugin publishes for ``node``."""
    devices = []
    for gpu in node["gpus"]:
        attributes = {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu["uuid"]},
            "productName": {"string": gpu["productName"]},
            "brand": {"string": gpu["brand"]},
            "architecture": {"string": gpu["architecture"]},
            "cudaComputeCapability": {"version": semver(gpu["cudaComputeCapability"])},
            "driverVersion": {"version": semver(node["driverVersion"])},
            "cudaDriverVersion": {"version": semver(node["cudaDriverVersion"])},
            "resource.kubernetes.io/pciBusID": {"string": gpu["pciBusID"]},
            "resource.kubernetes.io/pcieRoot": {"string": gpu["pcieRoot"]},
        }
        if drift:
            del attributes["productName"]
        devices.append({"name": f"gpu-{gpu['minor']}", "attributes": attributes,
                        "capacity": {"memory": {"value": format_binary(gpu["memoryBytes"])}},
                        **({"taints": health_taints(gpu["health"])} if gpu.get("health") else {})})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node['name']}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node["name"],
                     "pool": {"name": node["name"], "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def health_taints(health: dict) -> list[dict]:
    """The device taints of a GPU with these NVML health events, as the plugin on real nodes
    publishes them (gomod/gpu-driver deviceinfo.go healthTaints: the NVIDIA driver's keys); the
    API server stamps timeAdded.

    >>> health_taints({"xid": 79})
    [{'key': 'gpu.nvidia.com/xid', 'value': '79', 'effect': 'NoSchedule'}]
    >>> health_taints({"lost": True})
    [{'key': 'gpu.nvidia.com/gpu-lost', 'effect': 'NoSchedule'}]
    """
    taints = []
    if health.get("xid"):
        taints.append({"key": f"{DRIVER}/xid", "value": str(health["xid"]), "effect": "NoSchedule"})
    if health.get("lost"):
        taints.append({"key": f"{DRIVER}/gpu-lost", "effect": "NoSchedule"})
    return taints


#: The label the admin-access-everywhere fault puts on every new namespace.
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def admin_access_everywhere_policy() -> list[dict]:
    """A MutatingAdmissionPolicy and its binding that label every namespace on create
    ``resource.kubernetes.io/admin-access: "true"``.

    >>> [d["kind"] for d in admin_access_everywhere_policy()]
    ['MutatingAdmissionPolicy', 'MutatingAdmissionPolicyBinding']
    """
    name = "grant-gpu-admin-access"
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["namespaces"]}]},
                  "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                  "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                      "expression": 'Object{metadata: Object.metadata{labels: {"%s": "true"}}}'
                                    % ADMIN_ACCESS_LABEL}}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": name}, "spec": {"policyName": name}},
    ]


#: The label every namespace of a draconf run carries (draconf.namespaces): what an admin's policy
#: aimed at "the conformance suite's pods" would select.
SUITE_NAMESPACE_LABEL = dict(MANAGED_BY)

#: Removes a pod's resourceClaims and every container's resources.claims (a container may only
#: name claims the pod lists), by index: CEL's two-variable transformList gives the index.
STRIP_CLAIMS = ('[JSONPatch{op: "remove", path: "/spec/resourceClaims"}] + '
                'object.spec.containers.transformList(i, c, has(c.resources) && has(c.resources.claims), '
                'JSONPatch{op: "remove", path: "/spec/containers/" + string(i) + "/resources/claims"})')


def suite_namespace_patch_policy(name: str, group: str, resource: str, condition: tuple[str, str],
                                 patch: str) -> list[dict]:
    """A MutatingAdmissionPolicy that JSON-patches every ``resource`` (of API ``group``) created
    in the suite's namespaces and matching ``condition`` (its name, its CEL), and its binding
    (selecting those namespaces by :data:`SUITE_NAMESPACE_LABEL`): what an admin's rule aimed
    at "the conformance suite" looks like."""
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": [resource]}]},
                  "matchConditions": [{"name": condition[0], "expression": condition[1]}],
                  "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                  "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name,
                  "matchResources": {"namespaceSelector": {"matchLabels": dict(SUITE_NAMESPACE_LABEL)}}}},
    ]


def claims_stripped_policy() -> list[dict]:
    """A MutatingAdmissionPolicy and its binding that strip the DRA claims from every pod
    created in the suite's namespaces (an admin's "no GPUs for test namespaces" rule, or a
    webhook gone wrong): the pods run, without GPUs.

    >>> policy, binding = claims_stripped_policy()
    >>> policy["spec"]["matchConditions"][0]["expression"], binding["spec"]["matchResources"]["namespaceSelector"]
    ('has(object.spec.resourceClaims)', {'matchLabels': {'app.kubernetes.io/managed-by': 'draconf'}})
    """
    return suite_namespace_patch_policy("strip-gpu-claims-from-test-namespaces", "", "pods",
                                        ("has-claims", "has(object.spec.resourceClaims)"), STRIP_CLAIMS)


#: Sets every device request's count above 1 to 1, by index (transformList gives it).
ONE_DEVICE_EACH = ('object.spec.devices.requests.transformList(i, r, '
                   'has(r.exactly) && has(r.exactly.count) && r.exactly.count > 1, '
                   'JSONPatch{op: "replace", path: "/spec/devices/requests/" + string(i) + "/exactly/count", '
                   'value: 1})')


def claim_count_lowered_policy() -> list[dict]:
    """A MutatingAdmissionPolicy and its binding that make every claim created in the suite's
    namespaces ask for one device per request (an admin's "one GPU per test claim" rule): the
    claims made from a template asking for two GPUs are allocated one, and a check that judged
    the live claim alone would find it right.

    >>> policy, binding = claim_count_lowered_policy()
    >>> policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"], binding["spec"]["policyName"]
    (['resourceclaims'], 'lower-gpu-count-in-test-namespaces')
    """
    return suite_namespace_patch_policy(
        "lower-gpu-count-in-test-namespaces", "resource.k8s.io", "resourceclaims",
        ("asks-for-more-than-one",
         "object.spec.devices.requests.exists(r, has(r.exactly) && has(r.exactly.count) && r.exactly.count > 1)"),
        ONE_DEVICE_EACH)


#: What the agent runs as once the install is done (a key of :data:`pki.IDENTITIES`).
DRIVER_IDENTITY = "nvidia-dra-driver"
#: Its ServiceAccount: the identity's user name is that ServiceAccount's.
DRIVER_SERVICE_ACCOUNT = pki.IDENTITIES[DRIVER_IDENTITY][0].rsplit(":", 1)[1]


def driver_rbac() -> list[dict]:
    """The ServiceAccount, ClusterRole and binding of the agent after its install: exactly the
    calls of :meth:`Agent.run` (GPU Operator status, and the kubelet plugin, kubelet and CDI
    runtime of KWOK GPU nodes), nothing more.

    >>> account, role, binding = driver_rbac()
    >>> account["metadata"], binding["subjects"][0]["name"] == account["metadata"]["name"]
    ({'name': 'nvidia-dra-driver', 'namespace': 'gpu-operator'}, True)
    >>> sorted((g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"])[:3]
    [('', 'events'), ('', 'pods'), ('', 'pods/exec')]
    """
    name = DRIVER_SERVICE_ACCOUNT

    def rule(group: str, resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict:
        return {"apiGroups": [group], "resources": resources, "verbs": verbs,
                **({"resourceNames": names} if names else {})}

    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": PLUGIN_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": [
             # GPU Operator: GPUCluster ready when every kubelet-plugin pod is.
             rule("apps", ["daemonsets"], ["get"], [PLUGIN_DAEMONSET]),
             rule("nvidia.com", ["gpuclusters/status"], ["patch"], ["gpu-cluster"]),
             # kubelet plugin on KWOK GPU nodes: its pools; the claims of the pods it prepares,
             # followed by watch (patch: the finalizer of claims-not-released).
             rule("resource.k8s.io", ["resourceslices"], ["create"]),
             rule("resource.k8s.io", ["resourceclaims"], ["list", "watch", "patch"]),
             # kubelet: the pods bound to its nodes (watched), marked prepared; events (plugin-unhealthy);
             # exec into a container to see that kwok serves its rule (a websocket upgrade: get, and
             # create since Kubernetes 1.35, AuthorizePodWebsocketUpgradeCreatePermission).
             rule("", ["pods"], ["list", "watch", "patch"]),
             rule("", ["events"], ["create"]),
             rule("", ["pods/exec"], ["get", "create"]),
             # CDI / container runtime: kwok's Exec rule per prepared pod, deleted with the pod
             # (deletecollection: the rules of every pod gone since the last sync at once).
             rule("kwok.x-k8s.io", ["execs"], ["create", "delete", "deletecollection"]),
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": PLUGIN_NAMESPACE}]},
    ]
