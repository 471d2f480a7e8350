"""The containers of GPU pods on KWOK nodes: what CDI injection and the container runtime do
there, as the simulated driver (:mod:`draconf.testbed.agent`) plays them.

For each container of a prepared pod:

* a **view**, the directory ``kwok-containers/<pod uid>/<container>``, holding what the CDI spec
  would have put into the container: device nodes ``dev/nvidia<minor>`` of its GPUs,
  ``usr/bin/nvidia-smi`` and the node's NVML data (:func:`~draconf.testbed.nvidia.install_gpu_view`);
* a kwok **Exec rule** whose environment points the nvidia-smi stand-in at that view
  (``NVIDIA_SIM_ROOT``).  kwok runs exec requests in its sandbox
  (:mod:`draconf.testbed.sandbox`), where the stand-in and ``env`` are the only programs.

A pod starts only once kwok serves its rule (:meth:`KwokContainers.wait_until_served`), as a
real runtime starts a container only after CDI injection; views and rules go when the pod does.
The bed faults ``cdi-not-injected`` and ``cdi-wrong-device`` act here, where the real failure
would.
"""

from __future__ import annotations

import logging
import shutil
import time
from concurrent.futures import Executor
from pathlib import Path
from typing import Callable

from kubernetes.client.exceptions import ApiException

from draconf.kube import unread
from draconf.pods import exec_in_container
from draconf.testbed.nvidia import DRIVER, install_gpu_view

log = logging.getLogger("nvidia-dra-driver")

#: On a pod's Exec rule: the uid of the pod it was written for.
POD_UID_LABEL = "testbed.draconf.dev/pod-uid"
#: The pod-level name of the scheduler's claim for a pod's extended resources.
EXTENDED_CLAIM = "(extended resources)"
#: Pods whose rules one delete names at most: keeps the label selector's URL short.
RULES_PER_DELETE = 64
EXEC_API = ("kwok.x-k8s.io", "v1alpha1")


