"""The live pods and claims held against the manifests the suite applied (draconf.applied and
DeployedWorkload.assert_pods_as_applied), over the walkthrough's own manifests: a pod whose
claims an admission policy stripped, or a claim whose request it rewrote, fails
``spec-altered`` before anything is judged."""

import copy
from pathlib import Path

import pytest
import yaml

from draconf.claims import Claim
from draconf.pods import Pod
from draconf.errors import CheckFailed
from draconf.workload import SPEC_ALTERED, DeployedWorkload

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def applied(name: str) -> DeployedWorkload:
    docs = [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]
    return DeployedWorkload(api=None, namespace="draconf-test", workload=None, profile=None, documents=docs)


def live_pods(workload: DeployedWorkload, mutate=None) -> list[Pod]:
    """The pods the cluster would run from the documents, after ``mutate`` (an admission
    policy's edit) if given."""
    pods = []
    for doc in workload.documents:
        if doc["kind"] == "Pod":
            meta, spec = {"name": doc["metadata"]["name"]}, copy.deepcopy(doc["spec"])
        elif doc["kind"] == "Deployment":
            template = doc["spec"]["template"]
            meta = {"name": doc["metadata"]["name"] + "-7c9d-abcde", "labels": dict(template["metadata"]["labels"])}
            spec = copy.deepcopy(template["spec"])
        else:
            continue
        if mutate:
            mutate(spec)
        # the claims the resourceclaim controller made from the pod's templates
        status = {"resourceClaimStatuses": [{"name": ref["name"], "resourceClaimName": f"{meta['name']}-{ref['name']}-x1"}
                                            for ref in spec.get("resourceClaims") or []
                                            if ref.get("resourceClaimTemplateName")]}
        pods.append(Pod({"metadata": meta, "spec": spec, "status": status}))
    return pods


def live_claims(workload: DeployedWorkload, pods: list[Pod], mutate=None) -> dict[str, Claim]:
    """The claims the cluster would hold for ``pods``: each ResourceClaim as applied, and one per
    pod and template reference with the template's spec; ``mutate`` edits each claim's spec (an
    admission policy acting on claim creates), with the API server's defaults written out as it
    stores them."""
    templates = {d["metadata"]["name"]: d for d in workload.documents if d["kind"] == "ResourceClaimTemplate"}
    claims = {d["metadata"]["name"]: copy.deepcopy(d["spec"]) for d in workload.documents if d["kind"] == "ResourceClaim"}
    for pod in pods:
        names = pod.claim_names()
        for ref in pod.spec.get("resourceClaims") or []:
            if ref.get("resourceClaimTemplateName") in templates:
                claims[names[ref["name"]]] = copy.deepcopy(templates[ref["resourceClaimTemplateName"]]["spec"]["spec"])
    for spec in claims.values():
        for request in spec["devices"]["requests"]:
            request["exactly"].setdefault("allocationMode", "ExactCount")
            request["exactly"].setdefault("count", 1)
        if mutate:
            mutate(spec)
    return {name: Claim({"metadata": {"name": name, "namespace": "draconf-test"}, "spec": spec})
            for name, spec in claims.items()}


def judged(workload: DeployedWorkload, mutate_pod=None, mutate_claim=None) -> None:
    pods = live_pods(workload, mutate_pod)
    workload.assert_pods_as_applied(pods, live_claims(workload, pods, mutate_claim))


def strip_claims(spec):
    spec.pop("resourceClaims", None)
    for container in spec["containers"]:
        (container.get("resources") or {}).pop("claims", None)


@pytest.mark.parametrize("manifest", ["01-single-gpu.yaml", "05-two-gpus.yaml", "06-shared-claim.yaml",
                                      "07-deployment.yaml"])
def test_pods_as_applied_pass(manifest):
    # the claims carry the API server's defaults (allocationMode, count): no difference
    judged(applied(manifest))


@pytest.mark.parametrize("manifest", ["01-single-gpu.yaml", "06-shared-claim.yaml", "07-deployment.yaml"])
def test_claims_stripped_by_admission_are_spec_altered(manifest):
    workload = applied(manifest)
    with pytest.raises(CheckFailed) as failed:
        judged(workload, strip_claims)
    message = failed.value.reason
    assert failed.value.code == SPEC_ALTERED and "spec.resourceClaims lacks" in message, message
    assert "lists no claim" in message, message


def test_a_container_that_lost_only_its_claim_entry_is_named():
    workload = applied("01-single-gpu.yaml")

    def drop_container_claims(spec):
        spec["containers"][0]["resources"].pop("claims")
    with pytest.raises(CheckFailed, match=r"container workload lists no claim gpu"):
        judged(workload, drop_container_claims)


def test_a_claim_swapped_for_another_template_is_named():
    workload = applied("01-single-gpu.yaml")

    def swap(spec):
        spec["resourceClaims"][0]["resourceClaimTemplateName"] = "cpu-only"
    with pytest.raises(CheckFailed, match=r"comes from template cpu-only, applied as template single-gpu"):
        judged(workload, swap)


def test_a_template_whose_count_admission_lowered_is_named():
    """05-two-gpus.yaml asks for two GPUs; a policy that makes the generated claim ask for one
    would let the workload pass on one GPU, judged against the rewritten claim."""
    workload = applied("05-two-gpus.yaml")

    def one_gpu(spec):
        spec["devices"]["requests"][0]["exactly"]["count"] = 1
    with pytest.raises(CheckFailed) as failed:
        judged(workload, mutate_claim=one_gpu)
    message = failed.value.reason
    assert failed.value.code == SPEC_ALTERED and "(from template" in message, message
    assert "count 1 (applied 2)" in message, message


@pytest.mark.parametrize("manifest", ["01-single-gpu.yaml", "06-shared-claim.yaml"])
def test_a_claim_given_another_class_is_named(manifest):
    workload = applied(manifest)

    def other_class(spec):
        spec["devices"]["requests"][0]["exactly"]["deviceClassName"] = "cheap-gpu.example.com"
    with pytest.raises(CheckFailed, match=r"deviceClassName 'cheap-gpu.example.com'"):
        judged(workload, mutate_claim=other_class)



def test_the_spec_altered_code_is_in_the_vocabulary():
    from draconf.reporting import DIAGNOSES
    assert SPEC_ALTERED in DIAGNOSES
