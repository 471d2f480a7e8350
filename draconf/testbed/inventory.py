"""The simulated GPU fleet: which nodes exist and which GPUs each one holds.

An inventory is a YAML file (see ``data/inventories/default.yaml``) or a uniform fleet built
from two numbers.  Every GPU gets a UUID and PCI bus id derived from its node and minor
number, so they are unique across the fleet and the same on every start.

>>> inv = uniform(nodes=2, gpus_per_node=8)
>>> [n.name for n in inv.nodes]
['gpu-node-0', 'gpu-node-1']
>>> inv.nodes[0].gpus[3].device_name
'gpu-3'
>>> inv.nodes[0].gpus[0].uuid == uniform(2, 8).nodes[0].gpus[0].uuid
True

Each node is ``real`` (a kubelet, containerd and runc on this machine) or ``kwok`` (a KWOK
node: API objects only, for fleets too large to run for real).  The file says which per node
(``kind:``, default ``real``); :func:`with_node_kind` overrides every node at once.

>>> [n.kind for n in with_node_kind(inv, "kwok").nodes]
['kwok', 'kwok']
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from kubernetes.utils import parse_quantity

from draconf.errors import DraconfError, yaml_problem

_INVENTORIES = Path(__file__).parent / "data" / "inventories"
#: What ``draconf testbed up`` starts: the guide's fleet with MIG and a tainted GPU, so that a
#: newcomer's first run exercises every check (default.yaml says how).
DEFAULT_INVENTORY = _INVENTORIES / "default.yaml"
#: The hands-on guide's fleet alone (no MIG, no tainted GPU): what the project's self-tests
#: and the fault matrix start; their expectations are read on it, and it schedules faster.
GUIDE_INVENTORY = _INVENTORIES / "mixed.yaml"
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NODE_KINDS = ("real", "kwok")


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile of a MIG-capable model (a row of ``nvidia-smi mig -lgip``)."""
    name: str
    id: int
    memory_mib: int
    multiprocessors: int
    size: int
    placements: tuple[int, ...]
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_engines: int = 0
    ofa_engines: int = 0


@dataclass(frozen=True)
class MigSupport:
    """What NVML reports about a MIG-capable model: memory slices and GPU instance profiles."""
    memory_slices: int
    profiles: tuple[MigProfile, ...]


@dataclass(frozen=True)
class GpuModel:
    key: str
    product_name: str
    architecture: str
    cuda_compute_capability: str
    memory_bytes: int
    brand: str = "Nvidia"
    #: MIG profiles the GPU supports (None: no MIG).  The driver publishes them only with its
    #: DynamicMIG feature gate on (the inventory's ``dynamicMIG``).
    mig: MigSupport | None = None


