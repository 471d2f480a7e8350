"""The KWOK configuration of the test bed: the stages that play kubelet, and the default exec rule.

KWOK's stock "fast" pod stage marks every pod Running as soon as it is bound.  A real kubelet
does not start a container until the DRA driver has prepared the pod's claims, so on the bed
kwok starts only the pods that have none; a pod with claims (or with the scheduler's claim for
its extended resources) is started by the simulated NVIDIA kubelet plugin
(``draconf.testbed.agent``) once it has prepared every claim, with the status kwok's own stage
writes (:func:`running_status`), as kwok's identity.  One write per pod where a "prepared"
mark for a kwok stage to act on took two.  Stage shapes follow kwok v0.8.0 ``kustomize/stage``.
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
from datetime import datetime, timezone

import yaml

#: The address every KWOK node reports (kwok --node-ip): the hostIP of its pods.
NODE_IP = "127.0.0.1"
#: Where kwok takes its pods' IPs from (kwok --cidr).
KWOK_POD_CIDR = "10.244.0.0/16"
#: Where the simulated plugin takes the IPs of the pods it starts: apart from kwok's, whose
#: allocator it cannot share.  Only ever written into pod status: no interface has them.
PLUGIN_POD_CIDR = "10.245.0.0/16"
#: Set on pods whose containers the bed keeps crash-looping (the plugin-unhealthy fault).
SIMULATE_ANNOTATION = "testbed.draconf.dev/simulate"

_NOT_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_PENDING = {"key": ".status.phase", "operator": "In", "values": ["Pending"]}
_NOT_READY = {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
              "operator": "NotIn", "values": ["True"]}


#: The scheduler's claim for a pod's DRA-backed extended resources (DRAExtendedResource).
_EXTENDED_CLAIM = ".status.extendedResourceClaimStatus"


def _annotation(name: str) -> str:
    return f'.metadata.annotations["{name}"]'


_RUNNING_STATUS = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

_CRASH_LOOP_STATUS = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: ContainersNotReady
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: ContainersNotReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 7
  state:
    waiting:
      reason: CrashLoopBackOff
      message: "back-off 5m0s restarting failed container"
  lastState:
    terminated:
      exitCode: 1
      reason: Error
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

_NODE_STATUS = """\
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
allocatable:
{{ with .status.allocatable }}
{{ YAML . 1 }}
{{ else }}
  cpu: "64"
  memory: 512Gi
  pods: "110"
{{ end }}
capacity:
{{ with .status.capacity }}
{{ YAML . 1 }}
{{ else }}
  cpu: "64"
  memory: 512Gi
  pods: "110"
{{ end }}
nodeInfo:
  architecture: amd64
  containerRuntimeVersion: containerd://2.1.4
  kernelVersion: 6.8.0-draconf-testbed
  kubeletVersion: KUBELET_VERSION
  operatingSystem: linux
  osImage: "draconf test bed (kwok)"
