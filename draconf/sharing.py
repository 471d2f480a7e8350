"""GPU sharing: what a claim's sharing config asks of the driver, and whether its containers show it.

The NVIDIA driver takes an opaque claim config of kind ``GpuConfig``
(``apiVersion: resource.nvidia.com/v1beta1``, ``sharing.strategy`` TimeSlicing or MPS) and, when
it prepares the claim, applies it to the GPUs (kubernetes-sigs/dra-driver-nvidia-gpu,
cmd/gpu-kubelet-plugin/sharing.go):

* **TimeSlicing**: ``nvidia-smi -c DEFAULT`` and ``nvidia-smi compute-policy --set-timeslice N``
  on each GPU (N from ``timeSlicingConfig.interval``: Default 0, Short 1, Medium 2, Long 3;
  Default when no interval is given), no container edits;
* **MPS**: an MPS control daemon per claim, the GPUs in compute mode ``EXCLUSIVE_PROCESS``, and in
  every container of the request ``CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps`` with the daemon's
  pipe directory (its ``control`` named pipe) mounted there.

So each container of a sharing request shows the config from inside, through ``nvidia-smi`` and
its environment (:data:`PROBE`), and every container of one request sees the same GPUs.

>>> cfg = sharing_configs({"spec": {"devices": {"config": [{"requests": ["ts"], "opaque": {
...     "driver": "gpu.nvidia.com", "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
...     "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing",
...     "timeSlicingConfig": {"interval": "Long"}}}}}]}}}, "gpu.nvidia.com")
>>> cfg
{'ts': Sharing(strategy='TimeSlicing', interval='Long')}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: What the suite runs in each container of a sharing request: the GPUs' compute mode, their
#: compute policy (time slice), and what MPS put in the environment.
PROBE = ["sh", "-c",
         "nvidia-smi --query-gpu=index,uuid,compute_mode --format=csv,noheader; echo @@; "
         "nvidia-smi compute-policy -l; echo @@; "
         "echo \"CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-}\"; "
         "if [ -n \"${CUDA_MPS_PIPE_DIRECTORY:-}\" ] && [ -p \"$CUDA_MPS_PIPE_DIRECTORY/control\" ]; "
         "then echo MPS_CONTROL_PIPE=yes; else echo MPS_CONTROL_PIPE=no; fi"]

TIME_SLICING, MPS = "TimeSlicing", "MPS"
INTERVALS = ("Default", "Short", "Medium", "Long")
MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
#: nvidia-smi's compute modes (``--query-gpu=compute_mode``).
MODE_DEFAULT, MODE_EXCLUSIVE_PROCESS = "Default", "Exclusive_Process"


@dataclass(frozen=True)
class Sharing:
    """One request's sharing config: the strategy, and the time-slice interval it implies."""
    strategy: str
    interval: str | None = None


def sharing_configs(claim: dict, driver: str) -> dict[str, Sharing]:
    """Request name -> the GpuConfig sharing the claim gives it (the last config naming the
    request wins, as in the driver; a config naming no request applies to all, key ``""``)."""
    out: dict[str, Sharing] = {}
    for config in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
        opaque = config.get("opaque") or {}
        params = opaque.get("parameters") or {}
        if opaque.get("driver") != driver or params.get("kind") != "GpuConfig":
            continue
        sharing = params.get("sharing") or {}
        if not sharing.get("strategy"):
            continue
        interval = ((sharing.get("timeSlicingConfig") or {}).get("interval")
                    or "Default") if sharing["strategy"] == TIME_SLICING else None
        for request in config.get("requests") or [""]:
            out[request] = Sharing(sharing["strategy"], interval)
    return out


@dataclass
class ContainerView:
    """What :data:`PROBE` showed in one container."""
    modes: dict[str, str] = field(default_factory=dict)        # GPU UUID -> compute mode
    time_slices: dict[str, str] = field(default_factory=dict)  # GPU UUID -> interval name
    mps_pipe_directory: str = ""
    mps_control_pipe: bool = False

    @property
    def uuids(self) -> list[str]:
        return sorted(self.modes)


