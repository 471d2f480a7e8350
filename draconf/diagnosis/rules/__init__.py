"""The rules: which diagnosis code these facts show, first match wins (see :func:`classify`).

Each rule is a small function ``(facts) -> (code, reason) | None`` in the
module of its family: :mod:`.access` (API server, RBAC, admission, control plane),
:mod:`.inventory` (classes, slices, attributes, device taints, features), :mod:`.placement`
(scheduling and allocation), :mod:`.node` (image, kubelet plugin, CDI), :mod:`.lifecycle`
(release, quota, policy conflict) and :mod:`.fallback` (timeout).  :data:`RULES` lists them in priority order
and :func:`classify` runs them.

===================  ==========================================================================
api-unavailable      the API server does not answer, or does not serve resource.k8s.io/v1
api-throttled        the server's answer was still 429 (or 5xx) after the client's retries
controller-manager-  (checked third) a pending pod's template claims stayed ungenerated for
 unavailable         stall_after seconds with no FailedResourceClaimCreation event, or the
                     namespace stayed that long without its `default` ServiceAccount
scheduler-           (checked third) every pod stayed unbound without a PodScheduled condition
 unavailable         for stall_after seconds, with no scheduling event: no scheduler acted
missing-deviceclass  a claim/template (or the scheduler) names a DeviceClass that does not exist
no-resourceslices    no ResourceSlice of the driver holds any device
attribute-missing    the scheduler reports a CEL runtime error (no such key), or a selector of an
                     unallocated claim reads an attribute/capacity some published device lacks
scheduler-without-  a pod is bound to a node while a claim it uses is unallocated or was never
 dra                 generated: the scheduler that bound it does not run DRA
allocation-invalid   a scheduled pod's allocation breaks a promise draconf.allocation.judge checks
                     (a device in two claims or unpublished, wrong count, selectors, node ...)
node-excluded        an unschedulable pod is kept off every node holding a candidate device by
                     an untolerated taint, its nodeSelector or required node affinity
capacity-exhausted   the scheduler cannot allocate and every node's matching devices are taken
selector-unmatched   the scheduler cannot allocate and no node has enough matching devices
config-rejected      a pod is bound, a claim of it carries opaque config for the driver, and
                     FailedPrepareDynamicResources says the driver refused that config
plugin-unhealthy     a pod is bound, its claims allocated and reserved, but it is not running,
                     with FailedPrepareDynamicResources or an unready/absent kubelet plugin
inventory-mismatch   a container lists its MIG device under the GPU whose counter set the device
                     consumes, not under the GPU its published parentUUID names
cdi-not-injected     a running container shows none/fewer of its GPUs
cdi-wrong-device     a running container shows a GPU not allocated to it
claim-not-released   claims outlive their pods (overdue, or the failing check waited for their
                     release), stay allocated/reserved or are stuck deleting on a finalizer
quota-not-enforced   a ResourceQuota's used exceeds its hard limit, or a quota check failed
                     while the namespace has a quota and no "exceeded quota" rejection was seen
policy-conflict      a ClusterPolicy exists beside the GPUCluster
permission-denied    the server answered one of the suite's requests 403 Forbidden (user, verb
                     and resource from its message; checked second, after api-unavailable)
admission-denied     the server refused an object (or a controller's pod/claim, per its events)
                     by a ValidatingAdmissionPolicy, webhook, LimitRange or a quota the suite did
                     not create; named from the server's answer, with the policy read if readable
config-ignored       (recorded by the gpu-sharing checks) the containers of a sharing request do
                     not show the config, or an invalid config was accepted
device-tainted       a claim's allocation result is a device carrying a NoSchedule/NoExecute
                     taint that the result's request does not tolerate (scheduler ignores taints)
intermittent         a check that compared containers with their allocation failed, but every
                     container shows its GPUs when read again
timeout              nothing definitive: the last observed state is the evidence
===================  ==========================================================================

A new code: its meaning in ``draconf.reporting.DIAGNOSES``, its rule in the module of its
family, placed in :data:`RULES` by priority (reading facts, never the wording of the suite's own
assertion messages: what the server answered is ``facts.failure.answers``), a unit test in
tests/unit/test_diagnosis_<family>.py (its helpers: tests/unit/diagnosis_facts.py).
"""

from __future__ import annotations

from draconf.diagnosis.facts import Facts
from draconf.diagnosis.rules.access import (rule_admission_denied, rule_api, rule_api_throttled, rule_control_plane,
                                            rule_permission_denied)
from draconf.diagnosis.rules.fallback import rule_timeout
from draconf.diagnosis.rules.inventory import (rule_attribute_missing, rule_device_tainted,
                                               rule_feature_disabled, rule_inventory_mismatch,
                                               rule_missing_class, rule_no_slices)
from draconf.diagnosis.rules.lifecycle import rule_cleanup, rule_policy_conflict, rule_quota
from draconf.diagnosis.rules.node import (rule_admin_access_unsupported, rule_cdi, rule_cdi_unresolved, rule_config_rejected,
                                          rule_image_pull, rule_intermittent, rule_mps_daemon_unready,
                                          rule_plugin_unhealthy)
from draconf.diagnosis.rules.placement import (rule_allocation, rule_allocation_invalid,
                                               rule_node_excluded, rule_partition_overlap,
                                               rule_scheduler_without_dra)


def classify(facts: Facts) -> tuple[str, str]:
    """The diagnosis code and one operator-facing sentence for these facts (first rule wins).

    What the failing check did, and what the API server answered it, are facts
    (``facts.failure``); which check it was, and how its message is worded, are not."""
    for rule in RULES:
        verdict = rule(facts)
        if verdict:
            break
    else:
        verdict = rule_timeout(facts)
    return verdict


RULES = [rule_api, rule_api_throttled, rule_permission_denied, rule_admission_denied, rule_control_plane,
         # A pod bound with its claims unallocated never happens under a scheduler running DRA,
         # whatever else is wrong with the claim (a missing class keeps a pod Pending there).
         rule_scheduler_without_dra, rule_partition_overlap, rule_allocation_invalid,
         rule_missing_class, rule_no_slices, rule_attribute_missing, rule_device_tainted,
         rule_feature_disabled,
         rule_node_excluded, rule_allocation, rule_image_pull,
         rule_admin_access_unsupported, rule_mps_daemon_unready, rule_config_rejected, rule_cdi_unresolved,
         rule_plugin_unhealthy,
         # Before cdi: a MIG device has no uuid to compare, so cdi would take the parent GPU a
         # container lists for a device it was not given.
         rule_inventory_mismatch, rule_cdi,
         rule_cleanup, rule_quota, rule_policy_conflict, rule_intermittent]
