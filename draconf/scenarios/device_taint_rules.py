"""device-taint-rule (``49-device-taint-rule.yaml``, ``50-device-taint-rule-evict.yaml``,
``51-gpu-drained.yaml``): an administrator's DeviceTaintRule (resource.k8s.io/v1beta2) keeps an
untolerated claim off the GPU it taints, and NoExecute evicts the pods whose claims do not
tolerate it.  What the rule checks of ``suites/test_features.py`` create, read and wait for."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from draconf import capabilities, cel, manifests, taints, waits
from draconf.claims import device_holders
from draconf.devices import class_selectors
from draconf.errors import NoVerdict
from draconf.pods import Pod

#: 49: one free GPU tainted NoSchedule by rule; 46 then asks for it without a toleration.
RULE_MANIFEST = "features/49-device-taint-rule.yaml"

#: 50: a NoExecute rule, created once per GPU the two pods of 51 hold.
DRAIN_MANIFEST = "features/50-device-taint-rule-evict.yaml"
DRAINED, DRAIN_TOLERANT = "gpu-drained", "gpu-drain-tolerant"

#: How long kube-controller-manager has to write a new rule's status (it does within a second
#: on the bed), and to evict a pod from a device tainted NoExecute.
RULE_STATUS_TIMEOUT = 20
EVICTION_TIMEOUT = 30

#: The event kube-controller-manager's device-taint-eviction controller puts on a pod it deletes.
EVICTION_EVENT = "DeviceTaintManagerEviction"

#: Events reach the API server through the controller's event broadcaster, within seconds.
EVICTION_EVENT_TIMEOUT = 15


def rule_capability(request, cluster, profile) -> None:
    """Skip, with the API server's answer, where DeviceTaintRule is not served (1.36: beta, off
    by default), unless the run expects it (``--expect-feature device-taint-rules``)."""
    capability = capabilities.device_taint_rules(cluster, profile.driver)
    request.getfixturevalue("expected_features").require("device-taint-rules", capability)


def create_rule(request, cluster, ns: str, run_id, manifest: str, key: str, suffix: str = "") -> str:
    """The manifest's DeviceTaintRule for the device ``key`` (driver/pool/device), named after ``ns``
    and owned by that namespace (a cluster-scoped rule left behind would keep tainting a GPU:
    deleting the namespace, as ``draconf sweep`` does, deletes it too); deleted when the test
    ends.  Returns its name."""
    doc = manifests.find(manifests.load(manifest), "DeviceTaintRule")
    meta = doc["metadata"]
    meta["name"] = f"{ns}-{meta['name']}{suffix}"
    meta.setdefault("labels", {}).update(run_id.labels)
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Namespace", "name": ns,
                                "uid": cluster.core.read_namespace(ns).metadata.uid}]
    driver, pool, device = key.split("/")
    doc["spec"]["deviceSelector"] = {"driver": driver, "pool": pool, "device": device}
    cluster.resource_beta.create_device_taint_rule(doc)

    def delete():
        try:
            cluster.resource_beta.delete_device_taint_rule(meta["name"])
        except ApiException as err:
            if err.status != 404:
                raise
    request.addfinalizer(delete)
    return meta["name"]


def read_rule(cluster, name: str) -> dict:
    return cluster.api_client.sanitize_for_serialization(cluster.resource_beta.read_device_taint_rule(name))


def wait_rule_status(cluster, name: str, done=lambda condition: True, timeout: float = RULE_STATUS_TIMEOUT) -> dict:
    """The rule once kube-controller-manager wrote an ``EvictionInProgress`` condition that
    ``done`` accepts; as last read when it did not within ``timeout`` (the caller judges)."""
    try:
        return waits.wait_until(f"DeviceTaintRule {name}'s status", lambda: read_rule(cluster, name),
                                lambda rule: (c := taints.rule_condition(rule)) is not None and done(c),
                                timeout=timeout, describe=taints.describe_rule)
    except waits.WaitTimeout:
        return read_rule(cluster, name)


def free_gpu(cluster, profile, published, avoid=frozenset()):
    """A device of the profile's class on the validated nodes, with a uuid, that no claim holds and
    no taint (the driver's or a rule's) keeps from claims: the one the rule is about to taint."""
    class_cel = class_selectors(cluster, profile.device_class) or []
    slices = taints.read_slices(cluster, profile.driver)
    rules = [cluster.api_client.sanitize_for_serialization(r)
             for r in cluster.resource_beta.list_device_taint_rule().items]
    tainted = {d.key for d in taints.tainted_devices(taints.with_rule_taints(slices, rules)) if d.blocking}
    held = device_holders(cluster)
    usable = [d for d in published if d.node not in avoid and d.key not in tainted
              and d.has_attribute(profile.attributes["uuid"]) and cel.evaluate_all(class_cel, d).matched]
    if not usable:
        pytest.skip(f"no untainted {profile.device_class} device with a uuid on the validated nodes "
                    "to taint by rule")
    found = [d for d in usable if d.key not in held]
    if not found:
        # The cluster has such devices, all in use now: the rule was not checked (never green).
        raise NoVerdict(f"every {profile.device_class} device the rule could taint is held now: "
                        + ", ".join(f"{d.key} by {', '.join(held[d.key])}" for d in usable[:5])
                        + (f" and {len(usable) - 5} more" if len(usable) > 5 else ""))
    return sorted(found, key=lambda d: d.key)[0]


def pod_uid(cluster, ns: str, name: str) -> str | None:
    """The uid of pod ``name`` unless it is gone or being deleted."""
    try:
        pod = Pod.read(cluster, ns, name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return None if pod.is_deleting else pod.uid
