"""Faults an admin produces from outside the driver, on a running dra-example-driver bed.

The bed's own faults (``draconf testbed up --fault``) act inside the simulated NVIDIA driver.
A driver this project did not write can only be broken the way a cluster admin breaks a
cluster, through the API and the control plane's flags, and then mended again:

- ``missing-deviceclass``: the chart's DeviceClass deleted (kept in the bed's directory);
- ``no-resourceslices``: the kubelet plugin's DaemonSet given a nodeSelector no node matches
  (its pods go away) and the driver's ResourceSlices deleted;
- ``quota-not-enforced``: kube-apiserver restarted without the ResourceQuota admission plugin;
- ``gpu-nodes-tainted``: every GPU node tainted ``dedicated=gpu-reserved:NoSchedule`` (the taint
  of the bed fault of that name).

``apply(bed, fault)`` breaks a healthy bed, ``restore(bed, fault)`` mends it and waits until it
is healthy again (DeviceClass back, every node's plugin Ready and its pool published, quota
enforced, no taint).  Both go through the bed's real API server, as ``kubectl`` would.

The names are the bed faults' own, so the matrix judges them by the same expectations:

>>> from draconf.testbed.faults import FAULTS
>>> set(EXTERNAL) <= set(FAULTS)
True
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from draconf import waits
from draconf.errors import DraconfError
from draconf.kube import connect
from draconf.testbed import example_driver
from draconf.testbed.faults import GPU_NODE_TAINT

EXTERNAL: dict[str, str] = {
    "missing-deviceclass": f"DeviceClass {example_driver.DEVICE_CLASS} deleted",
    "no-resourceslices": "the kubelet plugin's DaemonSet selects no node; the driver's ResourceSlices deleted",
    "quota-not-enforced": "kube-apiserver restarted without the ResourceQuota admission plugin",
    "gpu-nodes-tainted": "the GPU nodes tainted {key}={value}:{effect}".format(**GPU_NODE_TAINT),
}

#: The nodeSelector that no node matches (an admin's typo in a label has the same effect).
NO_NODE = {"draconf.dev/no-such-node": "true"}
SAVED = "external-faults.json"
#: Seconds between the probe pods of ``wait_control_plane_acts``.
PROBE_EVERY = 5


def validate(bed, fault: str) -> None:
    if fault not in EXTERNAL:
        raise DraconfError(f"{fault!r} is not a fault made from outside the driver; choose from: "
                           f"{', '.join(EXTERNAL)}")
    driver = (bed.state() or {}).get("driver", "nvidia")
    if driver != "example":
        raise DraconfError(f"test bed {bed.name!r} runs the {driver} driver; faults from outside "
                           "the driver are made on a `--driver example` bed (the NVIDIA bed has "
                           "them built in: `draconf testbed up --fault NAME`)")
    if not bed.is_up:
        raise DraconfError(f"test bed {bed.name!r} is not up")


def apply(bed, fault: str, timeout: float = 60) -> None:
    """Break the running bed ``bed`` with ``fault``, from outside the driver."""
    validate(bed, fault)
    api = connect(bed.kubeconfig)
    if fault == "missing-deviceclass":
        saved = api.api_client.sanitize_for_serialization(
            api.resource.read_device_class(example_driver.DEVICE_CLASS))
        meta = saved["metadata"]
        saved["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if meta.get(k)}
        (bed.dir / SAVED).write_text(json.dumps({"deviceClass": saved}))
        api.resource.delete_device_class(example_driver.DEVICE_CLASS)
    elif fault == "no-resourceslices":
        api.apps.patch_namespaced_daemon_set(example_driver.PLUGIN_DAEMONSET, example_driver.NAMESPACE,
                                             {"spec": {"template": {"spec": {"nodeSelector": NO_NODE}}}})
        waits.wait_until("the kubelet plugin's pods to be gone", lambda: _plugin_pods(api),
                         lambda pods: not pods, timeout=timeout, interval=0.5,
                         describe=lambda pods: ", ".join(pods))
        api.resource.delete_collection_resource_slice(field_selector=f"spec.driver={example_driver.DRIVER}")
    elif fault == "quota-not-enforced":
        bed.restart_apiserver(enforce_quota=False)
        wait_control_plane_acts(bed, timeout=max(timeout, 90))
    elif fault == "gpu-nodes-tainted":
        for node in gpu_nodes(bed):
            taints = [t.to_dict() for t in api.core.read_node(node).spec.taints or []]
            api.core.patch_node(node, {"spec": {"taints": [*taints, GPU_NODE_TAINT]}})


def restore(bed, fault: str, timeout: float = 90) -> None:
    """Mend what ``apply`` broke and wait until the bed is healthy again."""
    validate(bed, fault)
    api = connect(bed.kubeconfig)
    if fault == "missing-deviceclass":
        path = bed.dir / SAVED
        if not path.exists():
            raise DraconfError(f"nothing saved to restore DeviceClass {example_driver.DEVICE_CLASS} from")
        try:
            api.resource.create_device_class(json.loads(path.read_text())["deviceClass"])
        except ApiException as err:
            if err.status != 409:
                raise
        path.unlink()
    elif fault == "no-resourceslices":
        ds = api.apps.read_namespaced_daemon_set(example_driver.PLUGIN_DAEMONSET, example_driver.NAMESPACE)
        if ds.spec.template.spec.node_selector:
            api.apps.patch_namespaced_daemon_set(
                example_driver.PLUGIN_DAEMONSET, example_driver.NAMESPACE,
                [{"op": "remove", "path": "/spec/template/spec/nodeSelector"}])
    elif fault == "quota-not-enforced":
        bed.restart_apiserver(enforce_quota=True)
        wait_control_plane_acts(bed, timeout)
    elif fault == "gpu-nodes-tainted":
        for node in gpu_nodes(bed):
            taints = [t.to_dict() for t in api.core.read_node(node).spec.taints or []]
            kept = [t for t in taints if (t["key"], t["effect"]) != (GPU_NODE_TAINT["key"], GPU_NODE_TAINT["effect"])]
            if kept != taints:
                api.core.patch_node(node, {"spec": {"taints": kept or None}})
    wait_healthy(bed, timeout)


def gpu_nodes(bed) -> list[str]:
    """The nodes the driver runs on: the bed's real nodes (the chart keeps it off KWOK nodes)."""
    return sorted(bed.state().get("real_nodes", {}))


