"""The ways a test bed can be started broken, each mimicking one real-world failure.

``draconf testbed up --fault NAME`` (repeatable) starts a bed with these faults.  Each fault
acts where the real failure would: in the driver install, the node side, or the control plane
flags, so the symptom reaches the suite through the real API server, scheduler and controllers.

>>> validate(["cdi-wrong-device"])
['cdi-wrong-device']
"""

from __future__ import annotations

from draconf.errors import DraconfError

FAULTS: dict[str, str] = {
    "missing-deviceclass":
        "the driver install created no `gpu.nvidia.com` DeviceClass (GPU part disabled in the chart)",
    "no-resourceslices":
        "the kubelet plugin publishes no ResourceSlices (it cannot discover its GPUs)",
    "attribute-drift":
        "devices are published without `productName`, as after a driver upgrade that renamed it",
    "cdi-not-injected":
        "claims are prepared and pods run, but the runtime injects no GPU (CDI disabled)",
    "cdi-wrong-device":
        "the container is given a GPU other than the one allocated to its claim",
    "claims-not-released":
        "the node never finishes unpreparing, so generated claims outlive their pods",
    "prepare-refused":
        "the kubelet plugin runs, registers and publishes its GPUs, but refuses to prepare every claim "
        "(NodePrepareResources fails with an NVML error): pods are allocated GPUs and never start",
    "unprepare-keeps-device":
        "the kubelet plugin reports every unprepare done but keeps the claim's devices (real nodes "
        "only): claims are released, yet the next pod given such a GPU is refused it by the node",
    "one-node-refuses-prepare":
        "the kubelet plugin of one GPU node (gpu-a100-0 of the default fleet) refuses every prepare; "
        "the other nodes are healthy: only a sweep over every node is sure to find it",
    "one-node-wrong-device":
        "the runtime of one GPU node (gpu-a100-0 of the default fleet) gives containers a GPU other "
        "than the one allocated; the other nodes are healthy",
    "one-gpu-bad":
        "the last GPU of one GPU node (gpu-a100-0/gpu-1 of the default fleet) cannot be prepared, "
        "published like its healthy neighbour: only a sweep over every GPU is sure to find it",
    "claims-stripped":
        "a MutatingAdmissionPolicy made by an admin removes resourceClaims from every pod created in "
        "the suite's namespaces: the pods run, without any GPU",
    "claim-count-lowered":
        "a MutatingAdmissionPolicy made by an admin lowers every device request's count to 1 in the "
        "claims created in the suite's namespaces: a pod written for two GPUs runs on one",
    "quota-not-enforced":
        "kube-apiserver runs without the ResourceQuota admission plugin",
    "clusterpolicy-conflict":
        "a device-plugin ClusterPolicy exists beside the GPUCluster",
    "plugin-unhealthy":
        "the kubelet plugin pods crash-loop; claims are never prepared and pods stay Pending",
    "exec-flaky":
        "the first nvidia-smi exec'd into each container fails NVML initialisation, later ones work "
        "(a flake: --reruns reports it flaky)",
    "gpu-nodes-tainted":
        "GPU nodes carry a NoSchedule taint that ordinary GPU workloads do not tolerate",
    "extended-resource-off":
        "kube-scheduler runs with DRAExtendedResource off while the DeviceClass maps nvidia.com/gpu "
        "(a scheduler behind the API server): `nvidia.com/gpu: 1` pods find no GPU",
    "prioritized-list-off":
        "kube-scheduler runs with DRAPrioritizedList off while the API server serves firstAvailable: "
        "claims with alternatives are never allocated",
    "admin-access-exclusive":
        "the kubelet plugin treats adminAccess devices as exclusive (a driver without admin-access "
        "support): a monitoring claim on a GPU in use is never prepared",
    "scheduler-without-dra":
        "kube-scheduler's profile disables the DynamicResources plugin (a custom "
        "KubeSchedulerConfiguration): pods with claims are bound to nodes, their claims never allocated",
    "gpu-cluster-not-ready":
        "the GPU Operator reports GPUCluster gpu-cluster notReady although the kubelet plugin runs "
        "(another operand of the install, such as its validator, failed)",
    "resource-api-partial":
        "kube-apiserver does not serve resourceclaimtemplates (part of resource.k8s.io/v1 switched "
        "off with --runtime-config)",
    "admin-access-everywhere":
        "a MutatingAdmissionPolicy labels every new namespace resource.kubernetes.io/admin-access=true, "
        "so any namespace may claim GPUs other workloads hold",
    "sharing-config-ignored":
        "the kubelet plugin reads no opaque claim config (a driver without GpuConfig support): a "
        "TimeSlicing or MPS claim is prepared as a plain one, and an invalid config is not refused",
    "sharing-gates-off":
        "the driver is installed without the chart's featureGates TimeSlicingSettings and MPSSupport "
        "(the chart's default): the kubelet plugin refuses every claim with a sharing config",
    "mps-daemon-fails":
        "the MPS control daemon the kubelet plugin starts for an MPS claim (a Deployment "
        "mps-control-daemon-<id> in the driver's namespace) exits at once: nvidia-cuda-mps-control -d "
        "fails on its GPUs, so the plugin never sees it ready and refuses to prepare the claim",
    "device-taints-ignored":
        "kube-scheduler runs with DRADeviceTaints off while the driver taints an unhealthy GPU "
        "gpu.nvidia.com/xid=79:NoSchedule: the tainted GPU is allocated to claims that do not "
        "tolerate it (the bed adds that GPU when the inventory has no unhealthy one)",
    "device-taint-rules-ignored":
        "kube-scheduler runs with DRADeviceTaintRules off while the API server serves DeviceTaintRules "
        "(a scheduler started without the beta gate the API server has): a GPU an admin tainted "
        "NoSchedule by rule is allocated to claims that do not tolerate it",
    "device-taint-eviction-off":
        "kube-controller-manager runs without its device-taint-eviction-controller (a --controllers "
        "list that leaves it out): pods keep GPUs tainted NoExecute, by the driver or by a "
        "DeviceTaintRule, that their claims do not tolerate",
    "mig-counters-ignored":
        "the driver (DynamicMIG on) publishes MIG devices without consumesCounters, so the scheduler "
        "gives a full GPU and a MIG device of it to two claims (the bed turns DynamicMIG on)",
    "mig-caps-missing":
        "the GPU nodes lack the MIG capability device nodes (/dev/nvidia-caps, which nvidia-modprobe "
        "creates from /proc/driver/nvidia-caps/mig-minors), so the driver cannot hand a MIG device to "
        "a container: MIG pods never start (the bed turns DynamicMIG on)",
    "mig-unpublished":
        "the driver (DynamicMIG on) publishes no MIG device, only each MIG-capable GPU whole with its "
        "counter set (MIG discovery broken): the MIG checks would find nothing to ask for (the bed "
        "turns DynamicMIG on)",
    "mig-parent-mislabelled":
        "the driver (DynamicMIG on) publishes MIG devices of more than one memory slice with the next "
        "GPU's UUID as parentUUID (a wrong device inventory): the scheduler keeps a claim's MIG devices "
        "on one parentUUID as asked, yet they are created on two GPUs (the bed turns DynamicMIG on)",
}

