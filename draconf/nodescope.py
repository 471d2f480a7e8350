"""Which GPU nodes a run validates.

A preflight failure confined to some GPU nodes (the kubelet plugin down there, no slices
published, attributes missing on their devices) takes those nodes out of the run instead of
gating every workload: the workloads are steered away from them (node affinity ``NotIn``) and
must still pass on the rest.  A failure of the whole cluster (no DeviceClass, no plugin
anywhere, a class that selects nothing), or one that leaves no GPU node standing, still gates
everything.

>>> from draconf.preflight.result import CheckResult
>>> down = CheckResult("kubelet-plugin", False, "blocking", "1 of 3 GPU node(s) have no Ready "
...                    "kubelet-plugin pod: gpu-b", "plugin-unhealthy", nodes=("gpu-b",))
>>> scope, whole = scope_of([down], ["gpu-a", "gpu-b", "gpu-c"])
>>> scope.validated, sorted(scope.excluded), whole
(('gpu-a', 'gpu-c'), ['gpu-b'], [])
>>> print(scope.describe())
GPU nodes validated: gpu-a, gpu-c; NOT validated: gpu-b (kubelet-plugin [plugin-unhealthy])
>>> scope, whole = scope_of([down], ["gpu-b"])     # nothing would be left: gate everything
>>> scope.excluded, [r.name for r in whole]
({}, ['kubelet-plugin'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

#: The well-known label the scheduler matches node names by.
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class NodeScope:
    """The GPU nodes a run validates and the ones it leaves out, each with the preflight
    checks that failed there."""

    validated: tuple[str, ...] = ()
    #: node -> the failed checks confined to it, e.g. ("kubelet-plugin [plugin-unhealthy]",)
    excluded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def avoid(self) -> frozenset[str]:
        """Nodes no pod of the run may be placed on."""
        return frozenset(self.excluded)

    def keeps(self, node: str | None) -> bool:
        """True for a device or pod the run validates (devices with no node stay in).

        >>> NodeScope(("a",), {"b": ("x",)}).keeps("b"), NodeScope().keeps(None)
        (False, True)
        """
        return node not in self.excluded

    def devices(self, published):
        """``published`` (:class:`~draconf.devices.PublishedDevices`) without the devices of
        the nodes left out: what the run's workloads are written for."""
        return type(published)(published.driver, [d for d in published if self.keeps(d.node)])

    def describe(self) -> str:
        """One line for the terminal; empty when every GPU node is validated."""
        return scope_line(self.as_info()) if self.excluded else ""

    def as_info(self) -> dict[str, Any]:
        """For summary.json's ``run`` section and the JUnit properties."""
        return {"validated": list(self.validated),
                "not_validated": {node: list(checks) for node, checks in sorted(self.excluded.items())}}


def scope_line(info: Mapping[str, Any]) -> str:
    """A run's node scope as summary.json keeps it (``run.nodes``), as one line.

    >>> scope_line({"validated": ["a"], "not_validated": {"b": ["kubelet-plugin [plugin-unhealthy]"]}})
    'GPU nodes validated: a; NOT validated: b (kubelet-plugin [plugin-unhealthy])'
    """
    left_out = "; ".join(f"{node} ({', '.join(checks)})" for node, checks in info["not_validated"].items())
    return f"GPU nodes validated: {', '.join(info['validated']) or '(none)'}; NOT validated: {left_out}"


def scope_of(failures: Iterable, gpu_nodes: Iterable[str]) -> tuple[NodeScope, list]:
    """Split blocking preflight failures (:class:`~draconf.preflight.CheckResult`) into a
    :class:`NodeScope` and the failures that concern the whole cluster.

    A failure with ``nodes`` set is confined to those nodes; when the confined failures would
    leave no GPU node, they all count as the whole cluster's.
    """
    failures = list(failures)
    gpu_nodes = sorted(set(gpu_nodes))
    confined = [r for r in failures if r.nodes]
    whole = [r for r in failures if not r.nodes]
    excluded: dict[str, list[str]] = {}
    for result in confined:
        for node in result.nodes:
            excluded.setdefault(node, []).append(f"{result.name} [{result.diagnosis}]")
    validated = tuple(n for n in gpu_nodes if n not in excluded)
    if not validated and confined:
        return NodeScope(tuple(gpu_nodes)), whole + confined
    return NodeScope(validated, {n: tuple(c) for n, c in excluded.items()}), whole


def avoiding(pod_spec: dict, nodes: Iterable[str]) -> dict:
    """Require ``pod_spec`` to stay off ``nodes``: a ``NotIn`` on the hostname label added to
    every required node-affinity term (terms are ORed, so each needs it), or one new term.

    >>> spec = avoiding({}, ["gpu-b"])
    >>> spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    {'nodeSelectorTerms': [{'matchExpressions': [{'key': 'kubernetes.io/hostname', 'operator': 'NotIn', 'values': ['gpu-b']}]}]}
    >>> avoiding({"containers": []}, [])
    {'containers': []}
    """
    nodes = sorted(set(nodes))
    if not nodes:
        return pod_spec
    expression = {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": nodes}
    required = (pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term.setdefault("matchExpressions", []).append(dict(expression))
    return pod_spec
