"""NVIDIA's own driver release on the bed (``--driver nvidia-v0.4.0``): the parts that need no
build and no cluster -- where the sources are read from, the cache keyed by an archive's
content, the per-node mock-NVML profile, the driver root's layout, the chart values and the
helm command line, and the image's filesystem.  The builds and the chart install run on a bed
(README, "NVIDIA's own driver on the bed")."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
import yaml

from draconf.errors import DraconfError
from draconf.testbed import inventory, mock_nvml_node as node_root, upstream_chart as chart, upstream_nvidia as up

REPO = Path(__file__).resolve().parents[2]


def _archive(path: Path, top: str, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        for name, content in files.items():
            data = content.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_sources_come_from_the_flag_then_the_environment_then_beside_the_repository(monkeypatch):
    monkeypatch.delenv(up.SOURCES_ENV, raising=False)
    assert up.sources_dir() == REPO.parent / "shared" / "upstream"
    monkeypatch.setenv(up.SOURCES_ENV, "/from/env")
    assert up.sources_dir() == Path("/from/env")
    assert up.sources_dir("/from/flag") == Path("/from/flag")


def test_a_missing_archive_names_the_setting(tmp_path):
    with pytest.raises(DraconfError, match="--upstream-sources"):
        up.archive_path(tmp_path, "dra-driver-nvidia-gpu-v0.4.0.tar.xz")


def test_an_archive_is_unpacked_once_under_its_sha256(tmp_path):
    archive = _archive(tmp_path / "a.tar.xz", "drv-v1", {"go.mod": "module x\n"})
    cache = tmp_path / "cache"
    src = up.extract(archive, cache)
    assert src == cache / up.sha256_of(archive) / "src" / "drv-v1"
    assert (src / "go.mod").read_text() == "module x\n"
    (src / "marker").write_text("kept")
    assert up.extract(archive, cache) == src and (src / "marker").is_file()  # not unpacked again
    other = _archive(tmp_path / "b.tar.xz", "drv-v1", {"go.mod": "module y\n"})
    assert up.extract(other, cache) != src  # other content, other directory


def test_every_release_is_a_driver_choice_and_the_choices_sit_beside_the_bed_drivers():
    from draconf.testbed.cluster import DRIVERS
    assert set(up.DRIVER_CHOICES.values()) == set(up.RELEASES)
    assert {"nvidia", "example", "nvidia-v0.4.0", "nvidia-v25.12.0"} <= set(DRIVERS)


def _node(name="gpu-a100-0"):
    return inventory.load(inventory.GUIDE_INVENTORY).node(name)


def test_the_mock_profile_is_the_inventory_node_over_the_model_profile():
    node = _node("gpu-h200-0")
    base = {"system": {"driver_version": "550.163.01", "cuda_version": "12.4"},
            "device_defaults": {"name": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
                                "memory": {"total_bytes": 85899345920, "reserved_bytes": 1073741824},
                                "gsp_firmware": {"version": "550.163.01"}},
            "devices": [{"index": i} for i in range(8)], "nvlink": {"version": 4}}
    cfg = node_root.mock_nvml_config(node, base)
    assert node_root.profile_for(node.gpus[0].model.product_name, node.gpus[0].model.architecture) == "h100"
    assert cfg["system"]["num_devices"] == len(cfg["devices"]) == len(node.gpus) == 2
    assert cfg["system"]["driver_version"] == "580.95.05" and cfg["system"]["cuda_version"] == "13.0"
    assert cfg["device_defaults"]["name"] == "NVIDIA H200"
    assert cfg["device_defaults"]["memory"]["total_bytes"] == node.gpus[0].model.memory_bytes
    assert cfg["device_defaults"]["memory"]["free_bytes"] == node.gpus[0].model.memory_bytes - 1073741824
    assert cfg["device_defaults"]["gsp_firmware"]["version"] == "580.95.05"
    assert [d["uuid"] for d in cfg["devices"]] == [g.uuid for g in node.gpus]
    assert [d["minor_number"] for d in cfg["devices"]] == [g.minor for g in node.gpus]
    assert cfg["nvlink"] == {"version": 4}  # what the inventory does not say stays the profile's
    assert len({d["serial"] for d in cfg["devices"]}) == 2
    assert yaml.safe_load(yaml.safe_dump(cfg)) == cfg


def test_nodes_of_different_models_get_different_profiles():
    assert node_root.profile_for("NVIDIA A100-SXM4-40GB", "Ampere") == "a100"
    assert node_root.profile_for("NVIDIA H100 80GB HBM3", "Hopper") == "h100"
    with pytest.raises(DraconfError, match="no mock NVML profile"):
        node_root.profile_for("Some GPU", "Volta")


def test_the_driver_root_holds_library_profile_nvidia_smi_device_nodes_and_proc(tmp_path, monkeypatch):
    mock_src = tmp_path / "infra"
    configs = mock_src / up.MOCKNVML_DIR / "configs"
    configs.mkdir(parents=True)
    (configs / "mock-nvml-config-a100.yaml").write_text(yaml.safe_dump(
        {"system": {}, "device_defaults": {"memory": {}}, "devices": []}))
    lib = tmp_path / "libnvidia-ml.so"
    lib.write_bytes(b"\x7fELF mock")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    made = []
    monkeypatch.setattr(os, "mknod", lambda path, mode, dev: (made.append(
        (str(Path(path).relative_to(root)), stat.S_ISCHR(mode), os.major(dev), os.minor(dev))),
        Path(path).touch()))
    cuda = tmp_path / "libcuda.so"
    cuda.write_bytes(b"\x7fELF cuda")
    built = up.Built(up.RELEASES["v0.4.0"], tmp_path, tmp_path, tmp_path, lib, mock_src, tmp_path, smi, tmp_path, cuda)
    root = tmp_path / "root"
    mps = tmp_path / "mps"
    mps.write_text("#!/bin/sh\n")
    node_root.install_driver_root(root, _node("gpu-a100-0"), built, mps_control=mps, shell=smi)
    assert os.access(root / "usr" / "bin" / "nvidia-cuda-mps-control", os.X_OK)
    assert os.readlink(root / "bin" / "sh") == "busybox" and os.readlink(root / "bin" / "tail") == "busybox"
    libdir = root / "usr" / "lib64"
    assert (libdir / "libnvidia-ml.so.580.95.05").read_bytes() == b"\x7fELF mock"
    assert os.readlink(libdir / "libnvidia-ml.so.1") == "libnvidia-ml.so.580.95.05"
    assert os.readlink(libdir / "libnvidia-ml.so") == "libnvidia-ml.so.1"
    assert (libdir / "libcuda.so.580.95.05").read_bytes() == b"\x7fELF cuda"
    assert os.readlink(libdir / "libcuda.so.1") == "libcuda.so.580.95.05"
    cfg = yaml.safe_load((root / "config" / "config.yaml").read_text())
    assert cfg["device_defaults"]["name"] == "NVIDIA A100-SXM4-40GB" and len(cfg["devices"]) == 2
    assert os.access(root / "usr" / "bin" / "nvidia-smi", os.X_OK)
    assert made == [("dev/nvidia0", True, 195, 0), ("dev/nvidia1", True, 195, 1), ("dev/nvidiactl", True, 195, 255),
                    ("dev/nvidia-uvm", True, 510, 0), ("dev/nvidia-uvm-tools", True, 510, 1)]
    assert "580.95.05" in (root / "proc" / "driver" / "nvidia" / "version").read_text()
    assert "NVreg_ModifyDeviceFiles: 1" in (root / "proc" / "driver" / "nvidia" / "params").read_text()


def test_the_chart_values_are_what_a_user_sets():
    for release in up.RELEASES.values():
        values = chart.chart_values(release)
        assert values["image"] == {"repository": f"draconf.local/{release.image_name}", "tag": release.version,
                                   "pullPolicy": "Never"}
        assert values["nvidiaDriverRoot"] == "/run/nvidia/driver"
        assert values["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
        assert values["gpuResourcesEnabledOverride"] is True
        # GPU sharing on both; device taints where the release taints an unhealthy GPU (v0.4.0)
        health = {"NVMLDeviceHealthCheck": True} if release.version == "v0.4.0" else {}
        assert values["featureGates"] == {"TimeSlicingSettings": True, "MPSSupport": True, **health}


def test_helm_renders_the_release_in_its_namespace_with_crds_and_the_bed_api_versions():
    release = up.RELEASES["v25.12.0"]
    args = chart.helm_args(release, Path("/chart"), Path("/values.yaml"), "v1.36.3",
                        ["v1", "resource.k8s.io/v1"])
    assert args[:3] == ["template", "nvidia-dra-driver-gpu", "/chart"]
    assert args[args.index("--namespace") + 1] == "nvidia-dra-driver-gpu"
    assert "--include-crds" in args and args[args.index("--values") + 1] == "/values.yaml"
    assert args[args.index("--kube-version") + 1] == "v1.36.3"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--api-versions"] == ["v1", "resource.k8s.io/v1"]


def test_the_image_holds_what_the_chart_commands_run(tmp_path):
    src = tmp_path / "src"
    (src / "hack").mkdir(parents=True)
    (src / "hack" / "kubelet-plugin-prestart.sh").write_text("echo\n")
    (src / "templates").mkdir()
    (src / "templates" / "a.tmpl.yaml").write_text("x: 1\n")
    debdir = tmp_path / "debs"
    debdir.mkdir()
    for paths in up.DEBIAN_FILES.values():
        for path in paths:
            (debdir / Path(path).name).write_bytes(b"elf")
    for name in ("plugin", "hook", "busybox"):
        (tmp_path / name).write_bytes(b"elf")
    entries = up.image_entries(tmp_path / "plugin", tmp_path / "hook", src, debdir, tmp_path / "busybox",
                               ["/bin/busybox", "/bin/sh", "/bin/ln", "/usr/bin/find", "/bin/bash"])
    paths = {e.path: e for e in entries}
    for wanted in ("bin/bash", "usr/bin/gpu-kubelet-plugin", "usr/bin/nvidia-cdi-hook",
                   "usr/bin/kubelet-plugin-prestart.sh", "templates/a.tmpl.yaml",
                   "lib/x86_64-linux-gnu/libc.so.6", "bin/ln", "usr/bin/find"):
        assert wanted in paths, wanted
    assert paths["bin/bash"].kind == "file" and paths["bin/bash"].source == debdir / "bash-static"
    assert paths["bin/sh"].kind == "symlink" and paths["bin/sh"].target == "/bin/busybox"
    assert paths["lib64/ld-linux-x86-64.so.2"].target == "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"


def test_gpu_nodes_start_every_container_with_the_mock_profile_mounted(tmp_path):
    import tomllib
    from draconf.testbed import node_config
    default = {"ociVersion": "1.3.0", "mounts": [{"destination": "/proc", "type": "proc"},
                                                 {"destination": "/run", "type": "tmpfs"}]}
    spec = node_root.base_runtime_spec(default)
    assert spec["mounts"][-1] == {"destination": "/config", "type": "bind",
                                  "source": "/run/nvidia/driver/config", "options": ["rbind", "ro", "nosuid", "nodev"]}
    assert [m["destination"] for m in spec["mounts"]] == ["/proc", "/config"]
    assert default["mounts"][1]["destination"] == "/run"  # the default is left as it was
    paths = node_config.NodePaths(tmp_path / "n")
    def runc(text):
        return tomllib.loads(text)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    assert "base_runtime_spec" not in runc(node_config.containerd_toml(paths, Path("/b"), "p:1"))
    with_spec = node_config.containerd_toml(paths, Path("/b"), "p:1", base_runtime_spec=Path("/n/spec.json"))
    assert runc(with_spec)["base_runtime_spec"] == "/n/spec.json"


def test_the_workload_image_has_the_c_library_ubuntu_has(tmp_path):
    debdir = tmp_path / "debs"
    debdir.mkdir()
    for path in up.DEBIAN_FILES["libc6"]:
        (debdir / Path(path).name).write_bytes(b"elf")
    (tmp_path / "busybox").write_bytes(b"elf")
    paths = {e.path for e in up.workload_entries(tmp_path / "busybox", ["/bin/sh"], debdir)}
    assert {"lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2", "bin/sh", "usr/bin"} <= paths
