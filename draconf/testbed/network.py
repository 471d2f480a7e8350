"""The network of a bed with real nodes: namespaces the bed creates, nothing on the host's interfaces.

A real kubelet refuses a loopback node IP, and the API server must reach each kubelet (for
``exec`` and ``logs``) at that IP.  This machine's rule is that traffic goes only to loopback or
to addresses inside network namespaces the project itself creates, so the bed builds its own
small network out of namespaces and touches no host interface::

    host                 127.0.0.1:<port>  --(forwarder)-->  control-plane ns 127.0.0.1:443
    control-plane ns     lo: 127.0.0.1, 10.96.0.1/32 (the `kubernetes` Service IP)
                         br0: 10.213.0.1/24; etcd, kube-apiserver (:443), scheduler,
                         controller-manager and kwok run here
    node ns (one each)   eth0: 10.213.0.<10+i>/24 (a veth whose peer sits on br0),
                         default route via 10.213.0.1; pods behind cni0 on 10.244.<i>.0/24

There is no kube-proxy (this machine has no iptables).  The one Service pods need, the API
server's, works because its ClusterIP is a local address of the control-plane namespace and
kube-apiserver listens on port 443 there, so in-cluster clients (the DRA kubelet plugin's
ServiceAccount) reach it exactly as on a real cluster.

Namespace names carry a hash of the bed's state directory, so two beds of the same name in
different state directories (a developer's and CI's) never collide.

>>> layout = Layout.plan("/tmp/x/testbeds/default", ["gpu-a", "gpu-b"])
>>> layout.node("gpu-b").ip, layout.node("gpu-b").pod_cidr, layout.apiserver_ip
('10.213.0.11', '10.244.1.0/24', '10.213.0.1')
>>> layout.control_plane.startswith("draconf-") and layout.node("gpu-a").netns.endswith("-n0")
True
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from draconf.errors import DraconfError

BRIDGE_SUBNET = "10.213.0"
APISERVER_SERVICE_IP = "10.96.0.1"
APISERVER_PORT = 443
#: At most this many real nodes per bed (the bridge subnet is one /24).
MAX_REAL_NODES = 200


@dataclass(frozen=True)
class NodeNet:
    name: str
    index: int
    netns: str

    @property
    def ip(self) -> str:
        return f"{BRIDGE_SUBNET}.{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def bridge_port(self) -> str:
        """The name of this node's veth end on the control plane's bridge."""
        return f"vn{self.index}"


@dataclass(frozen=True)
class Layout:
    control_plane: str
    nodes: tuple[NodeNet, ...]

    apiserver_ip = f"{BRIDGE_SUBNET}.1"

    @classmethod
    def plan(cls, bed_dir: str | Path, node_names: list[str]) -> "Layout":
        if len(node_names) > MAX_REAL_NODES:
            raise DraconfError(f"a bed holds at most {MAX_REAL_NODES} real nodes "
                               f"({len(node_names)} asked); use KWOK nodes for large fleets")
        tag = hashlib.sha256(str(Path(bed_dir).resolve()).encode()).hexdigest()[:8]
        cp = f"draconf-{tag}"
        return cls(cp, tuple(NodeNet(n, i, f"{cp}-n{i}") for i, n in enumerate(node_names)))

    @property
    def tag(self) -> str:
        """The hash of the bed's state directory that names everything the bed makes on the host."""
        return self.control_plane.removeprefix("draconf-")

    def node(self, name: str) -> NodeNet:
        return next(n for n in self.nodes if n.name == name)

    @property
    def namespaces(self) -> list[str]:
        return [self.control_plane, *(n.netns for n in self.nodes)]


def netns_path(name: str) -> str:
    return f"/run/netns/{name}"


def in_netns(name: str, cmd: list[str]) -> list[str]:
    """``cmd`` run inside a bed namespace; ``nsenter`` execs it, so its PID is the command's."""
    return [shutil.which("nsenter") or "nsenter", f"--net={netns_path(name)}", "--", *cmd]


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode:
        raise DraconfError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")


def _sysctl(netns: str, key: str, value: str) -> None:
    # /proc/sys/net shows the network namespace of the process that opens it.
    proc = subprocess.run(in_netns(netns, ["sysctl", "-q", "-w", f"{key}={value}"]),
                          capture_output=True, text=True)
    if proc.returncode:
        raise DraconfError(f"setting {key} in {netns} failed: {proc.stderr.strip()}")


def check_can_create() -> str | None:
    """Why this process cannot build the network, or None if it can."""
    if os.geteuid() != 0:
        return "real nodes need root (network namespaces, mounts and cgroups)"
    for tool in ("ip", "nsenter", "unshare", "sysctl", "mount"):
        if shutil.which(tool) is None:
            return f"real nodes need the `{tool}` command (Debian: iproute2, util-linux, procps)"
    return None


def create(layout: Layout) -> None:
    """Create every namespace, the bridge, the veths and the routes (idempotent only via destroy)."""
    cp = layout.control_plane
    _ip("netns", "add", cp)
    _ip("-n", cp, "link", "set", "lo", "up")
    _ip("-n", cp, "addr", "add", f"{APISERVER_SERVICE_IP}/32", "dev", "lo")
    _ip("-n", cp, "link", "add", "br0", "type", "bridge")
    _ip("-n", cp, "addr", "add", f"{layout.apiserver_ip}/24", "dev", "br0")
    _ip("-n", cp, "link", "set", "br0", "up")
    _sysctl(cp, "net.ipv4.ip_forward", "1")
    for node in layout.nodes:
        _ip("netns", "add", node.netns)
        _ip("-n", node.netns, "link", "set", "lo", "up")
        _ip("-n", cp, "link", "add", node.bridge_port, "type", "veth",
            "peer", "name", "eth0", "netns", node.netns)
        _ip("-n", cp, "link", "set", node.bridge_port, "master", "br0", "up")
        _ip("-n", node.netns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        _ip("-n", node.netns, "link", "set", "eth0", "up")
        _ip("-n", node.netns, "route", "add", "default", "via", layout.apiserver_ip)
        _ip("-n", cp, "route", "add", node.pod_cidr, "via", node.ip)
        _sysctl(node.netns, "net.ipv4.ip_forward", "1")


def destroy(namespaces: list[str]) -> None:
    """Delete a bed's namespaces (their links go with them); missing ones are fine."""
    for name in reversed(namespaces):
        if os.path.exists(netns_path(name)):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
