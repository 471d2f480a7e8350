"""Pod Security for the suite's own pods: they pass the ``restricted`` standard as written.

Clusters enforce Pod Security Standards (``pod-security.kubernetes.io/enforce`` on namespaces,
or cluster-wide admission defaults).  The suite's manifests carry the ``restricted`` settings
(non-root, no privilege escalation, every capability dropped, seccomp ``RuntimeDefault``), and
the namespaces the suite creates enforce the profile's level, so the real PodSecurity admission
checks every pod the suite runs.  GPUs reach a non-root container through CDI as they do a
root one.  A profile whose driver needs more relaxes the level (``podSecurity: baseline`` or
``privileged``); the run reports the level it used.

>>> spec = {"containers": [{"name": "c"}]}
>>> conform(spec, "restricted")["securityContext"]["runAsNonRoot"]
True
>>> conform(spec, "baseline").get("securityContext", {}).get("runAsNonRoot") is None
True
>>> namespace_labels("restricted")["pod-security.kubernetes.io/enforce"]
'restricted'
"""

from __future__ import annotations

#: Pod-level settings of the restricted standard (a numeric user: images run as root by default).
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
#: Container-level settings of the restricted standard.
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
#: What a relaxed level gives up: running as a non-root user (baseline), and everything (privileged).
_NON_ROOT = ("runAsNonRoot", "runAsUser")


def namespace_labels(level: str) -> dict[str, str]:
    """The labels that make the PodSecurity admission enforce ``level`` in a namespace."""
    return {"pod-security.kubernetes.io/enforce": level,
            "pod-security.kubernetes.io/enforce-version": "latest"}


def conform(pod_spec: dict, level: str) -> dict:
    """``pod_spec`` made to meet ``level``, in place (and returned): restricted adds what a pod
    built in code lacks; a relaxed level removes what the driver cannot live with."""
    pod = pod_spec.setdefault("securityContext", {}) if level == "restricted" else pod_spec.get("securityContext")
    containers = pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
    if level == "restricted":
        assert pod is not None  # set just above for this level
        for key, value in RESTRICTED_POD.items():
            pod.setdefault(key, value)
        for container in containers:
            context = container.setdefault("securityContext", {})
            for key, value in RESTRICTED_CONTAINER.items():
                context.setdefault(key, value)
        return pod_spec
    if pod is not None:
        for key in _NON_ROOT:
            pod.pop(key, None)
        if not pod:
            pod_spec.pop("securityContext")
    if level == "privileged":
        for container in containers:
            container.pop("securityContext", None)
    return pod_spec
