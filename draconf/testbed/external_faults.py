"""Faults an admin produces from outside the driver, on a running bed of a driver this project
did not write: dra-example-driver (``--driver example``) or NVIDIA's own release
(``--driver nvidia-v0.4.0``, ``nvidia-v25.12.0``).

The bed's own faults (``draconf testbed up --fault``) act inside the simulated NVIDIA driver.
A driver this project did not write can only be broken the way a cluster admin (or the
hardware) breaks a cluster, through the API, the control plane's flags and the node, and then
mended again:

- ``missing-deviceclass``: the chart's DeviceClass deleted (kept in the bed's directory);
- ``no-resourceslices``: the kubelet plugin's DaemonSet given a nodeSelector no node matches
  (its pods go away) and the driver's ResourceSlices deleted;
- ``quota-not-enforced``: kube-apiserver restarted without the ResourceQuota admission plugin;
- ``gpu-nodes-tainted``: every GPU node tainted ``dedicated=gpu-reserved:NoSchedule`` (the taint
  of the bed fault of that name);
- ``plugin-crashloop`` (NVIDIA's release only): the chart upgraded with a misspelt feature gate
  (``featureGates.MPSSuport``); the release's plugin refuses an unknown gate at start, so the
  DaemonSet's new pods crash-loop while its rollout stalls;
- ``sharing-gates-off`` (NVIDIA's release only): the chart upgraded with
  ``featureGates.TimeSlicingSettings`` and ``MPSSupport`` false, as the release runs by
  default: its plugin runs, and refuses TimeSlicing and MPS configs;
- ``gpu-fallen-off-bus`` (NVIDIA's release only): the last GPU of the first GPU node falls off
  the bus, through NVIDIA's mock NVML's own runtime control: a ``failure`` of mode
  ``fallen_off_bus`` for that device in ``overrides.yaml`` beside the node's mock config, which
  the library re-reads within a second (k8s-test-infra pkg/gpu/mocknvml/README.md, "Runtime
  control"); from its next query on NVML answers GPU_IS_LOST for it, as for real hardware;
- ``cdi-spec-dirs-wrong`` (NVIDIA's release only): one node's containerd told to read CDI specs
  from /etc/cdi only, not where the driver writes them;
- ``cdi-spec-removed``, ``cdi-spec-edited`` (NVIDIA's release only): something on one node
  deletes, or rewrites with the neighbouring GPU's device node, each claim's CDI spec once the
  driver has written it (:mod:`draconf.testbed.cdi_tamper`, a process of the bed's own).

``apply(bed, fault)`` breaks a healthy bed, ``restore(bed, fault)`` mends it and waits until it
is healthy again (DeviceClass back, every node's plugin Ready and its pool published, quota
enforced, no taint, no GPU failing).  All go through the bed's real API server as ``kubectl``
would, or through the node's own files as the hardware would.

The names the example driver shares are the bed faults' own, so the matrix judges them by the
same expectations:

>>> from draconf.testbed.faults import FAULTS
>>> set(EXTERNAL) <= set(FAULTS)
True
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes.client.exceptions import ApiException

from draconf import waits
from draconf.errors import DraconfError
from draconf.kube import connect
from draconf.plugins import PluginPod, feature_gates_of
from draconf.testbed import example_driver, hostsys, upgrade, upstream_chart, upstream_nvidia
from draconf.testbed.faults import GPU_NODE_TAINT
from draconf.testbed.nvidia import ONE_NODE
from draconf.testbed.node_config import NodePaths

EXTERNAL: dict[str, str] = {
    "missing-deviceclass": "the driver's GPU DeviceClass deleted",
    "no-resourceslices": "the kubelet plugin's DaemonSet selects no node; the driver's ResourceSlices deleted",
    "quota-not-enforced": "kube-apiserver restarted without the ResourceQuota admission plugin",
    "gpu-nodes-tainted": "the GPU nodes tainted {key}={value}:{effect}".format(**GPU_NODE_TAINT),
}
#: Faults only a bed of NVIDIA's release can be given: through its chart, and through the mock
#: NVML under it, which can be told a GPU is gone.
RELEASE_FAULTS: dict[str, str] = {
    "gpu-fallen-off-bus": "the last GPU of the first GPU node fallen off the bus (mock NVML overrides.yaml)",
    "plugin-crashloop": "the chart upgraded with a misspelt feature gate: the new plugin pods crash at start",
    "sharing-gates-off": "the chart upgraded with its GPU sharing gates (TimeSlicingSettings, MPSSupport) set false",
    "cdi-spec-dirs-wrong": f"the containerd of {ONE_NODE} reads CDI specs from /etc/cdi only, not /var/run/cdi "
                           "where the driver writes them (cdi_spec_dirs; containerd restarted)",
    "cdi-spec-removed": f"something on {ONE_NODE} deletes each claim's CDI spec as soon as the driver has "
                        "written it (after prepare, before the container is created)",
    "cdi-spec-edited": f"something on {ONE_NODE} rewrites each claim's CDI spec once the driver has written it, "
                       "each GPU's device node swapped for its neighbour's",
}
#: The faults that are a process on the node tampering with the driver's CDI specs
#: (:mod:`draconf.testbed.cdi_tamper`), and its mode for each.
TAMPERED = {"cdi-spec-removed": "removed", "cdi-spec-edited": "edited"}
#: The bed's name for that process (``down`` stops it with the rest of the bed).
TAMPER_PROCESS = "fault/cdi-tamper"
#: A value an admin could set by a typo (MPSSupport misspelt): a gate the release does not know,
#: which its plugin refuses at start ("unrecognized feature gate").
BAD_CHART_VALUES = {"featureGates": {"MPSSuport": True}}
#: The gates GPU sharing needs, switched off as an admin would who never asked for sharing (the
#: release's defaults: both Alpha, off).
SHARING_OFF_VALUES = {"featureGates": {gate: False for gate in upstream_nvidia.FEATURE_GATES}}


@dataclass(frozen=True)
class DriverObjects:
    """Where a driver's objects are: what the faults act on."""
    device_class: str
    driver: str
    namespace: str
    plugin_daemonset: str
    plugin_selector: str
    #: NVIDIA's release, from its chart over NVIDIA's mock NVML (the RELEASE_FAULTS apply)
    nvidia_release: bool = False


