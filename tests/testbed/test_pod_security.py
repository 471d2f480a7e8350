"""The suite's pods pass Pod Security "restricted", and GPUs reach them as non-root.

The namespaces the suite creates enforce the profile's level through the real PodSecurity
admission; here a namespace enforcing ``restricted`` rejects a plain root pod and admits the
suite's own workload, whose container (uid 65534, no capabilities) still sees its GPU.
"""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from draconf import namespaces
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.podsecurity import namespace_labels
from draconf.pods import exec_in_container, parse_nvidia_smi_uuids
from draconf.profile import builtin, for_target
from draconf.workload import DeployedWorkload, Workload

PROFILE = for_target(builtin("nvidia"), "testbed")
RUN = namespaces.RunId("selftest")


@pytest.fixture
def restricted_ns(api, request):
    name = namespaces.create(api, RUN, request.node.name, extra_labels=namespace_labels("restricted"))
    yield name
    namespaces.delete(api, name, wait=60)


def test_a_restricted_namespace_admits_the_suites_gpu_pod_and_it_sees_its_gpu(api, restricted_ns):
    with pytest.raises(ApiException) as denied:
        api.core.create_namespaced_pod(restricted_ns, {"metadata": {"name": "root"}, "spec": {
            "containers": [{"name": "c", "image": PROFILE.image, "command": ["sleep", "1d"]}]}})
    assert denied.value.status == 403 and "violates PodSecurity" in denied.value.body, denied.value.body

    deployed = DeployedWorkload.deploy(api, restricted_ns, Workload("single-gpu", ["01-single-gpu.yaml"], 1), PROFILE)
    (pod,) = deployed.wait_running(timeout=60)
    assert exec_in_container(api, restricted_ns, pod.name, "workload", ["id", "-u"]).stdout.strip() == "65534"
    (result,) = Claim.read(api, restricted_ns, pod.generated_claim_names()[0]).results
    device = PublishedDevices.read(api, "gpu.nvidia.com").lookup(result.driver, result.pool, result.device)
    out = exec_in_container(api, restricted_ns, pod.name, "workload", ["nvidia-smi", "-L"])
    assert out.succeeded and parse_nvidia_smi_uuids(out.stdout) == [device.attribute("uuid")], out
