"""What "the test bed is ready" means, checked through the API: every node Ready, every GPU
node's slice published, the DeviceClasses present and a kubelet-plugin pod on each GPU node
(each unless a fault removes it on purpose)."""

from __future__ import annotations

import time

from kubernetes.client.exceptions import ApiException

from draconf import waits
from draconf.errors import DraconfError
from draconf.kube import connect


def observe(api, inventory, faults, driver: str = "nvidia") -> dict[str, tuple[bool, str]]:
    """Check name -> (satisfied, what was seen), for the bed's ``driver`` (nvidia, example or
    an upstream release, nvidia-v<version>)."""
    nodes = api.core.list_node().items
    ready = [n.metadata.name for n in nodes
             if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])]
    want_nodes = len(inventory.nodes)
    slices = api.resource.list_resource_slice().items
    gpu_nodes = {n.name for n in inventory.gpu_nodes}
    published = {s.spec.node_name for s in slices if s.spec.devices}
    want_slices = set() if "no-resourceslices" in faults else gpu_nodes
    if "plugin-unhealthy" in faults:
        # A real plugin that crashes at start never publishes; the KWOK agent still does.
        want_slices -= {n.name for n in inventory.real_nodes}
    classes = {c.metadata.name for c in api.resource.list_device_class().items}
    if driver == "example":
        from draconf.testbed import example_driver
        want_classes = {example_driver.DEVICE_CLASS}
        plugin_namespace, plugin_selector = example_driver.NAMESPACE, example_driver.PLUGIN_SELECTOR
    elif driver.startswith("nvidia-"):
        from draconf.testbed import upstream_nvidia
        release = upstream_nvidia.RELEASES[upstream_nvidia.DRIVER_CHOICES[driver]]
        # The classes the release's chart renders with GPUs on (deviceclass-*.yaml).
        want_classes = {"gpu.nvidia.com", "mig.nvidia.com"}
        plugin_namespace, plugin_selector = release.namespace, upstream_nvidia.PLUGIN_SELECTOR
    else:
        want_classes = {"mig.nvidia.com", "vfio.gpu.nvidia.com"}
        if "missing-deviceclass" not in faults:
            want_classes.add("gpu.nvidia.com")
        plugin_namespace, plugin_selector = "gpu-operator", "app=nvidia-dra-driver-kubelet-plugin"
    try:
        plugin_pods = api.core.list_namespaced_pod(plugin_namespace, label_selector=plugin_selector).items
    except ApiException:
        plugin_pods = []
    # Ready, not just Running: with the GPUCluster's state fixed by a fault (gpu-cluster-not-ready)
    # nothing else waits for the plugin, and a preflight run before it is Ready blames it.  A
    # crash-looping plugin (plugin-unhealthy) runs between its crashes but is never Ready.
    def up(pod) -> bool:
        if pod.status.phase != "Running":
            return False
        return "plugin-unhealthy" in faults or any(
            c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    running = {p.spec.node_name for p in plugin_pods if up(p)}
    # Why a plugin pod does not run, in the kubelet's words (a bad image, a failing mount ...).
    stuck = sorted({f"{s.state.waiting.reason}: {(s.state.waiting.message or '')[:200]}"
                    for p in plugin_pods if p.status.phase != "Running"
                    for s in p.status.container_statuses or [] if s.state and s.state.waiting
                    and s.state.waiting.reason not in (None, "ContainerCreating", "PodInitializing")})
    checks = {
        "nodes Ready": (len(ready) >= want_nodes, f"{len(ready)}/{want_nodes}"),
        "ResourceSlices published": (want_slices <= published, f"{len(published & gpu_nodes)}/{len(want_slices)}"),
        "DeviceClasses present": (want_classes <= classes, ", ".join(sorted(classes)) or "none"),
        "kubelet plugin on GPU nodes": (gpu_nodes <= running, f"{len(running & gpu_nodes)}/{len(gpu_nodes)}"
                                        + (f" ({'; '.join(stuck)})" if stuck else "")),
    }
    if driver == "nvidia":
        try:
            gpucluster = (api.custom.get_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters",
                                                               "gpu-cluster").get("status") or {}).get("state")
        except ApiException:
            gpucluster = None
        want_gpucluster = "notReady" if {"plugin-unhealthy", "gpu-cluster-not-ready"} & set(faults) else "ready"
        checks = {"GPUCluster state": (gpucluster == want_gpucluster, str(gpucluster)), **checks}
    return checks


def wait_ready(bed, inventory, faults, deadline: float, log, driver: str = "nvidia") -> None:
    """Poll :func:`observe` until every check holds; a bed process that died ends it at once
    (``bed.check_alive`` raises), and running out of time names the checks still unmet."""
    api = connect(bed.kubeconfig)

    def look() -> dict[str, tuple[bool, str]]:
        bed.check_alive()
        try:
            return observe(api, inventory, faults, driver)
        except ApiException as err:
            return {"API": (False, f"{err.status} {err.reason}")}

    def unmet(seen: dict[str, tuple[bool, str]]) -> str:
        return "; ".join(f"{k}: {v}" for k, (ok, v) in seen.items() if not ok)

    try:
        waits.wait_until(f"test bed {bed.name!r} to be ready", look,
                         lambda seen: all(ok for ok, _ in seen.values()),
                         timeout=max(0.0, deadline - time.monotonic()), describe=unmet, interval=0.25,
                         progress_every=5, progress=lambda line: log(f"  {line}"))
    except waits.WaitTimeout as err:
        raise DraconfError(f"test bed {bed.name!r} did not become ready in time ({err.last_observed}); "
                           f"logs in {bed.logs}") from None
