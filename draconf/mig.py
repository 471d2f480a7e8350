"""MIG devices as the NVIDIA DRA driver publishes them, and what a container shows of them.

With its DynamicMIG feature gate, the driver (kubernetes-sigs/dra-driver-nvidia-gpu) publishes
every possible MIG device of a MIG-capable GPU beside the full GPU, as partitionable devices
(KEP-4815, DRAPartitionableDevices: beta and on in 1.36): DeviceClass ``mig.nvidia.com``
selects ``type == 'mig'``; attributes in the ``gpu.nvidia.com`` domain name the ``profile``
(``1g.10gb``) and the ``parentUUID``; capacities are ``multiprocessors``, ``memory`` and the
engines.  The full GPU and its MIG devices consume counters of one counter set, so the
scheduler never gives a GPU and a MIG device of it (or two overlapping MIG devices) to two
claims.  In the container, ``nvidia-smi -L`` lists the MIG device under its parent GPU.

>>> from draconf.devices import Device
>>> d = Device("gpu.nvidia.com", "n", "gpu-0-mig-1g10gb-19-0", "n", {"gpu.nvidia.com/type": "mig",
...     "gpu.nvidia.com/profile": "1g.10gb", "gpu.nvidia.com/parentUUID": "GPU-1"})
>>> is_mig(d), profile_of(d), parent_of(d)
(True, '1g.10gb', 'GPU-1')
>>> smallest_profiles([d])
['1g.10gb']
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from draconf import cel

#: The DeviceClass of MIG devices, as the NVIDIA chart renders it.
MIG_DEVICE_CLASS = "mig.nvidia.com"
#: The driver's feature gate under which it publishes MIG devices, carved on demand
#: (pkg/featuregates in NVIDIA's releases): a plugin running with it on promises them.
MIG_GATE = "DynamicMIG"
#: The `type` attribute's value of a MIG device.
MIG_TYPE = "mig"
PROFILE_ATTRIBUTE = "profile"
#: The attribute naming the GPU a MIG device is carved from (its `uuid`).
PARENT_ATTRIBUTE = "parentUUID"


def is_mig(device) -> bool:
    return device.attribute("type") == MIG_TYPE and device.has_attribute(PARENT_ATTRIBUTE)


def profile_of(device) -> str | None:
    return device.attribute(PROFILE_ATTRIBUTE)


def parent_of(device) -> str | None:
    return device.attribute(PARENT_ATTRIBUTE)


#: A whole GPU's identity, which a MIG device's ``parentUUID`` names.
UUID_ATTRIBUTE = "uuid"


def carved_from(device, devices):
    """The GPU a MIG device is carved from as its ResourceSlice pool says it through counters,
    not through its ``parentUUID``: the whole GPU of the same pool consuming a counter set the
    MIG device consumes (one counter set per GPU, KEP-4815).  None for a device consuming no
    counters (a driver publishing them without) or when no such GPU is published.

    >>> from draconf.devices import Device
    >>> gpus = [Device("d", "n", f"gpu-{i}", "n", {"d/type": "gpu", "d/uuid": f"GPU-{i}"},
    ...                counter_sets=(f"gpu-{i}-counter-set",)) for i in (0, 1)]
    >>> part = Device("d", "n", "gpu-1-mig-2g20gb-14-2", "n", {"d/type": "mig", "d/parentUUID": "GPU-0"},
    ...               counter_sets=("gpu-1-counter-set",))
    >>> carved_from(part, gpus + [part]).attribute(UUID_ATTRIBUTE), parent_of(part)
    ('GPU-1', 'GPU-0')
    """
    if not device.counter_sets:
        return None
    return next((d for d in devices if d.pool == device.pool and d.driver == device.driver and not is_mig(d)
                 and d.has_attribute(UUID_ATTRIBUTE) and set(d.counter_sets) & set(device.counter_sets)), None)


def _slices(name: str) -> int:
    """The compute slices of a profile name (``3g.40gb`` -> 3; unknown forms sort last)."""
    m = re.match(r"(\d+)g\.", name)
    return int(m.group(1)) if m else 99


def smallest_profiles(devices) -> list[str]:
    """The published MIG profiles, smallest first (by compute slices, then name)."""
    found: set[str] = {p for d in devices if is_mig(d) and (p := profile_of(d))}
    return sorted(found, key=lambda p: (_slices(p), p))


def profile_with_slices(devices, slices: int) -> str | None:
    """The smallest published profile of ``slices`` compute slices (``2`` -> ``2g.20gb``)."""
    return next((p for p in smallest_profiles(devices) if _slices(p) == slices), None)


@dataclass
class SmiGpu:
    """One GPU of ``nvidia-smi -L`` and the MIG devices listed under it."""
    uuid: str
    name: str
    migs: list[tuple[str, str]] = field(default_factory=list)  # (profile, MIG UUID)


_GPU_LINE = re.compile(r"^GPU \d+: (.+) \(UUID: (GPU-[0-9A-Fa-f-]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[0-9A-Fa-f-]+)\)\s*$")


def parse_list(text: str) -> list[SmiGpu]:
    """``nvidia-smi -L`` as GPUs with their MIG devices.

    >>> out = '''GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-16290e0e-ba63-e9b2-07f0-ad86c85b2623)
    ...   MIG 1g.10gb     Device  0: (UUID: MIG-2ca5206e-b3b9-53b5-8d86-3c4f64851fc6)'''
    >>> g = parse_list(out)[0]
    >>> g.uuid, g.migs
    ('GPU-16290e0e-ba63-e9b2-07f0-ad86c85b2623', [('1g.10gb', 'MIG-2ca5206e-b3b9-53b5-8d86-3c4f64851fc6')])
    """
    gpus: list[SmiGpu] = []
    for line in text.splitlines():
        if m := _GPU_LINE.match(line):
            gpus.append(SmiGpu(m.group(2), m.group(1)))
        elif (m := _MIG_LINE.match(line)) and gpus:
            gpus[-1].migs.append((m.group(1), m.group(2)))
    return gpus


def sees_mig(text: str, parent: str, profile: str) -> str | None:
    """None when ``nvidia-smi -L`` lists exactly one MIG device, of ``profile``, under the GPU
    ``parent`` and nothing else; else what is wrong.

    >>> ok = "GPU 0: H (UUID: GPU-1)\\n  MIG 1g.10gb     Device  0: (UUID: MIG-1)\\n"
    >>> sees_mig(ok, "GPU-1", "1g.10gb") is None
    True
    >>> sees_mig(ok, "GPU-2", "1g.10gb")
    'lists GPU(s) GPU-1, not the parent GPU-2'
    >>> sees_mig("GPU 0: H (UUID: GPU-1)\\n", "GPU-1", "1g.10gb")
    'lists GPU-1 without a MIG device (the whole GPU, not a MIG device of it)'
    """
    gpus = parse_list(text)
    if not gpus:
        return "lists no GPU"
    if [g.uuid for g in gpus] != [parent]:
        return f"lists GPU(s) {', '.join(g.uuid for g in gpus)}, not the parent {parent}"
    migs = gpus[0].migs
    if not migs:
        return f"lists {parent} without a MIG device (the whole GPU, not a MIG device of it)"
    if [p for p, _ in migs] != [profile]:
        return f"lists MIG device(s) {', '.join(p for p, _ in migs)} under {parent}, not one {profile}"
    return None


def class_devices(published, class_cel: list[str]) -> list:
    """The published devices DeviceClass selectors ``class_cel`` select (MIG devices for
    ``mig.nvidia.com``)."""
    return [d for d in published if cel.evaluate_all(class_cel, d).matched]
