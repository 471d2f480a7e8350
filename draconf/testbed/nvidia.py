"""The NVIDIA GPU DRA driver as the bed installs it: one release's chart objects, and the hardware.

The release is kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 (chart
``deployments/helm/dra-driver-nvidia-gpu``), the first whose chart maps ``nvidia.com/gpu`` onto
DRA devices.  The objects live where the GPU Operator puts them (namespace ``gpu-operator``,
DaemonSet ``nvidia-dra-driver-kubelet-plugin``), as in the hands-on guide.

What a cluster gets from the driver's Helm chart (DeviceClasses, the kubelet-plugin DaemonSet
with its ServiceAccount and RBAC), the labels GPU Feature Discovery puts on GPU nodes, and what
the simulated GPUs look like on a real node: a driver root such as the GPU Operator's
containerized driver provides, with character devices ``dev/nvidia<minor>`` (major 195),
``nvidia-smi``, and the NVML data the simulated plugin and ``nvidia-smi`` read.

The GPU hardware is the only simulated part: on real nodes the plugin is a real DRA kubelet
plugin (``gomod/gpu-driver``) run by this DaemonSet; on KWOK nodes the agent
(:mod:`draconf.testbed.agent`) stands in for it.

>>> semver("580.95.05"), semver("13.0")
('580.95.5', '13.0.0')
>>> device_class("gpu.nvidia.com", "gpu")["spec"]["extendedResourceName"]
'nvidia.com/gpu'
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

DRIVER = "gpu.nvidia.com"
PLUGIN_NAMESPACE = "gpu-operator"
PLUGIN_DAEMONSET = "nvidia-dra-driver-kubelet-plugin"
PLUGIN_SERVICE_ACCOUNT = "nvidia-dra-driver-kubelet-plugin"
PLUGIN_COMPONENT_LABEL = "nvidia-dra-driver-gpu-component"
#: The image the bed builds for the simulated plugin (imported into every real node).
PLUGIN_IMAGE = "draconf.local/dra-driver-nvidia-gpu-sim:v0.4.1"
#: The MPS control daemon Deployments' image (the plugin's IMAGE_NAME): the bed's busybox, as
#: the daemon's script (gomod/gpu-driver/internal/plugin/mps.go) needs sh, rm, touch, cat and
#: tail (draconf.profile.TESTBED_IMAGE, not imported: this module is imported by images.py,
#: which imports profile; tests/unit/test_images.py holds the two together).
MPS_DAEMON_IMAGE = "draconf.local/busybox:1.35.0"
#: The plugin's gRPC health service, which the chart's startup and liveness probes ask.
HEALTHCHECK_PORT = 51516
GPU_NODE_LABELS = {"feature.node.kubernetes.io/pci-10de.present": "true",
                   "nvidia.com/gpu.present": "true"}
#: DeviceClass name -> the `type` attribute its selector requires.
DEVICE_CLASSES = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig", "vfio.gpu.nvidia.com": "vfio"}
#: Character-device major number of NVIDIA GPUs (/dev/nvidia<minor>; nvidiactl is minor 255).
NVIDIA_MAJOR = 195
NVML_DATA = "usr/share/nvidia-sim/nvml.json"
#: Character-device major of the MIG capability nodes dev/nvidia-caps/nvidia-cap<minor> (dynamic
#: on a real host; fixed on the bed, as gomod/gpu-driver/internal/nvmlsim NvidiaCapsMajor).
NVIDIA_CAPS_MAJOR = 508
#: GPU instances per GPU in the driver's capability minor numbering (mig-minors).
MAX_GPU_INSTANCES = 15


def semver(version: str) -> str:
    """A driver version as the plugin publishes it: semver, so "580.95.05" becomes "580.95.5"."""
    parts = [str(int(p)) for p in version.split(".")[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def device_class(name: str, device_type: str) -> dict:
    """A DeviceClass exactly as the chart renders it on resource.k8s.io/v1.

    Recent charts map the classic extended resource onto full GPUs, so a pod asking
    ``nvidia.com/gpu: 1`` gets a DRA device (DRAExtendedResource, beta and on in 1.36)."""
    spec: dict = {"selectors": [{"cel": {"expression":
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"}}]}
    if name == "gpu.nvidia.com":
        spec["extendedResourceName"] = "nvidia.com/gpu"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": spec}


def node_labels(product_name: str | None) -> dict[str, str]:
    """The labels NFD and GPU Feature Discovery put on a node whose GPUs are ``product_name``
    (none on a CPU node, where it is None)."""
    if not product_name:
        return {}
    return {**GPU_NODE_LABELS, "nvidia.com/gpu.product": product_name.replace(" ", "-")}


def nvml_data(node) -> dict:
    """What NVML reports on ``node``: the simulated hardware, read by the plugin and nvidia-smi."""
    gpus = node.gpus
    return {"driverVersion": gpus[0].driver_version if gpus else "",
            "cudaDriverVersion": gpus[0].cuda_driver_version if gpus else "",
            "gpus": [{"minor": g.minor, "uuid": g.uuid, "productName": g.model.product_name,
                      "brand": g.model.brand, "architecture": g.model.architecture,
                      "cudaComputeCapability": g.model.cuda_compute_capability,
                      "pciBusID": g.pci_bus_id, "pcieRoot": g.pcie_root,
                      "memoryBytes": g.model.memory_bytes,
                      **({"mig": mig_data(g.model.mig)} if g.model.mig else {}),
                      **({} if g.healthy else {"health": {k: v for k, v in
                                                          (("xid", g.xid), ("lost", g.lost)) if v}})}
                     for g in gpus]}


def mig_data(mig) -> dict:
    """A model's MIG profiles as NVML reports them (nvml.json ``mig``)."""
    return {"memorySlices": mig.memory_slices, "profiles": [
        {"name": p.name, "id": p.id, "memoryMiB": p.memory_mib, "multiprocessors": p.multiprocessors,
         "copyEngines": p.copy_engines, "decoders": p.decoders, "encoders": p.encoders,
         "jpegEngines": p.jpeg_engines, "ofaEngines": p.ofa_engines, "size": p.size,
         "placements": list(p.placements)} for p in mig.profiles]}