def _plugin_pods(api) -> list[str]:
    return [p.metadata.name for p in api.core.list_namespaced_pod(
        example_driver.NAMESPACE, label_selector=example_driver.PLUGIN_SELECTOR).items]


def problems(bed) -> list[str]:
    """What keeps the bed from being the healthy example bed (empty when it is)."""
    api = connect(bed.kubeconfig)
    found = []
    if example_driver.DEVICE_CLASS not in {c.metadata.name for c in api.resource.list_device_class().items}:
        found.append(f"DeviceClass {example_driver.DEVICE_CLASS} missing")
    nodes = gpu_nodes(bed)
    ds = api.apps.read_namespaced_daemon_set(example_driver.PLUGIN_DAEMONSET, example_driver.NAMESPACE)
    if ds.spec.template.spec.node_selector:
        found.append(f"plugin DaemonSet has nodeSelector {ds.spec.template.spec.node_selector}")
    status = ds.status
    if (status.number_ready or 0) != len(nodes) or (status.updated_number_scheduled or 0) != len(nodes):
        found.append(f"plugin DaemonSet {status.number_ready or 0}/{len(nodes)} ready, "
                     f"{status.updated_number_scheduled or 0} updated")
    published = {s.spec.node_name for s in api.resource.list_resource_slice().items
                 if s.spec.driver == example_driver.DRIVER and s.spec.devices}
    if missing := sorted(set(nodes) - published):
        found.append(f"no devices published on {', '.join(missing)}")
    for node in api.core.list_node().items:
        if any(t.key == GPU_NODE_TAINT["key"] for t in node.spec.taints or []):
            found.append(f"node {node.metadata.name} tainted {GPU_NODE_TAINT['key']}")
    pid = bed.state()["processes"]["kube-apiserver"]["pid"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    if not any(a.startswith("--enable-admission-plugins=") and "ResourceQuota" in a.split("=", 1)[1].split(",")
               for a in argv):
        found.append("kube-apiserver runs without the ResourceQuota admission plugin")
    return found


def wait_healthy(bed, timeout: float = 90) -> None:
    waits.wait_until(f"test bed {bed.name!r} to be healthy again", lambda: problems(bed),
                     lambda found: not found, timeout=timeout, interval=1,
                     describe=lambda found: "; ".join(found))


def wait_control_plane_acts(bed, timeout: float = 90) -> float:
    """After kube-apiserver restarted: wait until a GPU pod runs again; return the seconds.

    A restarted API server refuses requests (403) until its authorizers' caches are filled, and
    the controllers', scheduler's and kubelets' watches that met those refusals back off for up
    to about 30 s; meanwhile a pod's claim from a template is not made ("resourceclaimtemplate
    not found") and the run would blame a healthy cluster.  So a probe pod with a claim from a
    template must be placed, prepared by the driver and Running before the bed counts as up:
    the resourceclaim controller, the scheduler's DRA view, the kubelet and the plugin all
    acting again."""
    from draconf import namespaces
    from draconf.pods import Pod
    from draconf.testbed import images
    started = time.monotonic()
    api = connect(bed.kubeconfig)
    ns = namespaces.create(api, namespaces.RunId("selftest"), "control-plane-probe", sa_timeout=timeout)
    try:
        api.resource.create_namespaced_resource_claim_template(ns, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpu"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": example_driver.DEVICE_CLASS}}]}}}})
        # A fresh pod every few seconds: the resourceclaim controller retries a pod whose claim
        # it could not make with a growing per-pod delay (10 s, 20 s, 40 s, ...), which would
        # measure that delay rather than when the controllers see new objects again.
        deadline = time.monotonic() + timeout
        for attempt in range(1, 1000):
            name = f"probe-{attempt}"
            api.core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "probe", "image": images.WORKLOAD_REF, "command": ["sleep", "1d"],
                                "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]}})
            try:
                waits.wait_until("a GPU pod to run after kube-apiserver restarted",
                                 lambda: [Pod.read(api, ns, f"probe-{i}") for i in range(1, attempt + 1)],
                                 lambda pods: any(p.is_running for p in pods),
                                 timeout=max(0.0, min(PROBE_EVERY, deadline - time.monotonic())),
                                 describe=lambda pods: "; ".join(p.summary() for p in pods))
                break
            except waits.WaitTimeout as err:
                if time.monotonic() >= deadline:
                    raise DraconfError(f"test bed {bed.name!r}: no GPU pod ran within {timeout:.0f}s of "
                                       f"kube-apiserver's restart: {err}") from None
    finally:
        namespaces.delete(api, ns, wait=60)
    return time.monotonic() - started
