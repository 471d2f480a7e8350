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
    #: the first of its containers that is not ready and has restarted (a crash loop): whose
    #: previous run's log says why
    crashed_container: str | None = None

    @classmethod
    def from_raw(cls, raw: dict) -> "PluginPod":
        """From a pod as the API serves it (a dict; a client object through
        ``ApiClient.sanitize_for_serialization``)."""
        pod = Pod(raw)
        status = raw.get("status") or {}
        problems, reasons, restarts, crashed = [], [], 0, None
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
                if cs.get("restartCount") and crashed is None:
                    crashed = cs.get("name")
                label = f"{'init container ' if kind else ''}{cs.get('name')}"
                problems.append(f"{label}: {what}" + (f" ({', '.join(extra)})" if extra else ""))
        return cls(pod.namespace or "", pod.name or "", pod.node, status.get("phase"), pod.is_ready,
                   tuple(problems), tuple(reasons), restarts, crashed_container=crashed)

    def with_log(self, tail: str | None) -> "PluginPod":
        return replace(self, log_tail=tail)

    @property
    def last_error(self) -> str | None:
        """The log tail's last line that says error (else its last line), shortened: what a
        crashing plugin said as it ended.

        >>> PluginPod("ns", "p", "n", "Running", False, log_tail="usage: ...\\nError: unrecognized "
        ...           "feature gate: X\\n\\n").last_error
        'Error: unrecognized feature gate: X'
        """
        lines = [line.strip() for line in (self.log_tail or "").splitlines() if line.strip()]
        if not lines or lines[0].startswith("(logs unavailable"):
            return None
        said = [line for line in lines if "error" in line.lower()] or lines
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
