"""Self-test of draconf.audit against a running test bed (``--testbed-name``).

Creates a namespace whose only GPU cap is ``requests.nvidia.com/gpu``, checks that
``audit_quotas`` reports it (and stops reporting it once a DeviceClass quota is added), and
that the suite's exclusion selector leaves it out. The ``namespace`` fixture deletes it.
"""

from __future__ import annotations

from draconf.audit import audit_quotas, deviceclass_key, format_findings
from draconf.kube import label_selector
from draconf.namespaces import MANAGED_BY

SUITE_NAMESPACES = label_selector(MANAGED_BY)


def _quota(name: str, hard: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
            "spec": {"hard": hard}}


def test_audit_finds_extended_resource_only_quota(cluster, namespace, profile):
    api = cluster
    api.core.create_namespaced_resource_quota(
        namespace, _quota("legacy-gpu-cap", {"requests.nvidia.com/gpu": "4", "pods": "10"}))
    api.core.create_namespaced_resource_quota(
        namespace, _quota("claims", {"count/resourceclaims.resource.k8s.io": "2"}))

    findings = {f.namespace: f for f in audit_quotas(api, device_class=profile.device_class)}
    assert namespace in findings, f"audit missed {namespace}:\n{format_findings(list(findings.values()))}"
    finding = findings[namespace]
    assert finding.quotas == ["legacy-gpu-cap"]
    assert finding.keys == {"requests.nvidia.com/gpu": "4"}
    assert f'{deviceclass_key(profile.device_class)}: "4"' in finding.message
    assert "count/resourceclaims.resource.k8s.io: 2" in finding.message
    assert namespace in format_findings([finding])

    # The suite's own namespaces carry the managed-by label and are excluded on request.
    excluded = audit_quotas(api, device_class=profile.device_class, exclude_selector=SUITE_NAMESPACES)
    assert namespace not in {f.namespace for f in excluded}

    # A DeviceClass cap (any quota object in the namespace) resolves the finding.
    api.core.create_namespaced_resource_quota(
        namespace, _quota("dra-gpu-cap", {deviceclass_key(profile.device_class): "4"}))
    assert namespace not in {f.namespace for f in audit_quotas(api, device_class=profile.device_class)}


def test_audit_reads_limits_and_bare_keys(cluster, namespace, profile):
    api = cluster
    api.core.create_namespaced_resource_quota(
        namespace, _quota("limits-cap", {"limits.nvidia.com/gpu": "2"}))
    findings = {f.namespace: f for f in audit_quotas(api, device_class=profile.device_class)}
    assert findings.get(namespace) is not None and findings[namespace].keys == {"limits.nvidia.com/gpu": "2"}