@dataclass(frozen=True)
class Gpu:
    node: str
    minor: int
    model: GpuModel
    driver_version: str
    cuda_driver_version: str
    #: A critical XID the GPU raised (0: none) and whether NVML lost it: the health events the
    #: NVIDIA driver turns into device taints (``gpu.nvidia.com/xid``, ``gpu.nvidia.com/gpu-lost``).
    xid: int = 0
    lost: bool = False

    @property
    def healthy(self) -> bool:
        return not self.xid and not self.lost

    @property
    def device_name(self) -> str:
        """The ResourceSlice device name the NVIDIA plugin uses: ``gpu-<minor>``."""
        return f"gpu-{self.minor}"

    @property
    def uuid(self) -> str:
        digest = hashlib.sha256(f"{self.node}/{self.minor}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    @property
    def pci_bus_id(self) -> str:
        return f"0000:{0x18 + 0x10 * self.minor:02x}:00.0"

    @property
    def pcie_root(self) -> str:
        """The PCIe root complex above the GPU; pairs of GPUs share one, as behind a PCIe switch."""
        return f"pci0000:{0x17 + 0x20 * (self.minor // 2):02x}"


@dataclass(frozen=True)
class Node:
    name: str
    gpus: tuple[Gpu, ...] = ()
    kind: str = "real"

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpus)


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[Node, ...]
    source: str = ""
    #: The driver's DynamicMIG feature gate (chart value featureGates.DynamicMIG): MIG-capable
    #: GPUs are published as partitionable devices with their possible MIG devices.
    dynamic_mig: bool = False

    @property
    def mig_gpus(self) -> tuple[Gpu, ...]:
        """The GPUs the driver publishes MIG devices of (on real nodes; none with the gate off)."""
        if not self.dynamic_mig:
            return ()
        return tuple(g for n in self.real_nodes for g in n.gpus if g.model.mig)

    @property
    def gpu_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.has_gpus)

    @property
    def real_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind == "real")

    @property
    def kwok_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind == "kwok")

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def describe(self) -> str:
        """One line per node, e.g. ``gpu-h100-0: 4 x NVIDIA H100 80GB HBM3 (real)``, naming its
        unhealthy GPUs and the health event the driver taints them for (``unhealthy: gpu-4 xid 79``)."""
        def unhealthy(n: Node) -> str:
            bad = [f"{g.device_name} " + ("lost" if g.lost else f"xid {g.xid}") for g in n.gpus if not g.healthy]
            return f"; unhealthy: {', '.join(bad)}" if bad else ""
        def mig(n: Node) -> str:
            return "; MIG (DynamicMIG)" if self.dynamic_mig and n.kind == "real" and n.gpus and n.gpus[0].model.mig else ""
        return "\n".join(
            f"{n.name}: {len(n.gpus)} x {n.gpus[0].model.product_name} ({n.kind}){unhealthy(n)}{mig(n)}" if n.gpus
            else f"{n.name}: no GPU ({n.kind})" for n in self.nodes)


