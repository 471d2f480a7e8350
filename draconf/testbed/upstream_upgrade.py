"""A real upgrade of NVIDIA's released driver on the bed, done as that release tells its users.

``draconf testbed upgrade --driver nvidia-v0.4.0`` on a bed running ``nvidia-v25.12.0`` follows
the newer release's ``docs/upgrade.md``: its CRDs applied first (``helm upgrade`` never updates a
chart's CRDs), then the existing Helm release upgraded in place with the new chart: same release
name and namespace, and, because the chart was renamed between them (``nvidia-dra-driver-gpu`` to
``dra-driver-nvidia-gpu``), ``nameOverride`` set to the old chart's name so that the kubelet-plugin
DaemonSet, its RBAC and ServiceAccounts are upgraded instead of duplicated beside the old ones.

The bed keeps no Helm release state, so the upgrade renders both charts with ``helm template``
(the bed's values, as the user passes the same ``--set`` flags again), replaces each object the
old chart made with the new chart's version of it (the DaemonSet then rolls its pods onto the new
image), creates what is new and deletes what the new chart no longer renders, as ``helm upgrade``
does.  The new release's image is imported into every real node's containerd first (the bed has
no registry; the chart's ``pullPolicy: Never`` would otherwise leave the pods ErrImageNeverPull).

``--without-name-override`` makes the mistake that guide warns of: the same upgrade with the
renamed chart's own object names, so its kubelet-plugin DaemonSet, RBAC and ServiceAccounts come
beside the old ones, and the old ones are deleted afterwards (``helm upgrade`` deletes what the
previous revision rendered and the new one does not).  The old plugin pods then end while the
new ones already run on the same node; what that does to each node is the upgrade gate's to
find, so the wait is only what ``helm upgrade --wait`` waits for: the new DaemonSet ready.

The other direction is refused: the same guide says a cluster on v0.4.0 cannot go back (its
kubelet-plugin checkpoint gained a boot id, and its ComputeDomain API made ``numNodes``
optional), so :data:`PATHS` lists forward steps only.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from draconf import waits
from draconf.errors import DraconfError
from draconf.testbed import build, example_driver, images, upstream_chart, upstream_nvidia
from draconf.testbed.upgrade import rolled_out
from draconf.testbed.upstream_nvidia import DRIVER_CHOICES, PLACEMENT_KEY, Release

#: Upgrades the releases support, (from, to) -> why the other direction is refused.
PATHS = {("v25.12.0", "v0.4.0"):
         "v0.4.0's docs/upgrade.md: downgrading to v25.12.0 is not supported (the kubelet plugin's "
         "checkpoint format gained a BootID field, and ComputeDomain's numNodes may be omitted)"}


def plan(current: str, target: str) -> str:
    """The target release's version once ``current`` -> ``target`` is an upgrade the releases
    support; a clear error otherwise.

    >>> plan("nvidia-v25.12.0", "nvidia-v0.4.0")
    'v0.4.0'
    >>> plan("nvidia-v0.4.0", "nvidia-v25.12.0")
    Traceback (most recent call last):
    ...
    draconf.errors.DraconfError: nvidia-v0.4.0 cannot be taken back to nvidia-v25.12.0: v0.4.0's docs/upgrade.md: downgrading to v25.12.0 is not supported (the kubelet plugin's checkpoint format gained a BootID field, and ComputeDomain's numNodes may be omitted)
    """
    if target not in DRIVER_CHOICES:
        raise DraconfError(f"--driver must name one of NVIDIA's releases ({', '.join(DRIVER_CHOICES)}), "
                           f"not {target!r}")
    if current == target:
        raise DraconfError(f"the bed already runs {target}")
    old, new = DRIVER_CHOICES[current], DRIVER_CHOICES[target]
    if (old, new) in PATHS:
        return new
    if (new, old) in PATHS:
        raise DraconfError(f"{current} cannot be taken back to {target}: {PATHS[(new, old)]}")
    raise DraconfError(f"no upgrade from {current} to {target} is known; supported: "
                       + ", ".join(f"nvidia-{a} -> nvidia-{b}" for a, b in PATHS))


def placed_as(previous: Release, target: Release) -> Release:
    """``target`` installed over ``previous`` in place: its release name and namespace, and its
    objects' names (``nameOverride``) when the chart's own name differs.

    >>> from draconf.testbed.upstream_nvidia import RELEASES
    >>> new = placed_as(RELEASES["v25.12.0"], RELEASES["v0.4.0"])
    >>> new.chart_name, new.namespace, new.object_prefix
    ('dra-driver-nvidia-gpu', 'nvidia-dra-driver-gpu', 'nvidia-dra-driver-gpu')
    """
    override = previous.object_prefix if previous.object_prefix != target.chart_name else ""
    return dataclasses.replace(target, release_name=previous.release_name, namespace=previous.namespace,
                               name_override=override)


def _key(doc: dict) -> tuple[str, str, str, str]:
    meta = doc["metadata"]
    return doc["apiVersion"], doc["kind"], meta.get("namespace") or "", meta["name"]


def _import_image(ctr: Path, real_nodes: dict, archive: Path, log) -> None:
    """``ctr images import`` of ``archive`` into the containerd of every real node (the bed
    state's ``real_nodes``), as each node does at start (node.py)."""
    for name, node in sorted(real_nodes.items()):
        sock = Path(node["dir"]) / "run-containerd" / "containerd.sock"
        proc = subprocess.run(images.import_command(ctr, sock, archive), capture_output=True, text=True, timeout=300)
        if proc.returncode:
            raise DraconfError(f"importing {archive.name} into {name}'s containerd failed: "
                               f"{proc.stderr.strip() or proc.stdout.strip()}")
    log(f"imported {archive.name} into {len(real_nodes)} nodes' containerd")


def _apply(api, docs: list[dict], previous: list[dict], namespace: str) -> tuple[int, int, int]:
    """What ``helm upgrade`` does to the cluster: CRDs first, each object replaced by its new
    version (created when new), then the objects only ``previous`` rendered deleted (CRDs stay,
    as Helm keeps them).  Returns (replaced, created, deleted)."""
    dynamic = api.dynamic
    counts = [0, 0, 0]
    ordered = sorted(docs, key=lambda d: d["kind"] != "CustomResourceDefinition")
    for doc in ordered:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        ns = (doc["metadata"].get("namespace") or namespace) if resource.namespaced else None
        try:
            current = resource.get(name=doc["metadata"]["name"], namespace=ns)
        except ApiException as err:
            if err.status != 404:
                raise
            resource.create(body=doc, namespace=ns)
            counts[1] += 1
            continue
        body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": current.metadata.resourceVersion}}
        resource.replace(body=body, namespace=ns)
        counts[0] += 1
    kept = {_key(d) for d in docs}
    for doc in previous:
        if _key(doc) in kept or doc["kind"] == "CustomResourceDefinition":
            continue
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        try:
            resource.delete(name=doc["metadata"]["name"],
                            namespace=(doc["metadata"].get("namespace") or namespace) if resource.namespaced else None)
            counts[2] += 1
        except ApiException as err:
            if err.status != 404:
                raise
    return counts[0], counts[1], counts[2]


def _published_nodes(api) -> set[str]:
    return {s.spec.node_name for s in api.resource.list_resource_slice().items
            if s.spec.driver == "gpu.nvidia.com" and s.spec.node_name and s.spec.devices}


def _wait_rolled_out(api, release: Release, image: str, nodes: set[str], timeout: float, log) -> None:
    """The kubelet-plugin DaemonSet rolled out: every pod on the new image and Ready, and every
    node that published GPUs before the upgrade publishing them again.  A new pod that crashes
    ends the wait at once, with its reasons."""
    from draconf.plugins import PluginPod
    name = f"{release.object_prefix}-kubelet-plugin"
    started = time.monotonic()

    def observe():
        ds = api.apps.read_namespaced_daemon_set(name, release.namespace)
        pods = []
        for raw in api.core.list_namespaced_pod(release.namespace, label_selector=upstream_nvidia.PLUGIN_SELECTOR).items:
            plain = api.api_client.sanitize_for_serialization(raw)
            pods.append((PluginPod.from_raw(plain), image in {c["image"] for c in plain["spec"]["containers"]}))
        return ds, pods, _published_nodes(api)

    def done(seen) -> bool:
        ds, pods, published = seen
        return (rolled_out(ds) and (ds.status.desired_number_scheduled or 0) > 0
                and all(new and pod.ready for pod, new in pods) and nodes <= published)

    def describe(seen) -> str:
        ds, pods, published = seen
        s = ds.status
        old = [pod.name for pod, new in pods if not new]
        return (f"DaemonSet {release.namespace}/{name}: {s.updated_number_scheduled or 0} of "
                f"{s.desired_number_scheduled or 0} updated, {s.number_ready or 0} ready"
                + (f"; still on the old image: {', '.join(old)}" if old else "")
                + (f"; not publishing again: {', '.join(sorted(nodes - published))}" if nodes - published else "")
                + f" ({time.monotonic() - started:.0f}s)")

    def crashed(seen) -> str | None:
        _, pods, _ = seen
        bad = [f"{pod.name} ({'; '.join(pod.problems) or 'exited'})"
               for pod, new in pods if new and pod.crashed_container]
        return f"the new kubelet plugin crashed: {', '.join(bad)}" if bad else None

    waits.wait_until(f"the kubelet plugin to roll out onto {image}", observe, done, timeout=timeout,
                     describe=describe, verdict=crashed, progress=log)


def upgrade(bed, target: str, log=print, timeout: float = 180, sources: str | Path | None = None,
            name_override: bool = True) -> Release:
    """Upgrade the bed's NVIDIA release to ``target`` (a ``--driver`` choice) in place; return
    the release as it is now placed.  The bed's state records it, so later faults, renders and
    ``testbed status`` find its objects where they are.  ``name_override=False``: without the
    ``nameOverride`` the release's upgrade guide requires (see the module's docstring)."""
    from draconf.kube import connect
    state = bed.state()
    if not bed.is_up or state is None:
        raise DraconfError(f"test bed {bed.name!r} is not up; start it with "
                           "`draconf testbed up --driver nvidia-v25.12.0`")
    current = state.get("driver", "nvidia")
    if current not in DRIVER_CHOICES:
        raise DraconfError(f"--driver upgrades NVIDIA's released driver; test bed {bed.name!r} runs "
                           f"{current} (start one with `draconf testbed up --driver nvidia-v25.12.0`)")
    version = plan(current, target)
    quiet = lambda *_: None  # noqa: E731
    bindir = build.ensure_built(log=quiet)
    helm = build.ensure_helm_built(log=log)
    sources = upstream_nvidia.sources_dir(sources)
    old_built = upstream_nvidia.ensure_built(DRIVER_CHOICES[current], sources, bindir, log=quiet)
    new_built = upstream_nvidia.ensure_built(version, sources, bindir, log=log)
    previous = upstream_nvidia.installed_release(state)
    release = placed_as(previous, new_built.release)
    if not name_override:
        release = dataclasses.replace(release, name_override="")
    api = connect(bed.kubeconfig)
    facts = example_driver.cluster_facts(api)
    old_docs = upstream_chart.render(helm, dataclasses.replace(old_built, release=previous), *facts,
                                     workdir=bed.dir)
    new_docs = upstream_chart.render(helm, dataclasses.replace(new_built, release=release), *facts,
                                     workdir=bed.dir)
    nodes = _published_nodes(api)
    _import_image(bindir / "ctr", state.get("real_nodes") or {}, new_built.image, log)
    log(f"helm upgrade {release.release_name} -n {release.namespace}: chart {previous.chart_name} "
        f"{previous.version} -> {release.chart_name} {release.version}"
        + (f" (nameOverride={release.name_override})" if release.name_override else "")
        + ("" if name_override else f" without nameOverride: its objects are named {release.object_prefix}-*"))
    replaced, created, deleted = _apply(api, new_docs, old_docs, release.namespace)
    log(f"{replaced} objects replaced, {created} created, {deleted} deleted")
    state = bed.state()
    state["driver"] = target
    state[PLACEMENT_KEY] = {"release_name": release.release_name, "namespace": release.namespace,
                            "name_override": release.name_override}
    bed._save(state)
    # Without the override nothing promises the nodes publish again: that is the gate's to judge.
    _wait_rolled_out(api, release, upstream_nvidia.image_ref(release), nodes if name_override else set(),
                     timeout, log)
    return release
