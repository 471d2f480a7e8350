"""The cluster fails GPU requests correctly: quickly, with the message an operator can act on.

Each test provokes one of the seed's failure modes in its own namespace and asserts the
scheduler's verdict (PodScheduled=False / FailedScheduling), measured in seconds:

* **missing-deviceclass** - a claim naming a DeviceClass that does not exist: the pod stays
  Pending with ``device class <name> does not exist``;
* **selector-unmatched** - a valid selector that no published device satisfies (exact memory
  size, the seed's example, moved off every published size): ``cannot allocate all claims``,
  and the claim stays unallocated; the test names the selector and the published sizes;
* **capacity-exhausted** - every free GPU of one model is held, one more pod asks for that
  model: it stays Pending with ``cannot allocate all claims``, and runs once a holder is
  deleted.

On a healthy cluster these tests pass; they fail when the cluster places a pod it should not,
reports the wrong reason, or never reaches a verdict.
"""

from __future__ import annotations

import copy
import logging
import time

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from draconf import cel, manifests, waits
from draconf import selectors as sel
from draconf.claims import Claim, device_holders
from draconf.devices import PublishedDevices, class_selectors
from draconf.pods import delete_pods
from draconf.pods import Pod
from draconf.quantity import format_binary
from draconf.errors import CheckFailed, NoVerdict
from draconf.reporting import note, record_diagnosis, show_templated
from draconf.startup import VERDICT_AFTER, is_definitive
from draconf.workload import DeployedWorkload, Workload

# Quota and failure behaviour only means something on a cluster that passes preflight.
pytestmark = pytest.mark.usefixtures("preflight_gate")

log = logging.getLogger("draconf")

NO_CAPACITY = "cannot allocate all claims"
#: Most holders the capacity test will start (one pod per free device of the chosen model).
MAX_HOLDERS = 32


# --- helpers -----------------------------------------------------------------------------------

def report_time(request, what: str, seconds: float) -> None:
    log.info("%s: %.2fs to verdict (%s)", request.node.name, seconds, what)
    request.node.user_properties.append((f"seconds to verdict: {what}", round(seconds, 2)))


def report_unschedulable(request, what: str, seconds: float, confirmed: str | None) -> None:
    """The seconds to the scheduler's message, and how the verdict was made sure of: the
    cluster's state read just then, or the message standing VERDICT_AFTER seconds."""
    report_time(request, what, seconds)
    note(request.node, f"the scheduler's message confirmed by the cluster's state: {confirmed}" if confirmed
         else f"the scheduler's message stood {VERDICT_AFTER:g}s (the cluster's state did not confirm it)")


def wait_unschedulable(deployed: DeployedWorkload, pod_name: str, text: str,
                       hold: float = VERDICT_AFTER) -> tuple[Pod, float, str | None]:
    """Wait until the scheduler says ``text`` about ``pod_name`` and the cluster's state
    confirms it (:meth:`DeployedWorkload.confirm_unschedulable`: the class is missing, too few
    free devices pass the request's selectors), or else the scheduler keeps saying it for
    ``hold`` seconds without placing the pod; returns the pod, seconds to the first message,
    and the confirmation (None when it stood instead).

    Fails at once (no timeout) if the pod is scheduled, fails, or gets a different definitive
    verdict that stands for ``hold`` seconds.
    """
    api, namespace, profile = deployed.api, deployed.namespace, deployed.profile
    started = time.monotonic()
    other_since: dict[str, float] = {}

    def observe():
        try:
            return Pod.read(api, namespace, pod_name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def verdict(pod):
        if pod is None:
            return None
        if pod.node:
            return f"pod {pod_name} was scheduled to {pod.node}"
        if pod.phase == "Failed":
            return f"pod {pod_name} failed: {pod.summary()}"
        if refused := deployed.claim_not_created(pod):
            return refused  # the pod never reaches the scheduler: no message will come
        message = pod.unschedulable_message or ""
        if message and is_definitive(message):
            first = other_since.setdefault(message, time.monotonic())
            if time.monotonic() - first >= hold:
                return f"the scheduler reports {message!r} instead of {text!r}"
        return None

    describe = lambda pod: pod.summary() if pod else f"pod {pod_name} not found"  # noqa: E731
    waits.wait_until(f"the scheduler to report {text!r} for pod {pod_name}", observe,
                     lambda pod: pod is not None and text in (pod.unschedulable_message or ""),
                     timeout=profile.timeouts.schedule, describe=describe, verdict=verdict,
                     interval=0.25)
    seconds = time.monotonic() - started
    pod = Pod.read(api, namespace, pod_name)
    if not pod.node and text in (pod.unschedulable_message or "") and \
            (confirmed := deployed.confirm_unschedulable(pod, pod.unschedulable_message)):
        return pod, seconds, confirmed

    # Not confirmed by the state: the verdict must stand, the pod unscheduled with the same reason.
    def no_longer(pod):
        if pod is None or pod.node or text not in (pod.unschedulable_message or ""):
            return f"pod {pod_name} no longer reports {text!r}: {describe(pod)}"
        return None

    until = time.monotonic() + hold
    waits.wait_until(f"pod {pod_name} to stay unscheduled for {hold:g}s", observe,
                     lambda pod: time.monotonic() >= until and no_longer(pod) is None,
                     timeout=hold + 30, describe=describe, verdict=no_longer, interval=0.25)
    return Pod.read(api, namespace, pod_name), seconds, None


def scheduler_events(api, namespace: str, pod: str) -> list[str]:
    items = api.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}").items
    return [e.message or "" for e in items if e.reason == "FailedScheduling"]