#: Faults that turn one DRA feature gate off in kube-scheduler only: the API server keeps the
#: field, the scheduler ignores it (as a scheduler older than the API server, or started with
#: the gate off, does).
SCHEDULER_GATES_OFF = {"extended-resource-off": "DRAExtendedResource",
                       "prioritized-list-off": "DRAPrioritizedList",
                       "device-taints-ignored": "DRADeviceTaints",
                       "device-taint-rules-ignored": "DRADeviceTaintRules"}

#: Beta gates off by default in 1.36 that the bed turns on in kube-apiserver, kube-scheduler and
#: kube-controller-manager alike, so the suite's scenarios for them run in CI.  DRADeviceTaintRules
#: (KEP-5055) serves DeviceTaintRule: the API server's bootstrap RBAC then lets the scheduler and
#: the device-taint-eviction controller read rules, the scheduler applies their taints, and the
#: controller evicts for NoExecute ones and writes the rules' status.
BED_GATES_ON = ("DRADeviceTaintRules",)
#: The gates a gate needs (k8s.io/kubernetes pkg/features, v1.36.3): turning one off turns off
#: those that need it, else the component refuses to start.
GATE_NEEDS = {"DRADeviceTaintRules": "DRADeviceTaints"}
#: DeviceTaintRule is served by resource.k8s.io/v1beta2 only, a beta version disabled by default.
BED_RUNTIME_CONFIG = ("resource.k8s.io/v1beta2/devicetaintrules=true",)

#: Faults that need an unhealthy (tainted) GPU in the fleet to show (``inventory.with_unhealthy_gpu``).
NEED_UNHEALTHY_GPU = ("device-taints-ignored",)

#: Faults that need the driver's DynamicMIG gate on (``inventory.with_dynamic_mig``).
NEED_DYNAMIC_MIG = ("mig-counters-ignored", "mig-caps-missing", "mig-parent-mislabelled", "mig-unpublished")


#: The chart's ``featureGates`` the bed installs the driver with (GPU sharing is alpha upstream,
#: off by default; ``sharing-gates-off`` installs it without them).
SHARING_FEATURE_GATES = {"MPSSupport": True, "TimeSlicingSettings": True}


def plugin_feature_gates(faults) -> dict[str, bool]:
    """The driver's featureGates for ``faults``.

    >>> plugin_feature_gates([])
    {'MPSSupport': True, 'TimeSlicingSettings': True}
    >>> plugin_feature_gates(["sharing-gates-off"])
    {}
    """
    return {} if "sharing-gates-off" in faults else dict(SHARING_FEATURE_GATES)


