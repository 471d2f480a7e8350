"""The diagnosis rules: the pieces the rules rest on: facts built from a snapshot, node exclusions,
tolerations."""

from __future__ import annotations

from draconf.diagnosis import (
    NodeFacts,
    Snapshot,
    build_facts,
    classify,
    node_exclusions,
    tolerates,
)
from draconf.profile import builtin
from tests.unit.diagnosis_facts import (
    CLASS_CEL,
    DRIVER,
    GI,
    PROFILE_TOLERATION,
    TAINT,
    fake_pod,
)


def test_tolerations():
    assert tolerates([{"operator": "Exists"}], TAINT)
    assert tolerates([{"key": "dedicated", "operator": "Equal", "value": "gpu-reserved"}], TAINT)
    assert not tolerates([{"key": "dedicated", "value": "other"}], TAINT)
    assert not tolerates([PROFILE_TOLERATION], TAINT)
    assert not tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], TAINT)


def test_node_exclusions():
    pod = fake_pod("p", affinity_terms=[{"matchExpressions": [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}])
    assert node_exclusions(pod, NodeFacts("g", labels={"nvidia.com/gpu.present": "true"})) == []
    assert node_exclusions(pod, NodeFacts("c")) == ["required node affinity does not match"]
    assert node_exclusions(fake_pod("p"), NodeFacts("g", taints=[TAINT])) == [
        "untolerated taint dedicated=gpu-reserved:NoSchedule"]
    assert node_exclusions(fake_pod("p"), NodeFacts("g", taints=[dict(TAINT, effect="PreferNoSchedule")])) == []


def test_build_facts_from_raw_objects():
    snap = Snapshot(
        namespace="ns", resource_versions=["v1", "v1beta2"],
        pods=[{"metadata": {"name": "gpu-pod", "namespace": "ns", "uid": "p1"},
               "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                        "tolerations": [PROFILE_TOLERATION]},
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "False", "reason": "SchedulerError",
                    "message": "CEL runtime error: no such key: productName"}],
                   "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "gpu-pod-gpu-x"}]}}],
        claims=[{"metadata": {"name": "gpu-pod-gpu-x", "namespace": "ns",
                              "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                              "ownerReferences": [{"kind": "Pod", "name": "gpu-pod", "uid": "p1",
                                                   "controller": True}]},
                 "spec": {"devices": {"requests": [
                     {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2,
                                                 "selectors": [{"cel": {"expression": "true"}}]}},
                     {"name": "alt", "firstAvailable": [{"name": "big", "deviceClassName": DRIVER},
                                                        {"name": "small", "deviceClassName": "mig.nvidia.com"}]}]}}}],
        device_classes=[{"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": CLASS_CEL}}]}}],
        slices=[{"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "devices": [
            {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "driverVersion": {"version": "1.2.3"}},
             "capacity": {"memory": {"value": "80Gi"}}}]}},
            {"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "sharedCounters": []}}],
        all_claims=[{"metadata": {"name": "other", "namespace": "x"}, "status": {"allocation": {"devices": {
            "results": [{"driver": DRIVER, "pool": "n1", "device": "gpu-0", "request": "gpu"}]}}}}],
        cluster_policies=[{"metadata": {"name": "cluster-policy"}}],
        quotas=[{"metadata": {"name": "q", "namespace": "ns"}, "spec": {"hard": {"requests.cpu": "1"}},
                 "status": {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "2"}}}])
    facts = build_facts(snap, builtin("nvidia"))
    pod = facts.pods[0]
    assert pod.unschedulable_message.startswith("CEL runtime error") and pod.claim_names() == {"gpu": "gpu-pod-gpu-x"}
    claim = facts.claims[0]
    assert claim.is_generated and claim.owner_pod == "gpu-pod" and not claim.is_allocated
    assert [[r.name for r in req] for req in claim.device_requests] == [["gpu"], ["alt/big", "alt/small"]]
    assert claim.device_requests[0][0].count == 2 and claim.device_classes == [DRIVER, "mig.nvidia.com"]
    assert facts.slice_count == 2 and [d.key for d in facts.devices] == [f"{DRIVER}/n1/gpu-0"]
    assert facts.devices[0].memory("memory") == 80 * GI
    assert facts.allocated == {f"{DRIVER}/n1/gpu-0": "x/other"}
    assert facts.device_classes == {DRIVER: [CLASS_CEL]} and facts.cluster_policy and not facts.gpu_cluster
    assert facts.quotas[0].exceeded() == ["requests.cpu used 2 > hard 1"]


