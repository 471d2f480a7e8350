"""Why a deployed workload is not running yet, and whether that is final: the cluster's verdicts
while a workload starts (the part of e2e's ``framework/pod/wait.go`` that stops early).

:class:`StartVerdicts` is what :class:`draconf.workload.DeployedWorkload` asks on every poll of
its waits: :meth:`~StartVerdicts.verdict` gives the reason the pods will never run once the
cluster says so for good (a scheduler message that stands, or that the cluster's state confirms
at once: :mod:`draconf.availability`; an admission refusal; a node that cannot prepare the
claims or pull the image; a bound pod with unallocated claims), and
:meth:`~StartVerdicts.check_moving` raises :class:`ControlPlaneStalled` when nothing acts on the
pods at all.  Each state is timed from when this workload first saw it (``_standing``): the
cluster retries, so most states become verdicts only once they have stood a while.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from draconf import allocation, availability, refusals, waits
from draconf.admission import denial_in_text
from draconf.answers import ServerAnswer
from draconf.claims import Claim
from draconf.devices import class_selectors, devices_from_slices
from draconf.kube import raw_items
from draconf.pods import Pod
from draconf.profile import Profile

if TYPE_CHECKING:
    from draconf.builder import Workload

#: Scheduler messages that will not change by waiting (see dra-facts §2 and the seeds).
DEFINITIVE_UNSCHEDULABLE = ("cannot allocate all claims", "does not exist", "untolerated taint",
                            "didn't match Pod's node affinity/selector", "CEL runtime error",
                            "exceeded quota", "feature is disabled")
#: Parts of a scheduler message that say "not yet" rather than "never".
TRANSIENT_UNSCHEDULABLE = ("resourceclaim not available on the node", "not created yet",
                           "waiting for", "timed out trying to allocate", "is being deleted",
                           "in use by", "no longer")
#: Seconds a definitive scheduler message must stand before it is a verdict.
VERDICT_AFTER = 3.0

# Why a workload never started, as data (``waits.Verdict.kind``, ``Start.cause``): what a
# check does with it depends on whose promise it was, not on how the reason is worded.
#: the scheduler cannot place a pod (its standing or confirmed PodScheduled message)
UNSCHEDULABLE = "unschedulable"
#: admission refused the workload's objects, or a claim or pod a controller makes for it
ADMISSION_DENIED = "admission-denied"
#: the API server rejected the objects (validation, conflict): the cluster's verdict on them
REJECTED = "rejected"
#: the node's DRA driver refuses to prepare the pod's claims: the driver's promise broken
PREPARE_REFUSED = "prepare-refused"
#: the node's container runtime cannot inject the CDI devices the driver prepared (the spec is
#: not where the runtime looks for it, or not readable): the GPUs never reach the containers
CDI_UNRESOLVED = "cdi-unresolved"
#: what containerd's CreateContainer error says then (internal/cri: "CDI device injection
#: failed: unresolvable CDI devices <name>"), in the kubelet's Failed event
CDI_INJECTION_FAILED = "CDI device injection failed"
#: a pod was bound with its claims unallocated (a scheduler without DRA)
BOUND_UNALLOCATED = "bound-unallocated"
#: the node cannot pull the image: outside the driver's promise
IMAGE_PULL = "image-pull"
#: a pod ended Failed before the workload ran
POD_FAILED = "pod-failed"
#: a pod's claim was never created (quota, policy), seen only in an event
CLAIM_NOT_CREATED = "claim-not-created"
#: a feature the run expects is not there (draconf.expectations.FeatureMissing)
FEATURE_MISSING = "feature-missing"
#: no controller or scheduler acted (ControlPlaneStalled)
STALLED = "stalled"
#: nothing definitive within the timeout
TIMEOUT = "timeout"

#: "Nothing is moving": the fraction of the profile's ``timeouts.schedule`` after which a
#: workload that no scheduler (or no claim controller) has acted on is a control-plane verdict,
#: and the floor in seconds.  Measured on the 2-core bed under a full run: the first scheduler
#: action (binding or PodScheduled condition) comes within 1 s of a pod's creation, the
#: generated claims within 1 s (docs/hostile-clusters.md, "A stalled control plane"); the default schedule
#: timeout of 60 s gives 15 s, more than ten times that.
STALL_FRACTION = 0.25
STALL_FLOOR = 10.0


def stall_after(profile: Profile) -> float:
    """Seconds of no scheduler or claim-controller action that make a stalled-control-plane
    verdict: a quarter of the profile's schedule timeout, at least STALL_FLOOR.

    >>> from draconf.profile import Timeouts
    >>> stall_after(Profile(timeouts=Timeouts(schedule=60))), stall_after(Profile(timeouts=Timeouts(schedule=20)))
    (15.0, 10.0)
    """
    return max(STALL_FLOOR, profile.timeouts.schedule * STALL_FRACTION)


#: raised by the waits below; defined with the waits (namespaces raise it too)
ControlPlaneStalled = waits.ControlPlaneStalled


def is_definitive(message: str) -> bool:
    """True when a scheduler message says the pod cannot be placed, not that it must wait.

    >>> is_definitive("0/4 nodes are available: 4 cannot allocate all claims.")
    True
    >>> is_definitive("0/4 nodes are available: 2 cannot allocate all claims, "
    ...               "2 resourceclaim not available on the node.")
    False
    """
    return any(m in message for m in DEFINITIVE_UNSCHEDULABLE) and \
        not any(m in message for m in TRANSIENT_UNSCHEDULABLE)


class StartVerdicts:
    """The verdicts of a workload that has not started; mixed into DeployedWorkload, whose
    ``api``, ``namespace``, ``workload``, ``profile``, ``run_selector``, ``pods()``, ``claims()``,
    ``events()`` and ``describe()`` it reads, and whose ``_unschedulable_since`` holds its clocks."""

    if TYPE_CHECKING:  # what the host class provides (for the type checker; nothing at run time)
        api: Any
        namespace: str
        workload: Workload
        profile: Profile
        run_selector: str | None
        _unschedulable_since: dict

        def pods(self, include_deleting: bool = False) -> list[Pod]: ...
        def claims(self) -> dict[str, Claim]: ...
        def observed_claims(self) -> dict[str, Claim]: ...
        def events(self) -> list[str]: ...
        def describe(self, pods: list[Pod] | None = None) -> str: ...

    def verdict(self, pods: list[Pod]) -> waits.Verdict | None:
        """Why the pods will not run, once the cluster says so for good (None: keep waiting);
        raises :class:`ControlPlaneStalled` when nothing acts on them at all."""
        now = time.monotonic()
        self.check_moving(pods, now)
        for pod in pods:
            message = pod.unschedulable_message
            if message and is_definitive(message) and not self._held_by_this_run(message):
                # The scheduler retries; a verdict needs the same answer to stand for a while,
                # or the cluster's state to confirm it now.
                if self._standing((pod.uid, message), now) >= VERDICT_AFTER:
                    return self._cause(UNSCHEDULABLE, f"the scheduler cannot place pod {pod.name}: {message}")
                if confirmed := self._confirmed_now(pod, message):
                    return self._cause(UNSCHEDULABLE, f"the scheduler cannot place pod {pod.name}: {message} "
                                                      f"(the cluster confirms: {confirmed})")
            if message and not pod.node and denial_in_text(message):
                # The scheduler could not create the claim it makes for the pod (an extended
                # resource's): admission refused it.  It retries, so the refusal standing is it.
                if self._standing((pod.uid, "claim-denied"), now) >= VERDICT_AFTER:
                    refusals.book().record("ResourceClaim", denial_in_text(message), message)
                    return self._cause(ADMISSION_DENIED, "admission refused the claim the scheduler creates "
                                                         f"for pod {pod.name}: {message}",
                                       ServerAnswer(None, message, via="the pod's PodScheduled condition"))
            if pod.phase == "Failed":
                ended = "; ".join(pod.end_reasons) or "no reason given"
                return self._cause(POD_FAILED, f"pod {pod.name} failed: {pod.summary()} ({ended})")
            if pod.image_pull_failures:
                # A kubelet retries pulls with back-off; the same failure standing is a verdict.
                if self._standing((pod.uid, "image-pull"), now) >= VERDICT_AFTER:
                    return self._cause(IMAGE_PULL, f"pod {pod.name} cannot pull its image: "
                                                   f"{'; '.join(pod.image_pull_failures)} "
                                                   "(set the profile's `image` to one the nodes can pull)")
            if pod.phase == "Pending" and pod.node and not pod.is_deleting and pod.spec.get("resourceClaims"):
                unallocated = self._unallocated_claims(pod)
                if unallocated and self._standing((pod.uid, "bound-unallocated"), now) >= VERDICT_AFTER:
                    return self._cause(BOUND_UNALLOCATED, (
                        f"pod {pod.name} was bound to {pod.node} with its claims unallocated "
                        f"({', '.join(unallocated)}): {pod.spec.get('schedulerName') or 'its scheduler'} "
                        "placed it without allocating them (does it run DRA's DynamicResources "
                        "plugin?), and no node prepares an unallocated claim"))
            if pod.phase == "Pending" and pod.node and pod.spec.get("resourceClaims"):
                # The node's DRA driver refused to prepare the claims; the kubelet retries with
                # back-off, so the refusal standing is a verdict.
                refused = self._standing_event(pod, "FailedPrepareDynamicResources", now)
                if refused:
                    return self._cause(PREPARE_REFUSED, f"the node cannot prepare the claims of pod {pod.name} "
                                                        f"on {pod.node}: {refused}")
                # Prepared, and the runtime cannot find the CDI devices the kubelet names: the
                # kubelet retries the container, so the failure standing is a verdict.
                if any("CreateContainerError" in w for w in pod.waiting_reasons):
                    unresolved = self._standing_event(pod, CDI_INJECTION_FAILED, now)
                    if unresolved:
                        return self._cause(CDI_UNRESOLVED, f"the runtime on {pod.node} cannot inject the CDI "
                                                           f"devices of pod {pod.name}: {unresolved}")
            if refused := self.claim_refusal(pod, now):
                return self._cause(CLAIM_NOT_CREATED, claim_not_created_text(pod, refused),
                                   ServerAnswer(None, refused, via="FailedResourceClaimCreation event"))
        return self._controller_denied(pods)

    @staticmethod
    def _cause(kind: str, message: str, answer: ServerAnswer | None = None) -> waits.Verdict:
        """``message``, the verdict, with its kind (and the server's answer behind it) as data,
        which the wait's :class:`~draconf.waits.TerminalState` carries to
        :class:`draconf.workload.Start`."""
        return waits.Verdict(message, kind=kind, answers=(answer,) if answer is not None else ())

    def claim_not_created(self, pod: Pod, now: float | None = None) -> str | None:
        """Why the claim the resourceclaim controller makes for ``pod`` (from its template) is
        not created, once that has stood VERDICT_AFTER seconds (a quota, an admission policy)."""
        refused = self.claim_refusal(pod, now)
        return claim_not_created_text(pod, refused) if refused else None

    def claim_refusal(self, pod: Pod, now: float | None = None) -> str | None:
        """The FailedResourceClaimCreation event behind :meth:`claim_not_created` (the reason is
        only there): the server's answer to the claim controller's create."""
        if pod.phase != "Pending" or pod.node or pod.claim_names() or not pod.spec.get("resourceClaims"):
            return None
        refused = self._standing_event(pod, "FailedResourceClaimCreation", time.monotonic() if now is None else now)
        if not refused:
            return None
        refusals.book().record("ResourceClaim", denial_in_text(refused), refused)  # it ends a wait: once
        return refused

    def _confirmed_now(self, pod: Pod, message: str) -> str | None:
        """:meth:`confirm_unschedulable` for :meth:`verdict`: asked once per pod and message
        (it reads every slice and claim of the cluster), and again on each poll while a
        device the pod could use is being released; meanwhile the message does not count as
        standing (a GPU a deleted pod frees is the scheduler's next answer, however long its
        grace period)."""
        key = (pod.uid, message, "confirmed")
        if key in self._unschedulable_since:
            return None
        reading = self.read_availability(pod, message)
        if reading is not None and reading.releasing:
            self._unschedulable_since[(pod.uid, message)] = time.monotonic()
            return None
        self._unschedulable_since[key] = time.monotonic()
        return self.confirm_unschedulable(pod, message, reading)

    def read_availability(self, pod: Pod, message: str) -> availability.Availability | None:
        """For "cannot allocate all claims": how the pod's unallocated claims stand against every
        published device and every claim of the cluster (None for other messages)."""
        if "cannot allocate all claims" not in message:
            return None
        mine = self.claims()
        unallocated = [mine[n] for n in pod.claim_names().values() if n in mine and not mine[n].is_allocated]
        if not unallocated:
            return None
        classes = {name: class_selectors(self.api, name) for name in allocation.class_names(unallocated)}
        published = devices_from_slices(raw_items(self.api.resource.list_resource_slice))
        everyone = [Claim(c) for c in raw_items(self.api.resource.list_resource_claim_for_all_namespaces)]
        reading = availability.Availability()
        for claim in unallocated:
            availability.shortage(claim, published, classes, everyone, self._consumers_leaving, into=reading)
        return reading

    def confirm_unschedulable(self, pod: Pod, message: str,
                              reading: availability.Availability | None = None) -> str | None:
        """What the cluster's state says now about the scheduler's ``message`` for ``pod``: a
        DeviceClass its claims name that does not exist, or, for "cannot allocate all claims",
        the requests that fewer free devices pass than they want, with no matching device being
        released (:mod:`draconf.availability`).  None when the state does not confirm the
        message: then it must stand VERDICT_AFTER seconds."""
        if "does not exist" in message:
            mine = self.claims()
            unallocated = [mine[n] for n in pod.claim_names().values() if n in mine and not mine[n].is_allocated]
            missing = sorted(n for n in allocation.class_names(unallocated) if class_selectors(self.api, n) is None)
            return f"DeviceClass {', '.join(missing)} does not exist" if missing else None
        reading = reading or self.read_availability(pod, message)
        return str(reading) if reading is not None and reading.confirmed else None

    def _consumers_leaving(self, holder: Claim) -> bool:
        """Whether a pod ``holder`` is reserved for is being deleted (or already gone)."""
        for ref in holder.status.get("reservedFor") or []:
            if ref.get("resource") != "pods":
                continue
            try:
                consumer = self.api.core.read_namespaced_pod(ref.get("name"), holder.namespace)
            except ApiException as err:
                if err.status == 404:
                    return True
                raise
            if consumer.metadata.deletion_timestamp or consumer.metadata.uid != ref.get("uid"):
                return True
        return False

    def _unallocated_claims(self, pod: Pod) -> list[str]:
        """The claims of a bound pod that are not allocated (or not even generated): a
        scheduler running DRA allocates every claim before it binds the pod."""
        names = pod.claim_names()
        out = [f"{ref} (not generated)" for ref in pod.template_claims_not_generated]
        if names:
            claims = self.observed_claims()
            out += [name for name in names.values() if name in claims and not claims[name].is_allocated]
        return out

    def _controller_denied(self, pods: list[Pod]) -> waits.Verdict | None:
        """A controller (Job, ReplicaSet) whose pods admission refuses records it only in a
        ``FailedCreate`` event naming the policy or webhook: that is the verdict, at once."""
        if len(pods) >= self.workload.expected_pods:
            return None
        for event in reversed(self.events()):
            if " FailedCreate " in event and denial_in_text(event):
                refusals.book().record("Pod", denial_in_text(event), event)
                return self._cause(ADMISSION_DENIED, f"admission refused the workload's pods: {event}",
                                   ServerAnswer(None, event, via="FailedCreate event"))
        return None

    def check_moving(self, pods: list[Pod], now: float | None = None) -> None:
        """Raise :class:`ControlPlaneStalled` once, for :func:`stall_after` seconds, no
        controller has created the workload's pods or generated claims (controller-manager), or
        no scheduler has acted on any of its pods: no binding, no PodScheduled condition.
        A working scheduler acts on every pod within about a second, bound or not."""
        now = time.monotonic() if now is None else now
        limit = stall_after(self.profile)

        if not pods:
            if self.workload.pod_selector and self._standing(("no-pods",), now) >= limit:
                raise self._stalled("kube-controller-manager", "controller-manager-unavailable",
                                    f"no pod of {self.workload.name} ({self.workload.pod_selector}) was "
                                    f"created in {limit:.0f}s: its controller did not act")
            return
        pending = [p for p in pods if not p.node and not p.is_deleting]
        ungenerated = [p for p in pending if p.template_claims_not_generated]
        if not ungenerated:  # the clocks run while their state lasts, not since it first appeared
            self._unschedulable_since.pop(("claims-not-generated",), None)
        if not all(p.unseen_by_scheduler for p in pods):
            self._unschedulable_since.pop(("unseen-by-scheduler",), None)
        if ungenerated and self._standing(("claims-not-generated",), now) >= limit:
            refused = [e for e in self.events() if "FailedResourceClaimCreation" in e]
            if not refused:
                raise self._stalled("kube-controller-manager", "controller-manager-unavailable",
                                    f"no ResourceClaim was generated for "
                                    f"{', '.join(p.name for p in ungenerated)} in {limit:.0f}s and no "
                                    "FailedResourceClaimCreation event: the resourceclaim controller "
                                    "did not act")
        elif not ungenerated and all(p.unseen_by_scheduler for p in pods) \
                and self._standing(("unseen-by-scheduler",), now) >= limit:
            scheduling = [e for e in self.events() if " Scheduled " in e or "FailedScheduling" in e]
            if not scheduling:
                raise self._stalled("kube-scheduler", "scheduler-unavailable",
                                    f"no scheduler acted on {', '.join(p.name for p in pods)} in "
                                    f"{limit:.0f}s: no binding, no PodScheduled condition, no "
                                    "scheduling event")

    def _stalled(self, component: str, code: str, observed: str) -> ControlPlaneStalled:
        from draconf.controlplane import health
        return ControlPlaneStalled(code, f"{observed}; {component}: {health(self.api, component)}",
                                   self.describe())

    def _standing(self, key, now: float) -> float:
        """Seconds the state ``key`` names has lasted, since this workload first saw it (the
        cluster retries; a state becomes a verdict only once it has stood for a while)."""
        return now - self._unschedulable_since.setdefault(key, now)

    def _standing_event(self, pod: Pod, reason: str, now: float) -> str | None:
        """The last ``reason`` event of ``pod``, once the pod has been in that state for
        VERDICT_AFTER seconds (its controller retries; a passing failure is no verdict)."""
        if self._standing((pod.uid, reason), now) < VERDICT_AFTER:
            return None
        events = [e for e in self.events() if reason in e and f"Pod/{pod.name}:" in e]
        return events[-1] if events else None

    def _held_by_this_run(self, message: str) -> bool:
        """True when devices are short only because other tests of this run (pytest-xdist
        workers) hold some: that resolves by waiting, so it is not a verdict."""
        if "cannot allocate all claims" not in message or not self.run_selector:
            return False
        ours = {n["metadata"]["name"] for n in raw_items(self.api.core.list_namespace,
                                                          label_selector=self.run_selector)}
        ours.discard(self.namespace)
        if not ours:
            return False
        return any(c.namespace in ours and c.is_allocated
                   for c in map(Claim, raw_items(self.api.resource.list_resource_claim_for_all_namespaces)))


def claim_not_created_text(pod: Pod, refused: str) -> str:
    return f"the claim of pod {pod.name} cannot be created: {refused}"


def allocated_once_freed(api, namespace: str, claim: str, pod: str, freed: str, timeout: float) -> Claim:
    """``claim`` (of ``pod``) once allocated, after the caller removed what it says kept it
    Pending (``freed``, e.g. "the rule deleted"): the proof that nothing else did.  Not
    allocated within ``timeout`` is :class:`~draconf.errors.NoVerdict`, with the scheduler's
    message: something else keeps it Pending, so the refusal said nothing about ``freed``."""
    from draconf.errors import NoVerdict
    try:
        return waits.wait_until(f"claim {claim} to be allocated with {freed}",
                                lambda: Claim.read(api, namespace, claim), lambda c: c.is_allocated,
                                timeout=timeout, describe=lambda c: c.summary())
    except waits.WaitTimeout:
        raise NoVerdict(f"claim {claim} is not allocated even with {freed} (the scheduler: "
                        f"{Pod.read(api, namespace, pod).unschedulable_message}): something else keeps it "
                        "Pending") from None


def wait_scheduler_answer(api, namespace: str, claim: str, pod: str, timeout: float) -> tuple[Claim, Pod]:
    """The scheduler's answer on ``pod``, whose claim is ``claim``: the claim allocated, or the
    pod told it cannot be placed (a :func:`is_definitive` ``PodScheduled`` message, not a "not
    yet" one such as "waiting for ...").  For checks whose verdict is the answer itself (a claim
    that must not get a device), not the pod running; they still have to show that the reason
    they check is the only one (the scheduler says *that* it cannot allocate, not why)."""
    return waits.wait_until(
        f"the scheduler's verdict on pod {pod}",
        lambda: (Claim.read(api, namespace, claim), Pod.read(api, namespace, pod)),
        lambda state: state[0].is_allocated or is_definitive(state[1].unschedulable_message or ""),
        timeout=timeout, describe=lambda state: f"{state[0].summary()}; pod phase {state[1].phase}")
