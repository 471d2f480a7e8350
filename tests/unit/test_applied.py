"""The live pods held against the manifests the suite applied (draconf.applied and
DeployedWorkload.assert_pods_as_applied), over the walkthrough's own manifests: a pod whose
claims an admission policy stripped fails ``spec-altered`` before anything is judged."""

import copy
from pathlib import Path

import pytest
import yaml

from draconf.pods import Pod
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
        pods.append(Pod({"metadata": meta, "spec": spec}))
    return pods


def strip_claims(spec):
    spec.pop("resourceClaims", None)
    for container in spec["containers"]:
        (container.get("resources") or {}).pop("claims", None)


@pytest.mark.parametrize("manifest", ["01-single-gpu.yaml", "05-two-gpus.yaml", "06-shared-claim.yaml",
                                      "07-deployment.yaml"])
def test_pods_as_applied_pass(manifest):
    workload = applied(manifest)
    workload.assert_pods_as_applied(live_pods(workload))


@pytest.mark.parametrize("manifest", ["01-single-gpu.yaml", "06-shared-claim.yaml", "07-deployment.yaml"])
def test_claims_stripped_by_admission_are_spec_altered(manifest):
    workload = applied(manifest)
    with pytest.raises(AssertionError) as failed:
        workload.assert_pods_as_applied(live_pods(workload, strip_claims))
    message = str(failed.value)
    assert message.startswith(SPEC_ALTERED) and "spec.resourceClaims lacks" in message, message
    assert "lists no claim" in message, message


def test_a_container_that_lost_only_its_claim_entry_is_named():
    workload = applied("01-single-gpu.yaml")

    def drop_container_claims(spec):
        spec["containers"][0]["resources"].pop("claims")
    with pytest.raises(AssertionError, match=r"container workload lists no claim gpu"):
        workload.assert_pods_as_applied(live_pods(workload, drop_container_claims))


def test_a_claim_swapped_for_another_template_is_named():
    workload = applied("01-single-gpu.yaml")

    def swap(spec):
        spec["resourceClaims"][0]["resourceClaimTemplateName"] = "cpu-only"
    with pytest.raises(AssertionError, match=r"comes from template cpu-only, applied as template single-gpu"):
        workload.assert_pods_as_applied(live_pods(workload, swap))


def test_the_spec_altered_code_is_in_the_vocabulary():
    from draconf.reporting import DIAGNOSES
    assert SPEC_ALTERED == "[spec-altered] " and "spec-altered" in DIAGNOSES
