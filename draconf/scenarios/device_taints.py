"""device-taints (``45-device-taint-tolerated.yaml``, ``46-device-taint-untolerated.yaml``): a
GPU its driver tainted NoSchedule/NoExecute goes to a request that tolerates the taint, never
to one that does not."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from draconf import capabilities, taints, waits
from draconf import selectors as sel
from draconf.claims import Claim
from draconf.expectations import release_word
from draconf.preflight.nodes import read_plugin_pods
from draconf.pods import Pod
from draconf.startup import wait_scheduler_answer
from draconf.pytest_plugin import make_namespace
from draconf.workload import DeployedWorkload, Start, Workload

TOLERATING_CLAIM = "gpu-tolerating"
UNTOLERATED_CLAIM = "gpu-untolerated"
NO_TAINTED_DEVICE = "no tainted device published; nothing to check"


@dataclass
class TaintWorkload(Workload):
    """A manifest whose claim's request gets ``tolerations`` (None: as written)."""
    tolerations: list | None = None

    def documents(self, profile):
        docs = super().documents(profile)
        for doc in docs:
            if doc["kind"] == "ResourceClaim" and self.tolerations is not None:
                for request in doc["spec"]["devices"]["requests"]:
                    request["exactly"]["tolerations"] = [dict(t) for t in self.tolerations]
        return docs


def tolerations_for(device: taints.TaintedDevice) -> list[dict]:
    """One toleration per blocking taint of ``device``: its key, its effect, any value.

    >>> d = taints.TaintedDevice("d", "p", "gpu-4", "n", ({"key": "d/xid", "value": "79",
    ...     "effect": "NoSchedule"}, {"key": "d/info", "effect": "None"}), {})
    >>> tolerations_for(d)
    [{'key': 'd/xid', 'operator': 'Exists', 'effect': 'NoSchedule'}]
    """
    return [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in device.blocking]


def tainted_target(request, cluster, profile, ns: str, avoid=frozenset()) -> taints.TaintedDevice:
    """The tainted device the scenario asks for, or a skip with the reason: the API server
    drops request tolerations, the profile has no uuid attribute, or no published device of the
    validated nodes carries a NoSchedule/NoExecute taint."""
    capability = capabilities.device_taints(cluster, ns, profile.device_class)
    # The driver's release: a release that taints with its gate on promises the feature (the
    # scheduler must then honour its taints), and says why a run has nothing to check.
    word = release_word("device-taints", read_plugin_pods(cluster, profile.plugin)[1])
    if word.promised and not capability.promised:
        capability = replace(capability, promised=word.promised)
    expected = request.getfixturevalue("expected_features")
    expected.require("device-taints", capability)
    if not profile.has("uuid"):
        pytest.skip(f"device-taints selects the tainted device by uuid: {profile.lacks('uuid')}")
    uuid = f"{profile.domain}/{profile.attributes['uuid']}"
    found = [d for d in taints.tainted_devices(taints.read_slices(cluster, profile.driver))
             if d.blocking and d.node not in avoid and d.attributes.get(uuid)]
    if not found:
        pytest.skip(f"{NO_TAINTED_DEVICE} (no {profile.driver} device on the validated nodes carries a "
                    "NoSchedule or NoExecute taint in its ResourceSlice)"
                    + (f"; {word.note}" + (", and has found no GPU unhealthy" if word.promised else "")
                       if word.note else "") + expected.limit("device-taints"))
    return sorted(found, key=lambda d: d.key)[0]


def taint_workload(name: str, manifest: str, claim: str, device, profile, avoid, tolerations=None):
    uuid = device.attributes[f"{profile.domain}/{profile.attributes['uuid']}"]
    return TaintWorkload(name, [manifest], expected_pods=1, tolerations=tolerations, avoid_nodes=avoid,
                         selectors={claim: [sel.uuid_in(profile.domain, profile.attributes["uuid"], [uuid])]})


def untolerated_answer(cluster, ns: str, device: str) -> tuple[Claim, Pod]:
    """The claim and pod of 46-device-taint-untolerated.yaml once the scheduler answered (an
    allocation, or a standing refusal); no answer at all is the failure, naming ``device``."""
    try:
        return wait_scheduler_answer(cluster, ns, UNTOLERATED_CLAIM, UNTOLERATED_CLAIM, UNTOLERATED_VERDICT_TIMEOUT)
    except waits.WaitFailed as err:
        raise AssertionError(f"no verdict from the scheduler on a claim for {device}: {err}") from None


def start_device_taints(request, cluster, profile, run_id, avoid=frozenset()) -> Start:
    ns = make_namespace(request, cluster, run_id, "device-taints")
    device = tainted_target(request, cluster, profile, ns, avoid)
    workload = taint_workload("device-taints", "features/45-device-taint-tolerated.yaml", TOLERATING_CLAIM,
                              device, profile, avoid, tolerations_for(device))
    return DeployedWorkload.start(cluster, ns, workload, profile, run_id.labels)


#: How long the untolerated claim's pod is watched for the scheduler's verdict.
UNTOLERATED_VERDICT_TIMEOUT = 40
