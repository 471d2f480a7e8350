"""Pods as the suite asserts on them, and running a command in one of their containers.

>>> p = Pod({"metadata": {"name": "gpu-pod", "namespace": "ns", "uid": "p1"},
...   "spec": {"nodeName": "n1", "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
...            "containers": [{"name": "workload", "resources": {"claims": [{"name": "gpu"}]}},
...                           {"name": "sidecar"}]},
...   "status": {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "gpu-pod-gpu-abc"}]}})
>>> p.phase, p.claim_names(), p.container_claims("sidecar")
('Running', {'gpu': 'gpu-pod-gpu-abc'}, [])
>>> x = Pod({"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
...   "status": {"extendedResourceClaimStatus": {"resourceClaimName": "x-extended-resources-abc",
...     "requestMappings": [{"containerName": "w", "resourceName": "nvidia.com/gpu",
...                          "requestName": "container-0-request-0"}]}}})
>>> x.claim_names(), x.container_claims("w")
({'(extended resources)': 'x-extended-resources-abc'}, ['(extended resources)'])
>>> parse_nvidia_smi_uuids("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\\n")
['GPU-1234']
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL
from tenacity import Retrying, retry_if_exception, retry_if_result, stop_after_delay, wait_fixed

from draconf.kube import raw, raw_items, seconds_since
from draconf.waits import is_transient

#: Seconds the suite gives its pods to stop when it deletes them, stated rather than inherited:
#: their commands (``sleep``) ignore SIGTERM as PID 1, so a kubelet would wait the default 30 s
#: per pod; 0 would be a force delete that frees a pod's claims while its container may still
#: run on the node with the device.
DELETE_GRACE_SECONDS = 1

_NOT_FOUND = "executable file not found"
#: Waiting reasons a kubelet gives a container whose image it cannot get (kubelet images/types.go).
#: The pod-level name under which :meth:`Pod.claim_names` lists the scheduler's claim for the
#: pod's extended resources (not a valid claim name, so it cannot clash with the spec's).
EXTENDED_CLAIM = "(extended resources)"
IMAGE_PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def request_matches(result_request: str, request: str | None) -> bool:
    """Whether an allocation result (``req`` or ``req/sub``) belongs to ``request`` (None: any).

    >>> request_matches("gpu/first", "gpu"), request_matches("gpu", None), request_matches("a", "b")
    (True, True, False)
    """
    return request is None or result_request == request or result_request.startswith(request + "/")


def parse_nvidia_smi_uuids(text: str) -> list[str]:
    """The GPU UUIDs in ``nvidia-smi -L`` output (MIG lines are not full GPUs)."""
    from draconf.profile import Injection
    return Injection().parse(text)


@dataclass
class Pod:
    raw: dict

    @classmethod
    def read(cls, api, namespace: str, name: str) -> "Pod":
        return cls(raw(api.core.read_namespaced_pod, name, namespace))

    @classmethod
    def list(cls, api, namespace: str, selector: str | None = None) -> builtins.list["Pod"]:
        return [cls(i) for i in raw_items(api.core.list_namespaced_pod, namespace, label_selector=selector)]

    meta = property(lambda self: self.raw.get("metadata", {}))
    spec = property(lambda self: self.raw.get("spec", {}))
    status = property(lambda self: self.raw.get("status") or {})
    name = property(lambda self: self.meta.get("name"))
    namespace = property(lambda self: self.meta.get("namespace"))
    uid = property(lambda self: self.meta.get("uid"))
    node = property(lambda self: self.spec.get("nodeName"))
    phase = property(lambda self: self.status.get("phase", "Pending"))

    @property
    def is_ready(self) -> bool:
        return self.condition("Ready") == "True"

    @property
    def is_running(self) -> bool:
        return self.phase == "Running" and self.is_ready

    @property
    def is_deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def is_finished(self) -> bool:
        """Its containers ran to the end: phase Succeeded or Failed."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def age(self) -> float | None:
        """Seconds since the pod was created; None when unknown.

        >>> Pod({"metadata": {"creationTimestamp": "2000-01-01T00:00:00Z"}}).age > 0
        True
        >>> Pod({}).age is None
        True
        """
        return seconds_since(self.meta.get("creationTimestamp"))

    @property
    def finished_for(self) -> float | None:
        """For a finished pod, seconds since its last container ended; else None.

        >>> done = Pod({"status": {"phase": "Succeeded", "containerStatuses": [
        ...     {"state": {"terminated": {"finishedAt": "2000-01-01T00:00:00Z"}}}]}})
        >>> done.finished_for > 0, Pod({"status": {"phase": "Running"}}).finished_for
        (True, None)
        """
        if not self.is_finished:
            return None
        return seconds_since(max((str(t) for cs in self.status.get("containerStatuses") or []
                                  if (t := ((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))),
                                 default=None))

    scheduler_name = property(lambda self: self.spec.get("schedulerName") or "default-scheduler",
                              doc="spec.schedulerName: who binds the pod")
    tolerations = property(lambda self: list(self.spec.get("tolerations") or []))
    node_selector = property(lambda self: dict(self.spec.get("nodeSelector") or {}))

    @property
    def required_node_terms(self) -> builtins.list[dict]:
        """The required node affinity's nodeSelectorTerms (ORed), each {matchExpressions, matchFields}.

        >>> Pod({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        ...     "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
        ...                                             "values": ["n1"]}]}]}}}}}).required_node_terms
        [{'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['n1']}]}]
        >>> Pod({"spec": {}}).required_node_terms
        []
        """
        affinity = (((self.spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        return list(affinity.get("nodeSelectorTerms") or [])

    def condition(self, kind: str) -> str | None:
        for c in self.status.get("conditions") or []:
            if c.get("type") == kind:
                return c.get("status")
        return None

    @property
    def unschedulable_message(self) -> str | None:
        """The scheduler's verdict when it could not place the pod, else None."""
        for c in self.status.get("conditions") or []:
            # SchedulerError: a filter failed outright, e.g. "CEL runtime error: no such key".
            if c.get("type") == "PodScheduled" and c.get("status") == "False" \
                    and c.get("reason") in ("Unschedulable", "SchedulerError"):
                return c.get("message") or c.get("reason")
        return None

    @property
    def unseen_by_scheduler(self) -> bool:
        """Neither bound to a node nor given a PodScheduled condition: no scheduler has acted on
        the pod yet (it binds, or writes PodScheduled=False with its reason, on every attempt).

        >>> Pod({"spec": {}, "status": {"phase": "Pending"}}).unseen_by_scheduler
        True
        >>> Pod({"spec": {}, "status": {"conditions": [{"type": "PodScheduled", "status": "False",
        ...      "reason": "Unschedulable"}]}}).unseen_by_scheduler
        False
        """
        return not self.node and self.condition("PodScheduled") is None and not self.is_deleting

    @property
    def template_claims_not_generated(self) -> builtins.list[str]:
        """Pod-level claim names from a ResourceClaimTemplate whose claim the controller has not
        named in ``status.resourceClaimStatuses`` yet.

        >>> Pod({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}}
        ...     ).template_claims_not_generated
        ['gpu']
        """
        known = self.claim_names()
        return [r["name"] for r in self.spec.get("resourceClaims") or []
                if r.get("resourceClaimTemplateName") and r["name"] not in known]

    @property
    def waiting_reasons(self) -> builtins.list[str]:
        """``"container: Reason"`` for each waiting init or app container."""
        reasons = []
        for cs in (self.status.get("initContainerStatuses") or []) + (self.status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting:
                reasons.append(f"{cs.get('name')}: {waiting.get('reason')}")
        return reasons

    @property
    def end_reasons(self) -> builtins.list[str]:
        """Why a pod ended: the kubelet's reason and message for the pod (an admission
        rejection, an eviction) and each container's terminated state.

        >>> Pod({"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": "UnexpectedAdmissionError",
        ...      "message": "Allocate failed", "containerStatuses": [{"name": "c", "state": {"terminated": {
        ...      "exitCode": 128, "reason": "StartError", "message": "no such device"}}}]}}).end_reasons
        ['UnexpectedAdmissionError: Allocate failed', 'c: exit 128 StartError: no such device']
        """
        reasons = []
        if self.status.get("reason") or self.status.get("message"):
            reasons.append(": ".join(x for x in (self.status.get("reason"), self.status.get("message")) if x))
        for cs in (self.status.get("initContainerStatuses") or []) + (self.status.get("containerStatuses") or []):
            ended = (cs.get("state") or {}).get("terminated")
            if ended:
                detail = ": ".join(x for x in (ended.get("reason"), (ended.get("message") or "").strip()[:300]) if x)
                reasons.append(f"{cs.get('name')}: exit {ended.get('exitCode')}" + (f" {detail}" if detail else ""))
        return reasons

    @property
    def seconds_past_grace_period(self) -> float | None:
        """For a pod being deleted: seconds since its grace period ended (negative before); else None.

        The API server sets ``deletionTimestamp`` to the moment the grace period ends.

        >>> Pod({"metadata": {"deletionTimestamp": "2000-01-01T00:00:00Z"}}).seconds_past_grace_period > 0
        True
        """
        return seconds_since(self.meta.get("deletionTimestamp"))

    @property
    def containers_stopped(self) -> bool:
        """No container of the pod runs (they ended, or never started)."""
        return not any((cs.get("state") or {}).get("running")
                       for cs in self.status.get("containerStatuses") or [])

    @property
    def image_pull_failures(self) -> builtins.list[str]:
        """``"container: image (Reason: message)"`` for each container whose image cannot be pulled.

        >>> Pod({"spec": {"containers": [{"name": "c", "image": "ubuntu:24.04"}]}, "status": {
        ...     "containerStatuses": [{"name": "c", "image": "ubuntu:24.04", "state": {"waiting": {
        ...     "reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}}).image_pull_failures
        ['c: ubuntu:24.04 (ImagePullBackOff: Back-off pulling image)']
        """
        failures = []
        for cs in (self.status.get("initContainerStatuses") or []) + (self.status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_PULL_FAILURES:
                failures.append(f"{cs.get('name')}: {cs.get('image')} ({waiting['reason']}: "
                                f"{(waiting.get('message') or '').strip()[:300]})")
        return failures

    def claim_names(self) -> dict[str, str]:
        """Pod-level claim name -> ResourceClaim name (generated or named); only those known yet.
        The claim the scheduler made for the pod's extended resources (``nvidia.com/gpu: 1``
        backed by a DeviceClass's ``extendedResourceName``) is listed as :data:`EXTENDED_CLAIM`."""
        generated = {s["name"]: s.get("resourceClaimName")
                     for s in self.status.get("resourceClaimStatuses") or []}
        names = {}
        for ref in self.spec.get("resourceClaims") or []:
            name = ref.get("resourceClaimName") or generated.get(ref["name"])
            if name:
                names[ref["name"]] = name
        if self.extended_claim_name:
            names[EXTENDED_CLAIM] = self.extended_claim_name
        return names

    @property
    def extended_claim_name(self) -> str | None:
        """The claim the scheduler created for the pod's extended resources
        (``status.extendedResourceClaimStatus``, DRAExtendedResource), else None."""
        return (self.status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")

    @property
    def extended_request_mappings(self) -> builtins.list[dict]:
        """``{containerName, resourceName, requestName}`` for each container's extended resource
        that the scheduler mapped to a request of :attr:`extended_claim_name`."""
        return list((self.status.get("extendedResourceClaimStatus") or {}).get("requestMappings") or [])

    def generated_claim_names(self) -> builtins.list[str]:
        templated = {r["name"] for r in self.spec.get("resourceClaims") or []
                     if r.get("resourceClaimTemplateName")}
        return [n for k, n in self.claim_names().items() if k in templated]

    @property
    def containers(self) -> builtins.list[str]:
        return [c["name"] for c in self.spec.get("containers") or []]

    def container_claims(self, container: str) -> builtins.list[str]:
        """Pod-level claim names a container lists in ``resources.claims``."""
        for c in self.spec.get("containers") or []:
            if c["name"] == container:
                listed = [r["name"] for r in (c.get("resources") or {}).get("claims") or []]
                if any(m.get("containerName") == container for m in self.extended_request_mappings):
                    listed.append(EXTENDED_CLAIM)
                return listed
        raise KeyError(container)

    def container_claim_requests(self, container: str) -> builtins.list[tuple[str, str | None]]:
        """Like :meth:`container_claims`, with the request each entry names
        (``resources.claims[].request``: the container gets only that request's devices; None:
        every request of the claim).

        >>> Pod({"spec": {"containers": [{"name": "c", "resources": {"claims": [
        ...     {"name": "shared", "request": "ts-gpu"}, {"name": "own"}]}}]}}).container_claim_requests("c")
        [('shared', 'ts-gpu'), ('own', None)]
        """
        for c in self.spec.get("containers") or []:
            if c["name"] == container:
                return [(r["name"], r.get("request") or None)
                        for r in (c.get("resources") or {}).get("claims") or []] + \
                    [(ref, None) for ref in self.container_claims(container)
                     if ref == EXTENDED_CLAIM]
        raise KeyError(container)

    def summary(self) -> str:
        return describe_pod(self.namespace, self.name, self.phase, self.node,
                            ready=self.is_ready,
                            unschedulable=self.unschedulable_message,
                            waiting=self.waiting_reasons, deleting=self.is_deleting)


def describe_pod(namespace: str, name: str, phase: str, node: str | None = None, *,
                 ready: bool = True, unschedulable: str | None = None,
                 waiting: Sequence[str] = (), deleting: bool = False) -> str:
    """One line of pod state for failure messages, shared by waits and diagnoses.

    >>> describe_pod("ns", "gpu-pod", "Pending", unschedulable="0/4 nodes are available")
    'pod ns/gpu-pod: Pending, unschedulable: 0/4 nodes are available'
    >>> describe_pod("ns", "gpu-pod", "Running", "gpu-node-0", ready=False)
    'pod ns/gpu-pod: Running, on gpu-node-0, not ready'
    """
    parts = [f"pod {namespace}/{name}: {phase}"]
    if node:
        parts.append(f"on {node}")
    if phase == "Running" and not ready:
        parts.append("not ready")
    if unschedulable:
        parts.append(f"unschedulable: {unschedulable}")
    if waiting:
        parts.append("waiting: " + ", ".join(waiting))
    if deleting:
        parts.append("being deleted")
    return ", ".join(parts)


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    exit_code: int | None
    error: str = ""

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    @property
    def command_not_found(self) -> bool:
        text = f"{self.stderr}\n{self.error}"
        return self.exit_code in (126, 127) or "not found" in text or "No such file" in text

    def describe(self) -> str:
        out = f"exit {self.exit_code}"
        if self.stdout.strip():
            out += f"; stdout: {self.stdout.strip()[:400]}"
        if self.stderr.strip():
            out += f"; stderr: {self.stderr.strip()[:400]}"
        if self.error:
            out += f"; {self.error[:400]}"
        return out


_EXIT_STATUS = re.compile(r"exit (?:status|code) (\d+)")


def delete_pods(api, namespace: str, name: str | None = None, selector: str | None = None,
                grace_period_seconds: int = DELETE_GRACE_SECONDS) -> None:
    """Delete one pod (``name``) or all matching ``selector`` (all if neither), with the suite's
    stated grace period unless told otherwise; pods already gone are fine."""
    # One by one rather than deletecollection: the RBAC the docs give grants delete, not that.
    names = [name] if name else [p.metadata.name for p in
                                 api.core.list_namespaced_pod(namespace, label_selector=selector).items]
    for pod in names:
        try:
            api.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=grace_period_seconds)
        except ApiException as err:
            if err.status != 404:
                raise


#: How long an exec may meet "container not found" on a container its pod reports running.
#: The kubelet looks the container up in the runtime's list of running containers, which can
#: lag the pod status it has already written (seen once on a bed's real node); a container that
#: is really gone still fails, after this long.
CONTAINER_SETTLE_SECONDS = 5.0


def _last_outcome(state):
    """What the last attempt gave, once the settle time is over: its answer, not tenacity's RetryError."""
    return state.outcome.result()


def exec_in_container(api, namespace: str, pod: str, container: str, command: list[str],
                      timeout: float = 30, settle: float = CONTAINER_SETTLE_SECONDS) -> ExecResult:
    """Run ``command`` like ``kubectl exec``; see :func:`_exec_once`.  A kubelet answering
    ``container not found``, or a connection that fails to open (the exec stream's handshake:
    ``ApiException`` status 0, a 5xx), is tried again for up to ``settle`` seconds (0: once, for
    a caller that retries on its own terms)."""
    policy = Retrying(stop=stop_after_delay(settle), wait=wait_fixed(0.5),
                      retry=retry_if_result(lambda r: "container not found" in r.error)
                      | retry_if_exception(is_transient),
                      retry_error_callback=_last_outcome)
    return policy(_exec_once, api, namespace, pod, container, command, timeout)


def _exec_once(api, namespace: str, pod: str, container: str, command: list[str],
               timeout: float) -> ExecResult:
    """Run ``command`` like ``kubectl exec``; the exit code comes from the status channel.

    A runtime that reports a non-zero exit only in the status message (kwok does) is understood
    too: the code is read from ``exit status N`` in that message.  A command the container does
    not have never starts, and the runtime says so instead of giving an exit code
    (``executable file not found in $PATH``); that is reported as 127, the status a shell gives
    a command it cannot find.
    """
    ws = stream(api.exec_core().connect_get_namespaced_pod_exec, pod, namespace, container=container,
                command=command, stdout=True, stderr=True, stdin=False, tty=False,
                _preload_content=False, _request_timeout=timeout)
    stdout, stderr = [], []
    try:
        ws.run_forever(timeout=timeout)
        stdout.append(ws.read_stdout() or "")
        stderr.append(ws.read_stderr() or "")
        status_text = ws.read_channel(ERROR_CHANNEL)
    finally:
        ws.close()
    status = yaml.safe_load(status_text) if status_text else None
    if not status:
        return ExecResult("".join(stdout), "".join(stderr), None, "no exit status received")
    if status.get("status") == "Success":
        return ExecResult("".join(stdout), "".join(stderr), 0)
    message = status.get("message", "")
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" or cause.get("type") == "ExitCode":
            return ExecResult("".join(stdout), "".join(stderr), int(cause["message"]), message)
    match = _EXIT_STATUS.search(message)
    code = int(match.group(1)) if match else (127 if _NOT_FOUND in message else None)
    return ExecResult("".join(stdout), "".join(stderr), code, message)