def cap_minors(gpu_minor: int) -> list[int]:
    """The MIG capability minors of a GPU's 15 GPU instances and their first compute instance,
    numbered as the driver's /proc/driver/nvidia-caps/mig-minors (gpu0/gi1/access is 12).

    >>> cap_minors(0)[:3], cap_minors(1)[0]
    ([3, 4, 12], 138)
    """
    out = []
    for gi in range(MAX_GPU_INSTANCES):
        access = 3 + gpu_minor * MAX_GPU_INSTANCES * 9 + gi * 9
        out += [access, access + 1]
    return out


def install_driver_root(root: Path, node, nvidia_smi: Path, mig_caps: bool = True,
                        mps_control: Path | None = None) -> None:
    """Lay out the simulated GPUs of ``node`` under ``root`` (mounted at /run/nvidia/driver),
    with the MIG capability nodes of its MIG-capable GPUs (dev/nvidia-caps/nvidia-cap<minor>),
    which the plugin hands to containers given a MIG device (none with ``mig_caps`` False: the
    mig-caps-missing fault, a host where nvidia-modprobe never created them), and the MPS
    control daemon stand-in ``usr/bin/nvidia-cuda-mps-control`` (``mps_control``; the daemon
    Deployment the plugin creates for an MPS claim runs it from the driver root, as the real
    driver's daemon runs the driver's own binary)."""
    install_gpu_view(root, nvml_data(node), [g.minor for g in node.gpus], nvidia_smi)
    if mps_control is not None:
        target = root / "usr" / "bin" / "nvidia-cuda-mps-control"
        target.unlink(missing_ok=True)
        shutil.copyfile(mps_control, target)
        target.chmod(0o755)
    caps = [m for g in node.gpus if g.model.mig and mig_caps for m in cap_minors(g.minor)]
    if caps:
        (root / "dev" / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    for minor in caps:
        path = root / "dev" / "nvidia-caps" / f"nvidia-cap{minor}"
        if not path.exists():
            os.mknod(path, 0o444 | stat.S_IFCHR, os.makedev(NVIDIA_CAPS_MAJOR, minor))


def install_gpu_view(root: Path, nvml: dict, minors: list[int], nvidia_smi: Path | None) -> None:
    """What a driver root, or a container that got GPUs through CDI, holds under ``root``:
    ``dev/nvidia<minor>`` for ``minors`` (and ``dev/nvidiactl``), ``usr/bin/nvidia-smi`` (the
    stand-in; none when ``nvidia_smi`` is None) and the node's NVML record.

    The nvidia-smi stand-in (``gomod/gpu-driver/cmd/nvidia-smi``) run with ``NVIDIA_SIM_ROOT``
    set to ``root`` lists exactly the GPUs whose device nodes are here.
    """
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for name, minor in [*((f"nvidia{m}", m) for m in minors), ("nvidiactl", 255)]:
        path = dev / name
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
    if nvidia_smi is not None:
        (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
        target = root / "usr" / "bin" / "nvidia-smi"
        target.unlink(missing_ok=True)
        try:
            os.link(nvidia_smi, target)  # one copy per bed, not per container
        except OSError:
            shutil.copyfile(nvidia_smi, target)
        target.chmod(0o755)
    data = root / NVML_DATA
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(json.dumps(nvml, indent=2))


#: Fault of the bed -> the plugin's --simulate-fault value acting at the same place on a real node.
PLUGIN_FAULTS = {"attribute-drift": "attribute-drift", "no-resourceslices": "no-devices",
                 "cdi-not-injected": "cdi-not-injected", "cdi-wrong-device": "cdi-wrong-device",
                 "claims-not-released": "unprepare-fails", "plugin-unhealthy": "crash",
                 "admin-access-exclusive": "admin-access-exclusive",
                 "exec-flaky": "nvml-flaky", "sharing-config-ignored": "sharing-config-ignored",
                 "mig-counters-ignored": "mig-counters-ignored",
                 "mig-parent-mislabelled": "mig-parent-mislabelled", "mig-unpublished": "mig-unpublished",
                 "mps-daemon-fails": "mps-daemon-fails", "prepare-refused": "prepare-fails",
                 "unprepare-keeps-device": "unprepare-keeps-device",
                 "one-node-refuses-prepare": "prepare-fails", "one-node-wrong-device": "cdi-wrong-device",
                 "one-gpu-bad": "last-gpu-fails"}
#: Faults of one node only (SIMULATE_FAULTS_ON_NODES): the default fleet's A100 node breaks, the
#: others stay healthy, and a sweep over every node must name exactly that one.
ONE_NODE_FAULTS = ("one-node-refuses-prepare", "one-node-wrong-device", "one-gpu-bad")
ONE_NODE = "gpu-a100-0"


def feature_gates_env(gates: dict[str, bool]) -> str:
    """FEATURE_GATES as the chart renders ``featureGates`` (sorted keys, a trailing comma).

    >>> feature_gates_env({"TimeSlicingSettings": True, "MPSSupport": True})
    'MPSSupport=true,TimeSlicingSettings=true,'
    """
    return "".join(f"{k}={str(v).lower()}," for k, v in sorted(gates.items()))


def plugin_rbac() -> list[dict]:
    """The kubelet plugin's ServiceAccount and the cluster role it needs."""
    name = PLUGIN_SERVICE_ACCOUNT
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": PLUGIN_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": [
             {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
             {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
              "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
             # As the chart (rbac-kubeletplugin.yaml): the MPS control daemon's readiness is
             # read from its pod.
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": PLUGIN_NAMESPACE}]},
    ]


def plugin_mps_rbac() -> list[dict]:
    """The Role (and its binding) the chart gives the kubelet plugin in the driver's namespace
    when featureGates.MPSSupport is on: it creates and deletes the MPS control daemons'
    Deployments there."""
    name = PLUGIN_SERVICE_ACCOUNT
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": PLUGIN_NAMESPACE},
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": PLUGIN_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": PLUGIN_NAMESPACE}]},
    ]


