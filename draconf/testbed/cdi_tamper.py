"""Something on a node that tampers with the CDI specs a driver writes there: the external
faults ``cdi-spec-removed`` and ``cdi-spec-edited`` on a bed of NVIDIA's release.

A DRA driver prepares a claim by writing a CDI spec for it (NVIDIA's release: one transient
spec per claim, ``k8s.gpu.nvidia.com-claim_<uid>.yaml`` in its CDI root,
cmd/gpu-kubelet-plugin/cdi.go ``CreateClaimSpecFile``) and answering the kubelet with the
spec's device names; the kubelet then creates the pod's sandbox and asks containerd for the
container, and containerd resolves those names from the specs on disk.  Between the two, a
node's own tooling can get in the way: a cleanup job that empties the spec directory, or a
configuration manager that rewrites files it thinks it owns.  The driver did its part; the
container must still get exactly the GPU it was allocated, and the suite must say why it did not.

This process plays that tooling on one node, from the moment the fault is applied: every claim
spec that appears in the node's CDI directory afterwards is

- ``removed``: deleted at once (containerd then cannot resolve the claim's devices, and the
  kubelet reports "CDI device injection failed: unresolvable CDI devices"), or
- ``edited``: rewritten so that each GPU's device node is its neighbour's (``/dev/nvidia0``
  and ``/dev/nvidia1`` swapped, and so on in pairs): the container gets a GPU, the wrong one.

Specs that were there before it started are left alone (pods already running keep theirs).
It looks every few milliseconds: the window between the spec written and the container created
is the pod's sandbox start, a tenth of a second or more.  It runs until it is sent SIGTERM
(``external_faults.restore``, or ``draconf testbed down``, which stops every process of the bed).

    python -m draconf.testbed.cdi_tamper removed /path/to/node/cdi
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import yaml

MODES = ("removed", "edited")
#: How often the directory is looked at.
EVERY = 0.005
#: A claim's transient spec, as NVIDIA's release names it (vendor-class_uid).
CLAIM_SPEC = re.compile(r"-claim_[0-9a-f-]+\.(yaml|json)$")
#: A GPU's device node, in the container (``/dev/nvidia0``) or on the host (under the driver root).
GPU_NODE = re.compile(r"^(.*/dev/nvidia)(\d+)$")


def claim_specs(directory: Path) -> set[str]:
    """The names of the claim specs in ``directory`` now."""
    try:
        return {entry.name for entry in os.scandir(directory) if CLAIM_SPEC.search(entry.name)}
    except FileNotFoundError:
        return set()


def neighbour(path: str) -> str:
    """The device node of the GPU paired with ``path``'s: 0 <-> 1, 2 <-> 3, ...; other nodes
    (``/dev/nvidiactl``, ``/dev/nvidia-uvm``) are themselves.

    >>> neighbour("/dev/nvidia0"), neighbour("/run/nvidia/driver/dev/nvidia3"), neighbour("/dev/nvidiactl")
    ('/dev/nvidia1', '/run/nvidia/driver/dev/nvidia2', '/dev/nvidiactl')
    """
    found = GPU_NODE.match(path)
    return f"{found.group(1)}{int(found.group(2)) ^ 1}" if found else path


def swap_gpus(spec: dict) -> int:
    """Point each device's GPU device nodes at the neighbour's, in place; how many were changed.

    >>> spec = {"devices": [{"name": "c-gpu-0", "containerEdits": {"deviceNodes": [
    ...     {"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"}, {"path": "/dev/nvidiactl"}]}}]}
    >>> swap_gpus(spec), spec["devices"][0]["containerEdits"]["deviceNodes"][0]
    (1, {'path': '/dev/nvidia1', 'hostPath': '/dev/nvidia1'})
    """
    changed = 0
    for device in spec.get("devices") or []:
        for node in (device.get("containerEdits") or {}).get("deviceNodes") or []:
            if GPU_NODE.match(node.get("path", "")):
                node["path"] = neighbour(node["path"])
                if node.get("hostPath"):
                    node["hostPath"] = neighbour(node["hostPath"])
                changed += 1
    return changed


def tamper(directory: Path, name: str, mode: str) -> str:
    """Do ``mode`` to the spec ``name``; a line saying what was done."""
    path = directory / name
    try:
        if mode == "removed":
            path.unlink()
            return f"removed {name}"
        spec = yaml.safe_load(path.read_text())
        changed = swap_gpus(spec)
        # Written as the driver writes its specs: a new file renamed over the old one, so that
        # containerd never reads half a file.
        scratch = path.with_name(f".{name}.draconf")
        scratch.write_text(yaml.safe_dump(spec, sort_keys=False))
        scratch.replace(path)
        return f"edited {name}: {changed} GPU device node(s) pointed at the neighbouring GPU"
    except FileNotFoundError:
        return f"{name} was gone before it could be {mode}"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in MODES:
        print(f"usage: python -m draconf.testbed.cdi_tamper {{{'|'.join(MODES)}}} DIRECTORY", file=sys.stderr)
        return 2
    mode, directory = argv[0], Path(argv[1])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    seen = claim_specs(directory)
    print(f"cdi_tamper: {mode} mode on {directory}; leaving alone {len(seen)} spec(s) already there",
          flush=True)
    while not stop:
        for name in sorted(claim_specs(directory) - seen):
            print(f"cdi_tamper: {tamper(directory, name, mode)}", flush=True)
            seen.add(name)  # each claim's spec once: its name holds the claim's uid
        time.sleep(EVERY)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
