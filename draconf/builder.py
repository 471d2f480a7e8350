"""What a scenario declares, and the documents it applies: the builder, apart from the checks.

``Workload`` names the manifests, the selectors the cluster's inventory puts into which claim
(template), how many pods consume it and where they may run; :meth:`Workload.documents` turns
that into the objects to create, for a driver profile (class, image, tolerations, Pod
Security, the command that shows what a container received).  Nothing here talks to a cluster
(the pattern of the Kubernetes e2e framework's ``test/e2e/dra/utils/builder.go``).

>>> from draconf.profile import Profile
>>> docs = Workload("single-gpu", ["01-single-gpu.yaml"], 1).documents(Profile())
>>> [d["kind"] for d in docs], pod_spec(docs[-1])["containers"][0]["name"]
(['ResourceClaimTemplate', 'Pod'], 'workload')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draconf import manifests, nodescope, podsecurity
from draconf import selectors as sel
from draconf.kube import label_selector
from draconf.profile import Injection, Profile


@dataclass
class Workload:
    name: str
    manifests: list[str]
    expected_pods: int
    #: claim or template name -> selectors to set on its (first) request
    selectors: dict[str, list[sel.Selector]] = field(default_factory=dict)
    #: label selector finding the pods of a controller (Deployment); None: the manifest's pods
    pod_selector: str | None = None
    #: run every pod on this node (kubernetes.io/hostname); None: the scheduler chooses
    node: str | None = None
    #: the pods ask for devices as extended resources (``nvidia.com/gpu: 1``), served through
    #: the claim the scheduler creates (``status.extendedResourceClaimStatus``)
    extended_resources: bool = False
    #: keep every pod off these nodes: the GPU nodes preflight left out of the run
    avoid_nodes: frozenset[str] = frozenset()

    def documents(self, profile: Profile) -> list[dict]:
        """The manifests with the profile's class, image and tolerations and this run's selectors
        and node scope."""
        docs = [doc for name in self.manifests for doc in manifests.load(name)]
        for doc in docs:
            spec = claim_spec(doc)
            if spec is not None:
                for request in spec.get("devices", {}).get("requests", []):
                    exactly = request.get("exactly", {})
                    exactly["deviceClassName"] = profile.device_class
                    if doc["metadata"]["name"] in self.selectors:
                        exactly["selectors"] = [{"cel": {"expression": s.cel}}
                                                for s in self.selectors[doc["metadata"]["name"]]]
            spec = pod_spec(doc)
            if spec is not None:
                podsecurity.conform(spec, profile.pod_security)
                spec["tolerations"] = [dict(t) for t in profile.tolerations]
                for container in spec.get("containers", []):
                    container["image"] = profile.image
                    read_injection_with(container, profile.injection)
                if self.node:
                    spec.setdefault("nodeSelector", {})["kubernetes.io/hostname"] = self.node
                nodescope.avoiding(spec, self.avoid_nodes)
        return docs


#: The command the manifests run to show what a container received (the NVIDIA guide's).
MANIFEST_INJECTION = Injection()


def read_injection_with(container: dict, injection: Injection) -> None:
    """Make a manifest's container show what it received the way the profile reads it: its
    ``nvidia-smi -L`` (as the command, or inside a shell line) becomes the profile's command.

    >>> c = {"command": ["bash", "-c"], "args": ["nvidia-smi -L; sleep 3600"]}
    >>> read_injection_with(c, Injection(("env",), "env", variable="X")); c["args"]
    ['env; sleep 3600']
    >>> c = {"command": ["nvidia-smi", "-L"]}
    >>> read_injection_with(c, Injection(("env",), "env", variable="X")); c["command"]
    ['env']
    """
    if injection.command == MANIFEST_INJECTION.command:
        return
    if container.get("command") == list(MANIFEST_INJECTION.command):
        container["command"] = list(injection.command)
    shell = MANIFEST_INJECTION.describe()
    if "args" in container:
        container["args"] = [a.replace(shell, injection.describe()) if isinstance(a, str) else a
                             for a in container["args"]]


def claim_spec(doc: dict) -> dict | None:
    if doc["kind"] == "ResourceClaim":
        return doc.setdefault("spec", {})
    if doc["kind"] == "ResourceClaimTemplate":
        return doc.setdefault("spec", {}).setdefault("spec", {})
    return None


def match_labels(doc: dict) -> str:
    """The label selector of a controller's ``spec.selector.matchLabels``."""
    return label_selector(doc["spec"]["selector"]["matchLabels"])


def pod_spec(doc: dict) -> dict | None:
    if doc["kind"] == "Pod":
        return doc["spec"]
    if doc["kind"] in {"Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"}:
        return doc["spec"]["template"]["spec"]
    return None