def plugin_daemonset(faults: list[str], template_annotations: dict[str, str],
                     feature_gates: dict[str, bool] | None = None) -> dict:
    """The kubelet-plugin DaemonSet, shaped like the chart's; its pods run on every GPU node.
    ``feature_gates`` is the chart's ``featureGates`` value (FEATURE_GATES when not empty):
    TimeSlicingSettings and MPSSupport for GPU sharing, DynamicMIG for MIG."""
    labels = {"app": PLUGIN_DAEMONSET, PLUGIN_COMPONENT_LABEL: "kubelet-plugin"}
    simulated = ",".join(PLUGIN_FAULTS[f] for f in faults if f in PLUGIN_FAULTS)
    gates = feature_gates_env(feature_gates or {})

    def host_path(name: str, path: str, kind: str = "DirectoryOrCreate") -> dict:
        return {"name": name, "hostPath": {"path": path, "type": kind}}

    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": PLUGIN_DAEMONSET, "namespace": PLUGIN_NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": PLUGIN_DAEMONSET}},
            "template": {
                "metadata": {"labels": labels, "annotations": template_annotations},
                "spec": {
                    "serviceAccountName": PLUGIN_SERVICE_ACCOUNT,
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    # As the chart: every node that GPU Feature Discovery marked as holding GPUs.
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}},
                    # Plugins stop at once: they hold no state a grace period would save.
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "gpus",
                        "image": PLUGIN_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["gpu-kubelet-plugin", "-v", "4"],
                        "securityContext": {"privileged": True},
                        "env": [
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "NVIDIA_DRIVER_ROOT", "value": "/run/nvidia/driver"},
                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                            {"name": "CDI_ROOT", "value": "/var/run/cdi"},
                            {"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": "/var/lib/kubelet/plugins_registry"},
                            {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": "/var/lib/kubelet/plugins"},
                            {"name": "HEALTHCHECK_PORT", "value": str(HEALTHCHECK_PORT)},
                            # The chart sets the driver's own image, which the MPS control
                            # daemon's script runs in; the bed's plugin image has no shell, so
                            # the daemon runs in the bed's busybox image (preloaded on every node).
                            {"name": "IMAGE_NAME", "value": MPS_DAEMON_IMAGE},
                            *([{"name": "FEATURE_GATES", "value": gates}] if gates else []),
                            *([{"name": "SIMULATE_FAULTS", "value": simulated}] if simulated else []),
                            *([{"name": "SIMULATE_FAULTS_ON_NODES", "value": ONE_NODE}]
                              if set(faults) & set(ONE_NODE_FAULTS) else []),
                        ],
                        "startupProbe": {"grpc": {"port": HEALTHCHECK_PORT, "service": "liveness"},
                                         "periodSeconds": 1, "failureThreshold": 60},
                        "livenessProbe": {"grpc": {"port": HEALTHCHECK_PORT, "service": "liveness"},
                                          "periodSeconds": 10, "failureThreshold": 3},
                        "volumeMounts": [
                            {"name": "plugins-registry", "mountPath": "/var/lib/kubelet/plugins_registry"},
                            {"name": "plugins", "mountPath": "/var/lib/kubelet/plugins",
                             "mountPropagation": "Bidirectional"},
                            {"name": "cdi", "mountPath": "/var/run/cdi"},
                            # As the chart's gpus container: read-write (nvidia-smi changes
                            # the GPUs' state there for GPU sharing).
                            {"name": "driver-root", "mountPath": "/driver-root",
                             "mountPropagation": "HostToContainer"},
                        ],
                    }],
                    "volumes": [
                        host_path("plugins-registry", "/var/lib/kubelet/plugins_registry"),
                        host_path("plugins", "/var/lib/kubelet/plugins"),
                        host_path("cdi", "/var/run/cdi"),
                        host_path("driver-root", "/run/nvidia/driver", "Directory"),
                    ],
                }}}}
