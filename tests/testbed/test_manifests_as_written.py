"""Every manifest in ``manifests/`` and ``manifests/features/``, applied UNCHANGED with kubectl
on the shared healthy bed, does what its header comment promises (in the spirit of kopf's
``tests/e2e/test_examples.py``).

One test per file, each in its own namespace.  ``kubectl apply -n NS -f FILE`` is the real
``kubectl`` binary with the bed's kubeconfig; nothing is read into Python and rewritten.  Files
the comment pairs (a quota and the claims it caps, 42 and 43) are applied together, as the
comment's "By hand" lines do.  Where a promise depends on the cluster's inventory (a model, a
memory size), the expectation is computed from the published ResourceSlices with the file's own
CEL (``draconf.cel``): Running on a matching device when one is published, else Pending with the
scheduler's "cannot allocate all claims".

The bed has no registry: its nodes get the suite's bed image as ``ubuntu:24.04`` (a static
busybox with ``bash``, see ``testbed/images.py``), as a real cluster would pull it from Docker
Hub; that is the only help the files get.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from draconf import cel, namespaces, taints, waits
from draconf.kube import label_selector
from draconf.claims import Claim, device_holders
from draconf.devices import PublishedDevices, class_selectors
from draconf.pods import Pod
from draconf.profile import TESTBED_IMAGE
from draconf.testbed import pins

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
FILES = sorted(p.name for p in MANIFESTS.glob("*.yaml")) + \
    sorted(f"features/{p.name}" for p in (MANIFESTS / "features").glob("*.yaml"))
DRIVER = CLASS = "gpu.nvidia.com"
NO_CAPACITY = "cannot allocate all claims"
#: Seconds for a pod to run / a claim or event to appear on the idle 2-core bed (they take 1-5).
RUN_TIMEOUT = 40
#: Seconds a Pending verdict must stand (the scheduler's message is re-read at the end).
STAND = 3
ADMIN_LABEL = "resource.kubernetes.io/admin-access"


# --- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bed(healthy_bed):
    """The healthy bed, its real nodes holding ``ubuntu:24.04`` (the bed's workload image)."""
    ctr = pins.bin_dir() / "ctr"
    for sock in sorted(Path(healthy_bed.dir, "nodes").glob("*/run-containerd/containerd.sock")):
        proc = subprocess.run([str(ctr), "--address", str(sock), "-n", "k8s.io", "images", "tag",
                               "--force", TESTBED_IMAGE, "docker.io/library/ubuntu:24.04"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"tagging ubuntu:24.04 on {sock.parent.parent.name}: {proc.stderr}"
    return healthy_bed


@pytest.fixture
def ns(bed, api, request):
    name = namespaces.create(api, namespaces.RunId("asis"), request.node.callspec.id)
    yield name
    namespaces.delete_releasing_devices(api, name, timeout=60)


@pytest.fixture(scope="module", autouse=True)
def _namespaces_gone(api):
    yield
    left = namespaces.wait_deleted(api, namespaces.leftovers(api, namespaces.RunId("asis")), timeout=90)
    assert not left, f"namespaces not deleted: {left}"


# --- kubectl and what it leaves ----------------------------------------------------------------

def kubectl(bed, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", "--kubeconfig", str(bed.kubeconfig), *args],
                          capture_output=True, text=True, timeout=60)


def apply(bed, ns: str, *files: str, ok: bool = True) -> subprocess.CompletedProcess:
    """``kubectl apply -n NS -f FILE...`` on the files as they are in the repository."""
    args = ["apply", "-n", ns]
    for f in files:
        args += ["-f", str(MANIFESTS / f)]
    proc = kubectl(bed, *args)
    if ok:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def header(name: str) -> str:
    lines = (MANIFESTS / name).read_text().splitlines()
    return "\n".join(line for line in lines[:next(i for i, line in enumerate(lines) if not line.startswith("#"))])


def pod_state(pod: Pod) -> str:
    waiting = [s.get("state", {}).get("waiting", {}).get("reason")
               for s in pod.status.get("containerStatuses") or []]
    return (f"{pod.name}: {pod.phase} on {pod.node or 'no node'}"
            + (f", {pod.unschedulable_message}" if pod.unschedulable_message else "")
            + (f", waiting {[w for w in waiting if w]}" if any(waiting) else ""))


def wait_pods(api, ns: str, ready, what: str, count: int | None = None, timeout=RUN_TIMEOUT) -> list[Pod]:
    """Pods of ``ns`` once ``ready(pod)`` holds for each (and there are ``count``); a timeout
    fails with the last observed state of every pod."""
    def done(pods):
        return (count is None or len(pods) == count) and pods and all(ready(p) for p in pods)
    return waits.wait_until(what, lambda: Pod.list(api, ns), done, timeout=timeout, interval=0.5,
                            describe=lambda pods: "; ".join(map(pod_state, pods)) or "no pods")


def running(api, ns: str, count: int | None = None) -> list[Pod]:
    return wait_pods(api, ns, lambda p: p.is_running, f"the pods of {ns} to run", count)


def unschedulable(api, ns: str, name: str, text: str) -> Pod:
    """The pod stays unplaced with ``text`` in the scheduler's message (re-read after STAND s)."""
    def observe():
        return Pod.read(api, ns, name)
    waits.wait_until(f"pod {name} to be unschedulable with {text!r}", observe,
                     lambda p: text in (p.unschedulable_message or ""), timeout=RUN_TIMEOUT,
                     describe=pod_state, interval=0.5)
    time.sleep(STAND)
    pod = observe()
    assert not pod.node and text in (pod.unschedulable_message or ""), pod_state(pod)
    return pod


def devices_of(api, ns: str, pod: Pod, published) -> list:
    """The published devices the claims of ``pod`` were allocated."""
    names = set(pod.claim_names().values())
    out = []
    for claim in Claim.list(api, ns):
        if claim.name in names or any(ref.get("uid") == pod.uid for ref in claim.status.get("reservedFor") or []):
            out += [published.lookup(r.driver, r.pool, r.device) for r in claim.results]
    return out


def gpu_lines(bed, ns: str, pod: str, want: int) -> str:
    """The ``nvidia-smi -L`` lines ``pod`` logged, once there are ``want`` (a Running container
    may not have printed yet); a timeout fails with the log as it was."""
    def observe():
        return kubectl(bed, "logs", "-n", ns, pod).stdout
    return waits.wait_until(f"{want} GPU line(s) in the log of {pod}", observe,
                            lambda out: out.count("GPU ") >= want, timeout=15, interval=0.5, describe=repr)


def events(api, ns: str) -> list[str]:
    return [f"{e.reason}: {e.message}" for e in api.core.list_namespaced_event(ns).items]


def quota_hard_filled(api, ns: str, name: str) -> None:
    waits.wait_until(f"status.hard of ResourceQuota {name}", lambda: api.core.read_namespaced_resource_quota(name, ns),
                     lambda q: bool(q.status and q.status.hard), timeout=30, interval=0.25,
                     describe=lambda q: str(q.status))


# --- the promise of each file ------------------------------------------------------------------

def runs_on_matching_device(bed, api, ns: str, name: str) -> str:
    """A file whose claim selects by CEL (02, 03, 04, 31): Running on a device its own CEL (and
    the class's) matches when one is published, else Pending with ``cannot allocate all claims``."""
    template = next(d for d in docs(name) if d["kind"] == "ResourceClaimTemplate")
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    own = [s["cel"]["expression"] for s in exactly.get("selectors", [])]
    published = PublishedDevices.read(api, DRIVER)
    class_cel = class_selectors(api, exactly["deviceClassName"]) or []
    matching = [d for d in published if cel.evaluate_all(class_cel + own, d).matched]
    apply(bed, ns, name)
    pod_name = next(d for d in docs(name) if d["kind"] == "Pod")["metadata"]["name"]
    if not matching:
        unschedulable(api, ns, pod_name, NO_CAPACITY)
        return f"no published device matches {own}: Pending, '{NO_CAPACITY}'"
    pod, = running(api, ns, 1)
    got = devices_of(api, ns, pod, published)
    assert got and all(d in matching for d in got), (
        f"{pod_name} ran on {[str(d) for d in got]}, not on one of {[str(d) for d in matching]}")
    return f"Running on {got[0]} ({len(matching)} matching published device(s))"


def runs_as_written(bed, api, ns: str, name: str) -> str:
    """How a file without a case of its own is judged (a new walkthrough workload needs none):
    applied as written, each pod it makes (a Pod, a Deployment's replicas) Running, and the
    allocation judged as the suite's allocation check judges it."""
    from draconf.builder import Workload
    from draconf.profile import builtin, for_target
    from draconf.workload import DeployedWorkload
    documents = docs(name)
    pods = sum(1 if d["kind"] == "Pod" else (d["spec"].get("replicas", 1) if d["kind"] == "Deployment" else 0)
               for d in documents)
    labels = next((d["spec"]["selector"]["matchLabels"] for d in documents if d["kind"] == "Deployment"), None)
    apply(bed, ns, name)
    running(api, ns, pods)
    workload = Workload(name, [name], pods,
                        pod_selector=label_selector(labels) or None)
    deployed = DeployedWorkload(api, ns, workload, for_target(builtin("nvidia"), "testbed"), documents)
    return "; ".join(deployed.check_allocation(PublishedDevices.read(api, DRIVER)))[:400]


def case_01(bed, api, ns):
    apply(bed, ns, "01-single-gpu.yaml")
    pod, = running(api, ns, 1)
    got = devices_of(api, ns, pod, PublishedDevices.read(api, DRIVER))
    assert len(got) == 1 and got[0] is not None, f"gpu-pod holds {got}"
    logs = gpu_lines(bed, ns, "gpu-pod", 1)
    assert logs.count("GPU ") == 1, f"nvidia-smi -L in gpu-pod: {logs!r}"


def case_05(bed, api, ns):
    apply(bed, ns, "05-two-gpus.yaml")
    pod, = running(api, ns, 1)
    got = devices_of(api, ns, pod, PublishedDevices.read(api, DRIVER))
    assert len(got) == 2 and len({d.key for d in got}) == 2 and {d.node for d in got} == {pod.node}, got
    assert gpu_lines(bed, ns, "trainer", 2).count("GPU ") == 2


def case_06(bed, api, ns):
    """Both pods run with the same shared GPU when the scheduler puts the first one it places on
    a node with three GPUs; otherwise (the comment's caveat) the other cannot be placed."""
    apply(bed, ns, "06-shared-claim.yaml")
    published = PublishedDevices.read(api, DRIVER)
    pods = wait_pods(api, ns, lambda p: p.is_running or p.unschedulable_message, "both pods to be decided", 2)
    placed = [p for p in pods if p.is_running]
    if len(placed) == 1 and published.devices_per_node().get(placed[0].node, 0) < 3:
        other, = [p for p in pods if not p.is_running]
        unschedulable(api, ns, other.name, NO_CAPACITY)
        return f"{placed[0].name} on {placed[0].node} (< 3 GPUs): {other.name} Pending, as the comment warns"
    pods = running(api, ns, 2)
    shared = Claim.read(api, ns, "shared-gpu")
    assert len(shared.results) == 1 and {p.node for p in pods} == {published.lookup(
        shared.results[0].driver, shared.results[0].pool, shared.results[0].device).node}, shared.summary()
    assert len(shared.reserved_for_uids) == 2, f"shared-gpu reserved for {shared.reserved_for_uids}"
    out = kubectl(bed, "exec", "-n", ns, "shared-gpu-pod-a", "-c", "container3", "--", "nvidia-smi", "-L")
    assert "GPU " not in out.stdout, f"container3 lists no claim yet sees {out.stdout!r}"
    return f"both pods on {pods[0].node}, sharing {shared.results[0]}"


def case_07(bed, api, ns):
    apply(bed, ns, "07-deployment.yaml")
    pods = running(api, ns, 2)
    published = PublishedDevices.read(api, DRIVER)
    keys = [d.key for p in pods for d in devices_of(api, ns, p, published)]
    assert len(keys) == 2 and len(set(keys)) == 2, f"two replicas, two GPUs: {keys}"


def case_08(bed, api, ns):
    apply(bed, ns, "08-job.yaml")
    proc = kubectl(bed, "wait", "-n", ns, "--for=condition=complete", "job/gpu-job", f"--timeout={RUN_TIMEOUT}s")
    assert proc.returncode == 0, f"job gpu-job: {proc.stderr} {events(api, ns)[-3:]}"
    assert "GPU " in kubectl(bed, "logs", "-n", ns, "job/gpu-job").stdout
    waits.wait_until("the job's claim to be deleted", lambda: Claim.list(api, ns), lambda c: not c,
                     timeout=RUN_TIMEOUT, describe=lambda c: "; ".join(x.summary() for x in c))


def quota_refuses_second_claim(quota_file: str, quota_name: str):
    def case(bed, api, ns):
        apply(bed, ns, quota_file)
        quota_hard_filled(api, ns, quota_name)
        proc = apply(bed, ns, "23-quota-claims.yaml", ok=False)
        assert "gpu-claim-a created" in proc.stdout, proc.stdout + proc.stderr
        assert f"exceeded quota: {quota_name}" in proc.stderr and "gpu-claim-b" in proc.stderr, proc.stderr
        assert {c.name for c in Claim.list(api, ns)} == {"gpu-claim-a"}
        return proc.stderr.strip().splitlines()[-1]
    return case


def case_22(bed, api, ns):
    """With 24 beside it.  The outcome depends on the DeviceClass: mapping the extended
    resource (extendedResourceName) makes the legacy quota charge claims too."""
    apply(bed, ns, "22-extended-resource-quota.yaml")
    quota_hard_filled(api, ns, "legacy-gpu-cap")
    mapped = api.resource.read_device_class(CLASS).spec.extended_resource_name
    apply(bed, ns, "24-quota-templated-pod.yaml")
    if mapped == "nvidia.com/gpu":
        found = waits.wait_until("FailedResourceClaimCreation naming legacy-gpu-cap", lambda: events(api, ns),
                                 lambda es: any("exceeded quota: legacy-gpu-cap" in e for e in es),
                                 timeout=RUN_TIMEOUT, describe=lambda es: "; ".join(es[-3:]))
        assert not Pod.read(api, ns, "quota-gpu-pod").node
        return f"{CLASS} maps {mapped}: the claim is refused ({found[-1][:120]})"
    running(api, ns, 1)
    return f"{CLASS} maps {mapped or 'no extended resource'}: the pod runs with a GPU (the migration trap)"


def case_23(bed, api, ns):
    """Alone: both claims are created and stay unallocated (nothing consumes them)."""
    apply(bed, ns, "23-quota-claims.yaml")
    time.sleep(STAND)
    claims = Claim.list(api, ns)
    assert sorted(c.name for c in claims) == ["gpu-claim-a", "gpu-claim-b"]
    assert not any(c.is_allocated for c in claims), [c.summary() for c in claims]


def case_24(bed, api, ns):
    """Under 20 with 23's first claim holding the quota: the generated claim is refused and the
    pod stays Pending, unscheduled, with FailedResourceClaimCreation events."""
    apply(bed, ns, "20-deviceclass-quota.yaml")
    quota_hard_filled(api, ns, "gpu-devices")
    apply(bed, ns, "23-quota-claims.yaml", ok=False)   # gpu-claim-b refused, as in case 20
    apply(bed, ns, "24-quota-templated-pod.yaml")
    found = waits.wait_until("a FailedResourceClaimCreation event naming gpu-devices", lambda: events(api, ns),
                             lambda es: any(e.startswith("FailedResourceClaimCreation") and
                                            "exceeded quota: gpu-devices" in e for e in es),
                             timeout=RUN_TIMEOUT, describe=lambda es: "; ".join(es[-3:]))
    pod = Pod.read(api, ns, "quota-gpu-pod")
    assert not pod.node and pod.phase == "Pending", pod_state(pod)
    return next(e for e in found if e.startswith("FailedResourceClaimCreation"))[:160]


def case_30(bed, api, ns):
    missing = docs("30-missing-deviceclass.yaml")[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
    existing = {c.metadata.name for c in api.resource.list_device_class().items}
    assert missing not in existing, f"the bed has a DeviceClass {missing}"
    apply(bed, ns, "30-missing-deviceclass.yaml")
    text = f"request gpu: device class {missing} does not exist"
    pod = unschedulable(api, ns, "missing-class-pod", text)
    assert "FailedScheduling" in " ".join(waits.wait_until(
        "a FailedScheduling event", lambda: events(api, ns), lambda es: any(text in e for e in es),
        timeout=RUN_TIMEOUT, describe=lambda es: "; ".join(es[-3:])))
    return pod.unschedulable_message


def blocked(api, keys: set[str], own_namespace: str = "") -> list[str]:
    """What keeps the devices ``keys`` from a new claim: other namespaces' claims holding them,
    and taints (a slice's or a DeviceTaintRule's) that block them."""
    said = [f"{key} held by {', '.join(h for h in holders if not h.startswith(own_namespace + '/'))}"
            for key, holders in sorted(device_holders(api).items())
            if key in keys and any(not h.startswith(own_namespace + "/") for h in holders)]
    rules = [api.api_client.sanitize_for_serialization(r) for r in api.resource_beta.list_device_taint_rule().items]
    said += [f"{d.key} tainted {[t.get('key') for t in d.blocking]}"
             for d in taints.tainted_devices(taints.with_rule_taints(taints.read_slices(api, DRIVER), rules))
             if d.key in keys and d.blocking]
    return said


def case_32(bed, api, ns):
    """The two A100 holders run on the bed's two A100s; gpu-extra waits with ``cannot allocate
    all claims`` and runs once gpu-holder-0 is deleted."""
    published = PublishedDevices.read(api, DRIVER)
    own = [s["cel"]["expression"] for s in docs("32-capacity-exhausted.yaml")[0]["spec"]["spec"]["devices"]
           ["requests"][0]["exactly"]["selectors"]]
    matching = [d for d in published if cel.evaluate_all((class_selectors(api, CLASS) or []) + own, d).matched]
    assert len(matching) == 2, (f"the file holds two GPUs of its model; this cluster publishes "
                                f"{[str(d) for d in matching]}")
    keys = {d.key for d in matching}
    # As written the file needs both GPUs free: an earlier test's claim still being released,
    # or a taint left on one, is waited out here and named if it stays, rather than reported
    # as a holder that never runs.
    waits.wait_until("the model's two GPUs to be free", lambda: blocked(api, keys), lambda held: not held,
                     timeout=RUN_TIMEOUT, describe=lambda held: "; ".join(held))
    apply(bed, ns, "32-capacity-exhausted.yaml")
    waits.wait_until("the two holders to run", lambda: [Pod.read(api, ns, f"gpu-holder-{i}") for i in (0, 1)],
            lambda ps: all(p.is_running for p in ps), timeout=RUN_TIMEOUT,
            describe=lambda ps: "; ".join([*map(pod_state, ps), *blocked(api, keys, ns)]))
    unschedulable(api, ns, "gpu-extra", NO_CAPACITY)
    assert kubectl(bed, "delete", "pod", "-n", ns, "gpu-holder-0", "--grace-period=1").returncode == 0
    waits.wait_until("gpu-extra to run after gpu-holder-0 was deleted", lambda: Pod.read(api, ns, "gpu-extra"),
                     lambda p: p.is_running, timeout=RUN_TIMEOUT, describe=pod_state)


def case_40(bed, api, ns):
    mapped = api.resource.read_device_class(CLASS).spec.extended_resource_name
    apply(bed, ns, "features/40-extended-resource.yaml")
    if mapped != "nvidia.com/gpu":
        unschedulable(api, ns, "gpu-pod-extres", "nvidia.com/gpu")
        return f"{CLASS} maps {mapped or 'nothing'}: Pending"
    pod, = running(api, ns, 1)
    status = pod.status.get("extendedResourceClaimStatus") or {}
    claim = Claim.read(api, ns, status.get("resourceClaimName", "?"))
    assert claim.is_extended_resource_claim and claim.is_allocated, claim.summary()
    assert gpu_lines(bed, ns, "gpu-pod-extres", 1).count("GPU ") == 1
    return claim.summary()


def case_41(bed, api, ns):
    """B200 else H100: the first subrequest the published devices satisfy is the one allocated;
    none satisfied: Pending."""
    subs = docs("features/41-prioritized-list.yaml")[0]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    published = PublishedDevices.read(api, DRIVER)
    class_cel = class_selectors(api, CLASS) or []
    first = next((s["name"] for s in subs if any(
        cel.evaluate_all(class_cel + [x["cel"]["expression"] for x in s["selectors"]], d).matched
        for d in published)), None)
    apply(bed, ns, "features/41-prioritized-list.yaml")
    if first is None:
        unschedulable(api, ns, "gpu-pod-prio", NO_CAPACITY)
        return "neither model published: Pending"
    running(api, ns, 1)
    claim, = Claim.list(api, ns)
    assert [r.request for r in claim.results] == [f"gpu/{first}"], claim.summary()
    return f"allocated gpu/{first}"


def case_42(bed, api, ns):
    apply(bed, ns, "features/42-gpu-in-use.yaml")
    running(api, ns, 1)
    assert Claim.read(api, ns, "gpu-in-use").is_allocated


def case_43(bed, api, ns):
    """Unlabelled: refused.  Labelled, as written (the placeholder uuid): the monitor claim
    matches no GPU and its pod stays Pending beside the running gpu-user."""
    proc = apply(bed, ns, "features/43-admin-access-monitor.yaml", ok=False)
    assert proc.returncode != 0 and "admin-access" in proc.stderr, proc.stdout + proc.stderr
    assert kubectl(bed, "label", "namespace", ns, f"{ADMIN_LABEL}=true").returncode == 0
    apply(bed, ns, "features/42-gpu-in-use.yaml", "features/43-admin-access-monitor.yaml")
    unschedulable(api, ns, "gpu-monitor", NO_CAPACITY)
    waits.wait_until("gpu-user to run", lambda: Pod.read(api, ns, "gpu-user"), lambda p: p.is_running,
                     timeout=RUN_TIMEOUT, describe=pod_state)
    return proc.stderr.strip()[:160]


def case_44(bed, api, ns):
    apply(bed, ns, "features/44-extended-resource-quota.yaml")
    quota_hard_filled(api, ns, "one-gpu")
    apply(bed, ns, "features/40-extended-resource.yaml")
    running(api, ns, 1)
    used = waits.wait_until("the quota's used", lambda: api.core.read_namespaced_resource_quota("one-gpu", ns),
                            lambda q: (q.status.used or {}).get(f"{CLASS}.deviceclass.resource.k8s.io/devices") == "1",
                            timeout=RUN_TIMEOUT, describe=lambda q: json.dumps(q.status.used)).status.used
    assert used.get("requests.nvidia.com/gpu") == "1", used
    # A second such pod: the same file again as a server-side dry-run create (a name clash
    # would say AlreadyExists; admission answers first).
    proc = kubectl(bed, "create", "--dry-run=server", "-n", ns, "-f", str(MANIFESTS / "features/40-extended-resource.yaml"))
    assert proc.returncode != 0 and "exceeded quota: one-gpu, requested: requests.nvidia.com/gpu=1" in proc.stderr, \
        proc.stdout + proc.stderr
    return proc.stderr.strip()


def placeholder_stays_pending(bed, api, ns, name: str, pod: str) -> str:
    """45, 46 as written: the placeholder uuid matches no GPU (draconf puts a tainted GPU's there),
    so the pod stays Pending with the scheduler's "cannot allocate all claims"."""
    apply(bed, ns, name)
    unschedulable(api, ns, pod, NO_CAPACITY)
    return f"the placeholder uuid matches no published device: Pending, '{NO_CAPACITY}'"


def case_45(bed, api, ns):
    return placeholder_stays_pending(bed, api, ns, "features/45-device-taint-tolerated.yaml", "gpu-tolerating")


def case_46(bed, api, ns):
    return placeholder_stays_pending(bed, api, ns, "features/46-device-taint-untolerated.yaml", "gpu-untolerated")


def case_47(bed, api, ns):
    """gpu-test5: the pod runs; each container logs one GPU, the same for the two containers of
    a request, a different one for the other request (the driver applied both configs)."""
    apply(bed, ns, "features/47-gpu-sharing.yaml")
    running(api, ns, 1)

    def logged(container):
        return waits.wait_until(f"the GPU line of pod0/{container}",
                                lambda: kubectl(bed, "logs", "-n", ns, "pod0", "-c", container).stdout,
                                lambda out: "GPU " in out, timeout=15, interval=0.5, describe=repr).strip()
    ts0, ts1, mps0, mps1 = (logged(c) for c in ("ts-ctr0", "ts-ctr1", "mps-ctr0", "mps-ctr1"))
    assert ts0 == ts1 and mps0 == mps1 and ts0 != mps0, (ts0, ts1, mps0, mps1)
    return f"TimeSlicing: {ts0}; MPS: {mps0}"


def case_48(bed, api, ns):
    """Both invalid configs are refused by the driver with its own words; the pods never start."""
    apply(bed, ns, "features/48-gpu-sharing-invalid.yaml")
    words = {"bad-field": 'unknown field "sharing.timeSlicingConfig.quantum"',
             "bad-strategy": 'sharing strategy "Exclusive" is unknown'}
    found = waits.wait_until(
        "the driver's refusals", lambda: events(api, ns),
        lambda es: all(any(w in e and e.startswith("FailedPrepareDynamicResources") for e in es)
                       for w in words.values()), timeout=RUN_TIMEOUT, describe=lambda es: "; ".join(es[-3:]))
    assert not any(Pod.read(api, ns, name).is_running for name in words)
    return next(e for e in found if words["bad-strategy"] in e)[:200]



def rule_as_written(bed, api, name: str, rule: str, reason: str) -> str:
    """49, 50 as written: a cluster-scoped DeviceTaintRule for pool gpu-node-0, device gpu-0, which
    the bed does not publish, so it taints nothing; kube-controller-manager writes its status
    (``reason``).  Deleted here: the namespace does not own it as written."""
    from draconf import taints
    apply(bed, "default", name)
    try:
        got = waits.wait_until(f"DeviceTaintRule {rule}'s status", lambda: api.api_client.sanitize_for_serialization(
                               api.resource_beta.read_device_taint_rule(rule)),
                               lambda r: taints.rule_condition(r) is not None, timeout=RUN_TIMEOUT,
                               describe=taints.describe_rule)
        assert taints.rule_condition(got)["reason"] == reason, taints.describe_rule(got)
        assert not taints.tainted_devices(taints.with_rule_taints(taints.read_slices(api, DRIVER), [got]))
        return taints.describe_rule(got)
    finally:
        kubectl(bed, "delete", "devicetaintrule", rule, "--ignore-not-found")


def case_51(bed, api, ns):
    """Both pods run, each on a GPU of its own claim (the tolerating claim keeps its toleration)."""
    apply(bed, ns, "features/51-gpu-drained.yaml")
    running(api, ns, 2)
    claims = {n: Claim.read(api, ns, n) for n in ("gpu-drained", "gpu-drain-tolerant")}
    keys = [r.key for c in claims.values() for r in c.results]
    assert len(keys) == 2 and len(set(keys)) == 2, keys
    return "; ".join(c.summary() for c in claims.values())

CASES = {
    # 60, 61: Running on a MIG device of their profile where MIG devices are published (a
    # DynamicMIG bed, mixed-mig.yaml), else Pending (the healthy bed: DynamicMIG off).  61 is
    # judged by its first request's CEL.
    "features/60-mig-by-profile.yaml": lambda b, a, n: runs_on_matching_device(b, a, n, "features/60-mig-by-profile.yaml"),
    "features/61-mig-same-parent.yaml": lambda b, a, n: runs_on_matching_device(b, a, n, "features/61-mig-same-parent.yaml"),
    "features/62-mig-whole-gpu.yaml": lambda b, a, n: placeholder_stays_pending(
        b, a, n, "features/62-mig-whole-gpu.yaml", "gpu-whole"),
    "features/63-mig-on-whole-gpu.yaml": lambda b, a, n: placeholder_stays_pending(
        b, a, n, "features/63-mig-on-whole-gpu.yaml", "mig-on-whole-gpu"),
    "01-single-gpu.yaml": case_01,
    "02-model-selected.yaml": lambda b, a, n: runs_on_matching_device(b, a, n, "02-model-selected.yaml"),
    "03-memory-selected.yaml": lambda b, a, n: runs_on_matching_device(b, a, n, "03-memory-selected.yaml"),
    "04-architecture-and-memory.yaml": lambda b, a, n: runs_on_matching_device(b, a, n, "04-architecture-and-memory.yaml"),
    "05-two-gpus.yaml": case_05,
    "06-shared-claim.yaml": case_06,
    "07-deployment.yaml": case_07,
    "08-job.yaml": case_08,
    "20-deviceclass-quota.yaml": quota_refuses_second_claim("20-deviceclass-quota.yaml", "gpu-devices"),
    "21-claim-count-quota.yaml": quota_refuses_second_claim("21-claim-count-quota.yaml", "claim-count"),
    "22-extended-resource-quota.yaml": case_22,
    "23-quota-claims.yaml": case_23,
    "24-quota-templated-pod.yaml": case_24,
    "30-missing-deviceclass.yaml": case_30,
    "31-unmatched-selector.yaml": lambda b, a, n: runs_on_matching_device(b, a, n, "31-unmatched-selector.yaml"),
    "32-capacity-exhausted.yaml": case_32,
    "features/40-extended-resource.yaml": case_40,
    "features/41-prioritized-list.yaml": case_41,
    "features/42-gpu-in-use.yaml": case_42,
    "features/43-admin-access-monitor.yaml": case_43,
    "features/44-extended-resource-quota.yaml": case_44,
    "features/45-device-taint-tolerated.yaml": case_45,
    "features/46-device-taint-untolerated.yaml": case_46,
    "features/47-gpu-sharing.yaml": case_47,
    "features/48-gpu-sharing-invalid.yaml": case_48,
    "features/49-device-taint-rule.yaml": lambda b, a, n: rule_as_written(
        b, a, "features/49-device-taint-rule.yaml", "gpu-maintenance", "OtherEffect"),
    "features/50-device-taint-rule-evict.yaml": lambda b, a, n: rule_as_written(
        b, a, "features/50-device-taint-rule-evict.yaml", "gpu-drain", "NotStarted"),
    "features/51-gpu-drained.yaml": case_51,
}


def test_every_case_names_a_manifest():
    """No case outlives its file (a file without a case is judged by runs_as_written)."""
    assert set(CASES) <= set(FILES), sorted(set(CASES) - set(FILES))


@pytest.mark.parametrize("name", FILES)
def test_manifest_as_written(name, bed, api, ns, record_property):
    assert header(name), f"{name} has no header comment"
    outcome = CASES[name](bed, api, ns) if name in CASES else runs_as_written(bed, api, ns, name)
    if outcome:
        record_property("outcome", outcome)
        print(f"{name}: {outcome}")
