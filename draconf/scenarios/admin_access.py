"""admin-access (``42-gpu-in-use.yaml``, ``43-admin-access-monitor.yaml``): in a namespace
labelled for it, a claim with ``adminAccess: true`` is given the GPU another claim holds."""

from __future__ import annotations

import dataclasses

from kubernetes.client.exceptions import ApiException

from draconf import capabilities, cel, manifests, startup
from draconf import selectors as sel
from draconf.admission import AdmissionDenied
from draconf.claims import Claim
from draconf.devices import class_selectors
from draconf.errors import NoVerdict
from draconf.pytest_plugin import make_namespace
from draconf.workload import REJECTED_STATUSES, DeployedWorkload, Start, Workload

HOLDER_CLAIM = "gpu-in-use"
MONITOR_CLAIM = "gpu-monitor"


def label_for_admin_access(api, namespace: str) -> None:
    """What an administrator does: ``kubectl label namespace NS resource.kubernetes.io/admin-access=true``."""
    api.core.patch_namespace(namespace, {"metadata": {"labels": {capabilities.ADMIN_ACCESS_LABEL: "true"}}})


#: Kubernetes 1.36's allocator lets an admin-access request take a device another claim holds,
#: but still checks the counters the device consumes (structured/internal/*/allocator_*.go:
#: the in-use check is skipped for admin access, checkAvailableCounters is not). A GPU that
#: consumes counters (a partitionable GPU: DynamicMIG) and is held has none left, so a monitor
#: can never be given it.
COUNTERS_BLOCK_ADMIN_ACCESS = (
    "every GPU this cluster publishes for {cls} consumes shared counters (a partitionable GPU, "
    "e.g. DynamicMIG): once a claim holds one, the scheduler finds its counters used up even "
    "for an admin-access request, so a monitor cannot be given a held GPU here")


def holder_selectors(class_cel: list[str], profile, published) -> dict:
    """Where the GPU in use (42) may land so that the monitor (43) can be given it: on a GPU
    that consumes no counters when the cluster has both kinds (the manifest as written when
    it has one kind only); no verdict when every GPU consumes counters."""
    uuid = profile.attributes["uuid"]
    holdable = [d for d in published if d.attribute(uuid) and cel.evaluate_all(class_cel, d).matched]
    standalone = sorted(d.attribute(uuid) for d in holdable if not d.counter_sets)
    if holdable and not standalone:
        raise NoVerdict(COUNTERS_BLOCK_ADMIN_ACCESS.format(cls=profile.device_class))
    if len(standalone) == len(holdable):
        return {}
    return {HOLDER_CLAIM: [sel.uuid_in(profile.domain, uuid, standalone)]}


def start_admin_access(request, cluster, profile, run_id, published, avoid=frozenset()) -> Start:
    """The GPU in use first (42), then the monitor (43) selecting that GPU by its UUID; the
    workload is both, so the three checks judge both pods and both claims."""
    ns = make_namespace(request, cluster, run_id, "admin-access")
    label_for_admin_access(cluster, ns)
    capability = capabilities.admin_access(cluster, ns, profile.device_class)
    request.getfixturevalue("expected_features").require("admin-access", capability)
    holder = Workload("admin-access", ["features/42-gpu-in-use.yaml"], expected_pods=1,
                      selectors=holder_selectors(class_selectors(cluster, profile.device_class) or [], profile,
                                                published), avoid_nodes=avoid)
    start = DeployedWorkload.start(cluster, ns, holder, profile, run_id.labels)
    if start.never_started:
        return start
    deployed = start.running
    held = Claim.read(cluster, ns, HOLDER_CLAIM)
    devices = [published.lookup(r.driver, r.pool, r.device) for r in held.results]
    uuids = sorted(d.attribute(profile.attributes["uuid"]) for d in devices if d is not None)
    if not uuids:
        return Start(deployed, f"claim {HOLDER_CLAIM} holds no published device: {held.summary()}")
    both = Workload("admin-access", ["features/42-gpu-in-use.yaml", "features/43-admin-access-monitor.yaml"],
                    expected_pods=2, selectors={**holder.selectors, MONITOR_CLAIM: [
                        sel.uuid_in(profile.domain, profile.attributes["uuid"], uuids)]},
                    avoid_nodes=avoid)
    monitor_docs = Workload("admin-access", ["features/43-admin-access-monitor.yaml"], 1,
                            selectors={MONITOR_CLAIM: both.selectors[MONITOR_CLAIM]},
                            avoid_nodes=avoid).documents(profile)
    # From here the workload is both claims and both pods: a deployment of its own (the
    # holder's objects stay as they are in the cluster).
    deployed = dataclasses.replace(deployed, workload=both, documents=deployed.documents + monitor_docs,
                                   _unschedulable_since={})
    try:
        manifests.create(cluster, ns, monitor_docs, run_id.labels)
    except AdmissionDenied as err:
        return Start(deployed, err.msg, cause=startup.ADMISSION_DENIED)
    except ApiException as err:
        if err.status not in REJECTED_STATUSES:
            raise
        return Start(deployed, f"the API server rejected the monitor's objects: {err.status} {err.reason}",
                     cause=startup.REJECTED)
    return deployed.started()