def driver_objects(driver: str, state: dict | None = None) -> DriverObjects:
    """The objects of the bed's ``driver`` (``example`` or one of NVIDIA's releases), placed
    as the bed's ``state`` says (an upgraded release keeps its predecessor's names).

    >>> driver_objects("nvidia-v0.4.0").plugin_daemonset
    'dra-driver-nvidia-gpu-kubelet-plugin'
    """
    if driver == "example":
        return DriverObjects(example_driver.DEVICE_CLASS, example_driver.DRIVER, example_driver.NAMESPACE,
                             example_driver.PLUGIN_DAEMONSET, example_driver.PLUGIN_SELECTOR)
    release = upstream_nvidia.installed_release({**(state or {}), "driver": driver})
    # The chart names its DaemonSet after itself (or its nameOverride), whatever the release
    # is called (templates/kubeletplugin.yaml: <name>-kubelet-plugin); the DeviceClass is the
    # driver's name (templates/deviceclass-gpu.yaml).
    return DriverObjects("gpu.nvidia.com", "gpu.nvidia.com", release.namespace,
                         f"{release.object_prefix}-kubelet-plugin", upstream_nvidia.PLUGIN_SELECTOR,
                         nvidia_release=True)


def faults_for(driver: str) -> dict[str, str]:
    """The faults a bed of ``driver`` can be given from outside it."""
    return {**EXTERNAL, **(RELEASE_FAULTS if driver_objects(driver).nvidia_release else {})}

#: The nodeSelector that no node matches (an admin's typo in a label has the same effect).
NO_NODE = {"draconf.dev/no-such-node": "true"}
SAVED = "external-faults.json"
#: Seconds between the probe pods of ``wait_control_plane_acts``.
PROBE_EVERY = 5


