"""The driver's kubelet plugin as the suite reads it: where each known install runs it
(DaemonSets, pod labels) and one plugin pod's health, for preflight and diagnosis alike.

>>> pod = PluginPod.from_raw({
...     "metadata": {"namespace": "gpu-operator", "name": "plugin-x"}, "spec": {"nodeName": "n1"},
...     "status": {"phase": "Running", "containerStatuses": [{"name": "gpus", "ready": False,
...         "restartCount": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
...         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}})
>>> pod.ready, pod.reasons, pod.restarts
(False, ('CrashLoopBackOff',), 7)
>>> pod.summary()
'kubelet plugin gpu-operator/plugin-x on n1: Running, not ready, CrashLoopBackOff, 7 restarts'
>>> print(pod.describe())
gpu-operator/plugin-x on n1: not Ready (Running)
  gpus: CrashLoopBackOff (restarts 7, last exit 1 Error)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from draconf.pods import Pod

#: (namespace, name) of the kubelet-plugin DaemonSet in each known install: the current chart,
#: the older chart prefix, and the GPU Operator-managed install of the guide.
PLUGIN_DAEMONSETS = (("dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu-kubelet-plugin"),
                     ("nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"),
                     ("gpu-operator", "nvidia-dra-driver-kubelet-plugin"))
#: Pod label selectors of the kubelet plugin (current and older chart prefix), any namespace.
PLUGIN_POD_SELECTORS = ("dra-driver-nvidia-gpu-component=kubelet-plugin",
                        "nvidia-dra-driver-gpu-component=kubelet-plugin")


#: A log line that reports an error rather than mentions one.
_ERROR_REPORT = re.compile(r"^(error|fatal|panic)\b|^[EF]\d{4} |\blevel=(error|fatal)\b|\"level\":\"(error|fatal)\"",
                           re.IGNORECASE)


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``NAME=true,NAME=false`` (a trailing comma, as the chart renders it) as a dict; an entry
    that is not NAME=BOOL is left out (the driver itself refuses to start on it).

    >>> parse_feature_gates("MPSSupport=true,TimeSlicingSettings=false,")
    {'MPSSupport': True, 'TimeSlicingSettings': False}
    >>> parse_feature_gates(" DynamicMIG = True , bad, X=maybe")
    {'DynamicMIG': True}
    """
    gates = {}
    for entry in text.split(","):
        name, _, value = entry.partition("=")
        if name.strip() and value.strip().lower() in ("true", "false"):
            gates[name.strip()] = value.strip().lower() == "true"
    return gates


def feature_gates_of(containers: list[dict]) -> tuple[dict[str, bool], bool]:
    """The feature gates a pod's containers are given, and whether all of them could be read.
    A container's ``--feature-gates`` argument replaces its ``FEATURE_GATES`` variable (the
    variable is only the flag's default); a gate some container runs on is on.

    >>> feature_gates_of([{"name": "gpus", "env": [{"name": "FEATURE_GATES", "value": "MPSSupport=true,"}]},
    ...                   {"name": "cd", "args": ["--feature-gates=MPSSupport=false,DynamicMIG=true"]}])
    ({'MPSSupport': True, 'DynamicMIG': True}, True)
    >>> feature_gates_of([{"name": "gpus", "args": ["-v", "6", "--feature-gates", "TimeSlicingSettings=true"],
    ...                    "env": [{"name": "FEATURE_GATES", "value": "MPSSupport=true"}]}])
    ({'TimeSlicingSettings': True}, True)
    >>> feature_gates_of([{"name": "gpus", "env": [{"name": "FEATURE_GATES", "valueFrom": {"configMapKeyRef": {}}}]}])
    ({}, False)
    """
    gates: dict[str, bool] = {}
    known = True
    for container in containers:
        words = list(container.get("command") or []) + list(container.get("args") or [])
        flags = [word.split("=", 1)[1] for word in words if word.startswith("--feature-gates=")]
        flags += [after for word, after in zip(words, words[1:]) if word == "--feature-gates"]
        own: dict[str, bool] = {}
        if flags and "$(" not in flags[-1]:  # "$(FEATURE_GATES)": the kubelet puts the variable in
            own = parse_feature_gates(flags[-1])
        else:
            for var in container.get("env") or []:
                if var.get("name") == "FEATURE_GATES":
                    known = known and not var.get("valueFrom")
                    own.update(parse_feature_gates(var.get("value") or ""))
        for name, on in own.items():
            gates[name] = gates.get(name, False) or on
    return gates, known


