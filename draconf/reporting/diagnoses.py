"""The diagnosis vocabulary: every code a failed test may carry (:data:`DIAGNOSES`), what it
means for the cluster and where to look, and the ``[code]`` prefix a failure message starts with
so Allure can file it."""

from __future__ import annotations

#: Every diagnosis a test may record, with what it means for the cluster and where to look.
#: The wording is for the operator reading a failed run, modelled on the NVIDIA DRA driver's
#: troubleshooting list.
DIAGNOSES: dict[str, str] = {
    "api-unavailable":
        "The API server does not serve resource.k8s.io/v1, so no DRA workload can run: check "
        "the Kubernetes version (1.34 or later) and the API server's --runtime-config and "
        "feature gates (`kubectl api-resources --api-group=resource.k8s.io`).",
    "api-throttled":
        "The API server kept answering 429 Too Many Requests (or 5xx) after the suite had "
        "retried with backoff, honouring Retry-After: it is overloaded or its API Priority and "
        "Fairness limits the suite's user. Rerun when it is less busy, or give the suite's user "
        "a FlowSchema with more share; not a DRA failure.",
    "scheduler-unavailable":
        "No scheduler acted on the workload's pods (no binding, no PodScheduled condition, no "
        "scheduling event) while the API server answered: kube-scheduler is stopped, hung or "
        "not leading. Check its process or pod in kube-system, its logs and its Lease "
        "(`kubectl -n kube-system get lease kube-scheduler`); the workloads after it got no verdict.",
    "controller-manager-unavailable":
        "No controller acted on the workload: no ResourceClaim was generated from its template "
        "(and no FailedResourceClaimCreation event), or its Deployment made no pods, while the API "
        "server answered: kube-controller-manager is stopped, hung or not leading. Check its "
        "process or pod in kube-system, its logs and its Lease "
        "(`kubectl -n kube-system get lease kube-controller-manager`); the workloads after it got "
        "no verdict.",
    "spec-altered":
        "The workload's pods or claims do not ask for what the suite applied: a claim, a "
        "container's resources.claims or a GPU limit is missing or different on the live pod, or "
        "a claim's request asks for another count, class or selectors than its manifest, so it "
        "ran without the GPUs it was written to have. A mutating admission webhook or policy "
        "changed it: check `kubectl get mutatingwebhookconfigurations,mutatingadmissionpolicies` "
        "and the object's managedFields, and exempt GPU workloads' pods and claims from the "
        "mutation.",
    "diagnosis-error":
        "The check failed, and reading the cluster to explain why failed too: the test's own "
        "message is the evidence. The debug log (draconf.diagnosis) has the diagnosis's error; "
        "such a failure is never run again by --reruns.",
    "missing-deviceclass":
        "The DeviceClass the workload requests does not exist, which usually means the DRA "
        "driver was installed with that device type turned off: fix the driver's Helm values "
        "(for NVIDIA, resources.gpus.enabled) and check `kubectl get deviceclasses`.",
    "no-resourceslices":
        "The driver publishes no ResourceSlices, so the scheduler sees no GPUs: the kubelet "
        "plugin cannot discover the GPUs on its node; check its pod logs and the node's GPU "
        "driver, then `kubectl get resourceslices`.",
    "attribute-missing":
        "A CEL selector uses a device attribute the driver does not publish (wrong name, "
        "domain or type), so no device can ever match: compare the selector with the "
        "attributes in `kubectl get resourceslices -o yaml`.",
    "selector-unmatched":
        "The selectors are valid but no published GPU satisfies them (for example a product "
        "or memory size the cluster does not have): check the claim's CEL expressions "
        "against the devices listed in the ResourceSlices.",
    "capacity-exhausted":
        "Every GPU that matches the request is already allocated, so the pod stays Pending: "
        "free GPUs by deleting finished pods and claims (`kubectl get resourceclaims -A`) or "
        "add capacity.",
    "scheduler-without-dra":
        "Pods were bound to nodes with their ResourceClaims unallocated, so no node can prepare "
        "them: the scheduler that placed them does not run DRA (kube-scheduler's profile disables "
        "the DynamicResources plugin, or the pods name another scheduler). Check the "
        "KubeSchedulerConfiguration and the pods' schedulerName.",
    "gpu-operator-not-ready":
        "The GPU Operator reports its GPUCluster not ready although the DRA kubelet plugin runs: "
        "another operand of the install failed. Check `kubectl describe gpucluster gpu-cluster` "
        "and `kubectl get pods -n gpu-operator`.",
    "allocation-invalid":
        "A claim's allocation breaks DRA's promises (a device in two claims, one no slice "
        "publishes, one on another node, the wrong count, a device its selectors refuse, "
        "reservedFor without the pod): something other than the scheduler writes claim status, or "
        "the driver publishes one GPU under two names. The reason lists each broken promise.",
    "node-excluded":
        "The pod's node selector, affinity or an untolerated taint keeps it off every node "
        "that has a matching GPU: compare the pod spec with the GPU nodes' labels and taints "
        "(including DRA device taints).",
    "image-pull-failed":
        "A GPU node cannot pull the workload's image (no route to the registry, an air-gapped "
        "cluster, or a wrong name): set the profile's `image` to one the nodes can pull, e.g. a "
        "mirror, and check `kubectl describe pod` for the pull error.",
    "plugin-unhealthy":
        "The driver's kubelet plugin is absent or unhealthy on the GPU node, so allocated "
        "claims cannot be prepared: check the kubelet-plugin DaemonSet pods, their logs, and "
        "the kubelet's plugin registration.",
    "cdi-not-injected":
        "The container started without its allocated GPU, which means CDI is not enabled in "
        "the container runtime: enable CDI in containerd or CRI-O and check the CDI specs the "
        "driver writes (e.g. under /var/run/cdi).",
    "cdi-wrong-device":
        "The container sees a GPU other than the one allocated to its claim, so device "
        "isolation is broken: compare the claim's status.allocation with nvidia-smi inside "
        "the container and check the driver's CDI specs.",
    "claim-not-released":
        "ResourceClaims generated for pods outlive those pods, so their GPUs stay allocated: "
        "check the kube-controller-manager's resourceclaim controller and the claims' owner "
        "references and finalizers.",
    "quota-not-enforced":
        "A ResourceQuota on a DeviceClass (<class>.deviceclass.resource.k8s.io/devices) was "
        "not enforced: check that the ResourceQuota admission plugin is enabled on the API "
        "server and that the quota names the right DeviceClass; or a namespace caps GPUs only "
        "via requests.nvidia.com/gpu, which DRA claims bypass: add a "
        "<class>.deviceclass.resource.k8s.io/devices quota.",
    "policy-conflict":
        "A GPU Operator ClusterPolicy (device plugin) exists beside the GPUCluster (DRA), and a "
        "cluster may have one or the other but not both: delete the one you do not use.",
    "permission-denied":
        "The credentials draconf runs with may not do something the suite needs (RBAC): the "
        "message names each missing verb and resource; bind the ClusterRole in "
        "manifests/rbac/clusterrole.yaml to this identity and rerun. Not a cluster failure.",
    "admission-denied":
        "The cluster's admission control (a ValidatingAdmissionPolicy, an admission webhook, a "
        "LimitRange or a quota draconf did not create) refused the suite's objects; the message "
        "quotes the server naming the policy or webhook: exempt draconf's namespaces (label "
        "app.kubernetes.io/managed-by=draconf) or run where the policy does not apply.",
    "feature-disabled":
        "The API server accepted a DRA field (a prioritized list, an extended resource mapped by a "
        "DeviceClass) that kube-scheduler does not act on: its feature gate is off there, e.g. a "
        "scheduler older than the API server; or a feature the cluster must have (GA in its "
        "Kubernetes version, or named by --expect-feature) is not served at all. Turn the gate on "
        "in kube-scheduler (and the kubelets), keeping every control-plane component at one "
        "version; for a feature the platform does not offer, pass --waive-feature.",
    "admin-access-unsupported":
        "A claim was allocated a GPU with adminAccess (shared with the claim already using it, "
        "as monitoring agents and the GPU Operator's validator need), but the node's DRA driver "
        "refuses to prepare it while another claim holds that GPU: the driver treats admin access "
        "as exclusive. Upgrade the driver to a release that supports admin access.",
    "config-rejected":
        "The node's DRA driver refused to prepare a claim because of the claim's opaque "
        "configuration (for the NVIDIA driver a GpuConfig: an unknown field or strategy, a value "
        "out of range, or a sharing strategy whose feature gate, TimeSlicingSettings or "
        "MPSSupport, is off in the driver's chart): the pod never starts. The message is the "
        "driver's own (event FailedPrepareDynamicResources): fix the config, or enable the gate "
        "(`--set featureGates.TimeSlicingSettings=true,featureGates.MPSSupport=true`).",
    "config-ignored":
        "A claim's opaque configuration had no effect: its containers run, but do not show what "
        "the config asks (a TimeSlicing GPU without its time slice, an MPS GPU without the MPS "
        "control daemon's pipe directory or EXCLUSIVE_PROCESS mode), or an invalid config was "
        "accepted. The node's DRA driver does not read or apply claim configuration: upgrade it "
        "to a release that supports GpuConfig sharing.",
    "admin-access-unrestricted":
        "The API server admitted an adminAccess claim in a namespace the suite did not label "
        "`resource.kubernetes.io/admin-access: \"true\"`: something (a mutating policy or webhook, "
        "a namespace template) labels namespaces for admin access, so any user who may create "
        "claims there can reach GPUs other workloads hold. Find it (`kubectl get "
        "mutatingadmissionpolicies,mutatingwebhookconfigurations`) and restrict the label to "
        "monitoring namespaces.",
    "device-tainted":
        "A device tainted NoSchedule or NoExecute, by its driver in its ResourceSlice (e.g. an "
        "unhealthy GPU: gpu.nvidia.com/xid=79) or by an administrator's DeviceTaintRule, was "
        "allocated to a claim whose request does not tolerate the taint, or (NoExecute) its pod "
        "kept running on it: kube-scheduler ignores device taints (DRADeviceTaints, or for rules "
        "DRADeviceTaintRules, off there, or a scheduler older than the API server), or "
        "kube-controller-manager does not evict (its device-taint-eviction-controller left out of "
        "--controllers). Turn the gate or controller on and move the workload off the device "
        "(`kubectl get resourceslices,devicetaintrules -o yaml` shows the taints).",
    "partition-overlap":
        "A GPU and a MIG device carved from it (a partition: its parentUUID is the GPU's uuid) are "
        "allocated to two claims at once. The driver publishes both as partitionable devices "
        "consuming one counter set per GPU (KEP-4815, DRAPartitionableDevices), so the scheduler "
        "can never do this unless the MIG devices consume no counters (a driver publishing them "
        "without consumesCounters) or the scheduler ignores counters. `kubectl get resourceslices "
        "-o yaml` shows whether the MIG devices carry consumesCounters; the node then fails to "
        "create the MIG device (NVML: Insufficient Resources) or the full GPU's workload shares it.",
    "inventory-mismatch":
        "The driver publishes a device whose attributes disagree with the hardware its containers "
        "get: a MIG device's parentUUID names a GPU other than the one the container's nvidia-smi "
        "-L lists it under (the GPU whose counter set the device consumes in its ResourceSlice). "
        "Constraints on that attribute then hold on paper only: matchAttribute "
        "gpu.nvidia.com/parentUUID keeps a claim's MIG devices on one published parentUUID while "
        "they are created on several GPUs. The driver's device inventory is wrong: compare "
        "`kubectl get resourceslices -o yaml` with nvidia-smi -L on the node, and fix or upgrade "
        "the driver.",
    "intermittent":
        "The check failed, but the same reading repeated by the diagnosis moments later showed "
        "the expected state: the failure did not persist. Rerun with --reruns to tell a flake "
        "from a fault; a test that passes on a rerun is reported flaky.",
    "timeout":
        "The check ran out of time without a definitive signal from the cluster, so it says "
        "nothing about conformance yet: read the events of the objects involved and rerun "
        "with a longer timeout.",
}


def diagnosis_prefix(code: str) -> str:
    """The text a test may start its own failure message with (the reports add it to a
    diagnosed failure's message that lacks it, never to the exception).

    >>> diagnosis_prefix("cdi-wrong-device")
    '[cdi-wrong-device] '
    """
    require_known_code(code)
    return f"[{code}] "


def require_known_code(code: str) -> None:
    # A typo would yield a code that no Allure category and no operator doc knows about.
    if code not in DIAGNOSES:
        raise ValueError(f"unknown diagnosis {code!r}; known: {', '.join(DIAGNOSES)}")
