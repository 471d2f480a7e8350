"""Cluster audit: namespaces whose GPU quota no longer binds once workloads move to DRA.

A ResourceQuota on ``requests.nvidia.com/gpu`` (or ``nvidia.com/gpu``, ``limits.nvidia.com/gpu``)
counts the device plugin's extended resource only; pods that get GPUs through ResourceClaims
are not charged to it (see ``test_quota.py::test_extended_resource_quota_and_dra_claims``).
A namespace with such a cap and no ``<class>.deviceclass.resource.k8s.io/devices`` key has no
GPU limit for DRA workloads. This check reads every ResourceQuota (read-only) and fails, with
the diagnosis ``quota-not-enforced``, listing each such namespace and its fix.

The suite's own namespaces (label ``app.kubernetes.io/managed-by=draconf``) are left out: the
quota tests create this very situation on purpose.
"""

from __future__ import annotations

import logging

import pytest

from draconf.audit import GPU_EXTENDED_KEYS, audit_quotas, format_findings
from draconf.kube import label_selector
from draconf.namespaces import MANAGED_BY
from draconf.errors import CheckFailed
from draconf.reporting import record_diagnosis

log = logging.getLogger("draconf")

SUITE_NAMESPACES = label_selector(MANAGED_BY)


@pytest.mark.audit
@pytest.mark.draconf(workload="audit", check="gpu-quota")
def test_gpu_quotas_also_cap_deviceclasses(request, cluster, profile):
    resource = profile.capabilities.extended_resource
    if resource is None:
        pytest.skip(f"profile {profile.name}: driver {profile.driver} has no device-plugin extended "
                    "resource (capabilities.extendedResource), so no quota can cap its devices the "
                    "device-plugin way")
    keys = GPU_EXTENDED_KEYS if resource == "nvidia.com/gpu" else (
        f"requests.{resource}", resource, f"limits.{resource}")
    findings = audit_quotas(cluster, device_class=profile.device_class, extended_keys=keys,
                            exclude_selector=SUITE_NAMESPACES)
    report = format_findings(findings)
    log.info(report)
    if findings:
        record_diagnosis(request.node, "quota-not-enforced", {"quota audit": report})
        raise CheckFailed(f"{len(findings)} namespace(s) cap nvidia.com/gpu but no DeviceClass, so "
                          "DRA GPUs there are unlimited: "
                          + "; ".join(f"{f.namespace} ({', '.join(f'{k}: {v}' for k, v in f.keys.items())})"
                                      for f in findings)
                          + "\n" + report, code="quota-not-enforced")