def test_an_extended_resource_pod_seeing_another_gpu_is_cdi_wrong_device():
    # As recorded under cdi-wrong-device: a `nvidia.com/gpu: 1` pod lists no claim; its claim is
    # the scheduler's (status.extendedResourceClaimStatus), and the container saw another GPU.
    snap = Snapshot(
        namespace="ns",
        pods=[{"metadata": {"name": "gpu-pod-extres", "namespace": "ns", "uid": "p1"},
               "spec": {"nodeName": "n1", "containers": [{"name": "workload", "resources": {
                   "limits": {"nvidia.com/gpu": "1"}}}]},
               "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                          "extendedResourceClaimStatus": {
                              "resourceClaimName": "gpu-pod-extres-extended-resources-x",
                              "requestMappings": [{"containerName": "workload", "resourceName": "nvidia.com/gpu",
                                                   "requestName": "container-0-request-0"}]}}}],
        claims=[{"metadata": {"name": "gpu-pod-extres-extended-resources-x", "namespace": "ns",
                              "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                              "ownerReferences": [{"kind": "Pod", "name": "gpu-pod-extres", "uid": "p1",
                                                   "controller": True}]},
                 "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                                                    "exactly": {"deviceClassName": DRIVER, "count": 1}}]}},
                 "status": {"allocation": {"devices": {"results": [
                     {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "request": "container-0-request-0"}]}},
                     "reservedFor": [{"resource": "pods", "name": "gpu-pod-extres", "uid": "p1"}]}}],
        device_classes=[{"metadata": {"name": DRIVER}, "spec": {
            "extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression": CLASS_CEL}}]}}],
        slices=[{"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "devices": [
            {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{i}"}}}
            for i in range(2)]}}],
        containers={"gpu-pod-extres/workload": {"stdout": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n",
                                                "stderr": "", "exit_code": 0}})
    facts = build_facts(snap, builtin("nvidia"))
    assert facts.claims[0].is_generated and facts.extended_resources == {"nvidia.com/gpu": DRIVER}
    code, reason = classify(facts)
    assert code == "cdi-wrong-device" and "GPU-1" in reason and "GPU-0" in reason


def test_the_cluster_part_is_read_once_within_cluster_read_once():
    """The fleet sweep's failures share one reading of the cluster's part (gather.cluster_read_once):
    read by the first, copied into each later one's snapshot, never their namespaces' part."""
    from draconf.diagnosis.gather import ClusterReading, Snapshot, cluster_read_once, _shared

    reads = []

    def read(snap):
        reads.append(1)
        snap.nodes = [{"metadata": {"name": "n1"}}]
        snap.errors.update({"nodes": "HTTP 500", "pods": "not the cluster's"})

    shared = ClusterReading()
    first, second = Snapshot(namespace="a"), Snapshot(namespace="b", errors={"events": "own"})
    shared.fill(("api", "gpu.nvidia.com"), first, read)
    shared.fill(("api", "gpu.nvidia.com"), second, read)
    assert len(reads) == 1
    assert second.nodes == first.nodes == [{"metadata": {"name": "n1"}}]
    assert second.errors == {"events": "own", "nodes": "HTTP 500"} and second.namespace == "b"
    shared.fill(("other api", "gpu.nvidia.com"), Snapshot(), read)
    assert len(reads) == 2

    def unreachable(snap):
        reads.append(1)
        snap.api_error = "ConnectionRefusedError"

    for _ in range(2):  # an unreachable server is asked again by the next failure
        shared.fill(("down", "gpu.nvidia.com"), Snapshot(), unreachable)
    assert len(reads) == 4

    assert _shared.get() is None
    with cluster_read_once() as reading:
        assert _shared.get() is reading
    assert _shared.get() is None