def validate(bed, fault: str) -> DriverObjects:
    """The bed's driver objects, once ``fault`` is one this bed can be given and the bed is up."""
    driver = (bed.state() or {}).get("driver", "nvidia")
    every = {**EXTERNAL, **RELEASE_FAULTS}
    if fault not in every:
        raise DraconfError(f"{fault!r} is not a fault made from outside the driver; choose from: "
                           f"{', '.join(every)}")
    if driver == "nvidia":
        raise DraconfError(f"test bed {bed.name!r} runs the {driver} driver; faults from outside "
                           "the driver are made on a `--driver example` or NVIDIA release bed (the "
                           "simulated bed has them built in: `draconf testbed up --fault NAME`)")
    if fault not in faults_for(driver):
        raise DraconfError(f"{fault!r} is made on a bed of NVIDIA's release (`--driver nvidia-v0.4.0`, "
                           f"its chart over NVIDIA's mock NVML); test bed {bed.name!r} runs {driver}")
    if not bed.is_up:
        raise DraconfError(f"test bed {bed.name!r} is not up")
    return driver_objects(driver, bed.state())


def apply(bed, fault: str, timeout: float = 60) -> None:
    """Break the running bed ``bed`` with ``fault``, from outside the driver."""
    objs = validate(bed, fault)
    api = connect(bed.kubeconfig)
    if fault == "missing-deviceclass":
        saved = api.api_client.sanitize_for_serialization(api.resource.read_device_class(objs.device_class))
        meta = saved["metadata"]
        saved["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if meta.get(k)}
        (bed.dir / SAVED).write_text(json.dumps({"deviceClass": saved}))
        api.resource.delete_device_class(objs.device_class)
    elif fault == "no-resourceslices":
        api.apps.patch_namespaced_daemon_set(objs.plugin_daemonset, objs.namespace,
                                             {"spec": {"template": {"spec": {"nodeSelector": NO_NODE}}}})
        waits.wait_until("the kubelet plugin's pods to be gone", lambda: _plugin_pods(api, objs),
                         lambda pods: not pods, timeout=timeout, interval=0.5,
                         describe=lambda pods: ", ".join(pods))
        api.resource.delete_collection_resource_slice(field_selector=f"spec.driver={objs.driver}")
    elif fault == "quota-not-enforced":
        bed.restart_apiserver(enforce_quota=False)
        wait_control_plane_acts(bed, timeout=max(timeout, 90))
    elif fault == "gpu-nodes-tainted":
        for node in gpu_nodes(bed):
            taints = [t.to_dict() for t in api.core.read_node(node).spec.taints or []]
            api.core.patch_node(node, {"spec": {"taints": [*taints, GPU_NODE_TAINT]}})
    elif fault == "plugin-crashloop":
        _upgrade_chart(bed, api, objs, BAD_CHART_VALUES)
        # Made once the rollout is through: every pod of the new spec, none Ready.
        waits.wait_until("the upgraded plugin pods to replace the old ones", lambda: _rollout(api, objs),
                         lambda r: r[0] >= r[1] and not r[2], timeout=timeout, interval=1,
                         describe=lambda r: f"{r[0]}/{r[1]} updated, {r[2]} ready")
        # A crash loop is made once each new pod has crashed: before that a pod is only "not
        # Ready yet", and the suite would read a plugin that is still starting.
        waits.wait_until("every upgraded plugin pod to have crashed", lambda: _crashed(api, objs),
                         lambda pods: bool(pods) and all(pods.values()), timeout=timeout, interval=1,
                         describe=lambda pods: ", ".join(f"{n} {'crashed' if c else 'not yet'}"
                                                         for n, c in pods.items()) or "no pods")
    elif fault == "sharing-gates-off":
        _upgrade_chart(bed, api, objs, SHARING_OFF_VALUES)
        # Made once every plugin pod runs the new spec and is Ready: the driver runs, without
        # sharing.  rolled_out also waits for the controller to see the new spec: right after
        # the replace, the counts are still those of the old one.
        waits.wait_until("the upgraded plugin pods to be Ready",
                         lambda: api.apps.read_namespaced_daemon_set(objs.plugin_daemonset, objs.namespace),
                         upgrade.rolled_out, timeout=timeout, interval=1,
                         describe=lambda ds: f"{ds.status.updated_number_scheduled or 0}/"
                                             f"{ds.status.desired_number_scheduled or 0} updated, "
                                             f"{ds.status.number_ready or 0} ready")
    elif fault == "gpu-fallen-off-bus":
        node, index = fallen_gpu(bed)
        _update_overrides(bed, node, lambda doc: doc.setdefault("devices", {}).setdefault(str(index), {})
                          .update(failure={"mode": "fallen_off_bus"}))
    elif fault == "cdi-spec-dirs-wrong":
        _set_cdi_dirs(bed, ONE_NODE, wrong=True, timeout=timeout)
    elif fault in TAMPERED:
        _start_tamper(bed, ONE_NODE, TAMPERED[fault], timeout)


def restore(bed, fault: str, timeout: float = 90) -> None:
    """Mend what ``apply`` broke and wait until the bed is healthy again."""
    objs = validate(bed, fault)
    api = connect(bed.kubeconfig)
    if fault == "missing-deviceclass":
        path = bed.dir / SAVED
        if not path.exists():
            raise DraconfError(f"nothing saved to restore DeviceClass {objs.device_class} from")
        try:
            api.resource.create_device_class(json.loads(path.read_text())["deviceClass"])
        except ApiException as err:
            if err.status != 409:
                raise
        path.unlink()
    elif fault == "no-resourceslices":
        ds = api.apps.read_namespaced_daemon_set(objs.plugin_daemonset, objs.namespace)
        if ds.spec.template.spec.node_selector:
            api.apps.patch_namespaced_daemon_set(
                objs.plugin_daemonset, objs.namespace,
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
    elif fault in ("plugin-crashloop", "sharing-gates-off"):
        _upgrade_chart(bed, api, objs, None)
    elif fault == "gpu-fallen-off-bus":
        for node in gpu_nodes(bed):
            _update_overrides(bed, node, _drop_failures)
    elif fault == "cdi-spec-dirs-wrong":
        for node in cdi_dirs_wrong_nodes(bed):
            _set_cdi_dirs(bed, node, wrong=False, timeout=timeout)
    elif fault in TAMPERED:
        bed.stop_process(TAMPER_PROCESS)
    wait_healthy(bed, timeout)


#: The mark of a node's containerd config edited by the fault cdi-spec-dirs-wrong: its
#: ``cdi_spec_dirs`` line, narrowed to /etc/cdi, keeps what it was after "was: ".  (containerd 2
#: cannot turn CDI off: it ignores ``enable_cdi``, plugins/cri/runtime/plugin.go: "CDI is always
#: enabled"; the admin's mistake left is a spec directory list without the driver's.)
CDI_DIRS_MARK = "# draconf external fault cdi-spec-dirs-wrong; was: "
WRONG_CDI_DIRS = 'cdi_spec_dirs = ["/etc/cdi"]'


def _containerd_config(bed, node: str) -> Path:
    return NodePaths(Path(bed.state()["real_nodes"][node]["dir"])).etc / "containerd.toml"


def cdi_dirs_wrong_nodes(bed) -> list[str]:
    """The real nodes whose containerd config the fault narrowed."""
    return sorted(node for node in (bed.state() or {}).get("real_nodes", {})
                  if CDI_DIRS_MARK in _containerd_config(bed, node).read_text())


def _containerd_pid(config: Path) -> int | None:
    """The containerd running with ``config`` (the node's), from /proc."""
    def runs_it(cmdline: bytes) -> bool:
        argv = cmdline.split(b"\0")
        return argv[0].endswith(b"/containerd") and str(config).encode() in argv
    return next(iter(hostsys.pids_whose_cmdline(runs_it)), None)


def _set_cdi_dirs(bed, node: str, wrong: bool, timeout: float) -> None:
    """Edit ``node``'s containerd config as an admin would (``wrong``: its ``cdi_spec_dirs``
    without /var/run/cdi; else the line it was) and restart containerd there (the node's
    supervisor restarts it on SIGHUP, as ``systemctl restart containerd``); wait until the new
    containerd runs and the node is Ready."""
    config = _containerd_config(bed, node)
    lines = config.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("cdi_spec_dirs"))
    indent, current = lines[at][:len(lines[at]) - len(lines[at].lstrip())], lines[at].strip()
    original = current.split(CDI_DIRS_MARK, 1)[1] if CDI_DIRS_MARK in current else current
    lines[at] = indent + (f"{WRONG_CDI_DIRS}  {CDI_DIRS_MARK}{original}" if wrong else original)
    config.write_text("\n".join(lines) + "\n")
    before = _containerd_pid(config)
    os.kill(bed.state()["processes"][f"node/{node}"]["pid"], signal.SIGHUP)
    api = connect(bed.kubeconfig)

    def ready(state) -> bool:
        pid, node_ready = state
        return pid is not None and pid != before and node_ready

    def observe():
        conditions = api.core.read_node(node).status.conditions or []
        return _containerd_pid(config), any(c.type == "Ready" and c.status == "True" for c in conditions)

    waits.wait_until(f"containerd of {node} to restart with its CDI spec directories "
                     f"{'narrowed' if wrong else 'restored'}", observe, ready,
                     timeout=timeout, interval=0.5,
                     describe=lambda s: f"containerd pid {s[0]} (was {before}), node Ready: {s[1]}")


def _start_tamper(bed, node: str, mode: str, timeout: float) -> None:
    """Start :mod:`draconf.testbed.cdi_tamper` on ``node``'s CDI directory (what the node mounts
    at /run/cdi, where the release writes its specs), and wait until it watches."""
    cdi_dir = Path(bed.state()["real_nodes"][node]["dir"]) / "cdi"
    bed.start_process(TAMPER_PROCESS, [sys.executable, "-m", "draconf.testbed.cdi_tamper", mode, str(cdi_dir)],
                      marker="draconf.testbed.cdi_tamper")
    waits.wait_until(f"the CDI spec tamperer on {node} to watch {cdi_dir}", lambda: bed.log_tail(TAMPER_PROCESS, 5),
                     lambda tail: "cdi_tamper:" in tail, timeout=timeout, interval=0.2,
                     describe=lambda tail: tail.strip() or "no output yet")


def tampering(bed) -> str | None:
    """The mode of the CDI spec tamperer running on the bed, or None."""
    proc = ((bed.state() or {}).get("processes") or {}).get(TAMPER_PROCESS)
    if proc is None or not bed.processes().get(TAMPER_PROCESS):
        return None
    argv = Path(f"/proc/{proc['pid']}/cmdline").read_bytes().decode(errors="replace").split("\0")
    return next((mode for mode in TAMPERED.values() if mode in argv), "?")


def gpu_nodes(bed) -> list[str]:
    """The nodes the driver runs on: the bed's real nodes (the chart keeps it off KWOK nodes)."""
    return sorted(bed.state().get("real_nodes", {}))


def _plugin_pods(api, objs: DriverObjects) -> list[str]:
    return [p.metadata.name for p in api.core.list_namespaced_pod(
        objs.namespace, label_selector=objs.plugin_selector).items]


def _crashed(api, objs: DriverObjects) -> dict[str, bool]:
    """The plugin's pods: whether each has a crashed container."""
    pods = api.core.list_namespaced_pod(objs.namespace, label_selector=objs.plugin_selector).items
    return {p.name: p.crashed_container is not None
            for p in (PluginPod.from_raw(api.api_client.sanitize_for_serialization(raw)) for raw in pods)}


def _rollout(api, objs: DriverObjects) -> tuple[int, int, int]:
    """The plugin DaemonSet's pods: (updated, desired, ready)."""
    st = api.apps.read_namespaced_daemon_set(objs.plugin_daemonset, objs.namespace).status
    return st.updated_number_scheduled or 0, st.desired_number_scheduled or 0, st.number_ready or 0


def _upgrade_chart(bed, api, objs: DriverObjects, changed: dict | None) -> None:
    """``helm upgrade`` of the release with ``changed`` values (None: the bed's own): the chart
    rendered again, its kubelet-plugin DaemonSet replaced; the DaemonSet rolls its pods."""
    _, docs = upstream_chart.render_on_bed(bed, api, changed)
    (plugin,) = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == objs.plugin_daemonset]
    api.apps.replace_namespaced_daemon_set(objs.plugin_daemonset, objs.namespace, plugin)


