"""prioritized-list (``manifests/features/41-prioritized-list.yaml``): ``firstAvailable``, "a
B200, else the model this cluster publishes most of"; the result names the first alternative
some published device satisfies."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from draconf import capabilities, cel, manifests
from draconf.devices import class_selectors
from draconf.scenarios.walkthrough import choose_model
from draconf.pytest_plugin import make_namespace
from draconf.workload import DeployedWorkload, Start, Workload

@dataclass
class PrioritizedWorkload(Workload):
    """41-prioritized-list.yaml with the fallback subrequest's model set to ``fallback_model``,
    and the first alternative's to ``preferred_model`` (as written: a B200)."""
    fallback_model: str = ""
    preferred_model: str = ""

    def documents(self, profile):
        docs = super().documents(profile)
        for doc in docs:
            if doc["kind"] != "ResourceClaimTemplate":
                continue
            for request in doc["spec"]["spec"]["devices"]["requests"]:
                subs = request.get("firstAvailable") or []
                for sub in subs:
                    sub["deviceClassName"] = profile.device_class
                # The profile's attribute for the model: a selector reading an attribute the
                # driver lacks is a CEL runtime error, which fails the claim instead of falling back.
                subs[0]["selectors"] = [{"cel": {"expression": model_equals(
                    profile, self.preferred_model or PREFERRED_MODEL)}}]
                if len(subs) > 1 and self.fallback_model:
                    subs[-1]["selectors"] = [{"cel": {"expression": model_equals(profile, self.fallback_model)}}]
        return docs


#: The first alternative of 41-prioritized-list.yaml (absent on the bed and most clusters).
PREFERRED_MODEL = "NVIDIA B200"
#: The first alternative's model where the cluster publishes B200s: a product name no device has,
#: so that the fallback is still what the scheduler must take (a GA feature is never skipped
#: for the cluster having the GPUs the manifest prefers).
ABSENT_MODEL = "draconf absent model"


def model_equals(profile, product: str) -> str:
    """>>> from draconf.profile import builtin
    >>> model_equals(builtin("nvidia"), "NVIDIA B200")
    "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"
    """
    return f"device.attributes['{profile.domain}'].{profile.attributes['model']} == '{product}'"


def subrequests(docs: list[dict]) -> list[dict]:
    template = manifests.find(docs, "ResourceClaimTemplate")
    return template["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]


def satisfiable(sub: dict, published, class_cel: list[str]) -> list:
    """The published devices that satisfy a subrequest's class and its own selectors."""
    own = [s["cel"]["expression"] for s in sub.get("selectors") or []]
    return [d for d in published if cel.evaluate_all(class_cel + own, d).matched]


def start_prioritized_list(request, cluster, profile, run_id, published, avoid=frozenset()) -> Start:
    if not profile.has("model"):
        pytest.skip(f"prioritized-list selects by the model attribute: {profile.lacks('model')}")
    fallback = choose_model(published, profile)
    ns = make_namespace(request, cluster, run_id, "prioritized-list")
    capability = capabilities.prioritized_list(cluster, ns, profile.device_class)
    request.getfixturevalue("expected_features").require("prioritized-list", capability)
    workload = PrioritizedWorkload("prioritized-list", ["features/41-prioritized-list.yaml"],
                                   expected_pods=1, fallback_model=fallback, avoid_nodes=avoid)
    class_cel = class_selectors(cluster, profile.device_class) or []
    if satisfiable(subrequests(workload.documents(profile))[0], published, class_cel):
        # This cluster has the GPUs the manifest prefers: the first alternative asks for a model
        # no device has instead, and the fallback is still observed.
        workload = replace(workload, preferred_model=ABSENT_MODEL)
    return DeployedWorkload.start(cluster, ns, workload, profile, run_id.labels)
