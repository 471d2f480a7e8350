"""A GPU batch job: it runs to completion on the GPU it was given, and gives the GPU back.

The pattern of NVIDIA's DRA quickstart and of most real GPU work: apply ``08-job.yaml`` (a Job
whose pod gets its GPU from a ResourceClaimTemplate and runs ``nvidia-smi -L``, or the driver
profile's own command), then expect

* **completion** - the Job completes, the pod's log lists exactly the GPU allocated to its
  generated claim (read while the claim existed), and once the pod is done the resourceclaim
  controller deletes that claim, so the GPU is free again although the completed pod remains.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from draconf import startup, waits
from draconf.admission import AdmissionDenied
from draconf.claims import Claim
from draconf.devices import PublishedDevices
from draconf.errors import NoVerdict
from draconf.injection import WrongInjection
from draconf.workload import DeployedWorkload, Workload

JOB_NAME = "gpu-job"
CONTAINER = "list-gpus"
JOB = Workload("job", ["08-job.yaml"], expected_pods=1, pod_selector=f"job-name={JOB_NAME}")


@dataclass
class FinishedJob:
    """The Job after its wait: the claims seen allocated on the way, and why it did not complete."""
    deployed: DeployedWorkload
    allocated: dict[str, Claim]
    error: str | None
    #: what kind of reason ``error`` is (draconf.startup), when the cluster gave one
    cause: str | None = None


def _is_kwok_node(api, name: str) -> bool:
    """A node that KWOK simulates (the embedded bed's large fleets): objects only, no kubelet."""
    annotations = api.core.read_node(name).metadata.annotations or {}
    return "kwok.x-k8s.io/node" in annotations


def _condition(job, kind: str):
    return next((c for c in job.status.conditions or [] if c.type == kind and c.status == "True"), None)


@pytest.fixture(scope="module")
def finished_job(request, cluster, profile, run_id, validated_nodes) -> FinishedJob:
    from draconf.pytest_plugin import make_namespace
    namespace = make_namespace(request, cluster, run_id, "job")
    try:
        deployed = DeployedWorkload.deploy(cluster, namespace, replace(JOB, avoid_nodes=validated_nodes.avoid),
                                           profile, run_id.labels)
    except AdmissionDenied as err:
        return FinishedJob(None, {}, err.msg, startup.ADMISSION_DENIED)
    allocated: dict[str, Claim] = {}

    def observe():
        # The generated claim lives only while the pod runs: remember what it held.
        allocated.update({c.name: c for c in deployed.claims().values() if c.is_allocated})
        pods = deployed.pods()
        for pod in pods:
            if pod.node and _is_kwok_node(cluster, pod.node):
                pytest.skip(f"job pod {pod.name} runs on KWOK node {pod.node}, which runs no container, "
                            "so no job can complete there")
        return cluster.batch.read_namespaced_job_status(JOB_NAME, namespace), pods

    def verdict(state):
        job, pods = state
        failed = _condition(job, "Failed")
        why = (f"job {JOB_NAME} failed ({failed.reason}: {failed.message}); "
               + "; ".join(p.summary() for p in pods)) if failed else deployed.verdict(pods)
        if not why:
            return None
        # How the containers ended says why (e.g. a command the container does not have).
        ended = [f"{p.name}/{cs.get('name')} ended: exit {t.get('exitCode')} {t.get('reason')}: "
                 f"{(t.get('message') or '').strip()[:300]}"
                 for p in pods for cs in p.status.get("containerStatuses") or []
                 if (t := (cs.get("state") or {}).get("terminated"))]
        # The cause stays data: the job's own failure, or the start's verdict's kind.
        return waits.Verdict("; ".join([why] + ended), kind=startup.POD_FAILED if failed else why.kind,
                             answers=() if failed else why.answers)

    def describe(state):
        job, pods = state
        return "; ".join([f"job {JOB_NAME}: {job.status.succeeded or 0} succeeded, "
                          f"{job.status.active or 0} active"] + [p.summary() for p in pods])

    try:
        waits.wait_until(f"job {JOB_NAME} to complete", observe, lambda s: _condition(s[0], "Complete"),
                         timeout=profile.timeouts.running, describe=describe, verdict=verdict)
    except waits.WaitFailed as err:
        return FinishedJob(deployed, allocated, str(err), err.kind
                           if isinstance(err, waits.TerminalState) else startup.TIMEOUT)
    return FinishedJob(deployed, allocated, None)


@pytest.mark.conformance
@pytest.mark.usefixtures("preflight_gate")
@pytest.mark.draconf(workload="job", check="completion")
@pytest.mark.flaky(reruns=0)  # --reruns: the module's fixture ran the job once; a rerun re-reads it
def test_gpu_job_completes_on_the_gpu_it_was_given(finished_job, cluster, profile):
    if finished_job.cause == startup.IMAGE_PULL:
        # Outside what the driver promises: nothing about GPUs was shown either way.
        raise NoVerdict(f"the GPU job never ran: {finished_job.error}")
    if finished_job.error:
        # A container without the claim's CDI devices has no nvidia-smi to start.
        if "executable file not found" in finished_job.error:
            raise AssertionError(f"CDI injection is wrong: job {JOB_NAME}/{CONTAINER} sees no GPU: "
                                 f"{profile.injection.command[0]} is not in the container "
                                 f"({finished_job.error})")
        raise AssertionError(f"the GPU job did not complete: {finished_job.error}")
    deployed = finished_job.deployed
    (pod,) = deployed.pods()
    log = cluster.core.read_namespaced_pod_log(pod.name, deployed.namespace, container=CONTAINER)
    seen = profile.injection.parse(log)
    claims = [finished_job.allocated.get(name) for name in pod.generated_claim_names()]
    assert claims and all(claims), (
        f"pod {pod.name} completed, but no allocation of its claim {pod.generated_claim_names()} was "
        "ever observed")
    published = PublishedDevices.read(cluster, profile.driver)
    allocated = sorted(profile.identity(published.lookup(r.driver, r.pool, r.device))
                       for claim in claims for r in claim.results)
    if sorted(seen) != allocated:
        # The claim is gone once the job is done: the allocation goes to the diagnosis as data.
        raise WrongInjection(f"CDI injection is wrong: {pod.name}/{CONTAINER} sees {sorted(seen)}, allocated "
                             f"{allocated} (log: {log.strip()[:300]!r})", {f"{pod.name}/{CONTAINER}": allocated})
    # Done pods hold no devices: the resourceclaim controller deletes the generated claim.
    names = set(pod.generated_claim_names())
    try:
        waits.wait_until(
            "the completed job's generated claim to be deleted", deployed.claims,
            lambda claims: not names & set(claims), timeout=profile.timeouts.cleanup,
            describe=lambda claims: "; ".join(c.summary() for n, c in claims.items() if n in names))
    except waits.WaitFailed as err:
        raise AssertionError(f"cleanup is incomplete: job pod {pod.name} is done but its claim remains: "
                             f"{err}") from None