def gate_flags(off=()) -> list[str]:
    """``--feature-gates`` with the bed's gates on (:data:`BED_GATES_ON`) and ``off`` off, with
    what needs a gate that is off.

    >>> gate_flags()
    ['--feature-gates=DRADeviceTaintRules=true']
    >>> gate_flags(["DRADeviceTaints"])
    ['--feature-gates=DRADeviceTaintRules=false,DRADeviceTaints=false']
    """
    off = set(off)
    off |= {g for g, needs in GATE_NEEDS.items() if needs in off}
    gates = {g: True for g in BED_GATES_ON} | {g: False for g in off}
    return [f"--feature-gates={','.join(f'{g}={str(v).lower()}' for g, v in sorted(gates.items()))}"]


def scheduler_flags(faults) -> list[str]:
    """kube-scheduler's ``--feature-gates`` for ``faults``: the bed's, with the gates a fault
    turns off.

    >>> scheduler_flags(["prioritized-list-off", "cdi-wrong-device"])
    ['--feature-gates=DRADeviceTaintRules=true,DRAPrioritizedList=false']
    >>> scheduler_flags(["device-taint-rules-ignored"])
    ['--feature-gates=DRADeviceTaintRules=false']
    >>> scheduler_flags(["device-taints-ignored"])
    ['--feature-gates=DRADeviceTaintRules=false,DRADeviceTaints=false']
    >>> scheduler_flags([])
    ['--feature-gates=DRADeviceTaintRules=true']
    """
    return gate_flags(SCHEDULER_GATES_OFF[f] for f in faults if f in SCHEDULER_GATES_OFF)

def scheduler_config(faults, kubeconfig: str) -> dict | None:
    """The KubeSchedulerConfiguration ``faults`` need (None: the flags' defaults serve).

    ``scheduler-without-dra`` disables DynamicResources in the default profile, as a custom
    scheduler configuration that lists its plugins (or a second scheduler without DRA) does.
    With ``--config`` the client and leader-election flags are ignored, so they move here.

    >>> cfg = scheduler_config(["scheduler-without-dra"], "/k")
    >>> cfg["profiles"][0]["plugins"]["multiPoint"]["disabled"], cfg["clientConnection"]["kubeconfig"]
    ([{'name': 'DynamicResources'}], '/k')
    >>> scheduler_config([], "/k") is None
    True
    """
    if "scheduler-without-dra" not in faults:
        return None
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig, "qps": 200, "burst": 400},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler", "plugins": {
                "multiPoint": {"disabled": [{"name": "DynamicResources"}]}}}]}


def apiserver_flags(faults) -> list[str]:
    """kube-apiserver's extra flags for ``faults``: the bed's gates and ``--runtime-config``.

    >>> apiserver_flags(["resource-api-partial"])[1]
    '--runtime-config=resource.k8s.io/v1/resourceclaimtemplates=false,resource.k8s.io/v1beta2/devicetaintrules=true'
    >>> apiserver_flags([])
    ['--feature-gates=DRADeviceTaintRules=true', '--runtime-config=resource.k8s.io/v1beta2/devicetaintrules=true']
    """
    runtime = (["resource.k8s.io/v1/resourceclaimtemplates=false"] if "resource-api-partial" in faults else []) \
        + list(BED_RUNTIME_CONFIG)
    return [*gate_flags(), f"--runtime-config={','.join(runtime)}"]


def controller_manager_flags(faults) -> list[str]:
    """kube-controller-manager's ``--feature-gates``: the bed's (its device-taint-eviction
    controller reads DeviceTaintRules only with DRADeviceTaintRules on); ``--controllers``
    without that controller for ``device-taint-eviction-off``.

    >>> controller_manager_flags([])
    ['--feature-gates=DRADeviceTaintRules=true']
    >>> controller_manager_flags(["device-taint-eviction-off"])[1]
    '--controllers=*,-device-taint-eviction-controller'
    """
    return gate_flags() + (["--controllers=*,-device-taint-eviction-controller"]
                           if "device-taint-eviction-off" in faults else [])


#: The taint the gpu-nodes-tainted fault puts on every GPU node.
GPU_NODE_TAINT = {"key": "dedicated", "value": "gpu-reserved", "effect": "NoSchedule"}


def validate(names: list[str] | tuple[str, ...]) -> list[str]:
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise DraconfError(f"unknown fault {', '.join(unknown)}; choose from: {', '.join(FAULTS)}")
    from draconf.testbed.nvidia import ONE_NODE_FAULTS, PLUGIN_FAULTS
    scoped = set(names) & set(ONE_NODE_FAULTS)
    fleet_wide = {n for n in names if n in PLUGIN_FAULTS} - scoped
    if scoped and fleet_wide:
        # The plugin's faults are scoped all together (SIMULATE_FAULTS_ON_NODES).
        raise DraconfError(f"{', '.join(sorted(scoped))} act on one node; they cannot be combined with "
                           f"the plugin faults {', '.join(sorted(fleet_wide))}")
    return sorted(set(names))
