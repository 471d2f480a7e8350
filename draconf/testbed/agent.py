"""The NVIDIA DRA driver's install, and its simulation on KWOK nodes.

Run by ``draconf testbed up`` as ``python -m draconf.testbed.agent --state-dir DIR``.  It does,
through the real API server, what the real components do on a GPU cluster, each with the
identity it would have there:

* the **Helm chart** (every bed), as the cluster admin (``admin.kubeconfig``, as ``helm install``
  runs): installs the CRDs, the DeviceClasses, the GPUCluster singleton, the kubelet-plugin
  DaemonSet with its ServiceAccount and RBAC (:mod:`draconf.testbed.nvidia`), and the
  ServiceAccount and ClusterRole of what runs afterwards (:func:`~draconf.testbed.driver_objects.driver_rbac`).  On real nodes
  that DaemonSet's pods are the real DRA kubelet plugin; nothing below applies to them.

Afterwards the agent runs as ``system:serviceaccount:gpu-operator:nvidia-dra-driver``, in no
group, with only what :func:`~draconf.testbed.driver_objects.driver_rbac` grants (a 403 in its log is a rule missing there):

* the **GPU Operator**'s status reporting: GPUCluster ``status.state`` from the plugin DaemonSet;

For **KWOK nodes** only (large simulated fleets), where no kubelet runs:

* **kubelet registration** (part of the install, as the admin): creates the Node objects that
  kwok then keeps Ready;
* the **kubelet plugin**: publishes one ResourceSlice pool per GPU node, with the attributes and
  types of kubernetes-sigs/dra-driver-nvidia-gpu (cmd/gpu-kubelet-plugin/deviceinfo.go);
  "prepares" a pod's allocated claims once the scheduler has allocated and reserved them,
  and "unprepares" them when the last consumer is gone;
* **CDI / the container runtime** (:mod:`draconf.testbed.kwok_containers`): for each container
  of a prepared pod, a *view* holding what the CDI spec would have put into the container, and
  a kwok ``Exec`` rule that serves it;
* the **kubelet's start** of such a pod, as kwok's identity (kwok plays the kubelet of KWOK
  nodes): once its claims are prepared and kwok serves its rule, the pod's status becomes the
  Running status kwok's own stage writes for pods without claims (:mod:`~draconf.testbed.kwok_config`).

Allocation, reservation, generated claims, quota and garbage collection are left entirely to
kube-scheduler, kube-controller-manager and kube-apiserver.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from draconf.kube import connect, unread
from draconf.reflector import Reflector
from draconf.testbed import faults as faults_mod
from draconf.testbed.driver_objects import (DRIVER_IDENTITY, admin_access_everywhere_policy,
                                            claims_stripped_policy, claim_count_lowered_policy, driver_rbac, resource_slice)
from draconf.testbed.kwok_config import SIMULATE_ANNOTATION, PodIPs, running_status
from draconf.testbed.kwok_containers import EXTENDED_CLAIM, KwokContainers
from draconf.testbed.nvidia import (DEVICE_CLASSES, DRIVER, PLUGIN_DAEMONSET, PLUGIN_NAMESPACE,
                                    device_class, node_labels, plugin_daemonset,
                                    plugin_mps_rbac, plugin_rbac)

log = logging.getLogger("nvidia-dra-driver")

DATA = Path(__file__).parent / "data"
#: Held on a claim while its devices are prepared on a KWOK node whose unprepare never completes.
UNPREPARE_FINALIZER = "gpu.nvidia.com/unprepare-pending"

#: API calls of one sync (Exec rules, pod starts) in flight at once: a kubelet prepares and
#: starts its pods concurrently, and one call at a time leaves the API server's cores idle.
CONCURRENT_CALLS = 8
#: Pods prepared per sync at most.  With hundreds scheduled at once, one batch of all of them
#: would start none until the last is prepared; batches keep pods flowing to kwok meanwhile.
BATCH = 64
#: The least time between two syncs: under a burst of watch events, a sync per event would
#: spend the CPU on reading the store again.
MIN_SYNC_GAP = 0.05
#: Seconds between passes over every pod and claim, whatever changed (an informer's resync).
FULL_PASS_SECONDS = 10.0


class Agent:
    def __init__(self, state_dir: Path, crd_dir: Path, faults: list[str], nvidia: bool = True):
        self.dir = state_dir
        #: False on a bed whose driver is installed from another chart: KWOK nodes only.
        self.nvidia = nvidia
        self.crd_dir = crd_dir
        self.faults = set(faults)
        #: The install's client: the cluster admin, as Helm runs.
        self.admin = connect(state_dir / "admin.kubeconfig")
        #: Everything after the install: the driver's own identity, bound to driver_rbac().
        self.api = connect(state_dir / f"{DRIVER_IDENTITY}.kubeconfig")
        #: The same identity for the exec probe alone: while an exec opens, the client turns
        #: every request of its ApiClient into a websocket (kubernetes.stream), from any thread.
        exec_api = connect(state_dir / f"{DRIVER_IDENTITY}.kubeconfig")
        #: kwok's identity, for the part of the kubelet kwok plays: a started pod's status.
        self.kubelet = connect(state_dir / "kwok.kubeconfig")
        self.pod_ips = PodIPs()
        self.pool = ThreadPoolExecutor(CONCURRENT_CALLS, thread_name_prefix="kubelet")
        self.inventory = json.loads((state_dir / "inventory.json").read_text())
        # The nodes this agent plays kubelet and plugin for; real nodes have their own.
        self.kwok_nodes = [n for n in self.inventory["nodes"] if n["kind"] == "kwok"]
        self.gpu_nodes = {n["name"]: n for n in self.kwok_nodes if n["gpus"]}
        self.cdi_dir = state_dir / "cdi"
        self.cdi_dir.mkdir(exist_ok=True)
        #: What CDI injection and the runtime make of a prepared pod's containers.
        self.containers = KwokContainers(state_dir, self.api, exec_api, self.gpu_nodes, self.faults, self.pool)
        self.warned: set[str] = set()
        self.gpucluster_state: str | None = None
        self.stopping = False
        #: Set by the pod and claim watches on every change: the loop's cue to sync.
        self.changed = threading.Event()
        #: Uids of pods started; the watch may not have brought their status back yet.
        self.started: set[str] = set()
        # Made by _follow_pods_and_claims, before the first sync reads them.
        self.pods: Reflector = None  # type: ignore[assignment]
        self.claims: Reflector = None  # type: ignore[assignment]
        #: Pods (namespace, name) to look at again at the next sync whatever changed: left over
        #: from a full batch, or their start failed.  Written from pool threads too.
        self.again: set[tuple[str, str]] = set()
        self.again_lock = threading.Lock()
        #: When the last full pass ran: every pod and claim looked at (see sync).
        self.last_full_pass = 0.0
        #: Set when a sync failed: what it had taken from the watches is looked at again.
        self.full_pass_due = False
        #: Claim uid -> its CDI spec and the claim's (namespace, name): what is on disk, kept
        #: here so that a sync need not read the directory.
        self.prepared_claims: dict[str, tuple[Path, tuple[str, str]]] = {}
        for spec in self.cdi_dir.glob("k8s.gpu.nvidia.com-claim_*.json"):
            namespace, name = json.loads(spec.read_text())["claim"].split("/", 1)
            self.prepared_claims[spec.stem.split("claim_", 1)[1]] = (spec, (namespace, name))

    # --- install -----------------------------------------------------------------------------
    def install(self) -> None:
        self._apply_crd(self.crd_dir / "kwok.x-k8s.io_execs.yaml")
        if not self.nvidia:
            self._register_nodes()
            log.info("KWOK nodes registered; the bed's driver comes from its own chart")
            return
        self._apply_crd(DATA / "crds" / "gpucluster.yaml")
        if "clusterpolicy-conflict" in self.faults:
            self._apply_crd(DATA / "crds" / "clusterpolicy.yaml")
        self._register_nodes()
        for name, device_type in DEVICE_CLASSES.items():
            if name == "gpu.nvidia.com" and "missing-deviceclass" in self.faults:
                continue
            self._create(lambda body: self.admin.resource.create_device_class(body),
                         device_class(name, device_type))
        self._install_operator_footprint()
        if "admin-access-everywhere" in self.faults:
            self._create_policy(admin_access_everywhere_policy())
        if "claims-stripped" in self.faults:
            self._create_policy(claims_stripped_policy())
        if "claim-count-lowered" in self.faults:
            self._create_policy(claim_count_lowered_policy())
        self._wait_until_granted()
        log.info("install complete: %d GPU nodes, faults=%s", len(self.gpu_nodes),
                 sorted(self.faults) or "none")

    def _wait_until_granted(self, timeout: float = 30.0) -> None:
        """Until the API server's authorizer holds driver_rbac()'s binding (its RBAC cache
        follows a watch): asked as the driver, SelfSubjectAccessReview, every rule's verbs."""
        authz = client.AuthorizationV1Api(self.api.api_client)
        _, role, _ = driver_rbac()
        wanted = [(rule["apiGroups"][0], resource, verb, (rule.get("resourceNames") or [None])[0])
                  for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]]
        deadline = time.monotonic() + timeout
        while True:
            missing = []
            for group, resource, verb, name in wanted:
                base, _, sub = resource.partition("/")
                review = authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
                    spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=client.V1ResourceAttributes(
                        group=group, resource=base, subresource=sub or None, verb=verb, name=name,
                        namespace=PLUGIN_NAMESPACE if group == "apps" else None))))
                if not review.status.allowed:
                    missing.append(f"{verb} {resource}")
            if not missing:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{DRIVER_IDENTITY} is still not allowed: {', '.join(missing)}")
            time.sleep(0.2)

    def publish_slices(self) -> None:
        """As the kubelet plugin of each KWOK GPU node: its ResourceSlice pool."""
        if "no-resourceslices" in self.faults:
            return
        for node in self.gpu_nodes.values():
            self._create(lambda body: self.api.resource.create_resource_slice(body),
                         resource_slice(node, drift="attribute-drift" in self.faults))

    def _create(self, create, body) -> None:
        try:
            create(body)
        except ApiException as err:
            if err.status != 409:
                raise

    def _apply_crd(self, path: Path) -> None:
        body = yaml.safe_load(path.read_text())
        self._create(lambda b: self.admin.extensions.create_custom_resource_definition(b), body)
        name = body["metadata"]["name"]
        for _ in range(100):
            crd = self.admin.extensions.read_custom_resource_definition(name)
            if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
                return
            time.sleep(0.1)
        raise RuntimeError(f"CRD {name} never became established")

    def _register_nodes(self) -> None:
        for node in self.kwok_nodes:
            labels = {"type": "kwok", "kubernetes.io/hostname": node["name"],
                      "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
            taints = []
            if node["gpus"]:
                labels.update(node_labels(node["gpus"][0]["productName"]))
                if "gpu-nodes-tainted" in self.faults:
                    taints.append(dict(faults_mod.GPU_NODE_TAINT))
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node["name"], "labels": labels,
                                 "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                                 "kwok.x-k8s.io/node": "fake"}},
                    "spec": {"taints": taints} if taints else {}}
            self._create(lambda b: self.admin.core.create_node(b), body)

    def _install_operator_footprint(self) -> None:
        admin = self.admin
        self._create(lambda b: admin.core.create_namespace(b),
                     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}})
        # KWOK nodes crash-loop the plugin pods by annotation; on real nodes the plugin itself
        # is told to fail (nvidia.PLUGIN_FAULTS).
        template_annotations = {SIMULATE_ANNOTATION: "crash-loop"} if "plugin-unhealthy" in self.faults else {}
        for account, role, binding in (plugin_rbac(), driver_rbac()):
            self._create(lambda b: admin.core.create_namespaced_service_account(PLUGIN_NAMESPACE, b), account)
            self._create(lambda b: admin.rbac.create_cluster_role(b), role)
            self._create(lambda b: admin.rbac.create_cluster_role_binding(b), binding)
        if faults_mod.plugin_feature_gates(self.faults).get("MPSSupport"):
            # As the chart: only with MPSSupport does the plugin get to manage Deployments.
            role, binding = plugin_mps_rbac()
            self._create(lambda b: admin.rbac.create_namespaced_role(PLUGIN_NAMESPACE, b), role)
            self._create(lambda b: admin.rbac.create_namespaced_role_binding(PLUGIN_NAMESPACE, b), binding)
        self._create(lambda b: admin.apps.create_namespaced_daemon_set(PLUGIN_NAMESPACE, b),
                     plugin_daemonset(sorted(self.faults), template_annotations,
                                      {**faults_mod.plugin_feature_gates(self.faults),
                                       **({"DynamicMIG": True} if self.inventory.get("dynamicMIG") else {})}))
        # Its status is the operator's to report (run(), as the driver).
        self._create(lambda b: admin.custom.create_cluster_custom_object(
            "nvidia.com", "v1alpha1", "gpuclusters", b),
            {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
             "metadata": {"name": "gpu-cluster"}, "spec": {"draDriver": {"enabled": True}}})
        if "clusterpolicy-conflict" in self.faults:
            self._create(lambda b: admin.custom.create_cluster_custom_object(
                "nvidia.com", "v1", "clusterpolicies", b),
                {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                 "metadata": {"name": "cluster-policy"}, "spec": {"devicePlugin": {"enabled": True}}})

    def _create_policy(self, docs: list[dict]) -> None:
        """An admin's cluster policy, through the API server's own MutatingAdmissionPolicy
        (admissionregistration.k8s.io/v1): admin-access-everywhere labels every new namespace
        for admin access ("let monitoring work everywhere"); claims-stripped removes the claims
        of the suite's pods; claim-count-lowered makes the suite's claims ask for one device."""
        from kubernetes.dynamic import DynamicClient
        dynamic = DynamicClient(self.admin.api_client)
        for body in docs:
            resource = dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
            self._create(lambda b: resource.create(body=b), body)

    def _report_gpucluster_state(self) -> None:
        """As the GPU Operator does: the GPUCluster is ready when every kubelet-plugin pod is."""
        ds = self.api.apps.read_namespaced_daemon_set(PLUGIN_DAEMONSET, PLUGIN_NAMESPACE).status
        ready = bool(ds and ds.desired_number_scheduled and ds.number_ready == ds.desired_number_scheduled)
        # gpu-cluster-not-ready: another operand failed; the operator says so whatever the plugin.
        state = "ready" if ready and "gpu-cluster-not-ready" not in self.faults else "notReady"
        if state != self.gpucluster_state:
            self.api.custom.patch_cluster_custom_object_status(
                "nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster", {"status": {"state": state}})
            self.gpucluster_state = state
            log.info("GPUCluster gpu-cluster is %s", state)

    # --- kubelet plugin loop -----------------------------------------------------------------
    def run(self) -> None:
        """As the driver (``self.api``): publish the KWOK GPU nodes' pools, then report the
        GPUCluster's state and play kubelet plugin until stopped.

        Pods and claims are followed by watch (as the kubelet and the plugin do), and the loop
        syncs whenever either changes: no list of every pod and claim four times a second,
        which at 800 pods cost the API server more CPU than the work itself."""
        last_report = 0.0
        published = False
        while not self.stopping:
            if not self.nvidia:
                time.sleep(0.25)  # nothing to simulate: no KWOK GPU node has this driver
                continue
            try:
                if not published:
                    self.publish_slices()
                    self._follow_pods_and_claims()
                    published = True
                if time.monotonic() - last_report > 1:
                    last_report = time.monotonic()
                    self._report_gpucluster_state()
                self.changed.clear()  # before reading: a change during sync brings another
                self.sync()
                time.sleep(MIN_SYNC_GAP)
            except ApiException as err:
                log.warning("API error during sync: %s %s", err.status, err.reason)
                self.full_pass_due = True
                time.sleep(0.25)
            except Exception:  # keep the node side alive whatever one pod does
                log.exception("sync failed")
                self.full_pass_due = True
                time.sleep(0.25)
            self.changed.wait(timeout=1.0)

    def _follow_pods_and_claims(self) -> None:
        # A connection of their own: see exec_api.
        watcher = connect(self.dir / f"{DRIVER_IDENTITY}.kubeconfig")
        self.pods = Reflector(watcher.core.list_pod_for_all_namespaces, "pods", self.changed).start()
        self.claims = Reflector(watcher.resource.list_resource_claim_for_all_namespaces, "resourceclaims",
                                self.changed).start()
        for reflector in (self.pods, self.claims):
            if not reflector.wait_synced(timeout=60):
                raise RuntimeError(f"could not list {reflector.name} in 60 s")

    def sync(self) -> None:
        """Prepare the pods that became ready for it, and unprepare what was released, from
        the pods and claims last heard of (raw objects: see Reflector).

        As the kubelet's DRA manager works from its informers' events, only what changed is
        looked at: the changed pods, and the pods a changed claim is reserved for.  A pass over
        everything runs after a watch listed anew, after a failed sync, and every
        FULL_PASS_SECONDS (an informer's resync): at 800 pods, scanning every pod and claim
        on each change was a sixth of this process's CPU."""
        pod_changes, claim_changes = self.pods.take_changes(), self.claims.take_changes()
        with self.again_lock:
            again, self.again = self.again, set()
        keys = None  # None: listed anew, or the last sync failed: anything may have changed
        if pod_changes is not None and claim_changes is not None and not self.full_pass_due:
            keys = pod_changes | again
            for namespace, name in claim_changes:
                for consumer in ((self.claims.get(namespace, name) or {}).get("status") or {}).get("reservedFor") or []:
                    if consumer.get("resource") == "pods":
                        keys.add((namespace, consumer["name"]))
        full = keys is None or time.monotonic() - self.last_full_pass > FULL_PASS_SECONDS
        if full:
            self.last_full_pass, self.full_pass_due = time.monotonic(), False
            candidates = self.pods.items()
        else:
            assert keys is not None  # not a full pass
            candidates = [pod for key in keys if (pod := self.pods.get(*key)) is not None]
        waiting: list = []
        left, missed = set(), []
        for pod in candidates:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
            if (spec.get("nodeName") in self.gpu_nodes
                    and (spec.get("resourceClaims") or status.get("extendedResourceClaimStatus"))
                    and not meta.get("deletionTimestamp") and meta["uid"] not in self.started
                    and status.get("phase", "Pending") == "Pending"):
                pod_claims = self._pod_claims(pod)
                if pod_claims is not None:
                    key = (meta["namespace"], meta["name"])
                    if keys is not None and key not in keys and f"{'/'.join(key)}/{meta['uid']}" not in self.warned:
                        missed.append("/".join(key))  # (not a pod the plugin-unhealthy fault refuses)
                    if len(waiting) == BATCH:
                        left.add(key)  # the next sync's
                    else:
                        waiting.append((pod, pod_claims))
        if missed:  # a change this loop should have acted on: a defect of the simulation
            log.warning("full pass: %d pod(s) ready to prepare that no change had brought: %s",
                        len(missed), ", ".join(sorted(missed)[:10]))
        if left:
            self._again(left)
        began = time.monotonic()
        written = [pod for pod, done in zip((pod for pod, _ in waiting),
                                            self.pool.map(lambda args: self._maybe_prepare(*args), waiting)) if done]
        if written:
            prepared = time.monotonic()
            probes = self._start_prepared(written)
            log.info("batch of %d pod(s): prepared in %.2f s, exec rules served %.2f s later (%s probe(s))",
                     len(written), prepared - began, time.monotonic() - prepared, probes or "no")
        if full or self._consumers_may_be_gone(pod_changes or set(), claim_changes or set()):
            self._unprepare_released()

    def _again(self, keys: set[tuple[str, str]]) -> None:
        """Look at these pods at the next sync, and sync again at once."""
        with self.again_lock:
            self.again |= keys
        self.changed.set()

    def _consumers_may_be_gone(self, pod_changes: set, claim_changes: set) -> bool:
        """Whether these changes may have left a prepared claim without a consumer: a pod gone
        or terminating, a prepared claim changed or gone."""
        for key in pod_changes:
            pod = self.pods.get(*key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return True
        for key in claim_changes:
            claim = self.claims.get(*key)
            if claim is None or claim["metadata"]["uid"] in self.prepared_claims:
                return True
        return False

    def _start_prepared(self, pods: list) -> int | None:
        """Start ``pods``, whose claims are prepared and Exec rules written, once kwok serves
        those rules.  kwok learns them through one watch, in the order they were written, so
        the last pod's rule being served means every earlier one is: one exec probe per sync
        instead of one per pod (the probe is most of the time a pod takes here)."""
        probes = None
        for pod in reversed(pods):  # the last one still there: a deleted pod's rule proves nothing
            probes = self.containers.wait_until_served(pod, lambda: self.stopping)
            if probes is not None:
                break
        def start(pod) -> None:
            meta = pod["metadata"]
            try:
                unread(self.kubelet.core.patch_namespaced_pod_status(
                    meta["name"], meta["namespace"], {"status": running_status(pod, self.pod_ips.next())},
                    _preload_content=False))
            except ApiException as err:
                if err.status == 404:
                    return  # deleted meanwhile: nothing to start
                self.started.discard(meta["uid"])  # the next sync tries again
                log.warning("could not start %s/%s: %s %s", meta["namespace"], meta["name"],
                            err.status, err.reason)
                self._again({(meta["namespace"], meta["name"])})
                return
            except Exception as err:  # noqa: BLE001 - a dropped connection, a timeout
                # Run in the pool, whose futures nobody reads: an error not caught here left the
                # pod counted as started and Pending for good (seen at 100 x 8: a few pods of
                # a node never started, the sweep's targets there gave no verdict).
                self.started.discard(meta["uid"])
                log.warning("could not start %s/%s: %s", meta["namespace"], meta["name"], err)
                self._again({(meta["namespace"], meta["name"])})
                return
            log.info("prepared and started %s/%s/%s on %s", meta["namespace"], meta["name"], meta["uid"],
                     pod["spec"]["nodeName"])

        # Started in the background while the next sync prepares the next batch; counted as
        # started now, so that no sync prepares them again before the watch brings the status.
        self.started.update(pod["metadata"]["uid"] for pod in pods)
        for pod in pods:
            self.pool.submit(start, pod)
        return probes

    def _pod_claims(self, pod: dict) -> dict[str, dict] | None:
        """Pod claim name -> ResourceClaim, or None while any is missing or not yet reserved
        (raw objects, as ``pod`` is)."""
        status = pod.get("status") or {}
        generated = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
        result = {}
        refs = [(ref["name"], ref.get("resourceClaimName") or generated.get(ref["name"]))
                for ref in pod["spec"].get("resourceClaims") or []]
        if extended := status.get("extendedResourceClaimStatus"):
            # The claim the scheduler made for the pod's extended resources (as the kubelet reads it).
            refs.append((EXTENDED_CLAIM, extended.get("resourceClaimName")))
        for ref_name, name in refs:
            if name is None:
                return None
            claim = self.claims.get(pod["metadata"]["namespace"], name)
            if claim is None:
                return None
            claim_status = claim.get("status") or {}
            if not claim_status.get("allocation"):
                return None
            if not any(r.get("uid") == pod["metadata"]["uid"] for r in claim_status.get("reservedFor") or []):
                return None
            result[ref_name] = claim
        return result

    def _maybe_prepare(self, pod: dict, pod_claims: dict[str, dict]) -> bool:
        """Prepare the pod's claims, allocated and reserved for it, and write its Exec rule;
        True when it did (it may start once kwok serves the rule).  Raw objects, as the
        watches keep them: turning each into a client model cost a third of the agent's CPU
        at 800 pods."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}/{meta['uid']}"
        refusal = self._prepare_refusal(meta["namespace"], next(iter(pod_claims.values()))["metadata"]["name"])
        if refusal:
            # As the kubelet reports a plugin it cannot reach, or whose NodePrepareResources
            # fails (real nodes run the plugin with the fault: nvidia.PLUGIN_FAULTS); once a pod.
            if key not in self.warned:
                self.warned.add(key)
                self._event(pod, "FailedPrepareDynamicResources",
                            "Failed to prepare dynamic resources: prepare dynamic resources: " + refusal)
            return False
        node = pod["spec"]["nodeName"]
        for claim in pod_claims.values():
            self._prepare_claim(claim, node)
        self.containers.create(pod, pod_claims)
        return True

    def _prepare_refusal(self, namespace: str, claim: str) -> str | None:
        """What the kubelet says when a fault keeps the claim from being prepared, or None."""
        if "plugin-unhealthy" in self.faults:
            return (f"NodePrepareResources failed for ResourceClaim {claim}: failed to get gRPC client "
                    f"for driver {DRIVER}: plugin name {DRIVER} not found in the list of registered DRA plugins")
        if "prepare-refused" in self.faults:
            return (f"NodePrepareResources failed for ResourceClaim {claim}: error from driver {DRIVER}: "
                    f"simulated: cannot prepare claim {namespace}/{claim}: NVML: Unknown Error")
        return None

    def _prepare_claim(self, claim: dict, node: str) -> None:
        """Record the CDI spec of a claim (raw): one per claim, as the NVIDIA plugin writes it."""
        meta = claim["metadata"]
        uid = meta["uid"]
        spec = self.cdi_dir / f"k8s.gpu.nvidia.com-claim_{uid}.json"
        if uid in self.prepared_claims:
            return
        devices = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]
                   if r["driver"] == DRIVER and r["pool"] == node]
        spec.write_text(json.dumps({
            "kind": "k8s.gpu.nvidia.com/claim", "claim": f"{meta['namespace']}/{meta['name']}",
            "claimUID": uid, "node": node,
            "devices": [{"name": f"{uid}-{d}", "device": d} for d in devices]}))
        self.prepared_claims[uid] = (spec, (meta["namespace"], meta["name"]))
        if "claims-not-released" in self.faults:
            finalizers = list(meta.get("finalizers") or [])
            if UNPREPARE_FINALIZER not in finalizers:
                self.api.resource.patch_namespaced_resource_claim(
                    meta["name"], meta["namespace"],
                    {"metadata": {"finalizers": finalizers + [UNPREPARE_FINALIZER]}})

    def _unprepare_released(self) -> None:
        """Unprepare every prepared claim that no running pod on its node consumes any more
        (each looked up by name: no pass over every claim)."""
        pods = self.pods.items()
        live = {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        self.started &= {p["metadata"]["uid"] for p in pods}
        if "claims-not-released" not in self.faults:  # else the node never gets to unprepare
            for uid, (spec, key) in list(self.prepared_claims.items()):
                claim = self.claims.get(*key)
                if claim is None or claim["metadata"]["uid"] != uid:
                    consumers = []  # deleted; or deleted and made again under its name
                else:
                    consumers = [r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []]
                if not any(consumer in live for consumer in consumers):
                    spec.unlink(missing_ok=True)
                    del self.prepared_claims[uid]
                    log.info("unprepared claim %s", uid)
        self.containers.remove_gone(live)

    def _event(self, pod: dict, reason: str, message: str) -> None:
        meta = pod["metadata"]
        now = datetime.now(timezone.utc)
        self.api.core.create_namespaced_event(meta["namespace"], client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}."),
            involved_object=client.V1ObjectReference(
                kind="Pod", namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], api_version="v1"),
            reason=reason, message=message, type="Warning", count=1,
            first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component="kubelet", host=pod["spec"]["nodeName"])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m draconf.testbed.agent")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--crd-dir", type=Path, required=True)
    parser.add_argument("--fault", action="append", default=[])
    from draconf.testbed.upstream_nvidia import DRIVER_CHOICES
    parser.add_argument("--driver", choices=["nvidia", "example", *DRIVER_CHOICES], default="nvidia",
                        help="example: another driver is installed from its chart; only register "
                             "the KWOK nodes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    agent = Agent(args.state_dir, args.crd_dir, args.fault, nvidia=args.driver == "nvidia")

    def stop(*_):
        agent.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for attempt in range(50):
        try:
            agent.install()
            break
        except ApiException as err:
            log.warning("install attempt %d failed: %s %s %s", attempt + 1, err.status, err.reason, err.body)
            time.sleep(0.5)
    else:
        log.error("could not install the driver footprint")
        return 1
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
