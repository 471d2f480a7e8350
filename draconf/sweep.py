"""The fleet sweep (``draconf run --every-node``, ``--every-gpu``): every GPU node, or every GPU,
proven by a workload pinned to it, a bounded number at a time.

A *target* is a node (any free GPU of it: ``--every-node``) or one GPU of a node
(``--every-gpu``).  Proving one is the walkthrough's first workload (``01-single-gpu.yaml``)
pinned there and judged as every workload is: the claim allocated a GPU of that node (that GPU),
the container sees exactly it, and once released it is allocatable again.

Safe on a live cluster: GPUs others hold are never taken (a target whose GPUs are all held is
*busy, not tested*, naming the holders: no verdict, so the run is not green); a cordoned or
NotReady node, or one preflight left out, gives no verdict naming why; a GPU its driver taints
is skipped, *tainted, not tested*; at most
:func:`bound` targets are in flight at once, each holding one GPU, so most of the fleet stays
free.  Targets run in a thread pool: a hundred nodes take about as long as their slowest
wave, not a hundred workloads one after another.

:func:`prove` raises what a test raises (``AssertionError``/``pytest.fail`` for a failure,
:class:`~draconf.errors.NoVerdict`, ``pytest.skip``); :func:`run` keeps each target's outcome
for its own test to raise (suites/test_every_node.py).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable, Iterable

import pytest

from draconf import cel, waits
from draconf import selectors as sel
from draconf.claims import Claim, held_devices
from draconf.errors import NoVerdict
from draconf.kube import raw_items
from draconf.builder import Workload

#: The walkthrough's first manifest: one pod, one claim from a template, one GPU.
MANIFEST = "01-single-gpu.yaml"
#: Its ResourceClaimTemplate, the one the every-gpu selector goes on.
TEMPLATE = "single-gpu"
#: The share of the published GPUs the sweep may hold at once unless told (``--sweep-max-gpus``).
DEFAULT_SHARE = 0.1
#: Targets the sweep starts at first; its :class:`Window` grows from there as they start promptly.
FIRST_WINDOW = 8
#: A target's start (namespace to pod Running) is prompt below this share of the stall verdict's
#: time (:func:`draconf.startup.stall_after`): beyond it the sweep is queueing its own starts.
PROMPT_SHARE = 1 / 3


@dataclass(frozen=True, order=True)
class Target:
    """What one sweep test proves: a node, or one GPU (device name) of it; ``gpus``: how many
    GPUs that is (a node's published whole GPUs), for the fleet picture.  A GPU node that
    publishes no device at all is a target too, of 0 GPUs: nothing of it can be proven, and
    the sweep says so."""
    node: str
    device: str | None = None
    gpus: int = field(default=1, compare=False)

    @property
    def publishes_nothing(self) -> bool:
        return self.device is None and self.gpus == 0

    @property
    def id(self) -> str:
        """The test id: ``gpu-a100-0`` or ``gpu-a100-0/gpu-1``.

        >>> Target("n1").id, Target("n1", "gpu-3").id
        ('n1', 'n1/gpu-3')
        """
        return self.node if self.device is None else f"{self.node}/{self.device}"


def targets(devices_per_node: dict[str, list], every_gpu: bool) -> list[Target]:
    """One target per node, or per GPU of each node, sorted.

    >>> from types import SimpleNamespace as D
    >>> per_node = {"b": [D(name="gpu-1"), D(name="gpu-0")], "a": [D(name="gpu-0")]}
    >>> [(t.id, t.gpus) for t in targets(per_node, every_gpu=False)]
    [('a', 1), ('b', 2)]
    >>> [t.id for t in targets(per_node, every_gpu=True)]
    ['a/gpu-0', 'b/gpu-0', 'b/gpu-1']
    """
    if not every_gpu:
        return sorted(Target(node, gpus=len(devices)) for node, devices in devices_per_node.items())
    return sorted(Target(node, d.name) for node, devices in devices_per_node.items() for d in devices)


def unpublished_targets(gpu_nodes, publishing) -> list[Target]:
    """A target of 0 GPUs for each GPU node (labelled one, or hosting a kubelet-plugin pod) that
    publishes no device of the driver at all (``publishing``: the nodes that publish some):
    the sweep names it instead of leaving it out of the fleet.

    >>> [(t.id, t.gpus, t.publishes_nothing) for t in unpublished_targets(["a", "b", "c"], {"a"})]
    [('b', 0, True), ('c', 0, True)]
    """
    return sorted(Target(node, gpus=0) for node in set(gpu_nodes) - set(publishing))


def full_gpus(published, profile) -> dict[str, list]:
    """The published devices per node that are whole GPUs (not a MIG device or a passthrough
    one, by the profile's ``type`` attribute): what the sweep's targets are made of.

    >>> from draconf.devices import Device, PublishedDevices
    >>> from draconf.profile import builtin
    >>> d = lambda name, kind: Device("gpu.nvidia.com", "n", name, "n", {"gpu.nvidia.com/type": kind})
    >>> found = full_gpus(PublishedDevices("gpu.nvidia.com", [d("gpu-0", "gpu"), d("gpu-0-mig-1g", "mig")]),
    ...                   builtin("nvidia"))
    >>> {node: [x.name for x in devices] for node, devices in found.items()}
    {'n': ['gpu-0']}
    """
    role = profile.attributes.get("type")
    per_node: dict[str, list] = {}
    for d in published.devices:
        if d.node and (not role or d.attribute(role) in (None, profile.device_type)):
            per_node.setdefault(d.node, []).append(d)
    return per_node


def bound(published_gpus: int, asked: int | None = None) -> int:
    """How many targets (each holding one GPU) may be in flight at once: ``asked``, else a tenth
    of the published GPUs, at least one.

    >>> bound(9), bound(800), bound(800, asked=4), bound(0)
    (1, 80, 4, 1)
    """
    if asked:
        return max(1, asked)
    return max(1, int(published_gpus * DEFAULT_SHARE))


@dataclass
class Proof:
    """One target's outcome: ``outcome`` None when proven, else what its test raises."""
    target: Target
    namespace: str | None = None
    outcome: BaseException | None = None
    notes: list[str] = field(default_factory=list)
    #: the cause of a stalled control plane the start saw (the run's breaker trips on it)
    stalled: str | None = None
    #: seconds from asking for its namespace to its pod running, or its start ending otherwise
    #: (None: no workload was started); what the sweep's :class:`Window` paces itself by
    started_in: float | None = None


class Window:
    """How many targets may be in flight now, at most ``most`` (the GPUs the sweep may hold):
    the sweep's pace, set by how promptly the cluster starts them.

    Every target asks its namespace's controllers, the scheduler, the claim controller and the
    node for work at once; a hundred asked in the same second queue behind each other (the
    serviceaccount controller makes one namespace's ServiceAccount at a time, the scheduler
    places one pod at a time), and on a slow control plane the last of them waited past the
    stall verdict's 15 s for a ServiceAccount or a scheduling decision: a fleet of 1,000 KWOK
    nodes on a loaded 2-core machine failed hundreds of healthy nodes so.  Starting with
    ``first`` and growing by one per target that started within ``prompt`` seconds, halving
    (once per round: only for a target that entered after the last cut) when one did not, the
    sweep keeps its own queue short whatever the cluster's speed, and reaches ``most`` where the
    cluster keeps up.

    >>> w = Window(most=4, prompt=5.0, first=2)
    >>> entered = [w.enter(), w.enter()]; w.size
    2
    >>> w.leave(entered[0], started_in=1.0); w.size  # prompt: one more
    3
    >>> w.leave(entered[1], started_in=9.0); w.size  # slow: halved
    1
    >>> w.leave(w.enter(), started_in=None); w.size, w.sizes  # nothing started: unchanged
    (1, (1, 3))
    """

    def __init__(self, most: int, prompt: float, first: int = FIRST_WINDOW):
        self.most, self.prompt = max(1, most), prompt
        self.size = min(self.most, max(1, first))
        self._busy = 0
        self._cut_at = float("-inf")
        self._smallest = self._largest = self.size
        self._cond = threading.Condition()

    @property
    def sizes(self) -> tuple[int, int]:
        """The smallest and largest the window has been."""
        return self._smallest, self._largest

    def enter(self, interrupted: threading.Event | None = None) -> float:
        """Wait for room in the window and take it: when this target entered (for :meth:`leave`).
        Raises :class:`~draconf.waits.Cancelled` once ``interrupted`` is set."""
        with self._cond:
            while self._busy >= self.size:
                if interrupted is not None and interrupted.is_set():
                    raise waits.Cancelled("given up waiting to start: the run was interrupted")
                self._cond.wait(0.2)
            self._busy += 1
            return time.monotonic()

    def leave(self, entered: float, started_in: float | None) -> None:
        """The target that entered at ``entered`` has ended; its start took ``started_in``."""
        with self._cond:
            self._busy -= 1
            if started_in is not None and started_in > self.prompt:
                if entered > self._cut_at:
                    self.size = max(1, self.size // 2)
                    self._cut_at = time.monotonic()
            elif started_in is not None:
                self.size = min(self.most, self.size + 1)
            self._smallest, self._largest = min(self._smallest, self.size), max(self._largest, self.size)
            self._cond.notify_all()


class ReuseProbes:
    """The release proof of every GPU of one node, made once for the node: the cleanup probe
    (:func:`draconf.workload.prove_allocatable`) allocates the freed GPUs again and runs a pod
    on them.  Per GPU (``--every-gpu``) that was 8 more claims and pods per node than the
    targets themselves, nearly half of the sweep's writes; one probe per node asks for all the
    node's freed GPUs at once.

    A target's release is *deferred* to the last of its node's targets to end: that one runs
    the node's probe for every GPU its neighbours freed, and its outcome (evidence, or the
    failure) becomes each of theirs.  If the node's probe fails, each GPU is probed alone, so
    the failure names exactly the GPU(s) that cannot be used again.  Nothing waits for a
    neighbour: a target ends (its thread is free) with its proof pending, and sweep.run returns
    only once every target has ended.  A node with one target (``--every-node``) is probed at
    once, as before."""

    def __init__(self, targets: Iterable[Target], probe: Callable[[Target, list], list[str]]):
        """``probe(target, devices)``: prove_allocatable for ``devices`` in the namespace of
        ``target`` (one of those that freed them)."""
        #: every target's proof (what sweep.run fills in when given these probes)
        self.proofs = {t: Proof(t) for t in targets}
        #: node -> its targets that have not ended yet
        self._open: dict[str, set[Target]] = {}
        for target in self.proofs:
            self._open.setdefault(target.node, set()).add(target)
        #: node -> [(target, devices it freed)] awaiting the node's probe
        self._freed: dict[str, list[tuple[Target, list]]] = {}
        self._probe = probe
        self._lock = threading.Lock()

    def released(self, target: Target, devices: list) -> list[str]:
        """Cleanup's probe for ``target``: its evidence now if it is its node's last target
        to end, else nothing yet (the node's last target proves it, :meth:`ended`)."""
        with self._lock:
            self._freed.setdefault(target.node, []).append((target, devices))
            if self._open[target.node] - {target}:
                return [f"reuse: proven with the other GPUs {target.node} frees, by one probe once the "
                        "last of them has ended"]
            self._open[target.node].discard(target)
            group = self._freed.pop(target.node)
        return self._prove(target, group)

    def ended(self, target: Target) -> None:
        """``target`` has its outcome (or its release deferred): if it was its node's last open
        target, the GPUs its neighbours freed are probed now, in this thread."""
        with self._lock:
            left = self._open.get(target.node, set())
            if target not in left:
                return
            left.discard(target)
            group = [] if left else self._freed.pop(target.node, [])
        if group:
            self._prove(None, group)

    def _attempt(self, target: Target, devices: list) -> list[str] | BaseException:
        try:
            return self._probe(target, devices)
        except (Exception, pytest.skip.Exception, pytest.fail.Exception) as outcome:
            return outcome

    def _prove(self, mine: Target | None, group: list[tuple[Target, list]]) -> list[str]:
        """Probe every GPU of ``group`` at once, and each alone if that fails; every target of
        the group gets the outcome of the probe that covered it (a deferred target is never
        left passing on a probe that did not pass); ``mine``'s is returned, or raised."""
        together = self._attempt(group[0][0], [d for _, freed in group for d in freed])
        if isinstance(together, AssertionError) and len(group) > 1:
            results = {target: self._attempt(target, freed) for target, freed in group}
        else:
            results = {target: together for target, _ in group}
        for target, result in results.items():
            if target == mine:
                continue
            proof = self.proofs[target]
            if isinstance(result, BaseException):
                proof.outcome = result
            else:
                proof.notes += result
        if mine is None:
            return []
        result = results[mine]
        if isinstance(result, BaseException):
            raise result
        return result


def run(to_prove: Iterable[Target], at_once: int, prove_one: Callable[[Target, Proof], None],
        progress: Callable[[str], None] = lambda line: None,
        probes: ReuseProbes | None = None, prompt: float | None = None) -> dict[Target, Proof]:
    """Prove every target, ``at_once`` in flight at a time; a target's outcome is kept, never
    raised here (Ctrl-C is: the targets not started are dropped, the running ones give up at
    their wait's next poll, and their namespaces go with the run's).  ``probes``: the node-wise release proofs the
    targets' cleanups defer to (:class:`ReuseProbes`, made on the same targets).  ``prompt``:
    the seconds within which a target's start is prompt; with it, the targets in flight are
    paced by a :class:`Window` (at most ``at_once``), else ``at_once`` start together."""
    proofs = {t: Proof(t) for t in to_prove} if probes is None else probes.proofs  # the same targets
    if not proofs:
        return proofs
    window = Window(at_once, prompt) if prompt is not None else None

    # Set once the run is interrupted: every target's wait gives up at its next poll
    # (waits.cancelled_by), so that the pool's threads end with the run instead of waiting
    # out their timeouts; their namespaces go with the run's.
    interrupted = threading.Event()

    def one(target: Target) -> Proof:
        with waits.cancelled_by(interrupted):
            if window is None:
                return judged(target)
            entered = window.enter(interrupted)
            try:
                return judged(target)
            finally:
                window.leave(entered, proofs[target].started_in)

    def judged(target: Target) -> Proof:
        proof = proofs[target]
        try:
            prove_one(target, proof)
        except (Exception, pytest.skip.Exception, pytest.fail.Exception) as outcome:
            proof.outcome = outcome
        if probes is not None:
            try:
                probes.ended(target)
            except (Exception, pytest.skip.Exception, pytest.fail.Exception) as outcome:
                # The node's probe, run by this target: its own outcome stands; the probe's
                # failure is its neighbours' (set by ReuseProbes), never lost.
                if proof.outcome is None:
                    proof.outcome = outcome
        return proof

    done = 0
    pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="sweep")
    try:
        futures = [pool.submit(one, t) for t in sorted(proofs)]
        for future in as_completed(futures):
            done += 1
            proof = future.result()
            if proof.outcome is not None or done % max(1, len(proofs) // 10) == 0:
                pace = f", {window.size} in flight at most now" if window is not None else ""
                progress(f"sweep: {done}/{len(proofs)} done ({proof.target.id}: {verdict_word(proof)}){pace}")
    except BaseException:
        interrupted.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    if window is not None:
        progress("sweep: targets in flight at once ranged from {} to {} (of at most {})".format(*window.sizes, at_once))
    return proofs


def verdict_word(proof: Proof) -> str:
    """passed, failed, busy, tainted or no-verdict: what the fleet picture colours a target by.

    >>> verdict_word(Proof(Target("n"))), verdict_word(Proof(Target("n"), outcome=NoVerdict("x")))
    ('passed', 'no-verdict')
    >>> verdict_word(Proof(Target("n"), outcome=AssertionError("x")))
    'failed'
    >>> verdict_word(Proof(Target("n"), outcome=NoVerdict(f"{BUSY}: gpu-0 held by a/b")))
    'busy'
    """
    outcome = proof.outcome
    if outcome is None:
        return "passed"
    if isinstance(outcome, pytest.skip.Exception):  # NoVerdict too
        if str(outcome).startswith(BUSY):
            return "busy"
        if str(outcome).startswith(NOT_PUBLISHED):
            return "not published"
        tainted = not isinstance(outcome, NoVerdict) and str(outcome).startswith(TAINTED)
        return "tainted" if tainted else "no-verdict"
    return "failed"


def tally(proofs: Iterable[Proof]) -> str:
    """How many targets ended each way, for the sweep's last progress line.

    >>> tally([Proof(Target("a")), Proof(Target("b")), Proof(Target("c"), outcome=AssertionError("x"))])
    '2 passed, 1 failed'
    """
    counts = Counter(verdict_word(proof) for proof in proofs)
    return ", ".join(f"{n} {word}" for word, n in counts.items()) or "none"


#: How a busy target's no-verdict starts (the picture and the terminal tell it from others).
BUSY = "busy, not tested"
#: How a tainted target GPU's skip starts (the picture tells it from a check that gave no verdict).
TAINTED = "tainted, not tested"
#: How the no-verdict of a GPU node that publishes no device starts.
NOT_PUBLISHED = "not published"


def node_state(api, name: str) -> str | None:
    """Why ``name`` cannot take a workload now (cordoned, NotReady), or None."""
    node = api.core.read_node(name)
    if node.spec.unschedulable:
        return f"node {name} is cordoned (spec.unschedulable)"
    ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
    if ready is None or ready.status != "True":
        return f"node {name} is NotReady ({ready.reason if ready else 'no Ready condition'})"
    return None


class NodeStates:
    """:func:`node_state` of each node, read again only once ``fresh`` seconds have passed: a
    node's GPUs (``--every-gpu``) start within the same second or two, and eight reads of one
    node then tell nothing the first did not.  A node that goes NotReady later still fails its
    targets' waits, with the kubelet's own reason."""

    def __init__(self, api, fresh: float = 5.0):
        self._api, self._fresh = api, fresh
        self._read: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str | None:
        with self._lock:
            hit = self._read.get(name)
        if hit is not None and time.monotonic() - hit[0] < self._fresh:
            return hit[1]
        why = node_state(self._api, name)
        with self._lock:
            self._read[name] = (time.monotonic(), why)
        return why


def held_by_others(api, run_prefix: str) -> dict[str, str]:
    """Device key -> ``namespace/claim`` of every allocated claim that is not this run's."""
    # Not the sweep's own targets, in flight beside this one.
    return held_devices(map(Claim, raw_items(api.resource.list_resource_claim_for_all_namespaces)),
                        lambda claim: not claim.namespace.startswith(run_prefix))


def candidates(api, profile, published, target: Target, run_prefix: str, tainted: dict,
               class_cel: list, view=None) -> list:
    """The target's GPUs the profile's DeviceClass selects, untainted, that no one else holds.
    When others hold them all: no verdict, naming the holders (the target exists and was not
    proven, so the run is not green; it is never taken from them).  A tainted target GPU is a
    skip naming the taint (out of service by its driver's or an admin's account: not something
    to prove).  ``tainted``:
    device key -> :class:`~draconf.taints.TaintedDevice`, and ``class_cel`` (the DeviceClass's
    selectors) are read once for the sweep; with a ``view`` (:class:`~draconf.watched.WatchedRun`)
    who holds what is read from it."""
    mine = [d for d in published.devices if d.node == target.node and cel.evaluate_all(class_cel, d).matched
            and (target.device is None or d.name == target.device)]
    blocked = {d.key: tainted[d.key] for d in mine if d.key in tainted and tainted[d.key].blocking}
    if target.device is not None and blocked:
        pytest.skip(f"{TAINTED}: {next(iter(blocked.values())).summary()}")
    held = view.held_outside_run() if view is not None else held_by_others(api, run_prefix)
    free = [d for d in mine if d.key not in held and d.key not in blocked]
    if not free:
        why = [f"{d.key} held by {held[d.key]}" for d in mine if d.key in held]
        why += [f"{d.summary()} tainted" for d in blocked.values()]
        raise NoVerdict(f"{BUSY}: no {profile.device_class} GPU of {target.id} is free "
                        f"({', '.join(why) or 'none published'})")
    return free


def prove(api, profile, run_id, published, validated_nodes, target: Target, proof: Proof,
          new_namespace: Callable[[str], str], tainted: dict, class_cel: list, view=None,
          probes: ReuseProbes | None = None, node_states: Callable[[str], str | None] | None = None) -> None:
    """01-single-gpu.yaml pinned to the target: allocation, injection and release, as judged
    for every workload, on the target's GPU.  Raises the target's outcome; notes its evidence.
    With a ``view`` (:class:`~draconf.watched.WatchedRun`) the waits read it, not the API server;
    with ``probes`` the release is proven with the node's other targets (:class:`ReuseProbes`);
    ``node_states``: :func:`node_state` as the sweep reads it (:class:`NodeStates`).
    ``class_cel``: the profile's DeviceClass selectors, read for the sweep (preflight's gate
    has stopped a run whose class is missing)."""
    from draconf.workload import DeployedWorkload, prove_allocatable
    if target.publishes_nothing:
        left_out = validated_nodes.excluded.get(target.node)
        raise NoVerdict(f"{NOT_PUBLISHED}: {target.node} is a GPU node (labelled so, or it hosts a kubelet-plugin "
                        f"pod) that publishes no {profile.driver} device"
                        + (f"; preflight: {', '.join(left_out)}" if left_out else ""))
    if not validated_nodes.keeps(target.node):
        raise NoVerdict(f"node {target.node} was left out by preflight: {validated_nodes.describe()}")
    if why := (node_states or (lambda name: node_state(api, name)))(target.node):
        raise NoVerdict(f"{why}: not tested")
    run_prefix = f"draconf-{run_id}-"
    free = candidates(api, profile, published, target, run_prefix, tainted, class_cel, view)
    asked = time.monotonic()
    try:
        proof.namespace = ns = new_namespace(f"node-{target.id}")
        workload = workload_for(target, profile, free, validated_nodes.avoid)
        start = DeployedWorkload.start(api, ns, workload, profile, run_id.labels, view=view)
    finally:
        proof.started_in = time.monotonic() - asked  # (a namespace that never got ready too)
    if start.stalled:
        proof.stalled = start.stalled
    if start.never_started and not start.refused_by_node and start.deployed is not None:
        # Allocation judges a workload that never started: the cluster's reason is the verdict.
        start.check_allocation(published, label=f"{target.id}: ")
        raise NoVerdict(f"{target.id}: {start.no_verdict_cause}")
    if start.never_started:
        raise start.failed(f"{target.id}: the container never got its GPU: {start.failure}")
    deployed = start.running
    # Allocation and injection are judged on one reading of the pod and its claims: nothing
    # happens to a running pod between the two, and each reading is two requests of 80 targets'.
    reading = deployed.allocation_snapshot(published, classes_read={profile.device_class: class_cel})
    proof.notes += deployed.check_allocation(published, reading)
    proof.notes += deployed.check_injection(published, reading)
    if probes is not None:
        proof.notes += deployed.check_cleanup(published, lambda devices: probes.released(target, devices))
        return
    proof.notes += deployed.check_cleanup(
        published, lambda devices: prove_allocatable(api, ns, devices, profile, run_id.labels,
                                                      list(tainted.values()), view))


def workload_for(target: Target, profile, free: list, avoid=frozenset()) -> Workload:
    """01-single-gpu.yaml pinned to the target's node, and for a GPU target to that GPU by its
    uuid attribute (a CEL selector cannot name a device)."""
    selectors = {}
    if target.device is not None:
        uuid_attr = profile.attributes.get("uuid")
        if not uuid_attr:
            raise NoVerdict(f"--every-gpu selects each GPU by its uuid attribute: {profile.lacks('uuid')}")
        (device,) = free
        selectors[TEMPLATE] = [sel.uuid_in(profile.domain, uuid_attr, [device.attribute(uuid_attr)])]
    return Workload("every-node", [MANIFEST], expected_pods=1, node=target.node, selectors=selectors,
                    avoid_nodes=avoid)