#: A release version as charts and image tags write it: 0.4.0, v25.12.0 (a pre-release or build
#: suffix is kept out: the release's features are those of its major.minor).
_RELEASE = re.compile(r"^v?(\d+\.\d+\.\d+)(?:[-+].*)?$")
#: The labels NVIDIA's charts put on the kubelet-plugin DaemonSet (both releases'
#: ``templates/_helpers.tpl``, the "labels" helper, used by ``templates/kubeletplugin.yaml``): the
#: chart's appVersion, and ``<chart name>-<chart version>``.  Its pods carry neither.
VERSION_LABEL = "app.kubernetes.io/version"
CHART_LABEL = "helm.sh/chart"


def release_of_labels(labels: dict | None) -> tuple[str | None, str]:
    """The release a DaemonSet's chart labels name, and which label said it.

    >>> release_of_labels({"app.kubernetes.io/version": "0.4.0", "helm.sh/chart": "dra-driver-nvidia-gpu-0.4.0"})
    ('0.4.0', 'label app.kubernetes.io/version=0.4.0')
    >>> release_of_labels({"helm.sh/chart": "nvidia-dra-driver-gpu-25.12.0"})
    ('25.12.0', 'label helm.sh/chart=nvidia-dra-driver-gpu-25.12.0')
    >>> release_of_labels({"app.kubernetes.io/version": "main"})
    (None, '')
    """
    labels = labels or {}
    version = _RELEASE.match(labels.get(VERSION_LABEL) or "")
    if version:
        return version.group(1), f"label {VERSION_LABEL}={labels[VERSION_LABEL]}"
    chart = re.search(r"-v?(\d+\.\d+\.\d+)(?:[-_].*)?$", labels.get(CHART_LABEL) or "")
    if chart:
        return chart.group(1), f"label {CHART_LABEL}={labels[CHART_LABEL]}"
    return None, ""


def release_of_images(containers: list[dict]) -> tuple[str | None, str]:
    """The release the first container image tagged with a version names (the charts tag the
    image ``v<appVersion>`` unless told otherwise), and that image; (None, "") when no tag is a
    version (``latest``, a digest alone).

    >>> release_of_images([{"image": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0"}])
    ('0.4.0', 'image registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0')
    >>> release_of_images([{"image": "localhost:5000/gpu-driver"}, {"image": "nvcr.io/x:latest"}])
    (None, '')
    """
    for container in containers:
        image = container.get("image") or ""
        _, _, tag = image.split("@", 1)[0].rpartition(":")
        version = _RELEASE.match(tag) if "/" not in tag else None
        if version:
            return version.group(1), f"image {image}"
    return None, ""


