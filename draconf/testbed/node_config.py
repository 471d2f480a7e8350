"""Configuration files of one real node: containerd, the CNI network, the kubelet.

Pure functions: they take a :class:`NodePaths` and the node's facts and return file contents,
so a unit test can read what a node is told.  The node supervisor
(:mod:`draconf.testbed.node`) runs containerd and kubelet in a mount namespace of the node's
own, where the node's directories are bind-mounted over the standard paths
(``/var/lib/kubelet``, ``/run/containerd``, ``/var/run/cdi`` ...); the configurations therefore
name the standard paths, as on any kubeadm node, wherever the node's state really lives.

>>> paths = NodePaths(Path("/s/nodes/gpu-a"))
>>> "restrict_oom_score_adj = true" in containerd_toml(paths, Path("/bin"), "draconf.local/pause:3.10")
True
>>> kubelet_config(paths, "10.213.0.10", "/draconf-x-gpu-a")["cgroupRoot"]
'/draconf-x-gpu-a'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: Where the node's containerd listens, inside its own mount namespace.
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
#: Where the simulated driver root (the "hardware") appears on the node, as a GPU Operator's
#: containerized driver does.
DRIVER_ROOT = "/run/nvidia/driver"


@dataclass(frozen=True)
class NodePaths:
    """The directories of one node under the bed's state directory, and where each is mounted."""
    dir: Path

    etc = property(lambda self: self.dir / "etc")
    logs = property(lambda self: self.dir / "logs")
    pki = property(lambda self: self.dir / "pki")
    containerd_root = property(lambda self: self.dir / "containerd")
    cni_conf_dir = property(lambda self: self.dir / "etc" / "cni")
    driver_root = property(lambda self: self.dir / "driver-root")
    spec_file = property(lambda self: self.dir / "node.json")
    #: The node's own resolver: nothing, as in an air-gapped cluster.  Lookups (an image pull
    #: from a registry, a pod's DNS) fail at once on the node's loopback instead of sending
    #: packets towards the host's resolver, which the bed's network must never reach.
    resolv_conf = property(lambda self: self.dir / "etc" / "resolv.conf")

    @property
    def mounts(self) -> list[tuple[Path, str]]:
        """(node directory, standard path) pairs bind-mounted in the node's mount namespace."""
        return [(self.dir / "kubelet", "/var/lib/kubelet"),
                (self.dir / "var-log", "/var/log"),
                (self.dir / "run-containerd", "/run/containerd"),
                (self.dir / "cdi", "/run/cdi"),
                (self.dir / "cni-state", "/var/lib/cni"),
                # The driver root's parent is a mount of its own, shared as every mount above:
                # NVIDIA's chart mounts it into its init container with HostToContainer
                # propagation, which containerd refuses on a private mount ("path /run/nvidia
                # is mounted on / but it is not a shared or slave mount").
                (self.dir / "run-nvidia", str(Path(DRIVER_ROOT).parent)),
                (self.driver_root, DRIVER_ROOT),
                (self.resolv_conf, "/etc/resolv.conf")]

    def create(self) -> None:
        for path in (self.etc, self.logs, self.pki, self.containerd_root, self.cni_conf_dir,
                     *(src for src, _ in self.mounts if src != self.resolv_conf)):
            path.mkdir(parents=True, exist_ok=True)
        self.resolv_conf.write_text("# draconf test bed node: no resolver (air-gapped)\nnameserver 127.0.0.1\n")


def containerd_toml(paths: NodePaths, bindir: Path, sandbox_image: str,
                    base_runtime_spec: Path | None = None) -> str:
    """containerd v2 (config version 3) as this machine needs it (see docs/testbed.md);
    ``base_runtime_spec``, an OCI spec every container of the node starts from."""
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    base = f'\n      base_runtime_spec = "{base_runtime_spec}"' if base_runtime_spec else ""
    return f"""\
version = 3
root = "{paths.containerd_root}"
state = "/run/containerd"

[grpc]
  address = "{CONTAINERD_SOCKET}"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{sandbox_image}"

[{cri_runtime}]
  # This sandbox may not lower a process's OOM score; runc would fail every container.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [{cri_runtime}.containerd]
    default_runtime_name = "runc"
    [{cri_runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"{base}
      [{cri_runtime}.containerd.runtimes.runc.options]
        BinaryName = "{bindir / 'runc'}"
        SystemdCgroup = false
        Root = "/run/containerd/runc"
  [{cri_runtime}.cni]
    bin_dirs = ["{bindir / 'cni'}"]
    conf_dir = "{paths.cni_conf_dir}"
"""


def cni_conflist(pod_cidr: str) -> str:
    """A bridge network for the node's pods; no masquerade (this machine has no iptables)."""
    gateway = pod_cidr.rsplit(".", 1)[0] + ".1"
    return json.dumps({
        "cniVersion": "1.0.0", "name": "draconf",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                     "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr, "gateway": gateway}]],
                              "routes": [{"dst": "0.0.0.0/0"}]}}]}, indent=2)


def kubelet_config(paths: NodePaths, node_ip: str, cgroup_root: str) -> dict:
    """KubeletConfiguration: webhook authn/authz and real serving certs, as kubeadm sets it up."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node_ip, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(paths.pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(paths.pki / "kubelet.crt"), "tlsPrivateKeyFile": str(paths.pki / "kubelet.key"),
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        # This machine has cgroup v1 (cgroup2 only at /sys/fs/cgroup/unified) and no systemd.
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
        # The host's disk and memory are shared with everything else on the machine: no node
        # evicts pods or deletes the bed's imported images because of what others use.
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%",
                         "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "logging": {"format": "text"},
    }


def kubeconfig(server: str, ca_file: Path, user: str, token: str) -> dict:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "node",
            "clusters": [{"name": "bed", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "node", "context": {"cluster": "bed", "user": user}}]}