_UUID = re.compile(r"\b(GPU-[0-9a-fA-F-]+|MIG-[0-9a-fA-F-]+)\b")


def parse_probe(stdout: str) -> ContainerView:
    """Read :data:`PROBE`'s output.  The compute-policy list is read leniently: a row naming a
    GPU (its UUID, else its nvidia-smi index at the start of the row) and an interval name.

    >>> v = parse_probe('''0, GPU-aa, Default
    ... @@
    ... GPU compute policies:
    ... GPU  UUID     Timeslice
    ... 0    GPU-aa   Long
    ... @@
    ... CUDA_MPS_PIPE_DIRECTORY=
    ... MPS_CONTROL_PIPE=no''')
    >>> v.modes, v.time_slices, v.mps_pipe_directory, v.mps_control_pipe
    ({'GPU-aa': 'Default'}, {'GPU-aa': 'Long'}, '', False)
    >>> parse_probe("0, GPU-bb, Exclusive_Process\\n@@\\n|   0   Timeslice: medium |\\n@@\\n").time_slices
    {'GPU-bb': 'Medium'}
    """
    parts = (stdout or "").split("@@")
    query, policy, env = (parts + ["", "", ""])[:3]
    view = ContainerView()
    by_index: dict[str, str] = {}
    for line in query.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3 and _UUID.fullmatch(cells[1]):
            view.modes[cells[1]] = cells[2]
            by_index[cells[0]] = cells[1]
    for line in policy.splitlines():
        level = next((name for name in INTERVALS if re.search(rf"\b{name}\b", line, re.IGNORECASE)), None)
        if level is None:
            continue
        uuid = _UUID.search(line)
        index = re.match(r"[\s|]*(\d+)\b", line)
        gpu = uuid.group(1) if uuid else by_index.get(index.group(1)) if index else None
        if gpu:
            view.time_slices[gpu] = level
    for line in env.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "CUDA_MPS_PIPE_DIRECTORY":
            view.mps_pipe_directory = value
        elif key == "MPS_CONTROL_PIPE":
            view.mps_control_pipe = value == "yes"
    return view


def judge(sharing: Sharing, views: dict[str, ContainerView]) -> list[str]:
    """What is wrong with the containers (name -> view) of one request configured ``sharing``.

    >>> ts = Sharing("TimeSlicing", "Long")
    >>> good = ContainerView({"GPU-a": "Default"}, {"GPU-a": "Long"})
    >>> judge(ts, {"c0": good, "c1": good})
    []
    >>> judge(ts, {"c0": good, "c1": ContainerView({"GPU-b": "Default"}, {"GPU-b": "Default"})})
    ["the containers of one request see different GPUs: c0: ['GPU-a']; c1: ['GPU-b']", 'c1: GPU-b time slice is Default, not Long']
    >>> judge(Sharing("MPS"), {"c0": ContainerView({"GPU-a": "Default"})})[0]
    'c0: GPU-a is in compute mode Default, not Exclusive_Process (MPS)'
    """
    problems = []
    seen = {name: v.uuids for name, v in views.items()}
    if len({tuple(u) for u in seen.values()}) > 1:
        problems.append("the containers of one request see different GPUs: "
                        + "; ".join(f"{n}: {u}" for n, u in sorted(seen.items())))
    for name, view in sorted(views.items()):
        if not view.uuids:
            problems.append(f"{name}: nvidia-smi reports no GPU")
            continue
        if sharing.strategy == TIME_SLICING:
            for uuid in view.uuids:
                if view.modes[uuid] != MODE_DEFAULT:
                    problems.append(f"{name}: {uuid} is in compute mode {view.modes[uuid]}, not "
                                    f"{MODE_DEFAULT} (TimeSlicing)")
                got = view.time_slices.get(uuid)
                if got is None:
                    problems.append(f"{name}: nvidia-smi compute-policy -l reports no time slice for {uuid}")
                elif got != sharing.interval:
                    problems.append(f"{name}: {uuid} time slice is {got}, not {sharing.interval}")
        elif sharing.strategy == MPS:
            for uuid in view.uuids:
                if view.modes[uuid] != MODE_EXCLUSIVE_PROCESS:
                    problems.append(f"{name}: {uuid} is in compute mode {view.modes[uuid]}, not "
                                    f"{MODE_EXCLUSIVE_PROCESS} (MPS)")
            if view.mps_pipe_directory != MPS_PIPE_DIRECTORY:
                problems.append(f"{name}: CUDA_MPS_PIPE_DIRECTORY is {view.mps_pipe_directory or 'unset'}, "
                                f"not {MPS_PIPE_DIRECTORY} (no MPS control daemon was set up for it)")
            elif not view.mps_control_pipe:
                problems.append(f"{name}: {MPS_PIPE_DIRECTORY}/control is not a named pipe (the MPS "
                                "control daemon's pipe directory is not mounted)")
    return problems