def load(path: str | Path = DEFAULT_INVENTORY) -> Inventory:
    """Read an inventory file; any mistake in it is a :class:`DraconfError` naming the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise DraconfError(f"cannot read inventory {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise DraconfError(f"inventory {path} is not valid YAML: {yaml_problem(err)}") from err
    return from_dict(data, source=str(path))


def from_dict(data, source: str = "<inventory>") -> Inventory:
    def fail(msg: str) -> DraconfError:
        return DraconfError(f"inventory {source}: {msg}")

    if not isinstance(data, dict):
        raise fail("expected a mapping with `models` and `nodes`")
    driver = str(data.get("driverVersion", "580.95.05"))
    cuda = str(data.get("cudaDriverVersion", "13.0.0"))
    models: dict[str, GpuModel] = {}
    for key, spec in (data.get("models") or {}).items():
        if not isinstance(spec, dict):
            raise fail(f"model {key!r} must be a mapping")
        missing = {"productName", "architecture", "memory"} - spec.keys()
        if missing:
            raise fail(f"model {key!r} lacks {', '.join(sorted(missing))}")
        try:
            memory = parse_quantity(spec["memory"])
        except ValueError as err:
            raise fail(f"model {key!r}: {err}") from err
        if memory <= 0 or memory != memory.to_integral_value():
            raise fail(f"model {key!r}: memory {spec['memory']!r} is not a whole, positive number of bytes")
        models[key] = GpuModel(
            key=key, product_name=str(spec["productName"]), architecture=str(spec["architecture"]),
            cuda_compute_capability=str(spec.get("cudaComputeCapability", "9.0.0")),
            memory_bytes=int(memory), brand=str(spec.get("brand", "Nvidia")),
            mig=_mig_support(spec.get("mig"), lambda msg: fail(f"model {key!r}: {msg}")))
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise fail("`nodes` must be a non-empty list")
    nodes, seen = [], set()
    for i, spec in enumerate(raw_nodes):
        if not isinstance(spec, dict) or "name" not in spec:
            raise fail(f"nodes[{i}] needs a `name`")
        name = str(spec["name"])
        if not _NODE_NAME.match(name) or len(name) > 63:
            raise fail(f"node name {name!r} is not a valid Kubernetes node name")
        if name in seen:
            raise fail(f"node {name!r} is listed twice")
        seen.add(name)
        count = spec.get("gpus", 0) or 0
        if not isinstance(count, int) or count < 0 or count > 128:
            raise fail(f"node {name!r}: `gpus` must be an integer from 0 to 128")
        gpus: tuple[Gpu, ...] = ()
        if count:
            model = models.get(str(spec.get("model")))
            if model is None:
                raise fail(f"node {name!r}: model {spec.get('model')!r} is not under `models` "
                           f"(known: {', '.join(models) or 'none'})")
            gpus = tuple(Gpu(name, minor, model, driver, cuda) for minor in range(count))
            gpus = _unhealthy(gpus, spec.get("unhealthy"), fail)
        kind = spec.get("kind", "real")
        if kind not in NODE_KINDS:
            raise fail(f"node {name!r}: `kind` must be one of {', '.join(NODE_KINDS)}, not {kind!r}")
        if spec.get("unhealthy") and not gpus:
            raise fail(f"node {name!r}: `unhealthy` names GPUs, but the node has none")
        nodes.append(Node(name, gpus, kind))
    dynamic_mig = data.get("dynamicMIG", False)
    if not isinstance(dynamic_mig, bool):
        raise fail("`dynamicMIG` must be true or false")
    return Inventory(tuple(nodes), source=source, dynamic_mig=dynamic_mig)


#: GPU instances a GPU has (the driver's capability minors reserve 15 per GPU).
MAX_GPU_INSTANCES = 15


def _mig_support(spec, fail) -> MigSupport | None:
    """A model's ``mig:`` block: ``memorySlices`` and ``profiles`` (name, id, memory, multiprocessors,
    size, placements; copyEngines, decoders, encoders, jpegEngines, ofaEngines default 0).

    >>> m = _mig_support({"memorySlices": 8, "profiles": [{"name": "1g.10gb", "id": 19, "memory": "9984Mi",
    ...     "multiprocessors": 16, "size": 1, "placements": [0, 1]}]}, ValueError)
    >>> m.profiles[0].memory_mib, m.profiles[0].placements
    (9984, (0, 1))
    """
    if spec is None:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("memorySlices"), int) \
            or not isinstance(spec.get("profiles"), list) or spec["memorySlices"] < 1:
        raise fail("`mig` needs a positive `memorySlices` and a list of `profiles`")
    profiles, slots = [], 0
    for p in spec["profiles"]:
        try:
            placements = tuple(int(x) for x in p["placements"])
            profile = MigProfile(
                name=str(p["name"]), id=int(p["id"]),
                memory_mib=int(parse_quantity(p["memory"]) // (1024 * 1024)),
                multiprocessors=int(p["multiprocessors"]), size=int(p["size"]), placements=placements,
                **{field: int(p.get(key, 0)) for field, key in (
                    ("copy_engines", "copyEngines"), ("decoders", "decoders"), ("encoders", "encoders"),
                    ("jpeg_engines", "jpegEngines"), ("ofa_engines", "ofaEngines"))})
        except (KeyError, TypeError, ValueError) as err:
            raise fail(f"MIG profile {p!r}: {err}") from None
        if any(s < 0 or s + profile.size > spec["memorySlices"] for s in placements):
            raise fail(f"MIG profile {profile.name}: a placement lies outside {spec['memorySlices']} memory slices")
        profiles.append(profile)
        slots += len(placements)
    if slots > MAX_GPU_INSTANCES:
        raise fail(f"{slots} MIG placements; a GPU has {MAX_GPU_INSTANCES} GPU instances")
    return MigSupport(spec["memorySlices"], tuple(profiles))


def with_dynamic_mig(inv: Inventory) -> Inventory:
    """``inv`` with the driver's DynamicMIG gate on (what the mig-counters-ignored fault needs).

    >>> with_dynamic_mig(load(GUIDE_INVENTORY)).mig_gpus[0].device_name
    'gpu-0'
    """
    return replace(inv, dynamic_mig=True)


def uniform(nodes: int, gpus_per_node: int, model: str = "h100-80gb-hbm3", kind: str = "kwok") -> Inventory:
    """``nodes`` GPU nodes with ``gpus_per_node`` GPUs each, all of one model from the default file.

    KWOK nodes by default: a uniform fleet is how the bed simulates scale."""
    if nodes < 1 or gpus_per_node < 1:
        raise DraconfError("--nodes and --gpus-per-node must both be at least 1")
    base = yaml.safe_load(GUIDE_INVENTORY.read_text())
    base["nodes"] = [{"name": f"gpu-node-{i}", "model": model, "gpus": gpus_per_node, "kind": kind}
                     for i in range(nodes)]
    return from_dict(base, source=f"uniform {nodes}x{gpus_per_node}")


def with_node_kind(inventory: Inventory, kind: str) -> Inventory:
    """The same fleet with every node of ``kind`` (``draconf testbed up --node-kind``)."""
    if kind not in NODE_KINDS:
        raise DraconfError(f"node kind must be one of {', '.join(NODE_KINDS)}, not {kind!r}")
    return replace(inventory, nodes=tuple(replace(n, kind=kind) for n in inventory.nodes),
                   source=f"{inventory.source} ({kind} nodes)")


def _unhealthy(gpus: tuple[Gpu, ...], spec, fail) -> tuple[Gpu, ...]:
    """A node's ``unhealthy:`` list applied to its GPUs: ``[{gpu: <minor>, xid: <code>}]`` or
    ``{gpu: <minor>, lost: true}``; the driver publishes such a GPU with a device taint.

    >>> inv = from_dict({"models": {"m": {"productName": "P", "architecture": "A", "memory": "1Gi"}},
    ...   "nodes": [{"name": "n", "model": "m", "gpus": 2, "unhealthy": [{"gpu": 1, "xid": 79}]}]})
    >>> [(g.device_name, g.xid, g.healthy) for g in inv.nodes[0].gpus]
    [('gpu-0', 0, True), ('gpu-1', 79, False)]
    """
    if not spec:
        return gpus
    if not isinstance(spec, list):
        raise fail("`unhealthy` must be a list of {gpu: <minor>, xid: <code>} or {gpu: <minor>, lost: true}")
    by_minor = {g.minor: g for g in gpus}
    for entry in spec:
        minor = entry.get("gpu") if isinstance(entry, dict) else None
        if minor not in by_minor:
            raise fail(f"unhealthy entry {entry!r}: `gpu` must be the minor of one of the node's GPUs")
        xid, lost = entry.get("xid", 0), bool(entry.get("lost", False))
        if not isinstance(xid, int) or xid < 0 or not (xid or lost):
            raise fail(f"unhealthy entry {entry!r}: give a positive `xid` or `lost: true`")
        by_minor[minor] = replace(by_minor[minor], xid=xid, lost=lost)
    return tuple(by_minor[m] for m in sorted(by_minor))


def with_unhealthy_gpu(inv: Inventory, xid: int = 79) -> Inventory:
    """``inv`` plus one unhealthy GPU (critical XID ``xid``), unless some GPU already is: an
    extra GPU of the node with the most GPUs, so every healthy GPU the suites count on stays.

    >>> inv = with_unhealthy_gpu(load(GUIDE_INVENTORY))
    >>> [(n.name, len(n.gpus), g.device_name, g.xid) for n in inv.nodes for g in n.gpus if not g.healthy]
    [('gpu-h100-0', 5, 'gpu-4', 79)]
    >>> with_unhealthy_gpu(inv, xid=48) == inv
    True
    """
    if any(not g.healthy for n in inv.nodes for g in n.gpus):
        return inv
    target = max(inv.gpu_nodes, key=lambda n: (len(n.gpus), n.name))
    extra = replace(target.gpus[-1], minor=len(target.gpus), xid=xid)
    nodes = tuple(replace(n, gpus=n.gpus + (extra,)) if n is target else n for n in inv.nodes)
    return replace(inv, nodes=nodes)
