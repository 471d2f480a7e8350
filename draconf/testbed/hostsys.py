"""What real nodes change on the host, and how ``down`` puts it back: cgroups and sysctls.

Each real node's kubelet gets a cgroup root of its own (``/draconf-<bed tag>-<node>``) in every
cgroup hierarchy (this machine has cgroup v1 controllers, with cgroup2 at
``/sys/fs/cgroup/unified``), so a node's pods can be found and killed by cgroup, and removed
without touching anything else.

A kubelet also sets a few host-wide sysctls at start (``vm.overcommit_memory``,
``kernel.panic`` ...; kubelet's ``setupKernelTunables``).  The values before the first real
node of any bed started are kept in ``/run/draconf/host-sysctls.json`` and written back when
the last real node on the machine stops.

>>> cgroup_root("0a1b2c3d", "gpu-h100-0")
'/draconf-0a1b2c3d-gpu-h100-0'
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Callable, Collection
from pathlib import Path

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

log = logging.getLogger("draconf.testbed")

CGROUP_MOUNT = Path("/sys/fs/cgroup")
#: Every sysctl kubelet v1.36 may set at start (pkg/kubelet/cm/container_manager_linux.go).
KUBELET_SYSCTLS = ["vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
                   "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"]
SYSCTL_RECORD = Path("/run/draconf/host-sysctls.json")
#: Directories real nodes created on the host as mount points (e.g. /var/lib/kubelet), removed
#: again when the last real node stops.
CREATED_DIRS_RECORD = Path("/run/draconf/created-dirs")


def cgroup_root(bed_tag: str, node: str) -> str:
    return f"/draconf-{bed_tag}-{node}"


def hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers and the cgroup2 one)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mountpoint, fstype, *_ = line.split()
        if fstype in ("cgroup", "cgroup2") and mountpoint.startswith(str(CGROUP_MOUNT)):
            found.append(Path(mountpoint))
    return found


def check_cgroups() -> str | None:
    """Why a kubelet could not run here for lack of cgroups, or None."""
    if not hierarchies():
        return "real nodes need cgroups mounted under /sys/fs/cgroup (none are)"
    if not os.access(CGROUP_MOUNT, os.W_OK) and not any(os.access(h, os.W_OK) for h in hierarchies()):
        return "real nodes need to create cgroups, and /sys/fs/cgroup is read-only here"
    return None


def create_cgroup(root: str) -> None:
    """Make ``root`` in every hierarchy; cpuset needs its cpus and mems filled in to be usable."""
    for hierarchy in hierarchies():
        path = hierarchy / root.lstrip("/")
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            parent, child = hierarchy / name, path / name
            if parent.exists() and child.exists() and not child.read_text().strip():
                child.write_text(parent.read_text())


def pids_in_cgroup(root: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in hierarchies():
        base = hierarchy / root.lstrip("/")
        if not base.is_dir():
            continue
        for procs in base.rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except OSError:
                pass
    return pids


def kill_until_gone(find, timeout: float = 5, between=lambda: None) -> list[int]:
    """SIGKILL the PIDs ``find()`` returns until it returns none (or ``timeout`` passes);
    ``between`` runs after each round (a parent reaps its children there).  Returns the PIDs
    still there at the end (none, normally) and logs them, so a teardown that goes on without
    them says so."""
    rounds: list[None] = []

    def kill_round() -> list[int]:
        if rounds:
            between()  # after the previous round's pause: reap what it killed
        rounds.append(None)
        pids = find()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    # tenacity directly, not draconf.waits: the node supervisor imports this module and must
    # not pay for the kubernetes client.
    left = Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.05), retry=retry_if_result(bool),
                    retry_error_callback=lambda state: state.outcome.result())(kill_round)  # type: ignore[union-attr]
    if left:
        between()
        log.warning("processes %s still there after %gs of SIGKILL", ", ".join(map(str, left)), timeout)
    return left


def kill_cgroup(root: str, timeout: float = 5) -> None:
    """SIGKILL everything in ``root`` until it is empty (or ``timeout`` passes)."""
    kill_until_gone(lambda: pids_in_cgroup(root), timeout)


def remove_cgroup(root: str) -> list[str]:
    """Remove ``root`` and everything below it, deepest first; returns what could not be removed."""
    left = []
    for hierarchy in hierarchies():
        base = hierarchy / root.lstrip("/")
        if not base.is_dir():
            continue
        for path in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [base]:
            try:
                path.rmdir()
            except OSError:
                left.append(str(path))
    return left


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def record_sysctls() -> None:
    """Keep the host's values before any kubelet changes them (first real node on the machine)."""
    if SYSCTL_RECORD.exists():
        return
    values = {}
    for key in KUBELET_SYSCTLS:
        try:
            values[key] = _sysctl_path(key).read_text().strip()
        except OSError:
            pass
    SYSCTL_RECORD.parent.mkdir(parents=True, exist_ok=True)
    SYSCTL_RECORD.write_text(json.dumps(values))


def restore_sysctls() -> dict[str, str]:
    """Write back the recorded values; call only when no real node runs any more."""
    try:
        values = json.loads(SYSCTL_RECORD.read_text())
    except (OSError, ValueError):
        return {}
    for key, value in values.items():
        try:
            _sysctl_path(key).write_text(value)
        except OSError:
            pass
    SYSCTL_RECORD.unlink(missing_ok=True)
    return values


def make_mountpoint(path: str) -> None:
    """``mkdir -p path``, remembering each directory this creates on the host."""
    missing = []
    current = Path(path)
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        CREATED_DIRS_RECORD.parent.mkdir(parents=True, exist_ok=True)
        with open(CREATED_DIRS_RECORD, "a") as record:
            record.write(f"{directory}\n")


def remove_created_dirs() -> list[str]:
    """Remove the mount points real nodes created, deepest first, if empty; call only when no
    real node runs any more.  Returns what was removed."""
    try:
        dirs = set(CREATED_DIRS_RECORD.read_text().split())
    except OSError:
        return []
    removed = []
    for directory in sorted(dirs, key=lambda d: -d.count("/")):
        try:
            os.rmdir(directory)
            removed.append(directory)
        except OSError:
            pass
    CREATED_DIRS_RECORD.unlink(missing_ok=True)
    return removed


def pids_whose_cmdline(matches: Callable[[bytes], bool], exclude: Collection[int] = frozenset()) -> list[int]:
    """PIDs of the processes on this machine whose ``/proc/<pid>/cmdline`` (NUL-separated)
    ``matches``; a process gone while it is read is left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if matches(cmdline):
            found.append(int(entry.name))
    return found


def running_node_supervisors(exclude: Collection[int] = frozenset()) -> list[int]:
    """PIDs of real-node supervisors of any bed on this machine (``draconf.testbed.node``)."""
    return pids_whose_cmdline(lambda cmdline: b"draconf.testbed.node\0" in cmdline, exclude)
