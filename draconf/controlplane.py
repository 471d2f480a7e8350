"""What can be read of the control plane's own health through the API: who is electing a
leader, and whether the component runs as a pod.

A stalled workload (no binding, no claim generated) is blamed on the scheduler or the
controller-manager; this module adds what the cluster says about that component, where it can
be read:

* the Lease ``kube-system/<component>`` (leader election): its holder and how long ago it was
  renewed.  Real clusters (kubeadm, managed offerings) run both components with
  ``--leader-elect=true`` and renew every 2 s, so a Lease older than its duration means no
  instance is leading.  Components run with ``--leader-elect=false`` (the embedded test bed)
  keep no Lease: its absence says nothing.
* pods in ``kube-system`` labelled ``component=<component>`` (kubeadm's static pods): their
  phase and readiness.  On managed clusters the control plane is not visible at all.

``/readyz`` of the API server says nothing about the scheduler, and the scheduler's own
``/readyz`` is on its host's port, not reachable through the API: it is not read.

>>> lease_sentence("kube-scheduler", {"spec": {"holderIdentity": "cp-1_abc",
...     "renewTime": "2000-01-01T00:00:00Z", "leaseDurationSeconds": 15}}).startswith(
...     "its Lease kube-system/kube-scheduler (holder cp-1_abc) was last renewed")
True
>>> lease_sentence("kube-scheduler", None)
'no Lease kube-system/kube-scheduler (it may run without leader election)'
"""

from __future__ import annotations

from draconf.kube import seconds_since

#: Seconds any one health read may take (this runs while a verdict is being written).
READ_TIMEOUT = 5


def lease_sentence(component: str, lease: dict | None) -> str:
    """One clause on the component's leader-election Lease (a plain dict, or None: absent)."""
    where = f"kube-system/{component}"
    if lease is None:
        return f"no Lease {where} (it may run without leader election)"
    spec = lease.get("spec") or {}
    age = seconds_since(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    holder = spec.get("holderIdentity") or "none"
    if age is None:
        return f"its Lease {where} (holder {holder}) was never renewed"
    stale = f", past its {duration}s duration: no instance is leading" if duration and age > duration else ""
    return f"its Lease {where} (holder {holder}) was last renewed {age:.0f}s ago{stale}"


def health(api, component: str) -> str:
    """What the cluster shows of ``component`` (kube-scheduler, kube-controller-manager): its
    Lease and its pods in kube-system, best effort (an unreadable part says so)."""
    parts = []
    try:
        from kubernetes import client
        lease = client.CoordinationV1Api(api.api_client).read_namespaced_lease(
            component, "kube-system", _request_timeout=READ_TIMEOUT)
        parts.append(lease_sentence(component, api.api_client.sanitize_for_serialization(lease)))
    except Exception as err:  # noqa: BLE001 - health is context for a verdict, never its cause
        status = getattr(err, "status", None)
        parts.append(lease_sentence(component, None) if status == 404
                     else f"its Lease could not be read ({status or type(err).__name__})")
    try:
        pods = api.core.list_namespaced_pod("kube-system", label_selector=f"component={component}",
                                            _request_timeout=READ_TIMEOUT).items
        if pods:
            parts.append("pods: " + ", ".join(
                f"{p.metadata.name} {p.status.phase}" + (" ready" if any(
                    c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) else " not ready")
                for p in pods))
        else:
            parts.append(f"no pod labelled component={component} in kube-system")
    except Exception as err:  # noqa: BLE001
        parts.append(f"its pods could not be listed ({getattr(err, 'status', None) or type(err).__name__})")
    return "; ".join(parts)
