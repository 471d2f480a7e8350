"""A real GPU node's simulated driver under NVIDIA's released DRA driver: the node's mock-NVML
profile (from the bed's inventory, so that nodes differ in model and memory) and its driver root
(the mock libraries, ``nvidia-smi``, device nodes, ``proc/driver/nvidia`` files), laid out as the
driver's own CPU-only CI lane does (``hack/ci/mock-nvml/setup-mock-gpu.sh`` in the driver's
source); and the OCI spec every container of such a node starts from.  What is built, and the
release itself, are :mod:`draconf.testbed.upstream_nvidia`'s.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import yaml

from draconf.errors import DraconfError
from draconf.testbed.upstream_nvidia import DRIVER_ROOT, MOCKNVML_DIR, Built

#: Character-device majors, as the mock lane's setup-mock-gpu.sh creates them (nvidia<N> and
#: nvidiactl on 195, the UVM nodes on 510).
NVIDIA_MAJOR = 195
UVM_MAJOR = 510


#: The mock's profiles (``configs/mock-nvml-config-<name>.yaml``) by product-name word, then by
#: architecture: the profile a node's model starts from; the inventory then says the rest.
PROFILE_BY_NAME = (("A100", "a100"), ("H100", "h100"), ("H200", "h100"), ("GB200", "gb200"),
                   ("GB300", "gb300"), ("B200", "b200"), ("L40S", "l40s"), ("T4", "t4"))
PROFILE_BY_ARCHITECTURE = {"ampere": "a100", "hopper": "h100", "blackwell": "b200", "ada": "l40s",
                           "ada lovelace": "l40s", "turing": "t4"}


def profile_for(product_name: str, architecture: str) -> str:
    """The mock profile a model starts from.

    >>> profile_for("NVIDIA H200", "Hopper"), profile_for("NVIDIA A100-SXM4-40GB", "Ampere")
    ('h100', 'a100')
    >>> profile_for("NVIDIA RTX PRO 6000", "Blackwell")
    'b200'
    """
    for word, profile in PROFILE_BY_NAME:
        if word in product_name.upper().split() or word in product_name.upper().replace("-", " ").split():
            return profile
    try:
        return PROFILE_BY_ARCHITECTURE[architecture.lower()]
    except KeyError:
        raise DraconfError(f"no mock NVML profile fits {product_name} ({architecture}); "
                           f"known architectures: {', '.join(sorted(PROFILE_BY_ARCHITECTURE))}") from None


def profile_path(mock_src: Path, profile: str) -> Path:
    return mock_src / MOCKNVML_DIR / "configs" / f"mock-nvml-config-{profile}.yaml"


def nvml_bus_id(bus_id: str) -> str:
    """A PCI address as NVML's ``nvmlPciInfo_t.busId`` holds it: an eight-digit domain, upper
    case (go-nvlib's GetPCIBusID drops the first four zeros, and the plugin then insists on
    ``dddd:bb:dd.f``: "invalid PCI Bus ID format: :18:00.0" with a four-digit one).

    >>> nvml_bus_id("0000:1a:00.0")
    '00000000:1A:00.0'
    """
    domain, rest = bus_id.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def mock_nvml_config(node, base: dict) -> dict:
    """The mock NVML profile of ``node``: ``base`` (the mock's profile for its model) with the
    inventory's GPUs: their count, UUIDs, minors, PCI bus ids and roots, and the model's name,
    memory, architecture and compute capability, and the node's driver and CUDA versions.

    >>> from draconf.testbed.inventory import uniform
    >>> node = uniform(1, 2, kind="real").nodes[0]
    >>> base = {"system": {"driver_version": "550.163.01"}, "device_defaults": {"name": "x",
    ...         "memory": {"total_bytes": 1, "reserved_bytes": 0}}, "devices": [{"index": 0}]}
    >>> cfg = mock_nvml_config(node, base)
    >>> cfg["system"]["driver_version"], cfg["system"]["num_devices"], cfg["device_defaults"]["name"]
    ('580.95.05', 2, 'NVIDIA H100 80GB HBM3')
    >>> [d["minor_number"] for d in cfg["devices"]], cfg["devices"][1]["pci"]["bus_id"]
    ([0, 1], '00000000:28:00.0')
    >>> base["devices"]  # the base is left as it was
    [{'index': 0}]
    """
    import copy
    cfg = copy.deepcopy(base)
    gpus = node.gpus
    model = gpus[0].model
    driver, cuda = gpus[0].driver_version, gpus[0].cuda_driver_version
    major, minor = (int(p) for p in cuda.split(".")[:2])
    system = cfg.setdefault("system", {})
    system.update({"driver_version": driver, "nvml_version": f"{major}.{driver}",
                   "cuda_version": f"{major}.{minor}", "cuda_version_major": major,
                   "cuda_version_minor": minor, "num_devices": len(gpus)})
    defaults = cfg.setdefault("device_defaults", {})
    cc_major, cc_minor = (int(p) for p in model.cuda_compute_capability.split(".")[:2])
    defaults.update({"name": model.product_name, "architecture": model.architecture.lower(),
                     "compute_capability": {"major": cc_major, "minor": cc_minor}})
    memory = defaults.setdefault("memory", {})
    reserved = int(memory.get("reserved_bytes", 0))
    memory.update({"total_bytes": model.memory_bytes, "free_bytes": model.memory_bytes - reserved,
                   "used_bytes": 0})
    if isinstance(defaults.get("gsp_firmware"), dict):
        defaults["gsp_firmware"]["version"] = driver
    cfg["devices"] = [{"index": i, "uuid": g.uuid, "minor_number": g.minor,
                       "serial": f"{1560000000000 + int(g.uuid[4:12], 16) % 10**9 * 10 + g.minor}",
                       "pci": {"bus_id": nvml_bus_id(g.pci_bus_id)}, **failure_of(g)} for i, g in enumerate(gpus)]
    roots: dict[str, list[str]] = {}
    for g in gpus:
        roots.setdefault(g.pcie_root, []).append(nvml_bus_id(g.pci_bus_id))
    cfg["pcie_topology"] = {"root_complexes": [{"id": root, "numa_node": 0, "devices": devices}
                                               for root, devices in roots.items()]}
    return cfg


def failure_of(gpu) -> dict:
    """The mock's ``failure`` for an inventory GPU with a critical Xid (``unhealthy: [{gpu, xid}]``),
    as the mock's own lane configures one: the mock delivers the Xid through the NVML event set
    once the GPU has tripped (engine/failure_injector.go), which with no trigger set is its
    first guarded query in that NVML session (no release's health monitor makes one:
    :data:`MOCK_NVML_LIMITS`).  Of the mock's modes, ``ecc_uncorrectable`` is the one that
    leaves the GPU answering NVML (``lost`` and ``fallen_off_bus`` make it unreachable,
    GPU_IS_LOST), a GPU a tolerating claim can still use.  A lost GPU (``lost: true``) is left
    out: the mock's lost modes would take it from the plugin at start.

    >>> from draconf.testbed.inventory import uniform
    >>> from dataclasses import replace
    >>> gpu = uniform(1, 1, kind="real").nodes[0].gpus[0]
    >>> failure_of(gpu), failure_of(replace(gpu, xid=79))
    ({}, {'failure': {'mode': 'ecc_uncorrectable', 'xid': {'code': 79}}})
    """
    if not gpu.xid:
        return {}
    return {"failure": {"mode": "ecc_uncorrectable", "xid": {"code": gpu.xid}}}


def proc_files(driver_version: str) -> dict[str, str]:
    """``proc/driver/nvidia`` as the kernel module shows it (what the mock lane writes there):
    the module's version line and its parameters, ModifyDeviceFiles on.

    >>> proc_files("580.95.05")["proc/driver/nvidia/version"].split()[7]
    '580.95.05'
    """
    return {
        "proc/driver/nvidia/version":
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver_version}  (draconf test bed)\n",
        "proc/driver/nvidia/params":
            "".join(f"{k}: {v}\n" for k, v in (
                ("EnableMSI", 1), ("NVreg_DeviceFileGID", 0), ("NVreg_DeviceFileMode", 438),
                ("NVreg_DeviceFileUID", 0), ("NVreg_ModifyDeviceFiles", 1))),
    }


def device_nodes(minors: list[int]) -> list[tuple[str, int, int]]:
    """(path under the driver root, major, minor) of a node's NVIDIA character devices.

    >>> device_nodes([0, 1])[:3]
    [('dev/nvidia0', 195, 0), ('dev/nvidia1', 195, 1), ('dev/nvidiactl', 195, 255)]
    """
    return [*((f"dev/nvidia{m}", NVIDIA_MAJOR, m) for m in minors), ("dev/nvidiactl", NVIDIA_MAJOR, 255),
            ("dev/nvidia-uvm", UVM_MAJOR, 0), ("dev/nvidia-uvm-tools", UVM_MAJOR, 1)]


#: What the MPS daemon template of v25.12.0 runs inside ``chroot /driver-root``.
DRIVER_ROOT_TOOLS = ("sh", "rm", "tail", "cat", "echo", "ls", "mkdir")


def install_driver_root(root: Path, node, built: Built, mps_control: Path | None = None,
                        shell: Path | None = None) -> None:
    """Lay out ``node``'s simulated driver under ``root`` (mounted at :data:`DRIVER_ROOT`):
    the mock libraries as ``usr/lib64/libnvidia-ml.so.<driver version>`` and
    ``libcuda.so.<driver version>`` with their ``.so.1`` and ``.so`` links, the node's profile at ``config/config.yaml``, ``usr/bin/nvidia-smi`` (the
    stand-in over NVML: the chart's init container runs ``nvidia-smi --version`` with the
    library preloaded to see a driver is there, and the driver's CDI spec mounts it into
    containers), the device nodes and the ``proc/driver/nvidia`` files; and ``mps_control``,
    the bed's MPS control daemon stand-in, as ``usr/bin/nvidia-cuda-mps-control``: the
    release's templates/mps-control-daemon.tmpl.yaml runs that from the driver root's PATH
    (NVIDIA's own daemon cannot be had; without one the MPS claim's prepare waits for ever,
    'MPS control daemon is not yet ready', and the daemon logs 'nvidia-cuda-mps-control: not
    found'); and ``shell``, a static busybox as ``bin/busybox`` with :data:`DRIVER_ROOT_TOOLS`
    linked to it, the shell and tools a containerized driver's root has: v25.12.0's MPS daemon
    template runs its whole script through ``chroot /driver-root sh -c`` (its daemon logged
    "chroot: can't execute 'sh': No such file or directory", then "sh: tail: not found");
    v0.4.0's template falls back to PATH when the root has no shell."""
    driver = node.gpus[0].driver_version
    lib = root / "usr" / "lib64"
    lib.mkdir(parents=True, exist_ok=True)
    for library, built_file in (("libnvidia-ml.so", built.mock_nvml), ("libcuda.so", built.mock_cuda)):
        if built_file is None:
            continue
        real = lib / f"{library}.{driver}"
        real.unlink(missing_ok=True)
        shutil.copyfile(built_file, real)
        for name, target in ((f"{library}.1", real.name), (library, f"{library}.1")):
            (lib / name).unlink(missing_ok=True)
            (lib / name).symlink_to(target)
    model = node.gpus[0].model
    base = yaml.safe_load(profile_path(built.mock_nvml_src, profile_for(model.product_name, model.architecture))
                          .read_text())
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(mock_nvml_config(node, base), sort_keys=False))
    (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.unlink(missing_ok=True)
    shutil.copyfile(built.nvidia_smi, smi)
    smi.chmod(0o755)
    for source, path in ((mps_control, "usr/bin/nvidia-cuda-mps-control"), (shell, "bin/busybox")):
        if source is None:
            continue
        dest = root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        shutil.copyfile(source, dest)
        dest.chmod(0o755)
    if shell is not None:
        for tool in DRIVER_ROOT_TOOLS:
            (root / "bin" / tool).unlink(missing_ok=True)
            (root / "bin" / tool).symlink_to("busybox")
    for path, major, minor in device_nodes([g.minor for g in node.gpus]):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        if not (root / path).exists():
            os.mknod(root / path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    for path, content in proc_files(driver).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)


#: Where every container of a GPU node sees the node's mock-NVML profile (read-only): where the
#: mock looks for it when the driver's CDI spec has mounted the library at /usr/lib64
#: (engine/config.go discoverConfigPath: <root>/config/config.yaml from <root>/usr/lib64/...).
#: The profile stands for the GPUs' kernel driver, which every container of a real GPU host
#: shares; which GPUs a container sees stays the CDI spec's doing (its /dev/nvidia<N> nodes).
MOCK_CONFIG_MOUNT = "/config"


def base_runtime_spec(default: dict) -> dict:
    """containerd's default OCI spec (``ctr oci spec``) with the node's mock profile mounted at
    :data:`MOCK_CONFIG_MOUNT`; the node's containerd starts every container from it.

    >>> spec = base_runtime_spec({"mounts": [{"destination": "/proc"}, {"destination": "/run"}]})
    >>> [m["destination"] for m in spec["mounts"]], spec["mounts"][-1]["source"]
    (['/proc', '/config'], '/run/nvidia/driver/config')
    """
    import copy
    spec = copy.deepcopy(default)
    # CRI drops the default spec's /run tmpfs from its own default (WithoutRunMount): so here.
    mounts = [m for m in spec.get("mounts", []) if m.get("destination") != "/run"]
    mounts.append({"destination": MOCK_CONFIG_MOUNT, "type": "bind", "source": f"{DRIVER_ROOT}/config",
                   "options": ["rbind", "ro", "nosuid", "nodev"]})
    spec["mounts"] = mounts
    return spec
