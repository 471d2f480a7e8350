"""The capability probes of draconf/capabilities.py against the healthy bed's real API server.

Each probe must say "available" where Kubernetes 1.36 serves the feature, and say why not where
the server refuses or the class lacks what is needed; a dry-run create must persist nothing.
"""

from __future__ import annotations

from draconf import capabilities

CLASS = "gpu.nvidia.com"


def test_prioritized_list_is_served_and_nothing_is_stored(api, ns):
    found = capabilities.prioritized_list(api, ns, CLASS)
    assert found.available, found.evidence
    assert not api.resource.list_namespaced_resource_claim(ns).items  # dry run only


def test_admin_access_needs_the_namespace_label(api, ns):
    refused = capabilities.admin_access(api, ns, CLASS)
    assert not refused.available and capabilities.ADMIN_ACCESS_LABEL in refused.evidence, refused
    api.core.patch_namespace(ns, {"metadata": {"labels": {capabilities.ADMIN_ACCESS_LABEL: "true"}}})
    found = capabilities.admin_access(api, ns, CLASS)
    assert found.available, found.evidence


def test_extended_resource_reads_the_live_class(api):
    assert capabilities.extended_resource(api, CLASS, "nvidia.com/gpu").available
    wrong = capabilities.extended_resource(api, CLASS, "example.com/gpu")
    assert not wrong.available and "maps nvidia.com/gpu" in wrong.evidence
    assert not capabilities.extended_resource(api, "mig.nvidia.com", "nvidia.com/gpu").available
    assert not capabilities.extended_resource(api, "no-such-class", "nvidia.com/gpu").available
    assert capabilities.device_plugin_nodes(api, "nvidia.com/gpu") == []
