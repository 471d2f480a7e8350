"""A GPU workload deployed into a test namespace, and the three checks every workload gets.

``Workload`` (:mod:`draconf.builder`, re-exported here) is what a scenario declares: which
manifests, which selectors to put into which claim (template), how many pods consume it.
``DeployedWorkload`` is that workload running in a cluster, with ``check_allocation``,
``check_injection`` and ``check_cleanup``; each raises ``AssertionError`` with a message an
operator can act on, or
:class:`~draconf.errors.NoVerdict` naming what kept it from a verdict, and returns the
evidence it read.

:meth:`DeployedWorkload.start` deploys and waits, and returns a :class:`Start`: the deployed
workload and, when it never started, why (the cluster's own verdict: the scheduler's, the
admission's, the node's).  The checks take that outcome as data::

    start = DeployedWorkload.start(api, namespace, workload, profile, labels)
    start.deployed.check_allocation(published)   # fails with the real cause if never started
    if start.never_started:
        raise NoVerdict(start.no_verdict_cause)  # injection, cleanup: nothing to judge
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from draconf import admission, allocation, manifests, podsecurity, startup, waits
from draconf.admission import AdmissionDenied
from draconf import answers
from draconf.builder import Workload, match_labels, pod_spec
from draconf import applied
from draconf import selectors as sel
from draconf.kube import Api, label_selector, raw_items
from draconf.claims import Claim, held_devices
from draconf.devices import PublishedDevices, class_selectors
from draconf.injection import Seen, WrongInjection, judge as judge_injection
from draconf.errors import CheckFailed, NoVerdict, ReleaseIncomplete, server_message
from draconf.pods import Pod, delete_pods, exec_in_container, request_matches
from draconf.profile import Profile
from draconf.release import CONTROLLER, ReleaseJudge
from draconf.startup import ControlPlaneStalled, StartVerdicts, stall_after
from draconf.watched import WatchedRun

log = logging.getLogger("draconf.workload")

#: The diagnosis code of a failure where the live pods are not what the suite applied (the
#: vocabulary is a layer above: draconf.reporting.diagnoses).
SPEC_ALTERED = "spec-altered"


@dataclass(frozen=True)
class Start:
    """How starting a workload ended: ``failure`` is None when every pod ran, else the
    cluster's reason it did not (a standing scheduler verdict, an admission rejection, a node
    that cannot prepare the claims or pull the image, or the timeout's last observed state).
    ``deployed`` is None when the workload could not even be written for this cluster.

    >>> Start(deployed=None, failure="the scheduler cannot place pod p: 0/4 nodes").no_verdict_cause
    'workload never started: the scheduler cannot place pod p: 0/4 nodes'
    >>> Start(deployed=None, failure=None).never_started
    False
    """
    deployed: "DeployedWorkload | None"
    failure: str | None = None
    #: a control-plane code (ControlPlaneStalled.code) when nothing acted on the workload
    stalled: str | None = None
    #: what kind of reason ``failure`` is (draconf.startup: PREPARE_REFUSED, IMAGE_PULL, ...)
    cause: str | None = None
    #: the API server's answers that refused the workload's objects (draconf.answers), if that
    #: is why: what a check failing on this start carries for the diagnosis
    answers: tuple = ()
    #: the diagnosis code of ``failure`` where the suite read the cause itself (a feature the
    #: cluster must have is missing, an attribute to select on is not published)
    code: str | None = None

    @property
    def never_started(self) -> bool:
        return self.failure is not None

    @property
    def refused_by_node(self) -> bool:
        """The node's DRA driver refused to prepare the claims the scheduler allocated, or its
        runtime cannot inject the CDI devices the driver prepared: the promise broken on the
        node, a failure of the checks after allocation, not a reason to give them no verdict
        (an image that cannot be pulled is one).

        >>> Start(None, "the node cannot prepare ...", cause=startup.PREPARE_REFUSED).refused_by_node
        True
        >>> Start(None, "the runtime cannot inject ...", cause=startup.CDI_UNRESOLVED).refused_by_node
        True
        >>> Start(None, "pod p cannot pull its image ...", cause=startup.IMAGE_PULL).refused_by_node
        False
        """
        return self.cause in (startup.PREPARE_REFUSED, startup.CDI_UNRESOLVED)

    @property
    def running(self) -> "DeployedWorkload":
        """The deployed workload, for a check of a start that got as far as deploying it;
        one never deployed (``deployed`` None) gives no verdict, naming why."""
        if self.deployed is None:
            raise NoVerdict(f"the workload was never deployed: {self.failure or 'no reason given'}")
        return self.deployed

    @property
    def no_verdict_cause(self) -> str:
        return f"workload never started: {self.failure}"

    def failed(self, message: str) -> BaseException:
        """The check's failure on this start, ``message`` its text, carrying the server's
        answers behind it for the diagnosis (``raise start.failed(...)``)."""
        return answers.failure(message, self.answers)

    def check_allocation(self, published: PublishedDevices, label: str = "") -> list[str]:
        """The allocation check of this start (:meth:`DeployedWorkload.check_allocation`); the
        evidence.  For a workload that never started the cluster's reason is the verdict and the
        headline, the allocation check's finding after it: nothing that never started was
        "allocated wrong".  ``label`` leads the message (a sweep target's id)."""
        try:
            return self.running.check_allocation(published)
        except (AssertionError, CheckFailed) as err:
            if not self.never_started:
                raise
            found = str(err).removeprefix("allocation is wrong: ")
            raise self.failed(f"{label}the workload never started: {self.failure} "
                              f"(allocation check: {found})") from None


#: API answers to a create that are the cluster's verdict on the workload (validation,
#: admission, quota), not a fault of the suite's credentials (401/403) or a transient error.
REJECTED_STATUSES = {400, 404, 409, 422}


@dataclass
class DeployedWorkload(StartVerdicts):
    api: Api
    namespace: str
    workload: Workload
    profile: Profile
    documents: list[dict]
    _unschedulable_since: dict = field(default_factory=dict, repr=False)
    #: label selector of this run's namespaces; their allocations are contention, not a verdict
    run_selector: str | None = None
    #: the run's pods and the cluster's claims as watched (the fleet sweep's): what the waits
    #: read instead of polling the API server; the checks always read the server
    view: WatchedRun | None = None

    @classmethod
    def deploy(cls, api, namespace: str, workload: Workload, profile: Profile,
               labels: dict | None = None) -> "DeployedWorkload":
        docs = workload.documents(profile)
        manifests.create(api, namespace, docs, labels)
        deployed = cls(api, namespace, workload, profile, docs)
        deployed.run_selector = run_selector(labels)
        return deployed

    @classmethod
    def start(cls, api, namespace: str, workload: Workload, profile: Profile,
              labels: dict | None = None, view: WatchedRun | None = None) -> Start:
        """Deploy ``workload`` and wait for its pods; a cluster that refuses or never runs it
        gives a :class:`Start` with the reason (other errors, e.g. RBAC, propagate).  With a
        ``view`` the waits read it (:mod:`draconf.watched`)."""
        docs = workload.documents(profile)
        deployed = cls(api, namespace, workload, profile, docs, view=view)
        deployed.run_selector = run_selector(labels)
        try:
            manifests.create(api, namespace, docs, labels)
        except AdmissionDenied as err:
            return Start(deployed, err.msg, cause=startup.ADMISSION_DENIED, answers=answers.carried_by(err))
        except ApiException as err:
            if err.status not in REJECTED_STATUSES:
                raise
            return Start(deployed, f"the API server rejected the workload's objects: "
                                   f"{err.status} {err.reason}: {server_message(err)}", cause=startup.REJECTED,
                         answers=answers.carried_by(err))
        return deployed.started()

    def started(self) -> Start:
        """Wait for the deployed pods to run: how that ended, with the cluster's reason as data."""
        try:
            self.wait_running()
        except ControlPlaneStalled as err:
            return Start(self, str(err), stalled=err.code, cause=startup.STALLED)
        except waits.WaitFailed as err:
            return self.not_started(err)
        return Start(self)

    def not_started(self, err: waits.WaitFailed) -> Start:
        """The :class:`Start` of a wait for the pods that ended with them not running: the
        cluster's verdict that ended it early (as data), or the timeout."""
        if isinstance(err, waits.TerminalState):
            return Start(self, str(err), cause=err.kind, answers=err.answers)
        return Start(self, str(err), cause=startup.TIMEOUT)

    # --- observing ---------------------------------------------------------------------------
    def pods(self, include_deleting: bool = False) -> list[Pod]:
        """The workload's pods; a controller's pods being deleted only if asked (a rollout
        replaces them, so they are not the workload's any more)."""
        if self.workload.pod_selector:
            return [p for p in Pod.list(self.api, self.namespace, self.workload.pod_selector)
                    if include_deleting or not p.is_deleting]
        pods = []
        for name in self.pod_names:
            try:
                pods.append(Pod.read(self.api, self.namespace, name))
            except ApiException as err:
                if err.status != 404:
                    raise
        return pods

    @property
    def pod_names(self) -> list[str]:
        """The pods the suite's documents create by name (a controller's are found by label)."""
        return [d["metadata"]["name"] for d in self.documents if d["kind"] == "Pod"]

    def claims(self) -> dict[str, Claim]:
        return {c.name: c for c in Claim.list(self.api, self.namespace)}

    def observed_pods(self, include_deleting: bool = False) -> list[Pod]:
        """:meth:`pods` for a wait: as watched when there is a view (and the workload's pods are
        named in its documents), else read from the API server."""
        if self.view is None or self.workload.pod_selector:
            return self.pods(include_deleting)
        found = [p for p in (self.view.pod(self.namespace, n) for n in self.pod_names) if p is not None]
        return [p for p in found if include_deleting or not p.is_deleting]

    def observed_claims(self) -> dict[str, Claim]:
        """:meth:`claims` for a wait: as watched when there is a view."""
        if self.view is None:
            return self.claims()
        return {c.name: c for c in self.view.claims_in(self.namespace)}

    def describe(self, pods: list[Pod] | None = None) -> str:
        """Pods, with the last event of each pod not yet running (what the kubelet is doing:
        pulling an image, preparing claims), and claims: the progress and timeout line."""
        pods = self.pods() if pods is None else pods
        claims = self.claims()
        events = self.events() if any(not p.is_running for p in pods) else []
        lines = []
        for pod in pods:
            line = pod.summary()
            last = [e for e in events if f" Pod/{pod.name}: " in e]
            if not pod.is_running and last:
                line += f" (last event: {last[-1]})"
            lines.append(line)
        lines = lines or ["no pods"]
        lines += [c.summary() for c in claims.values()]
        return "; ".join(lines)

    def events(self) -> list[str]:
        items = self.api.core.list_namespaced_event(self.namespace).items
        items.sort(key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp))
        return [f"{e.type} {e.reason} {e.involved_object.kind}/{e.involved_object.name}: {e.message}"
                for e in items]

    def wait_running(self, timeout: float | None = None) -> list[Pod]:
        """Every pod of the workload Running; a definitive scheduler verdict fails at once."""
        want = self.workload.expected_pods
        return waits.wait_until(
            f"{want} pod(s) of {self.workload.name} to run",
            self.observed_pods, lambda pods: len(pods) == want and all(p.is_running for p in pods),
            timeout=timeout or self.profile.timeouts.running, describe=self.describe,
            verdict=self.verdict, interval=0.5, confirm=self.pods if self.view is not None else None)

    def wait_pending_with(self, text: str, timeout: float | None = None) -> Pod:
        """The (single) pod stays unscheduled and the scheduler's message names ``text``."""
        def observe():
            pods = self.pods()
            return pods[0] if pods else None
        return waits.wait_until(
            f"the scheduler to report {text!r} for {self.workload.name}", observe,
            lambda p: p is not None and text in (p.unschedulable_message or ""),
            timeout=timeout or self.profile.timeouts.schedule,
            describe=lambda p: p.summary() if p else "no pod",
            verdict=lambda p: self._pending_verdict(p))

    def _pending_verdict(self, pod: Pod | None) -> str | None:
        """What ends a wait for a scheduler message early: the pod placed after all, its claim
        refused by the cluster (it never reaches the scheduler), or nothing acting on it."""
        if pod is not None and pod.node:
            return f"pod {pod.name} was scheduled to {pod.node}"
        if pod is not None and (refused := self.claim_not_created(pod)):
            return refused
        self.check_moving([pod] if pod else [])
        return None

    # --- checks --------------------------------------------------------------------------------
    def check_allocation(self, published: PublishedDevices,
                         reading: allocation.Snapshot | None = None) -> list[str]:
        """Claims allocated by the scheduler to published devices that satisfy their selectors
        (every promise :mod:`draconf.allocation` names), judged on one reading of the cluster
        (``reading``: one :meth:`allocation_snapshot` the caller took, default a new one)."""
        snapshot = reading or self.allocation_snapshot(published)
        self.assert_pods_as_applied(snapshot.pods, snapshot.claims)
        judgement = allocation.judge(
            snapshot, expected_pods=self.workload.expected_pods,
            extended_resources=self.workload.extended_resources,
            identity_attribute=self.profile.attributes.get("uuid"),
            describe_device=lambda device: _published_summary(device, self.profile))
        if not judgement.right:
            raise AssertionError("allocation is wrong: " + str(judgement))
        return judgement.evidence

    def applied_spec(self, pod: Pod) -> dict | None:
        """The pod spec the suite applied for ``pod``: its Pod document by name, else the
        controller whose template's labels the pod carries."""
        for doc in self.documents:
            if doc["kind"] == "Pod" and doc["metadata"]["name"] == pod.name:
                return doc["spec"]
        labels = pod.meta.get("labels") or {}
        for doc in self.documents:
            spec = pod_spec(doc) if doc["kind"] != "Pod" else None
            if spec is not None:
                template = (doc["spec"]["template"].get("metadata") or {}).get("labels") or {}
                if template and all(labels.get(k) == v for k, v in template.items()):
                    return spec
        return None

    def assert_pods_as_applied(self, pods: list[Pod], claims: Mapping[str, Claim]) -> None:
        """Every live pod asks for the claims, requests and GPU limits the suite applied, every
        live claim for the devices its ResourceClaim or ResourceClaimTemplate asked, and some
        pod asks for a device at all: otherwise a mutating webhook or policy rewrote them, and
        whatever runs proves nothing about the GPUs (``spec-altered``)."""
        found, asking = [], False
        for pod in pods:
            spec = self.applied_spec(pod)
            if spec is None:
                continue
            found += applied.differences(spec, pod.spec, pod.name)
            asking = asking or applied.asks_for_devices(pod.spec)
        altered_claims = applied.claim_differences(self.documents, pods, claims)
        # Who may have done it first (what the operator acts on), then what differs.
        if found or altered_claims:
            raise CheckFailed("the pods and claims do not ask for what the suite applied "
                              f"({self._mutators_named(pods if found else [], list(claims.values()) if altered_claims else [])}): "
                              + "; ".join(found + altered_claims), code=SPEC_ALTERED)
        if pods and not asking:
            raise CheckFailed("no pod of the workload asks for a device "
                              f"({self._mutators_named(pods, [])}): "
                              + ", ".join(p.name for p in pods) + " ask for none, so no allocation can be judged",
                              code=SPEC_ALTERED)

    def _mutators_named(self, pods: list[Pod], claims: list[Claim]) -> str:
        """Who may have rewritten these pods or claims (the live ones that differ; none: not
        concerned): the mutating admission acting on creating them in this workload's namespace,
        whose object selectors select one of them."""
        what = " and ".join(w for w, asked in (("pod", pods), ("claim", claims)) if asked)
        try:
            labels = self.api.core.read_namespace(self.namespace).metadata.labels or {}
        except Exception:  # noqa: BLE001 - unread, every mutator acting on those creates is named
            labels = None
        creates = ([("", "pods", [p.meta.get("labels") or {} for p in pods])] if pods else []) + (
            [("resource.k8s.io", "resourceclaims", [c.meta.get("labels") or {} for c in claims]),
             ("resource.k8s.io", "resourceclaimtemplates")] if claims else [])
        found = admission.mutators(self.api, creates, labels)  # one read of the policies and webhooks
        if found:
            return f"mutating admission acting on {what} creates: " + ", ".join(found)
        return f"no mutating admission policy or webhook acting on {what} creates was found"

    def allocation_snapshot(self, published: PublishedDevices,
                            classes_read: Mapping[str, list[str] | None] | None = None) -> allocation.Snapshot:
        """The pods, claims and (live) DeviceClass selectors the allocation is judged on:
        devices are judged by the CEL the cluster holds, not by the profile's assumption.
        ``classes_read``: DeviceClass name -> selectors the caller read from the cluster for
        this run (the fleet sweep's, once for its hundreds of targets); any other class the
        claims name is read now."""
        pods, claims = self.pods(), self.claims()
        known = classes_read or {}
        classes = {name: known[name] if name in known else class_selectors(self.api, name)
                   for name in sorted(allocation.class_names(claims.values()))}
        return allocation.Snapshot(pods, claims, published, classes)

    def expected_identities(self, pod: Pod, container: str, claims: dict[str, Claim],
                            published: PublishedDevices) -> tuple[list[str], list[str]]:
        """What the container should see: the profile's identity (a UUID attribute, or the
        device name) of each device allocated to the claims it lists; and why some of that
        could not be named (a claim not found or not allocated, a device not published or
        without the identity): then the container cannot be judged."""
        names = pod.claim_names()
        found, unknown = [], []
        for ref, request in pod.container_claim_requests(container):
            claim = claims.get(names.get(ref, ""))
            results = [r for r in (claim.results if claim else []) if request_matches(r.request, request)]
            if not results:
                unknown.append(f"claim {names.get(ref) or ref} has no allocation"
                               + (f" for request {request}" if request else ""))
            for result in results:
                device = published.lookup(result.driver, result.pool, result.device)
                identity = self.profile.identity(device) if device is not None else None
                if identity:
                    found.append(identity)
                else:
                    unknown.append(f"{result.key} is "
                                   + ("not published" if device is None else
                                      f"published without its {self.profile.injection.identity}"))
        return sorted(set(found)), unknown

    def check_injection(self, published: PublishedDevices,
                        reading: allocation.Snapshot | None = None) -> list[str]:
        """The profile's command (``nvidia-smi -L``) in every container shows exactly the
        devices allocated to its claims (``reading``: the pods and claims as the allocation
        check just read them, when it ran on the same start; default: read now)."""
        pods = self.pods() if reading is None else reading.pods
        not_running = [p.summary() for p in pods if not p.is_running]
        assert pods and not not_running, ("injection cannot be checked: the workload is not running ("
                                          + ("; ".join(not_running) or "no pods") + ")")
        assert len(pods) == self.workload.expected_pods, (
            f"injection cannot be checked in every pod: expected {self.workload.expected_pods} pod(s), "
            f"found {len(pods)} ({'; '.join(p.summary() for p in pods)})")
        claims = self.claims() if reading is None else dict(reading.claims)
        injection = self.profile.injection
        self.assert_pods_as_applied(pods, claims)
        readings = []
        for pod in pods:
            for container in pod.containers:
                expected, unknown = self.expected_identities(pod, container, claims, published)
                if unknown:
                    readings.append(Seen(pod.name, container, expected, unknown))
                    continue
                result = exec_in_container(self.api, self.namespace, pod.name, container,
                                           list(injection.command), timeout=self.profile.timeouts.exec)
                readings.append(Seen(pod.name, container, expected, seen=sorted(injection.parse(result.stdout)),
                                     result=result))
        judgement = judge_injection(readings, injection.describe(), injection.format == "nvidia-smi-L")
        if judgement.problems:
            raise WrongInjection("CDI injection is wrong: " + "; ".join(judgement.problems),
                                 {c.who: c.expected for c in readings if not c.unknown})
        if judgement.nothing_shown:
            # Every container "expects no GPU and sees none": nothing about injection was shown.
            raise CheckFailed("no container of the workload was allocated a GPU, so none could show one: "
                              + "; ".join(judgement.evidence), code=SPEC_ALTERED)
        if judgement.unjudged:
            # The allocation check judges the claims; here they leave nothing to compare with.
            raise NoVerdict("which GPUs a container should see is not known, so its injection cannot be "
                            "judged: " + " | ".join(judgement.unjudged))
        return judgement.evidence

    def delete_consumers(self) -> None:
        """Delete what consumes the claims (pods, controllers); claims and templates stay."""
        for doc in self.documents:
            if pod_spec(doc) is None:
                continue
            kind, name = doc["kind"], doc["metadata"]["name"]
            try:
                if kind == "Pod":
                    delete_pods(self.api, self.namespace, name)
                elif kind == "Deployment":
                    # The garbage collector would delete the pods with their own grace period
                    # (30 s for `sleep`): orphan them from the Deployment and its ReplicaSets,
                    # then delete them with the suite's.
                    selector = match_labels(doc)
                    self.api.apps.delete_namespaced_deployment(name, self.namespace, propagation_policy="Orphan")
                    for rs in self.api.apps.list_namespaced_replica_set(self.namespace, label_selector=selector).items:
                        self.api.apps.delete_namespaced_replica_set(rs.metadata.name, self.namespace,
                                                                    propagation_policy="Orphan")
                    delete_pods(self.api, self.namespace, selector=selector)
            except ApiException as err:
                if err.status != 404:
                    raise

    def check_cleanup(self, published: PublishedDevices, probe) -> list[str]:
        """After the consumers are gone: generated claims deleted, named claims deallocated, and
        the freed devices allocatable again (``probe(devices)`` allocates them to prove it).

        With no claim allocated there is nothing whose release could be seen: no verdict."""
        claims = self.claims()
        held = {k: c for k, c in claims.items() if c.is_allocated}
        if not held:
            raise NoVerdict("nothing was allocated, so there is no release to check ("
                            + ("; ".join(c.summary() for c in claims.values()) or "no claims") + ")")
        devices = {r.key: published.lookup(r.driver, r.pool, r.device)
                   for c in held.values() for r in c.results}
        unpublished = sorted(key for key, d in devices.items() if d is None)
        # Keyed by device: adminAccess claims share theirs with another claim; free it once.
        freed = [d for d in devices.values() if d is not None]
        self.delete_consumers()
        timeout = self.profile.timeouts.cleanup

        def state():
            return self.observed_pods(include_deleting=True), self.observed_claims()

        def describe(s):
            pods, current = s
            return "; ".join([p.summary() for p in pods] + [c.summary() for c in current.values()]) \
                or "nothing left"

        judge = ReleaseJudge(stall_after(self.profile))

        def done(s):
            return judge.released(s[0], s[1].values())

        def verdict(s):
            stuck = judge.stuck(s[0], list(s[1].values()), time.monotonic())
            if stuck is not None and stuck.where == CONTROLLER:
                raise self._stalled("kube-controller-manager", "controller-manager-unavailable", stuck.observed)
            return stuck.observed if stuck is not None else None

        try:
            waits.wait_until(f"{self.workload.name}'s claims to be released", state, done,
                             timeout=timeout, describe=describe, interval=0.5, verdict=verdict,
                             confirm=(lambda: (self.pods(include_deleting=True), self.claims()))
                             if self.view is not None else None)
        except ControlPlaneStalled:
            raise  # the run's breaker and diagnosis take it as it is
        except waits.WaitFailed as err:
            raise ReleaseIncomplete(f"cleanup is incomplete: {err}") from None
        if unpublished:
            # Released, but the probe can only ask for devices by what their slices publish.
            raise NoVerdict(f"the claims were released, but {', '.join(unpublished)} they held are not among "
                            "the devices published when the workload started, so whether they can be "
                            "allocated again was not probed")
        return [f"released {c.summary()}" for c in held.values()] + probe(freed)