MISSING_CLASS_MANIFEST = "30-missing-deviceclass.yaml"
UNMATCHED_MANIFEST = "31-unmatched-selector.yaml"


def memory_equals(domain: str, capacity: str, size: int) -> sel.Selector:
    """The seed's exact-size selector (``memory == quantity("64Gi")``)."""
    q = format_binary(size)
    return sel.Selector(
        cel=f"device.capacity['{domain}'].{capacity} == quantity(\"{q}\")",
        description=f"{capacity} == {q}")


def allocated_keys(api) -> set[str]:
    """``driver/pool/device`` of every device allocated to any claim in the cluster."""
    return set(device_holders(api))


def wait_holders_settled(holders: DeployedWorkload) -> list[Pod]:
    """Every holder pod Running, or told ``cannot allocate all claims`` for VERDICT_AFTER seconds
    (its device went to another workload); at least one must run. Other verdicts fail at once."""
    since: dict[str, float] = {}

    def waiting_for_capacity(pods) -> list[Pod]:
        """Pending holders told NO_CAPACITY for VERDICT_AFTER seconds already."""
        now, out = time.monotonic(), []
        for pod in pods:
            if not pod.is_running and NO_CAPACITY in (pod.unschedulable_message or ""):
                if now - since.setdefault(pod.uid, now) >= VERDICT_AFTER:
                    out.append(pod)
        return out

    def settled(pods) -> bool:
        running = [p for p in pods if p.is_running]
        return (len(pods) == holders.workload.expected_pods and bool(running)
                and len(running) + len(waiting_for_capacity(pods)) == len(pods))

    def verdict(pods):
        if pods and len(waiting_for_capacity(pods)) == len(pods):
            return f"none of the holders got a GPU: {pods[0].unschedulable_message}"
        message = holders.verdict(pods)
        return None if message is None or NO_CAPACITY in message else message

    return waits.wait_until(f"{holders.workload.expected_pods} holder pod(s) to run", holders.pods,
                            settled, timeout=holders.profile.timeouts.running,
                            describe=holders.describe, verdict=verdict, interval=0.5)


def diagnose_start_failure(request, message: str) -> None:
    """Name the cause when pods that should run do not (a broken bed, not this test's mode)."""
    for needle, code in (("does not exist", "missing-deviceclass"),
                         ("CEL runtime error", "attribute-missing"),
                         ("untolerated taint", "node-excluded")):
        if needle in message:
            record_diagnosis(request.node, code, {"scheduler": message})
            return


# --- tests -------------------------------------------------------------------------------------