class KwokContainers:
    """Container views and Exec rules of the pods on one bed's KWOK GPU nodes.

    ``api`` is the driver's client; ``exec_api`` the same identity on a connection of its own
    (while an exec opens, kubernetes.stream turns every request of its ApiClient into a
    websocket, from any thread); ``pool`` runs the deletes of rules in the background.
    """

    def __init__(self, state_dir: Path, api, exec_api, gpu_nodes: dict[str, dict], faults: set[str],
                 pool: Executor):
        self.api = api
        self.exec_api = exec_api
        self.gpu_nodes = gpu_nodes
        self.faults = faults
        self.pool = pool
        self.views_dir = state_dir / "kwok-containers"
        self.views_dir.mkdir(exist_ok=True)
        #: The stand-in as the sandbox holds it; views link it (cluster.Testbed._kwok_sandbox).
        self.nvidia_smi = state_dir / "kwok-sandbox" / "kwok-node" / "bin" / "nvidia-smi"
        #: Pod uid -> namespace of the pods with views and an Exec rule, kept here so that a
        #: sync need not read the directory.  (Views found at start name no namespace: their
        #: rules go with their namespace.)
        self.viewed_pods: dict[str, str | None] = {view.name: None for view in self.views_dir.iterdir()}

    def injected_gpus(self, node: str, devices: list[str]) -> list[dict]:
        """The GPUs (NVML records) the runtime puts into a container allocated ``devices``."""
        gpus = {f"gpu-{g['minor']}": g for g in self.gpu_nodes[node]["gpus"]}
        if "cdi-not-injected" in self.faults:
            return []
        if "cdi-wrong-device" in self.faults:
            # The runtime hands out the node's next GPUs that were *not* allocated here: same
            # node, wrong GPU.  (When the container holds every GPU of its node, no wrong GPU
            # exists and it sees the right ones.)
            ordered = sorted(gpus, key=lambda d: gpus[d]["minor"])
            others = [d for d in ordered if d not in devices]
            devices = [others[i % len(others)] if others else d for i, d in enumerate(devices)]
        return [gpus[d] for d in devices if d in gpus]

    def create(self, pod: dict, pod_claims: dict[str, dict]) -> None:
        """The views of ``pod``'s containers and its Exec rule (``pod`` and the claims of
        ``pod_claims``, pod claim name -> claim, are raw objects, as the API server sends them)."""
        meta, node = pod["metadata"], pod["spec"]["nodeName"]
        record = {k: v for k, v in self.gpu_nodes[node].items() if k not in ("name", "kind")}
        extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("requestMappings") or []
        execs = []
        for container in pod["spec"]["containers"]:
            devices: list[str] = []
            # (pod claim name, request or None) the container lists, and its extended resources'
            # requests in the scheduler's claim.
            wanted = [(ref["name"], ref.get("request"))
                      for ref in (container.get("resources") or {}).get("claims") or []]
            wanted += [(EXTENDED_CLAIM, m["requestName"]) for m in extended
                       if m["containerName"] == container["name"]]
            for ref_name, request in wanted:
                claim = pod_claims.get(ref_name)
                if claim is None:
                    continue
                for result in claim["status"]["allocation"]["devices"]["results"]:
                    if result["driver"] != DRIVER or result["pool"] != node:
                        continue
                    if request and result["request"].split("/")[0] != request:
                        continue  # another request's (a subrequest's name is main/sub)
                    if result["device"] not in devices:
                        devices.append(result["device"])
            gpus = self.injected_gpus(node, devices)
            view = self.views_dir / meta["uid"] / container["name"]
            view.mkdir(parents=True, exist_ok=True)
            self.viewed_pods[meta["uid"]] = meta["namespace"]
            envs = [{"name": "DRACONF_CONTAINER", "value": f"{meta['name']}/{container['name']}"},
                    {"name": "DRACONF_POD_UID", "value": meta["uid"]},
                    {"name": "NVIDIA_SIM_ROOT", "value": str(view)}]
            if gpus:
                install_gpu_view(view, record, [g["minor"] for g in gpus], self.nvidia_smi)
                envs.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(g["uuid"] for g in gpus)})
            execs.append({"containers": [container["name"]], "local": {"envs": envs}})
        # Deleted with the pod's view (remove_gone), as a runtime forgets a container: an owner
        # reference would have the garbage collector get and delete each one, two requests per
        # pod where one request per sync does.
        body = {"apiVersion": "/".join(EXEC_API), "kind": "Exec",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "labels": {POD_UID_LABEL: meta["uid"]}},
                "spec": {"execs": execs}}
        args = (*EXEC_API, meta["namespace"], "execs")
        try:
            unread(self.api.custom.create_namespaced_custom_object(*args, body, _preload_content=False))
        except ApiException as err:
            if err.status != 409:
                raise
            # A rule left by an earlier pod of the same name: replace it.
            self.api.custom.delete_namespaced_custom_object(*args, meta["name"])
            unread(self.api.custom.create_namespaced_custom_object(*args, body, _preload_content=False))

    def wait_until_served(self, pod: dict, stopping: Callable[[], bool], timeout: float = 15.0) -> int | None:
        """Hold the pod back until kwok answers ``exec`` with this pod's own rule.

        kwok learns Exec objects through a watch.  A pod marked Running before kwok has seen its
        rule would answer ``exec`` from the default rule, as a container without GPUs, which a
        real node never does: the runtime starts the container only after CDI injection.
        Returns the number of probes it took, or None when the pod went away first.
        """
        name, namespace, uid = pod["metadata"]["name"], pod["metadata"]["namespace"], pod["metadata"]["uid"]
        container = pod["spec"]["containers"][0]["name"]
        deadline = time.monotonic() + timeout
        seen, probes = "no answer", 0
        while not stopping():
            if self._gone(namespace, name, uid):
                # Deleted right after it was scheduled (the suite's probe pods are): nothing will
                # exec into it, and an exec into a deleted pod is retried for seconds, holding up
                # every other pod the agent prepares.
                log.info("%s/%s went away before kwok served its exec rule", namespace, name)
                return None
            probes += 1
            try:
                # One attempt: this loop retries, and looks first whether the pod went away (a
                # pod deleted after that look made every exec of the next 5 s fail, the sync
                # stalled behind it, and the next test's pods waited for it).
                env = exec_in_container(self.exec_api, namespace, name, container, ["env"],
                                        timeout=5, settle=0).stdout
                seen = next((line.split("=", 1)[1] for line in env.splitlines()
                             if line.startswith("DRACONF_POD_UID=")), f"no DRACONF_POD_UID in {env!r}")
            except Exception as err:  # noqa: BLE001 - the probe is retried until the deadline
                seen = f"exec failed: {err}"
            if seen == uid:
                break
            if time.monotonic() > deadline:
                log.warning("kwok does not serve the exec rule of %s/%s after %.0fs (last: %s); "
                            "marking it prepared anyway", namespace, name, timeout, seen)
                break
            time.sleep(0.1)
        return probes

    def _gone(self, namespace: str, name: str, uid: str) -> bool:
        """The pod was deleted, or is being deleted (listed, as its RBAC allows, by name)."""
        found = self.api.core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}").items
        return not found or found[0].metadata.uid != uid or found[0].metadata.deletion_timestamp is not None

    def remove_gone(self, live: set[str]) -> None:
        """Remove the views of pods not in ``live`` (uids), and their Exec rules in the
        background: the pod and its containers are gone."""
        gone: dict[str, list[str]] = {}
        for uid in self.viewed_pods.keys() - live:
            shutil.rmtree(self.views_dir / uid, ignore_errors=True)
            if namespace := self.viewed_pods.pop(uid):
                gone.setdefault(namespace, []).append(uid)
        for namespace, uids in gone.items():
            self.pool.submit(self._forget_exec_rules, namespace, uids)

    def _forget_exec_rules(self, namespace: str, uids: list[str]) -> None:
        """Delete the Exec rules of gone pods, by their uid label (a pod of the same name may
        have a new one already)."""
        for start in range(0, len(uids), RULES_PER_DELETE):
            some = uids[start:start + RULES_PER_DELETE]
            try:
                unread(self.api.custom.delete_collection_namespaced_custom_object(
                    *EXEC_API, namespace, "execs", label_selector=f"{POD_UID_LABEL} in ({','.join(some)})",
                    _preload_content=False))
            except ApiException as err:
                if err.status != 404:  # 404: the namespace is gone, and its rules with it
                    log.warning("could not delete the exec rules of %d pod(s) in %s: %s %s",
                                len(some), namespace, err.status, err.reason)