def _published_summary(device, profile: Profile) -> str:
    attrs = {role: device.attribute(name) for role, name in profile.attributes.items()}
    attrs["memory"] = device.memory(profile.memory_capacity)
    return ", ".join(f"{k}={v}" for k, v in attrs.items())


def run_selector(labels: dict | None) -> str | None:
    """The label selector of a run's namespaces, from the labels it puts on them.

    >>> run_selector({"app.kubernetes.io/managed-by": "draconf", "draconf.dev/run-id": "r1"})
    'app.kubernetes.io/managed-by=draconf,draconf.dev/run-id=r1'
    >>> run_selector(None) is None
    True
    """
    return label_selector(labels) or None


def taken_by_run(api, namespace: str, keys: set[str], selector: str | None) -> dict[str, str]:
    """Which of ``keys`` (driver/pool/device) a claim in another namespace of the run holds:
    key -> ``namespace/claim``."""
    if not selector:
        return {}
    ours = {n.metadata.name for n in api.core.list_namespace(label_selector=selector).items} - {namespace}
    if not ours:
        return {}
    return held_devices(map(Claim, raw_items(api.resource.list_resource_claim_for_all_namespaces)),
                        lambda claim: claim.namespace in ours, keys)


def prove_allocatable(api, namespace: str, devices: list, profile: Profile,
                      labels: dict | None = None, tainted: list | None = None,
                      view: WatchedRun | None = None) -> list[str]:
    """Allocate exactly ``devices`` again (one probe pod per node, selecting them by UUID) and
    release them; proves that cleanup really returned them to the pool.  ``tainted``: the
    driver's tainted devices (:class:`~draconf.taints.TaintedDevice`) if already read; with a
    ``view`` the waits read it (:mod:`draconf.watched`)."""
    uuid_attr = profile.attributes["uuid"]
    by_node: dict[str, list] = {}
    for device in devices:
        by_node.setdefault(device.node or device.pool, []).append(device)
    evidence: list = []
    for node, group in sorted(by_node.items()):
        uuids = sorted(d.attribute(uuid_attr) for d in group)
        rule = sel.uuid_in(profile.domain, uuid_attr, uuids)
        name = f"probe-{len(evidence)}"
        # A freed device its driver taints is allocatable again only to a claim tolerating it.
        from draconf.taints import tolerations_for_devices
        tolerations = tolerations_for_devices(api, profile.driver, [d.key for d in group], tainted)
        docs = [
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": profile.device_class, "count": len(uuids),
                 "selectors": [{"cel": {"expression": rule.cel}}],
                 **({"tolerations": tolerations} if tolerations else {})}}]}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
             "spec": podsecurity.conform({
                 "restartPolicy": "Never", "tolerations": [dict(t) for t in profile.tolerations],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                 "containers": [{"name": "probe", "image": profile.image, "command": ["sleep", "3600"],
                                 "resources": {"claims": [{"name": "gpu"}]}}]}, profile.pod_security)},
        ]
        manifests.create(api, namespace, docs, labels)
        probe = DeployedWorkload(api, namespace, Workload(name, [], 1), profile, docs, view=view)
        # Scoped to the run: a freed device another test of this run (a pytest-xdist worker)
        # holds now is no "cannot allocate" verdict, and its allocation there proves it as well.
        probe.run_selector = run_selector(labels)
        keys = {d.key for d in group}

        def read():
            return Claim.read(api, namespace, name), taken_by_run(api, namespace, keys, probe.run_selector)

        def observe():
            if view is not None:
                return view.claim(namespace, name) or Claim({}), view.held_in_run(keys, but=namespace)
            return read()
        try:
            claim, taken = waits.wait_until(
                f"the freed devices {', '.join(str(d) for d in group)} to be allocated again", observe,
                lambda seen: seen[0].is_allocated or set(seen[1]) == keys,
                timeout=profile.timeouts.schedule, describe=lambda seen: probe.describe(),
                verdict=lambda seen: probe.verdict(probe.pods()), confirm=read if view is not None else None)
        except waits.WaitFailed as err:
            raise AssertionError(f"freed devices are not allocatable again: {err}") from None
        if not claim.is_allocated:
            evidence.append("re-allocated " + ", ".join(f"{k} to claim {taken[k]}" for k in sorted(taken))
                            + " (another test of this run)")
            delete_pods(api, namespace, name)
            api.resource.delete_namespaced_resource_claim(name, namespace)
            continue
        claim = Claim.read(api, namespace, name)
        got = sorted(r.key for r in claim.results)
        assert got == sorted(d.key for d in group), (
            f"probe for the freed devices got {got}, expected {sorted(d.key for d in group)}")
        # Allocated is the scheduler's part; a driver that said "unprepared" but still holds
        # the device refuses it here, on the node: only a running pod proves it reusable.  Its
        # start is judged as any workload's: the node refusing the claim is the failure; a
        # cause outside the driver's promise (an image that cannot be pulled, a timeout) proves
        # nothing either way.
        try:
            probe.wait_running()
        except ControlPlaneStalled:
            raise  # the run's breaker and diagnosis take it as it is
        except waits.WaitFailed as err:
            start = probe.not_started(err)
            if start.refused_by_node:
                raise start.failed(f"freed devices are not reusable: {', '.join(got)} were allocated again, "
                                   f"but the node refused the probe pod on them: {err}") from None
            raise NoVerdict(f"the freed devices {', '.join(got)} were allocated again, but the probe pod on "
                            f"them did not start ({err}): that they can be used again is not proven") from None
        evidence.append(f"re-allocated {', '.join(got)} to a probe claim, and its pod ran on {node}")
        delete_pods(api, namespace, name)
        api.resource.delete_namespaced_resource_claim(name, namespace)
    return evidence
