"""``nvidia-smi`` as a container on a test bed node sees it.

kwok runs ``kubectl exec`` commands as local processes with the environment of the pod's
``Exec`` rule.  The simulated kubelet plugin puts the injected GPUs into that environment
(``NVIDIA_VISIBLE_DEVICES``, a UUID list, like the NVIDIA container toolkit), so this prints
exactly the GPUs CDI would have injected, in the real ``-L`` format::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b7f4a2c-...)

A container without injection has no ``nvidia-smi`` at all: the shim then behaves like a
missing executable (message on stderr, exit status 127).
"""

from __future__ import annotations

import json
import os
import sys


def visible_gpus(environ=os.environ) -> list[dict]:
    """The injected GPUs, ordered by PCI bus id as the driver enumerates them."""
    uuids = [u for u in environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if u.startswith("GPU-")]
    with open(environ["DRACONF_GPU_INVENTORY"]) as fh:
        inventory = json.load(fh)
    # Per node, the NVML record of draconf.testbed.nvidia.nvml_data: driver versions are the node's.
    by_uuid = {g["uuid"]: {**g, "driverVersion": n["driverVersion"], "cudaDriverVersion": n["cudaDriverVersion"]}
               for n in inventory["nodes"] for g in n["gpus"]}
    return sorted((by_uuid[u] for u in uuids if u in by_uuid), key=lambda g: g["pciBusID"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not os.environ.get("NVIDIA_VISIBLE_DEVICES") or "DRACONF_GPU_INVENTORY" not in os.environ:
        print('OCI runtime exec failed: exec failed: unable to start container process: exec: '
              '"nvidia-smi": executable file not found in $PATH: unknown', file=sys.stderr)
        return 127
    gpus = visible_gpus()
    if not gpus:
        print("No devices were found")
        return 6
    if "-L" in argv or "--list-gpus" in argv:
        for index, gpu in enumerate(gpus):
            print(f"GPU {index}: {gpu['productName']} (UUID: {gpu['uuid']})")
        return 0
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query:
        fields = {"index": lambda i, g: str(i), "name": lambda i, g: g["productName"],
                  "uuid": lambda i, g: g["uuid"], "pci.bus_id": lambda i, g: g["pciBusID"],
                  "memory.total": lambda i, g: f"{g['memoryBytes'] // 2**20} MiB",
                  "driver_version": lambda i, g: g["driverVersion"]}
        names = [f.strip() for f in query.split(",")]
        unknown = [n for n in names if n not in fields]
        if unknown:
            print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
            return 2
        for index, gpu in enumerate(gpus):
            print(", ".join(fields[n](index, gpu) for n in names))
        return 0
    print(f"NVIDIA-SMI {gpus[0]['driverVersion']}    Driver Version: {gpus[0]['driverVersion']}"
          f"    CUDA Version: {gpus[0]['cudaDriverVersion']}")
    for index, gpu in enumerate(gpus):
        print(f"|   {index}  {gpu['productName']:<32} | {gpu['pciBusID']} | "
              f"{gpu['memoryBytes'] // 2**20}MiB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