#: The MPS control daemon Deployment's name prefix (upstream ``MpsControlDaemonNameFmt``,
#: ``mps-control-daemon-<claim UID>-<hash of the GPUs' UUIDs>``).
MPS_DAEMON_PREFIX = "mps-control-daemon-"


def mps_daemon_node(deployment: dict) -> str | None:
    """The node a daemon Deployment is pinned to: its pod template's ``nodeName`` (upstream's
    template), else a ``kubernetes.io/hostname`` node selector."""
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")


def judge_mps_daemon(claim_uid: str, node: str | None, deployments: list[dict]) -> tuple[list[str], str]:
    """Whether the MPS control daemon of the claim ``claim_uid`` runs for the containers on
    ``node``: among ``deployments`` (those of the driver's namespaces) one named
    ``mps-control-daemon-<claim UID>...``, Available, pinned to the node.  The problems, and a
    line of evidence naming what was found.

    >>> d = {"metadata": {"name": "mps-control-daemon-u1-abcde", "namespace": "gpu-operator"},
    ...      "spec": {"template": {"spec": {"nodeName": "n1"}}},
    ...      "status": {"conditions": [{"type": "Available", "status": "True"}], "readyReplicas": 1}}
    >>> judge_mps_daemon("u1", "n1", [d])
    ([], 'gpu-operator/mps-control-daemon-u1-abcde on n1: Available=True, 1 ready')
    >>> judge_mps_daemon("u1", "n2", [d])[0]
    ['MPS control daemon gpu-operator/mps-control-daemon-u1-abcde runs on n1, not on n2 where the pod is']
    >>> print(judge_mps_daemon("u2", "n1", [d])[0][0])
    no MPS control daemon Deployment mps-control-daemon-u2-* in the driver's namespace (found: gpu-operator/mps-control-daemon-u1-abcde)
    """
    mine = [d for d in deployments
            if (d.get("metadata") or {}).get("name", "").startswith(f"{MPS_DAEMON_PREFIX}{claim_uid}")]
    if not mine:
        others = sorted(f"{d['metadata'].get('namespace')}/{d['metadata']['name']}" for d in deployments
                        if (d.get("metadata") or {}).get("name", "").startswith(MPS_DAEMON_PREFIX))
        return ([f"no MPS control daemon Deployment {MPS_DAEMON_PREFIX}{claim_uid}-* in the driver's "
                 f"namespace (found: {', '.join(others) or 'none'})"], "no MPS control daemon Deployment")
    problems, lines = [], []
    for d in mine:
        meta, status = d["metadata"], d.get("status") or {}
        name = f"{meta.get('namespace')}/{meta['name']}"
        available = next((c.get("status") for c in status.get("conditions") or []
                          if c.get("type") == "Available"), "unknown")
        pinned = mps_daemon_node(d)
        lines.append(f"{name} on {pinned or '(any node)'}: Available={available}, "
                     f"{status.get('readyReplicas') or 0} ready")
        if available != "True":
            problems.append(f"MPS control daemon {name} is not Available ({available}, "
                            f"{status.get('readyReplicas') or 0} ready replicas)")
        if pinned != node:
            problems.append(f"MPS control daemon {name} runs on {pinned or 'no pinned node'}, not on {node} "
                            "where the pod is")
    return problems, "; ".join(lines)