def _overrides_path(bed, node: str) -> Path:
    """The mock NVML's runtime overrides of ``node``: beside the config.yaml it reads."""
    return NodePaths(Path(bed.state()["real_nodes"][node]["dir"])).driver_root / "config" / "overrides.yaml"


def fallen_gpu(bed) -> tuple[str, int]:
    """The GPU ``gpu-fallen-off-bus`` takes away: the last of the first GPU node (its index in
    the node's mock config, the key of its overrides)."""
    node = gpu_nodes(bed)[0]
    config = yaml.safe_load((_overrides_path(bed, node).parent / "config.yaml").read_text())
    return node, len(config["devices"]) - 1


def _overrides(bed, node: str) -> dict:
    """``overrides.yaml`` of ``node`` as written here and by the nvidia-smi stand-in: JSON."""
    path = _overrides_path(bed, node)
    return json.loads(path.read_text() or "{}") if path.exists() else {}


def _update_overrides(bed, node: str, change) -> None:
    """Read, change and replace ``overrides.yaml`` of ``node`` in one rename, JSON being YAML: the
    bed's nvidia-smi stand-in keeps compute modes there too (gomod/nvml-smi)."""
    path = _overrides_path(bed, node)
    doc = _overrides(bed, node)
    doc.setdefault("version", 1)
    change(doc)
    tmp = path.with_suffix(".draconf-tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.rename(path)


def _drop_failures(doc: dict) -> None:
    for device in (doc.get("devices") or {}).values():
        device.pop("failure", None)


def failing_gpus(bed) -> list[str]:
    """``node/index`` of every GPU a node's mock overrides give a failure."""
    found = []
    for node in gpu_nodes(bed):
        doc = _overrides(bed, node)
        found += [f"{node}/{i}" for i, d in sorted((doc.get("devices") or {}).items()) if d.get("failure")]
    return found


def published_nodes(api, driver: str) -> set[str]:
    """The nodes whose ResourceSlices of ``driver`` hold devices."""
    return {s.spec.node_name for s in api.resource.list_resource_slice().items
            if s.spec.driver == driver and s.spec.devices}


def problems(bed) -> list[str]:
    """What keeps the bed from being the healthy bed of its driver (empty when it is)."""
    api = connect(bed.kubeconfig)
    objs = driver_objects((bed.state() or {}).get("driver", "example"), bed.state())
    found = []
    if objs.device_class not in {c.metadata.name for c in api.resource.list_device_class().items}:
        found.append(f"DeviceClass {objs.device_class} missing")
    nodes = gpu_nodes(bed)
    ds = api.apps.read_namespaced_daemon_set(objs.plugin_daemonset, objs.namespace)
    if ds.spec.template.spec.node_selector:
        found.append(f"plugin DaemonSet has nodeSelector {ds.spec.template.spec.node_selector}")
    status = ds.status
    if (status.observed_generation or 0) < (ds.metadata.generation or 0):
        # Just replaced: its counts are still those of the spec before.
        found.append("plugin DaemonSet's new spec not yet seen by its controller")
    if (status.number_ready or 0) != len(nodes) or (status.updated_number_scheduled or 0) != len(nodes):
        found.append(f"plugin DaemonSet {status.number_ready or 0}/{len(nodes)} ready, "
                     f"{status.updated_number_scheduled or 0} updated")
    if missing := sorted(set(nodes) - published_nodes(api, objs.driver)):
        found.append(f"no devices published on {', '.join(missing)}")
    for node in api.core.list_node().items:
        if any(t.key == GPU_NODE_TAINT["key"] for t in node.spec.taints or []):
            found.append(f"node {node.metadata.name} tainted {GPU_NODE_TAINT['key']}")
    pid = bed.state()["processes"]["kube-apiserver"]["pid"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    if not any(a.startswith("--enable-admission-plugins=") and "ResourceQuota" in a.split("=", 1)[1].split(",")
               for a in argv):
        found.append("kube-apiserver runs without the ResourceQuota admission plugin")
    if objs.nvidia_release:
        containers = api.api_client.sanitize_for_serialization(ds.spec.template.spec.containers)
        gates, _ = feature_gates_of(containers)
        if off := sorted(g for g in upstream_nvidia.FEATURE_GATES if not gates.get(g)):
            found.append(f"plugin DaemonSet runs without feature gate(s) {', '.join(off)}")
    if objs.nvidia_release and (failing := failing_gpus(bed)):
        found.append(f"mock NVML fails GPU(s) {', '.join(failing)}")
    if narrowed := cdi_dirs_wrong_nodes(bed):
        found.append(f"containerd of {', '.join(narrowed)} reads CDI specs from /etc/cdi only")
    if mode := tampering(bed):
        found.append(f"a process on {ONE_NODE} tampers with the driver's CDI specs ({mode})")
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
    objs = driver_objects((bed.state() or {}).get("driver", "example"), bed.state())
    ns = namespaces.create(api, namespaces.RunId("selftest"), "control-plane-probe", sa_timeout=timeout)
    try:
        api.resource.create_namespaced_resource_claim_template(ns, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpu"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": objs.device_class}}]}}}})
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
