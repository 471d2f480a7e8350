"""Upgrade the bed's simulated NVIDIA driver as a chart upgrade would, well or badly.

``draconf testbed upgrade [--driver-version V] [--bad KIND]`` is what the upgrade gate
(:mod:`draconf.baseline`) is tested against end to end.  A good upgrade installs a new driver
version on every real GPU node (the node's NVML data, as a new containerized driver would) and
rolls the kubelet-plugin DaemonSet: the plugin pods restart and republish their slices with the
new ``driverVersion``.  A bad one also does one of :data:`BAD_UPGRADES`, each a regression the
gate must name exactly.

Example::

    upgrade(bed, driver_version="580.105.08", bad="gpus-lost", log=print)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from draconf import waits
from draconf.errors import DraconfError
from draconf.testbed import node_config, nvidia

#: Bad upgrades, and what each does (what a baseline comparison must then report).
BAD_UPGRADES = {
    "attribute-renamed": "the new plugin publishes devices without productName (renamed upstream)",
    "gpus-lost": "one GPU node comes back from the upgrade with one GPU fewer",
    "deviceclass-changed": "the new chart renders gpu.nvidia.com with a narrower selector",
}
VERSION_ANNOTATION = "draconf.dev/driver-version"
#: The selector clause the bad chart adds to gpu.nvidia.com.
NARROWER_CLAUSE = " && device.attributes['gpu.nvidia.com'].brand == 'Nvidia'"


def next_version(version: str) -> str:
    """A later driver release on the same branch.

    >>> next_version("580.95.05")
    '580.96.05'
    """
    major, minor, *rest = version.split(".")
    return ".".join([major, str(int(minor) + 1), *rest])


def upgrade(bed, driver_version: str | None = None, bad: str | None = None, log=print,
            timeout: float = 120) -> str:
    """Roll the bed's driver to ``driver_version`` (default: the next one); return it."""
    from draconf.kube import connect
    if bad is not None and bad not in BAD_UPGRADES:
        raise DraconfError(f"--bad must be one of {', '.join(BAD_UPGRADES)}, not {bad!r}")
    state = bed.state()
    if not bed.is_up or state is None:
        raise DraconfError(f"test bed {bed.name!r} is not up; start it with `draconf testbed up`")
    if state.get("driver", "nvidia") != "nvidia":
        hint = ("give --driver with the release to upgrade to" if str(state.get("driver")).startswith("nvidia-")
                else "upgrade its chart with helm instead")
        raise DraconfError("--driver-version and --bad roll the simulated NVIDIA driver; this bed runs "
                           f"{state.get('driver')} ({hint})")
    roots = {name: node_config.NodePaths(Path(node["dir"])).driver_root
             for name, node in sorted(state.get("real_nodes", {}).items())}
    records = {name: root / nvidia.NVML_DATA for name, root in roots.items() if (root / nvidia.NVML_DATA).is_file()}
    gpu_nodes = [name for name, path in records.items() if json.loads(path.read_text())["gpus"]]
    if not gpu_nodes:
        raise DraconfError("upgrade needs real GPU nodes (the simulated driver on KWOK nodes is "
                           "the bed's agent, which is not upgraded); start the default fleet")
    current = json.loads(records[gpu_nodes[0]].read_text())["driverVersion"]
    version = driver_version or next_version(current)
    for name in gpu_nodes:
        data = json.loads(records[name].read_text())
        data["driverVersion"] = version
        if bad == "gpus-lost" and name == gpu_nodes[0]:
            lost = data["gpus"].pop()
            (roots[name] / "dev" / f"nvidia{lost['minor']}").unlink(missing_ok=True)
            log(f"{name}: GPU {lost['minor']} ({lost['uuid']}) lost")
        records[name].write_text(json.dumps(data, indent=2))
    api = connect(bed.kubeconfig)
    if bad == "deviceclass-changed":
        cls = api.resource.read_device_class("gpu.nvidia.com")
        expression = cls.spec.selectors[0].cel.expression + NARROWER_CLAUSE
        api.resource.patch_device_class("gpu.nvidia.com", {"spec": {"selectors": [{"cel": {"expression": expression}}]}})
    ds = api.apps.read_namespaced_daemon_set(nvidia.PLUGIN_DAEMONSET, nvidia.PLUGIN_NAMESPACE)
    env = {e.name: e.value for e in ds.spec.template.spec.containers[0].env or []}
    faults = [f for f in (env.get("SIMULATE_FAULTS") or "").split(",") if f]
    if bad == "attribute-renamed" and "attribute-drift" not in faults:
        faults.append("attribute-drift")
    container = {"name": ds.spec.template.spec.containers[0].name,
                 "env": [{"name": "SIMULATE_FAULTS", "value": ",".join(faults)}]}
    api.apps.patch_namespaced_daemon_set(nvidia.PLUGIN_DAEMONSET, nvidia.PLUGIN_NAMESPACE, {"spec": {"template": {
        "metadata": {"annotations": {VERSION_ANNOTATION: version}}, "spec": {"containers": [container]}}}})
    log(f"rolling {nvidia.PLUGIN_NAMESPACE}/{nvidia.PLUGIN_DAEMONSET} to driver {version}"
        + (f" (bad upgrade: {BAD_UPGRADES[bad]})" if bad else ""))
    _wait_rolled_out(api, gpu_nodes, nvidia.semver(version), timeout)
    return version


def rolled_out(ds) -> bool:
    """The DaemonSet's controller has seen its latest spec and every pod it wants is updated
    and ready (what ``kubectl rollout status`` waits for)."""
    s = ds.status
    return (s.observed_generation == ds.metadata.generation
            and s.updated_number_scheduled == s.desired_number_scheduled == s.number_ready)


def _wait_rolled_out(api, nodes: list[str], version: str, timeout: float) -> None:
    """Every plugin pod replaced and ready, and every node's slice republished with ``version``."""
    started = time.monotonic()

    def observe():
        ds = api.apps.read_namespaced_daemon_set(nvidia.PLUGIN_DAEMONSET, nvidia.PLUGIN_NAMESPACE)
        rolled = rolled_out(ds)
        published = {sl.spec.node_name for sl in api.resource.list_resource_slice().items
                     if sl.spec.driver == nvidia.DRIVER and sl.metadata.creation_timestamp
                     and any((d.attributes or {}).get("driverVersion") is not None
                             and d.attributes["driverVersion"].version == version for d in sl.spec.devices or [])}
        return rolled, published

    waits.wait_until(
        f"the driver upgrade to roll out ({len(nodes)} GPU nodes republishing {version})", observe,
        lambda seen: seen[0] and set(nodes) <= seen[1], timeout=timeout,
        describe=lambda seen: f"DaemonSet rolled: {seen[0]}; republished: {sorted(seen[1]) or 'none'} "
                              f"after {time.monotonic() - started:.0f}s")