phase: Running
"""


def _stage(name: str, kind: str, selector: list[dict], next_: dict, delay_ms: int = 0) -> dict:
    spec: dict = {"resourceRef": {"apiGroup": "v1", "kind": kind},
                  "selector": {"matchExpressions": selector}, "next": next_}
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms, "jitterDurationMilliseconds": delay_ms + 10000}
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
            "spec": spec}


def stages() -> list[dict]:
    node_ready = {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                  "operator": "In", "values": ["True"]}
    not_simulated = {"key": _annotation(SIMULATE_ANNOTATION), "operator": "DoesNotExist"}
    return [
        _stage("node-initialize", "Node", [_NOT_READY], {"statusTemplate": _NODE_STATUS}),
        _stage("node-heartbeat-with-lease", "Node",
               [{"key": ".status.phase", "operator": "In", "values": ["Running"]}, node_ready],
               {"statusTemplate": _NODE_STATUS}, delay_ms=600000),
        # Pods with claims, or with the scheduler's claim for their DRA-backed extended
        # resources (nvidia.com/gpu: 1, which lists no claim), are the plugin's to start.
        _stage("pod-ready", "Pod",
               [_NOT_DELETING, _PENDING, _NOT_READY, not_simulated,
                {"key": ".spec.resourceClaims", "operator": "DoesNotExist"},
                {"key": _EXTENDED_CLAIM, "operator": "DoesNotExist"}],
               {"statusTemplate": _RUNNING_STATUS}),
        _stage("pod-crash-loop", "Pod",
               [_NOT_DELETING, _PENDING,
                {"key": _annotation(SIMULATE_ANNOTATION), "operator": "In", "values": ["crash-loop"]}],
               {"statusTemplate": _CRASH_LOOP_STATUS}),
        _stage("pod-delete", "Pod",
               [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}], {"delete": True}),
    ]


class PodIPs:
    """The IPs of ``cidr`` in turn, none tracked as in use: a pod lives far shorter than it
    takes the plugin to start 65 000 more.

    >>> ips = PodIPs("10.245.0.0/30")
    >>> [ips.next() for _ in range(3)]
    ['10.245.0.1', '10.245.0.2', '10.245.0.1']
    """

    def __init__(self, cidr: str = PLUGIN_POD_CIDR):
        self._hosts = itertools.cycle(ipaddress.ip_network(cidr).hosts())
        # The plugin starts pods from several threads, and until the first cycle is through,
        # next() runs the hosts() generator: two threads in it at once is "ValueError:
        # generator already executing" (it left pods Pending for good).
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            return str(next(self._hosts))


def running_status(pod: dict, pod_ip: str, now: datetime | None = None) -> dict:
    """The status kwok's pod-ready stage writes (``_RUNNING_STATUS``), for a pod (raw object)
    that the simulated plugin starts itself; a strategic merge patch of it keeps the other
    conditions (PodScheduled).

    >>> status = running_status({"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    ...                         "10.245.0.1", datetime(2026, 1, 1, tzinfo=timezone.utc))
    >>> status["phase"], status["podIP"], status["containerStatuses"][0]["state"]
    ('Running', '10.245.0.1', {'running': {'startedAt': '2026-01-01T00:00:00Z'}})
    >>> [c["type"] for c in status["conditions"]]
    ['Initialized', 'Ready', 'ContainersReady']
    """
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    spec = pod["spec"]
    conditions = [{"type": kind, "status": "True", "lastTransitionTime": stamp}
                  for kind in ("Initialized", "Ready", "ContainersReady")]
    conditions += [{"type": gate["conditionType"], "status": "True", "lastTransitionTime": stamp}
                   for gate in spec.get("readinessGates") or []]
    status = {
        "conditions": conditions,
        "containerStatuses": [
            {"image": c.get("image", ""), "name": c["name"], "ready": True, "restartCount": 0,
             "state": {"running": {"startedAt": stamp}}} for c in spec["containers"]],
        "initContainerStatuses": [
            {"image": c.get("image", ""), "name": c["name"], "ready": True, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "finishedAt": stamp, "reason": "Completed",
                                      "startedAt": stamp}}} for c in spec.get("initContainers") or []],
        "hostIP": NODE_IP, "hostIPs": [{"ip": NODE_IP}],
        "phase": "Running", "startTime": stamp}
    ip = NODE_IP if spec.get("hostNetwork") else pod_ip
    status.update(podIP=ip, podIPs=[{"ip": ip}])
    return status


def default_cluster_exec() -> dict:
    """Every container can be exec'd into; what it sees is decided by per-pod Exec objects."""
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterExec",
            "metadata": {"name": "default-container"},
            "spec": {"execs": [{"local": {"envs": [{"name": "DRACONF_CONTAINER", "value": "plain"}]}}]}}


#: Node leases, node stages and pod stages kwok works on at once (its default is 4 of each).
#: 1,000 KWOK nodes renew a lease each every 10 s (a quarter of --node-lease-duration-seconds):
#: 100 writes a second, which 4 at a time could not keep up with once the API server answered
#: in 100 ms or more (a loaded 2-core machine); leases lapsed, the node-lifecycle controller
#: marked hundreds of nodes NotReady and their pods not Ready, and the kubelet-plugin pods of
#: those nodes stayed so (kwok marks pods ready only when they start): GPUCluster notReady,
#: and a run's preflight stopped it.  The namespaces a run deletes are its pods' stages too.
PARALLELISM = 16


def configuration() -> dict:
    """kwok's own options, beside the stages in its --config.  Given a KwokConfiguration, kwok
    takes an option it does not name as off: ``exec`` (its debugging handlers, which serve the
    suite's ``nvidia-smi -L``) is named on."""
    return {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            "options": {"enableDebuggingHandlers": True, "nodeLeaseParallelism": PARALLELISM,
                        "nodePlayStageParallelism": PARALLELISM, "podPlayStageParallelism": PARALLELISM}}


def render(kubelet_version: str) -> str:
    """The kwok --config file; nodes report ``kubelet_version`` like a real kubelet would."""
    docs = [configuration(), *stages(), default_cluster_exec()]
    for doc in docs:
        next_ = (doc.get("spec") or {}).get("next", {})
        if "statusTemplate" in next_:
            next_["statusTemplate"] = next_["statusTemplate"].replace("KUBELET_VERSION", kubelet_version)
    return yaml.safe_dump_all(docs, sort_keys=False)