@pytest.mark.failure_modes
@pytest.mark.draconf(workload="failure-modes", check="missing-deviceclass")
def test_missing_deviceclass_is_reported(request, cluster, namespace, profile, run_id, validated_nodes):
    """A claim naming an absent DeviceClass: Pending with ``device class … does not exist``."""
    api = cluster
    # The class the file names, as written (Workload.documents puts the profile's class in
    # every request; this one request keeps the file's).
    written = manifests.find(manifests.load(MISSING_CLASS_MANIFEST), "ResourceClaimTemplate")
    missing = written["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
    if missing in {c.metadata.name for c in api.resource.list_device_class().items}:
        raise NoVerdict(f"{MISSING_CLASS_MANIFEST} names DeviceClass {missing}, which this cluster has")
    workload = Workload("missing-deviceclass", [MISSING_CLASS_MANIFEST], expected_pods=1,
                        avoid_nodes=validated_nodes.avoid)
    docs = workload.documents(profile)
    template = manifests.find(docs, "ResourceClaimTemplate")
    request_name = template["spec"]["spec"]["devices"]["requests"][0]["name"]
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = missing
    show_templated(request.node, manifests.changes([MISSING_CLASS_MANIFEST], docs))
    manifests.create(api, namespace, docs, run_id.labels)
    deployed = DeployedWorkload(api, namespace, workload, profile, docs)
    pod_name = manifests.find(docs, "Pod")["metadata"]["name"]

    text = f"device class {missing} does not exist"
    pod, seconds, confirmed = wait_unschedulable(deployed, pod_name, text)
    report_unschedulable(request, f"'{text}'", seconds, confirmed)
    message = pod.unschedulable_message
    assert f"request {request_name}: {text}" in message, (
        f"the scheduler's message does not name request {request_name!r}: {message}")
    # The reason must also reach `kubectl describe pod` (a FailedScheduling event), which is
    # where an operator reads it; the scheduler may record it a moment after the condition.
    try:
        events = waits.wait_until(
            f"a FailedScheduling event of {pod_name} naming {text!r}",
            lambda: scheduler_events(api, namespace, pod_name),
            lambda found: any(text in e for e in found), timeout=profile.timeouts.schedule,
            describe=lambda found: "; ".join(found) or "no FailedScheduling event", interval=0.5)
    except waits.WaitFailed as err:
        raise AssertionError(f"the pod's condition names {text!r}, but its events do not: {err}") from None
    log.info("FailedScheduling events of %s: %s", pod_name, events[-1:])
    claims = [c for c in Claim.list(api, namespace) if c.is_generated]
    assert claims and not any(c.is_allocated for c in claims), (
        "the generated claim should exist, unallocated: "
        + ("; ".join(c.summary() for c in claims) or "no generated claim"))


@pytest.mark.failure_modes
@pytest.mark.draconf(workload="failure-modes", check="selector-unmatched")
def test_unmatched_selector_is_reported(request, cluster, namespace, profile, run_id, validated_nodes):
    """A selector matching no published device: Pending with ``cannot allocate all claims``."""
    api = cluster
    published = validated_nodes.devices(PublishedDevices.read(api, profile.driver))
    sizes = {d.memory(profile.memory_capacity) for d in published}
    size = parse_quantity("64Gi")  # the file's size; moved only if some device has exactly that
    while size in sizes:
        size += parse_quantity("1Gi")
    # No device has this size by construction, so the verdict asserted below is the
    # scheduler's own (the size is chosen, not checked: a check of our choice cannot fail).
    rule = memory_equals(profile.domain, profile.memory_capacity, size)
    written = manifests.find(manifests.load(UNMATCHED_MANIFEST), "ResourceClaimTemplate")
    as_written = written["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    # The file's expression unless the cluster has its size (or the profile names another
    # domain or capacity): then the templated one, shown in the report.
    selectors = {} if [s["cel"]["expression"].strip() for s in as_written] == [rule.cel] \
        else {"exact-64gi-gpu": [rule]}
    published_sizes = sorted({format_binary(s) for s in sizes if s})
    summary = (f"selector `{rule.cel}`, which no published {profile.device_class} device "
               f"satisfies (published memory sizes: {', '.join(published_sizes) or 'none'})")
    log.info(summary)
    request.node.user_properties.append(("selector", summary))

    workload = Workload("selector-unmatched", [UNMATCHED_MANIFEST], expected_pods=1,
                        selectors=selectors, avoid_nodes=validated_nodes.avoid)
    show_templated(request.node, manifests.changes([UNMATCHED_MANIFEST], workload.documents(profile)))
    deployed = DeployedWorkload.deploy(api, namespace, workload, profile, run_id.labels)
    pod_name = manifests.find(deployed.documents, "Pod")["metadata"]["name"]
    try:
        pod, seconds, confirmed = wait_unschedulable(deployed, pod_name, NO_CAPACITY)
    except waits.WaitFailed as err:
        diagnose_start_failure(request, str(err))
        raise AssertionError(f"{summary}, yet: {err}") from None
    report_unschedulable(request, f"'{NO_CAPACITY}'", seconds, confirmed)
    claims = [c for c in Claim.list(api, namespace) if c.is_generated]
    assert claims and not any(c.is_allocated for c in claims), (
        f"{summary}, but a claim was allocated: " + "; ".join(c.summary() for c in claims))
    log.info("%s: %s", pod_name, pod.unschedulable_message)


@pytest.mark.failure_modes
# Holds every free GPU of one model and expects the one it frees to go to its own pod: under
# pytest-xdist it runs while no other test of the run holds objects (draconf.parallel).
@pytest.mark.exclusive_capacity
@pytest.mark.draconf(workload="failure-modes", check="capacity-exhausted")
def test_exhausted_capacity_waits_and_recovers(request, cluster, namespace, profile, run_id,
                                               validated_nodes):
    """All free GPUs of one model held: one more waits with ``cannot allocate all claims`` and
    runs once a holder is deleted."""
    api = cluster
    published = validated_nodes.devices(PublishedDevices.read(api, profile.driver))
    if not len(published):
        record_diagnosis(request.node, "no-resourceslices")
        raise CheckFailed(f"no devices of driver {profile.driver} are published", code="no-resourceslices")
    if not profile.has("model"):
        pytest.skip(f"capacity-exhausted holds every GPU of one model: {profile.lacks('model')}")
    if profile.has("type"):
        in_class = sel.device_class(profile.driver, profile.attributes["type"], profile.device_type).matches
    else:
        # No type attribute to choose full GPUs by: the devices the live DeviceClass selects.
        class_cel = class_selectors(api, profile.device_class) or []
        in_class = lambda d: cel.evaluate_all(class_cel, d).matched  # noqa: E731
    model_attr = profile.attributes["model"]
    allocated = allocated_keys(api)
    free_by_model: dict[str, list] = {}
    for d in published:
        if in_class(d) and d.key not in allocated and d.has_attribute(model_attr):
            free_by_model.setdefault(d.attribute(model_attr), []).append(d)
    if not free_by_model:
        # The cluster has GPUs, all in use now: exhaustion was not checked (never green).
        raise NoVerdict("every published GPU is allocated already; nothing to exhaust")
    product = sorted(free_by_model, key=lambda m: (len(free_by_model[m]), m))[0]
    rule = sel.model(profile.domain, model_attr, product)
    matching = [d for d in published if in_class(d) and rule.matches(d)]
    free = [d for d in matching if d.key not in allocated]
    if len(free) > MAX_HOLDERS:
        # Holding them all would take more of the cluster than the suite takes: not checked.
        raise NoVerdict(f"the least common model {product!r} has {len(free)} free GPUs "
                        f"(more than {MAX_HOLDERS} holder pods): exhaustion was not checked")
    log.info("exhausting %s: selector %s matches %d published device(s), %d free: %s", product,
             rule, len(matching), len(free), ", ".join(str(d) for d in free))

    selectors = {"one-model-gpu": [rule]}
    docs = Workload("capacity", ["32-capacity-exhausted.yaml"], 0, selectors,
                    avoid_nodes=validated_nodes.avoid).documents(profile)
    template = manifests.find(docs, "ResourceClaimTemplate")
    proto, extra_doc = manifests.find(docs, "Pod", "gpu-holder-0"), manifests.find(docs, "Pod", "gpu-extra")
    holder_docs = []
    for i in range(len(free)):
        doc = copy.deepcopy(proto)
        doc["metadata"]["name"] = f"gpu-holder-{i}"
        holder_docs.append(doc)
    show_templated(request.node, manifests.changes(["32-capacity-exhausted.yaml"],
                                                   [template] + holder_docs + [extra_doc]))
    manifests.create(api, namespace, [template] + holder_docs, run_id.labels)
    holders = DeployedWorkload(api, namespace, Workload("capacity-holders", [], len(free), selectors),
                               profile, [template] + holder_docs)
    try:
        settled = wait_holders_settled(holders)
    except waits.WaitFailed as err:
        diagnose_start_failure(request, str(err))
        raise AssertionError(f"the {len(free)} holder pod(s) for the free {product} GPUs did not "
                             f"run, so capacity cannot be exhausted: {err}") from None
    # Another workload may have taken a device between our count and the holders' scheduling
    # (e.g. under pytest-xdist): the holders it left without a GPU would compete with the extra
    # pod for the released device, so they go.
    running = [p for p in settled if p.is_running]
    for pod in settled:
        if not pod.is_running:
            log.info("%s found its GPU taken by another workload; deleting it", pod.name)
            delete_pods(api, namespace, pod.name)
    running_names = {p.name for p in running}
    holders = DeployedWorkload(api, namespace,
                               Workload("capacity-holders", [], len(running), selectors), profile,
                               [template] + [d for d in holder_docs
                                             if d["metadata"]["name"] in running_names])
    holders.check_allocation(published)
    claims = holders.claims()
    held_claims = {p.name: p.generated_claim_names() for p in holders.pods()}
    held = {pod: [r.key for n in names if n in claims for r in claims[n].results]
            for pod, names in held_claims.items()}
    log.info("holders: %s", held)
    now_free = [d for d in matching if d.key not in allocated_keys(api)]
    if now_free:
        raise RuntimeError(f"could not exhaust {product}: {', '.join(map(str, now_free))} became "
                           "free while the holders started (another workload released it)")

    manifests.create(api, namespace, [extra_doc], run_id.labels)
    extra = DeployedWorkload(api, namespace, Workload("capacity-extra", [], 1, selectors), profile,
                             [template, extra_doc])
    extra_name = extra_doc["metadata"]["name"]
    pod, seconds, confirmed = wait_unschedulable(extra, extra_name, NO_CAPACITY)
    report_unschedulable(request, f"'{NO_CAPACITY}' with all {len(matching)} {product} GPU(s) allocated",
                         seconds, confirmed)

    # Release one: delete a holder; its generated claim is deallocated and deleted, the
    # scheduler retries the extra pod.
    victim = sorted(held)[0]
    delete_pods(api, namespace, victim)
    released = time.monotonic()
    victim_claims = held_claims.get(victim, [])
    try:
        waits.wait_until(f"pod {extra_name} to run after {victim} was deleted", extra.pods,
                         lambda pods: len(pods) == 1 and pods[0].is_running,
                         timeout=profile.timeouts.cleanup, describe=lambda _: extra.describe())
    except waits.WaitFailed as err:
        left = [c for c in Claim.list(api, namespace) if c.name in victim_claims]
        if left:
            record_diagnosis(request.node, "claim-not-released",
                             {"claims": "\n".join(c.summary() for c in left)})
        else:
            # Released, but a claim outside this test got the GPU first (another tenant of a
            # shared cluster): how the cluster recovers for this pod is then not shown.
            holders, freed = device_holders(api), held.get(victim, [])
            taken = sorted({h for key in freed for h in holders.get(key, []) if not h.startswith(f"{namespace}/")})
            if taken:
                raise NoVerdict(f"{victim} released {', '.join(freed)}, but {', '.join(taken)} got it "
                                f"before {extra_name}, which still waits: {extra.describe()}") from None
        raise AssertionError(f"{extra_name} did not run after {victim} released its GPU: {err}"
                             + (f"; {victim}'s claim is still there: "
                                + "; ".join(c.summary() for c in left) if left else "")) from None
    report_time(request, f"{extra_name} Running after {victim} was deleted",
                time.monotonic() - released)
    extra.check_allocation(published)
    results = [r for c in extra.claims().values() if c.owner_pod_uid == pod.uid for r in c.results]
    got = [r.key for r in results]
    log.info("%s got %s; %s had held %s", extra_name, got, victim, held.get(victim))
    assert results and all(rule.matches(published.lookup(r.driver, r.pool, r.device))
                           for r in results), f"{extra_name} got {got}, which does not satisfy {rule}"
