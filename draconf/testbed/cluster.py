"""Start, inspect and stop an embedded test bed: a real control plane with real or KWOK nodes.

Processes, started from the binaries :mod:`draconf.testbed.build` made: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok, the NVIDIA driver's install and its simulation
on KWOK nodes (``python -m draconf.testbed.agent``), and one supervisor per real node
(``python -m draconf.testbed.node``: containerd and a kubelet).

A bed of KWOK nodes only runs everything on the host's 127.0.0.1.  A bed with real nodes runs
the control plane in a network namespace of its own, the nodes in theirs
(:mod:`draconf.testbed.network`), and exposes only the API server on the host's 127.0.0.1.
Everything a bed owns lives in its state directory, so ``down`` can stop exactly what ``up``
started and remove the rest.

Example::

    bed = Testbed.named("default")
    bed.up(inventory.load(), faults=[])
    print(bed.kubeconfig)          # point kubectl or the suite here
    bed.down()
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from draconf.errors import DraconfError
from draconf.testbed import build, faults as faults_mod, hostsys, images, kwok_config, network, node as node_mod
from draconf.testbed import mock_nvml_node, node_config, pins, pki as pki_mod, processes, sandbox, upstream_chart, upstream_nvidia
from draconf.testbed.inventory import Inventory

SERVICE_CIDR = "10.96.0.0/16"
#: Components that talk to the API server from inside the control plane's namespace.
IN_CONTROL_PLANE = ("kube-scheduler", "kube-controller-manager", "kwok")
#: The DRA drivers a bed can run: the simulated NVIDIA driver, dra-example-driver, or a release
#: of NVIDIA's own driver over NVIDIA's mock NVML (upstream_nvidia.DRIVER_CHOICES).
DRIVERS = ("nvidia", "example", *upstream_nvidia.DRIVER_CHOICES)
#: Roles the bed grants its components that are not in system:masters (kwok's own; the
#: simulated driver's comes with its install, driver_objects.driver_rbac).
COMPONENT_RBAC = Path(__file__).parent / "data" / "rbac"
#: Where kwok and the only programs a KWOK "container" can run live inside its sandbox.
KWOK_TOOLS = "/kwok-node"
#: Seconds a real node gets to stop its kubelet, containers and containerd.
NODE_STOP_GRACE = 30
#: Go's garbage collector in the bed's components (etcd, the control plane, kwok, and through
#: the node supervisors containerd and the kubelet): collecting at 400% heap growth instead of
#: Go's 100% trades memory for CPU, which the 2-core machine lacks and its 24 GiB do not; the
#: soft limit keeps each heap bounded.  Measured with 800 claims (benchmarks/claims_at_scale.py,
#: A/B alternating, 2026-12-01): kube-apiserver 16.5-22.3 CPU-s to Running against 21.5-28.3,
#: 33-43 claims/s against 27-35.  The components stay as built; a GOGC or GOMEMLIMIT in the
#: environment wins.
GO_RUNTIME_ENV = {"GOGC": "400", "GOMEMLIMIT": "2GiB"}


def admission_flags(enforce_quota: bool) -> list[str]:
    """kube-apiserver's admission flags: ResourceQuota enforced, or off (the bed fault
    ``quota-not-enforced``; a cluster whose admin left it out).

    >>> admission_flags(True)
    ['--enable-admission-plugins=NodeRestriction,ResourceQuota']
    >>> admission_flags(False)
    ['--enable-admission-plugins=NodeRestriction', '--disable-admission-plugins=ResourceQuota']
    """
    if enforce_quota:
        return ["--enable-admission-plugins=NodeRestriction,ResourceQuota"]
    return ["--enable-admission-plugins=NodeRestriction", "--disable-admission-plugins=ResourceQuota"]


def state_root() -> Path:
    base = os.environ.get("DRACONF_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "draconf")
    return Path(base) / "testbeds"


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class, whatever its name

    name: str
    dir: Path

    @classmethod
    def named(cls, name: str = "default") -> "Testbed":
        if not name.replace("-", "").isalnum():
            raise DraconfError(f"test bed name {name!r} may hold only letters, digits and dashes")
        return cls(name, state_root() / name)

    # --- state -------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def state(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def running_state(self) -> dict:
        """:meth:`state` of a bed that has one (started, not yet torn down)."""
        state = self.state()
        if state is None:
            raise DraconfError(f"test bed {self.name!r} is not up (no {self.state_file})")
        return state

    def _save(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def processes(self) -> dict[str, bool]:
        """Component name -> whether its process is running."""
        state = self.state() or {}
        return {name: processes.child_alive(proc["pid"]) if proc["pid"] in processes.CHILDREN
                else processes.pid_alive(proc["pid"], proc["marker"])
                for name, proc in state.get("processes", {}).items()}

    @property
    def is_up(self) -> bool:
        state = self.state()
        running = self.processes()
        return bool(state and state.get("ready") and running and all(running.values()))

    def status(self) -> dict:
        state = self.state()
        if state is None:
            return {"name": self.name, "state": "down"}
        return {"name": self.name, "state": "up" if self.is_up else "half-up",
                "kubeconfig": str(self.kubeconfig),
                "server": state.get("server"), "driver": state.get("driver", "nvidia"), "faults": state.get("faults", []),
                "inventory": state.get("inventory"), "components": self.processes(),
                "real nodes": sorted(state.get("real_nodes", {})),
                "kubernetes": pins.KUBERNETES_VERSION, "logs": str(self.logs)}

    # --- up ----------------------------------------------------------------------------------
    def up(self, inventory: Inventory, faults: list[str], log=print,
           apiserver_port: int | None = None, timeout: float = 120, driver: str = "nvidia",
           upstream_sources: str | Path | None = None) -> Path:
        """Start the bed (or confirm it is already up with the same faults); return the kubeconfig.

        ``driver``: ``nvidia`` (the simulated NVIDIA driver, default), ``example``
        (dra-example-driver from its own chart; real GPU nodes only) or ``nvidia-<release>``
        (NVIDIA's released driver built from the archive in ``upstream_sources``, from its own
        chart over the mock NVML; real GPU nodes only)."""
        faults = faults_mod.validate(faults)
        if any(f in faults_mod.NEED_UNHEALTHY_GPU for f in faults):
            from draconf.testbed.inventory import with_unhealthy_gpu
            inventory = with_unhealthy_gpu(inventory)
        if any(f in faults_mod.NEED_DYNAMIC_MIG for f in faults):
            from draconf.testbed.inventory import with_dynamic_mig
            inventory = with_dynamic_mig(inventory)
        if driver not in DRIVERS:
            raise DraconfError(f"driver must be one of {', '.join(DRIVERS)}, not {driver!r}")
        if driver != "nvidia":
            if kwok_gpus := [n.name for n in inventory.gpu_nodes if n.kind == "kwok"]:
                raise DraconfError(
                    f"--driver {driver} runs on real nodes only, but {', '.join(kwok_gpus)} "
                    "are KWOK GPU nodes; leave out --node-kind kwok / --nodes")
            if faults:
                raise DraconfError("the bed's faults act inside the simulated NVIDIA driver; "
                                   f"--driver {driver} takes none")
        state = self.state()
        if state is not None:
            if self.is_up:
                if state.get("faults", []) != faults or state.get("inventory") != inventory.source \
                        or state.get("driver", "nvidia") != driver:
                    raise DraconfError(
                        f"test bed {self.name!r} is already up with faults {state.get('faults') or 'none'}, "
                        f"driver {state.get('driver', 'nvidia')} "
                        f"and inventory {state.get('inventory')}; run `draconf testbed down"
                        f"{'' if self.name == 'default' else ' --name ' + self.name}` first")
                log(f"test bed {self.name!r} is already up")
                return self.kubeconfig
            stopped = [c for c, alive in self.processes().items() if not alive]
            raise DraconfError(
                f"test bed {self.name!r} is half up ({', '.join(stopped) or 'never became ready'}"
                f"{' not running' if stopped else ''}); logs are in {self.logs}. "
                f"Run `draconf testbed down{'' if self.name == 'default' else ' --name ' + self.name}` "
                "to clear it, then `up` again")
        if inventory.real_nodes and (why := network.check_can_create() or hostsys.check_cgroups()):
            raise DraconfError(f"cannot start real nodes: {why}. Start the bed with KWOK nodes "
                               "instead: `draconf testbed up --node-kind kwok`")
        if apiserver_port is not None and not processes.port_is_free(apiserver_port):
            raise DraconfError(f"port {apiserver_port} on 127.0.0.1 is already in use; choose another "
                               "--port or leave it out to pick a free one")
        bindir = build.ensure_built(log=log)
        if driver == "example":
            build.ensure_example_built(log=log)
        upstream = None
        if driver in upstream_nvidia.DRIVER_CHOICES:
            build.ensure_helm_built(log=log)
            upstream = upstream_nvidia.ensure_built(upstream_nvidia.DRIVER_CHOICES[driver],
                                                    upstream_nvidia.sources_dir(upstream_sources), bindir, log=log)
        started = time.monotonic()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.logs.mkdir(parents=True)
        state = {"name": self.name, "faults": faults, "inventory": inventory.source,
                 "driver": driver, "processes": {}, "ready": False}
        self._save(state)
        try:
            self._start(state, bindir, inventory, faults, apiserver_port, log, timeout, driver, upstream)
        except BaseException:
            log(f"test bed {self.name!r} failed to start; stopping what was started "
                f"(logs kept in {self.logs})")
            self._stop_processes(log=lambda *_: None)
            self.state_file.unlink(missing_ok=True)
            raise
        state["ready"] = True
        self._save(state)
        log(f"test bed {self.name!r} is up in {time.monotonic() - started:.1f}s: "
            f"{len(inventory.nodes)} nodes ({len(inventory.real_nodes)} real), "
            + ("dra-example-driver from its chart" if driver == "example" else f"{inventory.gpu_count} GPUs"
               + (f", {upstream.release.module} {upstream.release.version} from its chart" if upstream else ""))
            + (f", faults: {', '.join(faults)}" if faults else ""))
        log(f"kubeconfig: {self.kubeconfig}")
        return self.kubeconfig

    def _start(self, state, bindir, inventory, faults, apiserver_port, log, timeout, driver, upstream=None) -> None:
        real = inventory.real_nodes
        layout = network.Layout.plan(self.dir, [n.name for n in real]) if real else None
        pki = pki_mod.create(self.dir / "pki", extra_server_ips=(network.Layout.apiserver_ip,) if layout else (),
                             nodes={n.name: layout.node(n.name).ip for n in real} if layout else None)
        server = f"https://127.0.0.1:{apiserver_port or processes.free_ports(1)[0]}"
        state["server"] = server
        if layout:
            # Inside the bed's own namespace every port is free: use the well-known ones.
            state["network"] = layout.namespaces
            self._save(state)
            network.create(layout)
            ports = {"etcd-client": 2379, "etcd-peer": 2380, "apiserver": network.APISERVER_PORT,
                     "kwok": 10247}
            netns = layout.control_plane
            internal_server = f"https://127.0.0.1:{network.APISERVER_PORT}"
        else:
            etcd_client, etcd_peer, kwok = processes.free_ports(3)
            ports = {"etcd-client": etcd_client, "etcd-peer": etcd_peer,
                     "apiserver": int(server.rsplit(":", 1)[1]), "kwok": kwok}
            netns = None
            internal_server = server
        state["ports"] = ports
        self._save(state)
        for identity in pki_mod.IDENTITIES:
            self._write_kubeconfig(self.dir / f"{identity}.kubeconfig",
                                   internal_server if identity in IN_CONTROL_PLANE else server, pki, identity)
        shutil.copyfile(self.dir / "admin.kubeconfig", self.kubeconfig)
        deadline = time.monotonic() + timeout

        log("starting etcd")
        self._spawn(state, "etcd", [
            str(bindir / "etcd"), "--name", "testbed", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{ports['etcd-client']}",
            "--advertise-client-urls", f"http://127.0.0.1:{ports['etcd-client']}",
            "--listen-peer-urls", f"http://127.0.0.1:{ports['etcd-peer']}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{ports['etcd-peer']}",
            "--initial-cluster", f"testbed=http://127.0.0.1:{ports['etcd-peer']}",
            "--quota-backend-bytes", str(4 << 30), "--unsafe-no-fsync", "--log-level", "warn"], netns=netns)
        if layout:
            # The host reaches the API server only through this forwarder.
            self._spawn(state, "apiserver-forwarder", [
                sys.executable, "-m", "draconf.testbed.forward", "--listen", server.rsplit(":", 1)[1],
                "--netns", network.netns_path(layout.control_plane),
                "--to", f"127.0.0.1:{network.APISERVER_PORT}"])
        else:
            self._wait_http(f"http://127.0.0.1:{ports['etcd-client']}/health", "etcd", deadline)

        log("starting kube-apiserver")
        address = ["--bind-address=0.0.0.0", f"--advertise-address={network.Layout.apiserver_ip}",
                   f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                   f"--kubelet-client-key={pki.kubelet_client_key}",
                   f"--kubelet-certificate-authority={pki.ca_cert}"] if layout else [
                   "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
        self._spawn(state, "kube-apiserver", [
            str(bindir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ports['etcd-client']}",
            *address, f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki.server_cert}", f"--tls-private-key-file={pki.server_key}",
            f"--client-ca-file={pki.ca_cert}", f"--token-auth-file={pki.token_file}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *admission_flags(enforce_quota="quota-not-enforced" not in faults),
            *faults_mod.apiserver_flags(faults),
            "--allow-privileged=true", "--kubelet-preferred-address-types=InternalIP",
            "--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
            # A DELETE of a collection (kubectl delete --all's server side, and every namespace's
            # deletion) deletes one object at a time by default: 800 pods took 11 s, idle cores.
            "--delete-collection-workers=4",
            "--profiling=false", "--v=1"], netns=netns)
        self._wait_http(f"{server}/readyz", "kube-apiserver", deadline, pki=pki)
        self._grant_component_roles()

        log("starting kube-controller-manager, kube-scheduler and kwok")
        self._spawn(state, "kube-controller-manager", [
            str(bindir / "kube-controller-manager"),
            f"--kubeconfig={self.dir / 'kube-controller-manager.kubeconfig'}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_cert}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-gc-syncs=20", "--v=1",
            *faults_mod.controller_manager_flags(faults)], netns=netns)
        scheduler_client = [f"--kubeconfig={self.dir / 'kube-scheduler.kubeconfig'}",
                            "--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=400"]
        config = faults_mod.scheduler_config(faults, str(self.dir / "kube-scheduler.kubeconfig"))
        if config:
            (self.dir / "kube-scheduler.yaml").write_text(yaml.safe_dump(config))
            scheduler_client = [f"--config={self.dir / 'kube-scheduler.yaml'}"]
        self._spawn(state, "kube-scheduler", [
            str(bindir / "kube-scheduler"), *scheduler_client,
            "--bind-address=127.0.0.1", "--secure-port=0", "--v=1",
            *faults_mod.scheduler_flags(faults)], netns=netns)
        kwok_yaml = self.dir / "kwok.yaml"
        kwok_yaml.write_text(kwok_config.render(pins.KUBERNETES_VERSION))
        root = self._kwok_sandbox(bindir)
        self._spawn(state, "kwok", sandbox.command(
            root, binds=[(bindir / "kwok", Path(KWOK_TOOLS) / "kwok", True), (self.dir, self.dir, True)],
            path=f"{KWOK_TOOLS}/bin", workdir=self.dir, program=[
                f"{KWOK_TOOLS}/kwok", f"--kubeconfig={self.dir / 'kwok.kubeconfig'}",
                f"--config={kwok_yaml}", "--manage-nodes-with-label-selector=type=kwok",
                f"--node-ip={kwok_config.NODE_IP}", f"--node-port={ports['kwok']}",
                f"--server-address=127.0.0.1:{ports['kwok']}", "--enable-crds=Exec",
                f"--tls-cert-file={pki.kwok_cert}", f"--tls-private-key-file={pki.kwok_key}",
                "--node-lease-duration-seconds=40", f"--cidr={kwok_config.KWOK_POD_CIDR}"]),
            netns=netns, marker=f"draconf.testbed.sandbox --root {root}")

        (self.dir / "inventory.json").write_text(json.dumps(_inventory_doc(inventory)))
        log("installing the NVIDIA DRA driver (simulated on KWOK nodes)" if driver == "nvidia"
            else "registering KWOK nodes")
        self._spawn(state, "nvidia-dra-driver", [
            sys.executable, "-m", "draconf.testbed.agent", "--state-dir", str(self.dir),
            "--crd-dir", str(build.crd_dir()), f"--driver={driver}", *[f"--fault={f}" for f in faults]],
            marker="-m draconf.testbed.agent")
        if layout:
            log(f"starting {len(real)} real node(s): containerd, kubelet")
            hostsys.record_sysctls()
            for node in real:
                self._start_real_node(state, bindir, pki, layout, node, faults, driver, upstream)
        if driver == "example":
            log("installing dra-example-driver from its chart (helm template)")
            self._install_example_driver(bindir)
        if upstream is not None:
            log(f"installing {upstream.release.module} {upstream.release.version} from its chart "
                f"{upstream.release.chart_name} (helm template)")
            self._install_upstream_driver(bindir, upstream)
        log("waiting for nodes, ResourceSlices and DeviceClasses")
        from draconf.testbed.readiness import wait_ready  # needs the kubernetes client; lazy
        wait_ready(self, inventory, faults, deadline, log, driver)

    def _install_example_driver(self, bindir: Path) -> None:
        from draconf.kube import connect  # needs the kubernetes client; lazy
        from draconf.testbed import example_driver
        api = connect(self.kubeconfig)
        docs = example_driver.render(bindir / "example" / "helm", build.example_chart_dir(),
                                     images.EXAMPLE_PLUGIN_REF, *example_driver.cluster_facts(api))
        example_driver.install(api, docs)

    def _install_upstream_driver(self, bindir: Path, upstream) -> None:
        from draconf.kube import connect  # needs the kubernetes client; lazy
        from draconf.testbed import example_driver
        api = connect(self.kubeconfig)
        docs = upstream_chart.render(bindir / "example" / "helm", upstream,
                                      *example_driver.cluster_facts(api), workdir=self.dir)
        upstream_chart.install(api, upstream.release, docs)

    def _start_real_node(self, state, bindir, pki, layout, node, faults, driver, upstream=None) -> None:
        """Write one node's configuration and simulated hardware, then start its supervisor."""
        from draconf.testbed import nvidia  # the NVIDIA install's facts; needs no cluster
        net = layout.node(node.name)
        paths = node_config.NodePaths(self.dir / "nodes" / node.name)
        paths.create()
        cgroup_root = hostsys.cgroup_root(layout.tag, node.name)
        state.setdefault("real_nodes", {})[node.name] = {"dir": str(paths.dir), "cgroup_root": cgroup_root}
        self._save(state)
        shutil.copyfile(pki.ca_cert, paths.pki / "ca.crt")
        cert, key = pki.kubelet_serving(node.name)
        shutil.copyfile(cert, paths.pki / "kubelet.crt")
        shutil.copyfile(key, paths.pki / "kubelet.key")
        user = pki_mod.node_user(node.name)
        (paths.etc / "kubelet.kubeconfig").write_text(yaml.safe_dump(node_config.kubeconfig(
            f"https://{layout.apiserver_ip}:{network.APISERVER_PORT}", paths.pki / "ca.crt", user, pki.token(user))))
        (paths.etc / "kubelet.yaml").write_text(yaml.safe_dump(
            node_config.kubelet_config(paths, net.ip, cgroup_root), sort_keys=False))
        base_spec = None
        if upstream is not None and node.has_gpus:
            # Every container starts from containerd's default spec with the node's mock-NVML
            # profile mounted (mock_nvml_node.MOCK_CONFIG_MOUNT says why).
            default = json.loads(subprocess.run([str(bindir / "ctr"), "oci", "spec"], capture_output=True,
                                                text=True, check=True).stdout)
            base_spec = paths.etc / "base-runtime-spec.json"
            base_spec.write_text(json.dumps(mock_nvml_node.base_runtime_spec(default), indent=2))
        (paths.etc / "containerd.toml").write_text(
            node_config.containerd_toml(paths, bindir, images.PAUSE_REF, base_runtime_spec=base_spec))
        (paths.cni_conf_dir / "10-draconf.conflist").write_text(node_config.cni_conflist(net.pod_cidr))
        labels = {}
        if driver == "nvidia":
            nvidia.install_driver_root(paths.driver_root, node, bindir / "nvidia-smi",
                                       mig_caps="mig-caps-missing" not in faults,
                                       mps_control=bindir / "nvidia-cuda-mps-control")
            labels = nvidia.node_labels(node.gpus[0].model.product_name if node.gpus else None)
        archives = [str(path) for path in build.image_archives(driver)]
        if upstream is not None:
            if node.has_gpus:
                mock_nvml_node.install_driver_root(paths.driver_root, node, upstream,
                                                    mps_control=bindir / "nvidia-cuda-mps-control",
                                                    shell=bindir / "busybox")
            # The labels NFD and GPU Feature Discovery give a GPU node, which the chart's
            # kubelet-plugin affinity selects on.
            labels = nvidia.node_labels(node.gpus[0].model.product_name if node.gpus else None)
            archives = archives[:2] + [str(upstream.image), str(upstream.workload_image)]
        taints = [faults_mod.GPU_NODE_TAINT] if node.has_gpus and "gpu-nodes-tainted" in faults else []
        spec = {"name": node.name, "bindir": str(bindir), "cgroup_root": cgroup_root,
                "images": archives,
                "kubelet_args": [
                    f"--config={paths.etc / 'kubelet.yaml'}", f"--kubeconfig={paths.etc / 'kubelet.kubeconfig'}",
                    f"--hostname-override={node.name}", f"--node-ip={net.ip}", "--root-dir=/var/lib/kubelet",
                    f"--cert-dir={paths.pki}",
                    *([f"--node-labels={','.join(f'{k}={v}' for k, v in labels.items())}"] if labels else []),
                    *([f"--register-with-taints={t['key']}={t['value']}:{t['effect']}" for t in taints]),
                    "--v=1"]}
        paths.spec_file.write_text(json.dumps(spec, indent=2))
        self._spawn(state, f"node/{node.name}", [
            "unshare", "--mount", "--uts", "--propagation", "private", "--",
            sys.executable, "-m", "draconf.testbed.node", "--node-dir", str(paths.dir)],
            netns=net.netns, marker=f"draconf.testbed.node --node-dir {paths.dir}")

    def _kwok_sandbox(self, bindir: Path) -> Path:
        """The root kwok runs in, and so every ``kubectl exec`` into a KWOK node's pod.

        kwok runs an exec request as a process of its own.  In this root the only programs
        are the nvidia-smi stand-in and ``env`` (the agent's probe reads a container's
        environment with it); anything else, by name or by path, does not exist, as a
        command missing from a container image.  See :mod:`draconf.testbed.sandbox`.
        """
        root = self.dir / "kwok-sandbox"
        tools = root / KWOK_TOOLS.lstrip("/") / "bin"
        tools.mkdir(parents=True, exist_ok=True)
        for name, source in (("nvidia-smi", bindir / "nvidia-smi"), ("env", bindir / "busybox")):
            shutil.copyfile(source, tools / name)  # busybox runs the applet its name says
            (tools / name).chmod(0o755)
        return root

    def _grant_component_roles(self) -> None:
        """As the admin, bind each component that is not in system:masters to its upstream
        role (``data/rbac/``); scheduler and controller manager have theirs from the API
        server's bootstrap policy."""
        from kubernetes.client.exceptions import ApiException

        from draconf.kube import connect  # needs the kubernetes client; lazy
        api = connect(self.dir / "admin.kubeconfig")
        create = {"ClusterRole": api.rbac.create_cluster_role,
                  "ClusterRoleBinding": api.rbac.create_cluster_role_binding}
        for path in sorted(COMPONENT_RBAC.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                try:
                    create[doc["kind"]](doc)
                except ApiException as err:
                    if err.status != 409:  # a bed restarted on its state keeps them
                        raise DraconfError(f"cannot create {doc['kind']} {doc['metadata']['name']} "
                                           f"from {path}: {err.status} {err.reason}") from None

    def _write_kubeconfig(self, path: Path, server: str, pki, identity: str) -> None:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": f"draconf-{self.name}",
            "clusters": [{"name": f"draconf-{self.name}", "cluster": {
                "server": server, "certificate-authority": str(pki.ca_cert)}}],
            "users": [{"name": identity, "user": {"token": pki.token(identity)}}],
            "contexts": [{"name": f"draconf-{self.name}", "context": {
                "cluster": f"draconf-{self.name}", "user": identity}}],
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    def _spawn(self, state: dict, name: str, cmd: list[str], env: dict | None = None,
                netns: str | None = None, marker: str | None = None) -> None:
        """Start a component in its own session; ``marker`` is what its command line shows once
        running (default: the program), by which a later process recognises it."""
        marker = marker or cmd[0]
        if netns:
            cmd = network.in_netns(netns, cmd)
        logfile = open(self.logs / f"{name.replace('/', '-')}.log", "ab")
        if env is None:
            # If the bed runs with draconf installed from a source tree, the Python components
            # (agent, forwarder, node supervisors) must import that same tree.
            env = dict(os.environ)
            package_root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        proc = subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=self.dir, env={**GO_RUNTIME_ENV, **env}, start_new_session=True)
        logfile.close()
        processes.CHILDREN[proc.pid] = proc
        state["processes"][name] = {"pid": proc.pid, "marker": marker}
        self._save(state)

    def start_process(self, name: str, cmd: list[str], marker: str) -> None:
        """Start a process that acts on the running bed from outside it (an external fault's,
        e.g. ``fault/cdi-tamper``); it is one of the bed's, so ``down`` stops it with the rest."""
        self._spawn(self.running_state(), name, cmd, marker=marker)

    def stop_process(self, name: str) -> bool:
        """Stop a process :meth:`start_process` started; False if the bed has none by that name."""
        state = self.running_state()
        if name not in state["processes"]:
            return False
        self._terminate([name], state["processes"], grace=3)
        del state["processes"][name]
        self._save(state)
        return True

    def check_alive(self) -> None:
        """Raise with the log tail of the first component that has exited."""
        for name, alive in self.processes().items():
            if not alive:
                tail = self.log_tail(name)
                hint = ""
                if "address already in use" in tail:
                    hint = " (a port it needs is taken by another process)"
                child = processes.CHILDREN.get(self.running_state()["processes"][name]["pid"])
                if child is not None and child.poll() is not None:
                    code = child.returncode
                    hint += f" (exit status {code})" if code >= 0 else f" (killed by signal {-code})"
                message = f"{name} exited during start-up{hint}; last lines of {self._log_path(name)}:\n{tail}"
                if name.startswith("node/"):
                    node_logs = Path(self.running_state()["real_nodes"][name[5:]]["dir"]) / "logs"
                    for component in ("kubelet", "containerd"):
                        message += f"\nlast lines of {node_logs / (component + '.log')}:\n" + processes.tail(
                            node_logs / f"{component}.log", 8)
                    message += ("\nIf real nodes cannot run on this machine, start the bed with KWOK "
                                "nodes instead: `draconf testbed up --node-kind kwok`")
                raise DraconfError(message)

    def _log_path(self, name: str) -> Path:
        return self.logs / f"{name.replace('/', '-')}.log"

    def log_tail(self, name: str, lines: int = 15) -> str:
        return processes.tail(self._log_path(name), lines)

    def _wait_http(self, url: str, name: str, deadline: float, pki=None) -> None:
        context = None
        headers = {}
        if pki is not None:
            context = ssl.create_default_context(cafile=str(pki.ca_cert))
            headers["Authorization"] = f"Bearer {pki.token('admin')}"
        last = "no answer yet"
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                req = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(req, timeout=2, context=context) as resp:
                    if resp.status == 200:
                        return
            except urllib.error.HTTPError as err:
                last = f"HTTP {err.code}"
            except OSError as err:
                last = str(getattr(err, "reason", err))
            time.sleep(0.2)
        raise DraconfError(f"{name} did not become ready at {url} (last answer: {last}); "
                           f"see {self._log_path(name)}")

    def restart_apiserver(self, enforce_quota: bool, timeout: float = 60) -> None:
        """Restart kube-apiserver with the ResourceQuota admission plugin on or off, as an admin
        who edits its flags does (on kubeadm: the static pod manifest, which the kubelet then
        restarts).  Every other flag is the running process's own; the rest of the bed keeps
        running and reconnects.  The bed's recorded faults follow (``quota-not-enforced``)."""
        if not self.is_up:
            raise DraconfError(f"test bed {self.name!r} is not up")
        state = self.running_state()
        procs = state["processes"]
        argv = Path(f"/proc/{procs['kube-apiserver']['pid']}/cmdline").read_bytes().decode().split("\0")[:-1]
        argv = [a for a in argv if not a.startswith(("--enable-admission-plugins=", "--disable-admission-plugins="))]
        self._terminate(["kube-apiserver"], procs, grace=3)
        self._spawn(state, "kube-apiserver", argv + admission_flags(enforce_quota),
                    netns=state["network"][0] if state.get("network") else None)
        faults = set(state.get("faults", [])) - {"quota-not-enforced"}
        state["faults"] = sorted(faults | (set() if enforce_quota else {"quota-not-enforced"}))
        self._save(state)
        self._wait_http(f"{state['server']}/readyz", "kube-apiserver", time.monotonic() + timeout,
                        pki=pki_mod.Pki(self.dir / "pki"))

    # --- down --------------------------------------------------------------------------------
    def down(self, log=print) -> bool:
        """Stop every process this bed started and remove its state. False if nothing was there."""
        if not self.dir.exists():
            return False
        started = time.monotonic()
        self._stop_processes(log)
        shutil.rmtree(self.dir, ignore_errors=True)
        log(f"test bed {self.name!r} is down ({time.monotonic() - started:.1f}s)")
        return True

    def _stop_processes(self, log) -> None:
        state = self.state() or {}
        procs = state.get("processes", {})
        # The driver first (it acts on what it sees), then the real nodes, which need the longest
        # to stop (kubelet, then containers, then containerd), then the rest in reverse start
        # order: kwok before the API server, etcd last.
        names = list(procs)
        order = ([n for n in names if n == "nvidia-dra-driver"] + [n for n in names if n.startswith("node/")]
                 + [n for n in reversed(names) if n != "nvidia-dra-driver" and not n.startswith("node/")])
        self._terminate([n for n in order if n == "nvidia-dra-driver" or n.startswith("node/")], procs,
                        grace=NODE_STOP_GRACE)
        for node in state.get("real_nodes", {}).values():
            node_mod.sweep(Path(node["dir"]), node["cgroup_root"])
        # Everything else is thrown away afterwards, so a short grace is enough (kube-apiserver
        # would otherwise drain its watches for up to a minute).
        self._terminate([n for n in order if n != "nvidia-dra-driver" and not n.startswith("node/")], procs,
                        grace=3)
        network.destroy(state.get("network", []))
        if state.get("real_nodes") and not hostsys.running_node_supervisors():
            hostsys.restore_sysctls()
            hostsys.remove_created_dirs()

    def _terminate(self, names: list[str], procs: dict, grace: float) -> None:
        """SIGTERM each process group, wait up to ``grace`` seconds for all, then SIGKILL."""
        for name in names:
            proc = procs[name]
            if processes.pid_alive(proc["pid"], proc["marker"]):
                try:
                    os.killpg(proc["pid"], signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for name in names:
            proc = procs[name]
            while processes.pid_alive(proc["pid"], proc["marker"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            if processes.pid_alive(proc["pid"], proc["marker"]):
                try:
                    os.killpg(proc["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
            processes.reap(proc["pid"])


def _inventory_doc(inventory: Inventory) -> dict:
    """The inventory as the agent reads it back: per node, what NVML reports on it (the same
    record real nodes get in their driver root)."""
    from draconf.testbed import nvidia
    return {"source": inventory.source, "dynamicMIG": inventory.dynamic_mig,
            "nodes": [{"name": n.name, "kind": n.kind, **nvidia.nvml_data(n)} for n in inventory.nodes]}
