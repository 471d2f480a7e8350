"""A real node's configuration, as containerd and the kubelet will read it (no node started)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from draconf.testbed import network
from draconf.testbed.node_config import NodePaths, cni_conflist, containerd_toml, kubelet_config

PATHS = NodePaths(Path("/state/nodes/gpu-h100-0"))


def test_containerd_config_is_version_3_with_what_this_machine_needs():
    config = tomllib.loads(containerd_toml(PATHS, Path("/cache/bin"), "draconf.local/pause:3.10"))
    assert config["version"] == 3 and config["grpc"]["address"] == "/run/containerd/containerd.sock"
    plugins = config["plugins"]
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True and "/var/run/cdi" in runtime["cdi_spec_dirs"]
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": "/cache/bin/runc", "SystemdCgroup": False, "Root": "/run/containerd/runc"}
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "draconf.local/pause:3.10"
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True


def test_kubelet_serves_with_webhook_auth_on_its_node_ip_and_never_evicts_for_the_host():
    config = kubelet_config(PATHS, "10.213.0.10", "/draconf-abc-gpu-h100-0")
    assert config["address"] == "10.213.0.10" and config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["cgroupDriver"] == "cgroupfs" and config["failCgroupV1"] is False
    assert config["imageGCHighThresholdPercent"] == 100


def test_pods_get_the_nodes_own_subnet_without_masquerade():
    (bridge,) = json.loads(cni_conflist("10.244.2.0/24"))["plugins"]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24", "gateway": "10.244.2.1"}]]


def test_every_node_has_its_own_addresses_and_namespaces_unique_per_state_dir():
    one = network.Layout.plan("/a/testbeds/default", ["n0", "n1", "n2"])
    other = network.Layout.plan("/b/testbeds/default", ["n0"])
    assert len({n.ip for n in one.nodes}) == 3 and len({n.pod_cidr for n in one.nodes}) == 3
    assert one.control_plane != other.control_plane
    assert all(len(n.bridge_port) <= 15 for n in one.nodes)  # Linux interface names