@dataclass(frozen=True)
class PluginPod:
    """A kubelet-plugin pod, reduced to what its health says."""

    namespace: str
    name: str
    node: str | None
    phase: str | None
    ready: bool
    #: one line per unhealthy container, e.g. "gpus: CrashLoopBackOff (restarts 7, last exit 1 Error)"
    problems: tuple[str, ...] = ()
    #: the containers' waiting/terminated reasons alone, e.g. ("CrashLoopBackOff",)
    reasons: tuple[str, ...] = ()
    #: restarts of all its containers
    restarts: int = 0
    #: the end of its log, when it was read (the diagnosis reads it for pods not ready)
    log_tail: str | None = None
    #: the first of its containers that is not ready and has crashed (restarted, or ended with
    #: a non-zero exit before its first restart): whose log says why
    crashed_container: str | None = None
    #: whether that crash's log is the previous run's (``kubectl logs --previous``): a container
    #: that has restarted runs again, or waits in CrashLoopBackOff; one that ended and has not yet
    #: restarted keeps its crash in its current log
    crash_log_previous: bool = True
    #: the driver's feature gates as its containers are told them (``FEATURE_GATES`` in the
    #: environment, as NVIDIA's chart renders ``featureGates``, or a ``--feature-gates`` argument,
    #: which wins): (name, on) pairs; a gate not named runs at the driver's default
    feature_gates: tuple[tuple[str, bool], ...] = ()
    #: whether any container could be read for them: False when a value comes from a
    #: ConfigMap or Secret (``valueFrom``), so what the driver runs with is not known
    gates_known: bool = True
    #: the driver release the pod runs ("0.4.0"; None: nothing says), and where that was read:
    #: its DaemonSet's chart labels (:func:`release_of_labels`, set by the reader that has the
    #: DaemonSet), else its containers' image tag (:func:`release_of_images`)
    release: str | None = None
    release_from: str = ""

    @classmethod
    def from_raw(cls, raw: dict) -> "PluginPod":
        """From a pod as the API serves it (a dict; a client object through
        ``ApiClient.sanitize_for_serialization``)."""
        pod = Pod(raw)
        status = raw.get("status") or {}
        problems, reasons, restarts, crashed, previous = [], [], 0, None, True
        for kind, statuses in (("init", status.get("initContainerStatuses")), ("", status.get("containerStatuses"))):
            for cs in statuses or []:
                restarts += cs.get("restartCount") or 0
                state = cs.get("state") or {}
                waiting, ended = state.get("waiting"), state.get("terminated")
                if cs.get("ready") or (kind == "init" and ended and ended.get("exitCode") == 0):
                    continue
                what = "running, not ready"
                if waiting:
                    what = waiting.get("reason") or "Waiting"
                    reasons.append(what)
                    if waiting.get("message"):
                        what += f": {waiting['message']}"
                elif ended:
                    reasons.append(ended.get("reason") or "Terminated")
                    what = f"terminated {ended.get('reason') or ''} exit {ended.get('exitCode')}"
                extra = [f"restarts {cs['restartCount']}"] if cs.get("restartCount") else []
                last = (cs.get("lastState") or {}).get("terminated")
                if last:
                    extra.append(f"last exit {last.get('exitCode')} {last.get('reason') or ''}".rstrip())
                if crashed is None and cs.get("restartCount"):
                    crashed = cs.get("name")
                elif crashed is None and ended and ended.get("exitCode"):
                    # The first run just ended: a moment before the kubelet restarts it.
                    crashed, previous = cs.get("name"), False
                label = f"{'init container ' if kind else ''}{cs.get('name')}"
                problems.append(f"{label}: {what}" + (f" ({', '.join(extra)})" if extra else ""))
        containers = (raw.get("spec") or {}).get("containers") or []
        gates, known = feature_gates_of(containers)
        release, release_from = release_of_images(containers)
        return cls(pod.namespace or "", pod.name or "", pod.node, status.get("phase"), pod.is_ready,
                   tuple(problems), tuple(reasons), restarts, crashed_container=crashed,
                   crash_log_previous=previous, feature_gates=tuple(sorted(gates.items())),
                   gates_known=known, release=release, release_from=release_from)

    def with_daemonset_labels(self, namespace: str, name: str, labels: dict | None) -> "PluginPod":
        """The pod with the release its DaemonSet's chart labels name, when they name one
        (they win over an image tag: a mirror may retag an image, the chart says what it is)."""
        release, source = release_of_labels(labels)
        if release is None:
            return self
        return replace(self, release=release, release_from=f"DaemonSet {namespace}/{name} {source}")

    def gate(self, name: str) -> bool | None:
        """Whether the driver runs with feature gate ``name`` on, off, or None when the pod
        does not say (the driver's default applies)."""
        return dict(self.feature_gates).get(name)

    def with_log(self, tail: str | None) -> "PluginPod":
        return replace(self, log_tail=tail)

    @property
    def last_error(self) -> str | None:
        """What a crashing plugin said as it ended, shortened: the log tail's last line that
        reads as an error report (``Error: ...``, ``fatal``, ``panic``, a klog ``E``/``F`` line, a
        structured ``level=error``), else its last line mentioning an error, else its last line.
        A usage text printed on a bad flag mentions "error" too, and the kubelet may interleave
        it after the error line (stdout and stderr are two streams), so the first kind wins.

        >>> PluginPod("ns", "p", "n", "Running", False, log_tail="Error: unrecognized feature gate: X\\n"
        ...           "usage: ...\\n  --split  write error messages to stderr\\n\\n").last_error
        'Error: unrecognized feature gate: X'
        >>> PluginPod("ns", "p", "n", "Running", False, log_tail="starting\\nopen /dev/nvidiactl: "
        ...           "an error\\n").last_error
        'open /dev/nvidiactl: an error'
        """
        lines = [line.strip() for line in (self.log_tail or "").splitlines() if line.strip()]
        if not lines or lines[0].startswith("(logs unavailable"):
            return None
        said = ([line for line in lines if _ERROR_REPORT.search(line)]
                or [line for line in lines if "error" in line.lower()] or lines)
        return said[-1][:300]

    def summary(self) -> str:
        """One line: phase, readiness, what its containers wait on, restarts."""
        state = f"{self.phase or 'no phase'}, {'ready' if self.ready else 'not ready'}"
        if self.reasons:
            state += ", " + ", ".join(self.reasons)
        if self.restarts:
            state += f", {self.restarts} restarts"
        return f"kubelet plugin {self.namespace}/{self.name} on {self.node or '(no node)'}: {state}"

    def describe(self) -> str:
        """A line for the pod, then one per unhealthy container."""
        state = "Ready" if self.ready else f"not Ready ({self.phase or 'no phase'})"
        lines = [f"{self.namespace}/{self.name} on {self.node or '(unscheduled)'}: {state}"]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)
