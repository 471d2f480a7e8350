"""Read-only preflight checks: is this cluster ready for DRA GPU workloads at all?

They follow the "Prerequisites and preflight checks" and "Validate the installation" steps of
the GPU Operator DRA guide, and the install footprint of the NVIDIA DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu, deployments/helm): each check reads the cluster, never
writes, and answers with one :class:`CheckResult`::

    from draconf.preflight import run_all, blocking_failures, describe
    results = run_all(api, profile)
    print(describe(results))
    for r in blocking_failures(results):
        print(r.diagnosis, r.summary)

The package has one module per concern: :mod:`.result` (:class:`CheckResult`), :mod:`.reading`
(API errors turned into verdicts), :mod:`.runner` (the registry, :func:`run_all`, the table),
and the checks by what they read: :mod:`.cluster` (server version, permissions, resource API),
:mod:`.classes` (DeviceClasses), :mod:`.slices` (ResourceSlices, device attributes, class
selectors), :mod:`.plugin` (kubelet plugin, with the GPU nodes of :mod:`.nodes`),
:mod:`.operator` (GPUCluster, ClusterPolicy) and, last, :mod:`.taints` (informational: the
devices the driver tainted).  The check modules are imported here in the order :func:`run_all`
runs them.

Every check is a function ``(api, profile) -> CheckResult`` listed in :data:`CHECKS`, made of
a thin reading part and a pure ``evaluate_*`` function over plain data (unit-tested without
a cluster). API trouble never escapes as a traceback: a 403 names the RBAC permission that is
missing, an unreachable server says so, and in both cases the result is *inconclusive*
(``ok=False, inconclusive=True``, no diagnosis): the check could not reach a verdict, which
is not the same as the cluster failing it. A check with nothing to look at (e.g. no GPUCluster
CRD on a standalone driver install) is *not applicable* (``ok=True, applicable=False``).

>>> r = evaluate_server_version("v1.33.4", "1", "33")
>>> r.ok, r.diagnosis
(False, 'api-unavailable')
>>> "v1beta2" in r.summary
True
"""


from __future__ import annotations

from draconf.preflight.reading import REQUEST_TIMEOUT, Access, Inconclusive, forbidden_summary, read
from draconf.preflight.result import BLOCKING, INFO, CheckResult, check_result
from draconf.preflight.runner import (CAPABILITY_MEANING, CHECKS, SEVERITY, blocking_failures, check,
                                      describe, not_applicable_by_profile, probe, run_all, run_check)
# The checks register themselves in CHECKS as they are imported: this order is run_all()'s.
from draconf.preflight.cluster import (MIN_VERSION, OPERATOR_MIN_VERSION, REQUIRED_RESOURCES,  # noqa: I001
                                       evaluate_resource_api, evaluate_server_version,
                                       parse_server_version)
from draconf.preflight.classes import evaluate_device_class, evaluate_optional_classes
from draconf.preflight.slices import (SliceInfo, evaluate_attributes, evaluate_class_selectors,
                                      evaluate_resource_slices, slice_info)
from draconf.preflight.nodes import (GPU_NODE_LABELS, PLUGIN_DAEMONSETS, PLUGIN_POD_SELECTORS,
                                     PluginDaemonSet, PluginPod, gpu_node_names, is_gpu_node_labels,
                                     plugin_pod)
from draconf.preflight.plugin import evaluate_kubelet_plugin
from draconf.preflight.operator import (CLUSTERPOLICY, GPUCLUSTER, GPUCLUSTER_NAME, evaluate_gpu_cluster,
                                        evaluate_policy_conflict)
from draconf.preflight.taints import evaluate_device_taints

__all__ = ["BLOCKING", "CAPABILITY_MEANING", "CHECKS", "CLUSTERPOLICY", "GPUCLUSTER", "GPUCLUSTER_NAME",
           "GPU_NODE_LABELS", "INFO", "MIN_VERSION", "OPERATOR_MIN_VERSION", "PLUGIN_DAEMONSETS",
           "PLUGIN_POD_SELECTORS", "REQUEST_TIMEOUT", "REQUIRED_RESOURCES", "SEVERITY", "Access",
           "CheckResult", "Inconclusive", "PluginDaemonSet", "PluginPod", "SliceInfo",
           "blocking_failures", "check", "check_result", "describe", "evaluate_attributes",
           "evaluate_class_selectors", "evaluate_device_class", "evaluate_device_taints",
           "evaluate_gpu_cluster", "evaluate_kubelet_plugin", "evaluate_optional_classes",
           "evaluate_policy_conflict", "evaluate_resource_api", "evaluate_resource_slices",
           "evaluate_server_version", "forbidden_summary", "gpu_node_names", "is_gpu_node_labels", "not_applicable_by_profile",
           "parse_server_version", "plugin_pod", "probe", "read", "run_all", "run_check", "slice_info"]
