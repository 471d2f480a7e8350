"""One real node of the test bed: containerd and a kubelet in the node's own namespaces.

Run by the bed, already inside the node's network namespace and a fresh mount and UTS
namespace (``nsenter --net=... unshare --mount --uts --propagation private``), as::

    python -m draconf.testbed.node --node-dir STATE/nodes/gpu-h100-0

It makes the node look like a machine of its own, the way kind separates nodes without
containers: the hostname is the node's name, and the node's directories are bind-mounted over
``/var/lib/kubelet``, ``/var/log``, ``/run/containerd``, ``/var/run/cdi``, ``/var/lib/cni`` and the
simulated driver root, so two kubelets on one machine never share the paths kubelet and
containerd hard-code.  Then it starts containerd, imports the bed's images into it (there is
no registry), starts the kubelet and stays as their parent and as the subreaper of everything
they leave behind (shims, containers).

On SIGTERM it stops the node as a machine would go down: kubelet first, then every container
of the node (found by cgroup), containerd, and whatever is left; it removes the node's cgroups
and exits.  :func:`sweep` does the same from outside when the supervisor itself is gone.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from draconf.testbed import hostsys, images
from draconf.testbed.node_config import CONTAINERD_SOCKET, NodePaths

PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} node: {msg}", flush=True)


def _check(call: int, what: str) -> None:
    if call != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class Supervisor:
    def __init__(self, node_dir: Path):
        self.paths = NodePaths(node_dir)
        self.spec = json.loads(self.paths.spec_file.read_text())
        self.bindir = Path(self.spec["bindir"])
        self.children: dict[str, int] = {}
        self.exited: dict[int, int] = {}
        self.stopping = False
        #: SIGHUP: start containerd again, re-reading its config (what an admin's `systemctl
        #: restart containerd` after editing config.toml does; external_faults uses it)
        self.restart_containerd = False

    # --- start -------------------------------------------------------------------------------
    def become_the_node(self) -> None:
        _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
        name = self.spec["name"].encode()
        _check(_libc.sethostname(name, len(name)), "sethostname")
        for source, target in self.paths.mounts:
            if source.is_dir():
                hostsys.make_mountpoint(target)
            subprocess.run(["mount", "--bind", str(source), target], check=True, capture_output=True)
            # Shared inside this namespace only (it began private): kubelet and containerd need
            # it for Bidirectional mounts, such as the DRA plugin's /var/lib/kubelet/plugins.
            subprocess.run(["mount", "--make-rshared", target], check=True, capture_output=True)
        (self.paths.dir / "mntns").write_text(str(os.stat("/proc/self/ns/mnt").st_ino))
        hostsys.create_cgroup(self.spec["cgroup_root"])

    def _spawn(self, name: str, cmd: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "NVIDIA_"))}
        # containerd finds its shim and runc on PATH.
        env["PATH"] = f"{self.bindir}{os.pathsep}{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        with open(self.paths.logs / f"{name}.log", "ab") as logfile:
            proc = subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        self.children[name] = proc.pid
        _log(f"started {name} (pid {proc.pid})")

    def _start_containerd(self) -> None:
        self._spawn("containerd", [str(self.bindir / "containerd"),
                                   "--config", str(self.paths.etc / "containerd.toml")])
        deadline = time.monotonic() + 30
        # Accepting, not only there: containerd creates its socket some 30 ms before it serves
        # it, and a `ctr` in between gets "connection refused" (seen on a loaded machine).
        while not _accepts(CONTAINERD_SOCKET):
            self._reap()
            if self.children["containerd"] in self.exited or time.monotonic() > deadline:
                raise RuntimeError("containerd did not serve its socket in 30 s; see containerd.log")
            time.sleep(0.05)

    def start(self) -> None:
        self._start_containerd()
        for archive in self.spec["images"]:
            started = time.monotonic()
            proc = subprocess.run(images.import_command(self.bindir / "ctr", CONTAINERD_SOCKET, archive),
                                  capture_output=True, text=True)
            if proc.returncode:
                raise RuntimeError(f"importing {archive} failed: {proc.stderr.strip() or proc.stdout.strip()}")
            _log(f"imported {Path(archive).name} in {time.monotonic() - started:.1f}s")
        self._spawn("kubelet", [str(self.bindir / "kubelet"), *self.spec["kubelet_args"]])

    # --- run ---------------------------------------------------------------------------------
    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exited[pid] = status

    def run(self) -> int:
        while not self.stopping:
            self._reap()
            if self.restart_containerd:
                # The containers' shims run on; the new containerd finds them again, and the
                # kubelet reconnects to its socket.
                self.restart_containerd = False
                _log("restarting containerd (SIGHUP): its config is read again")
                self._stop_child("containerd", grace=5)
                self._start_containerd()
            for name, pid in self.children.items():
                if pid in self.exited:
                    _log(f"{name} exited (status {os.waitstatus_to_exitcode(self.exited[pid])}); "
                         "stopping the node")
                    return 1
            time.sleep(0.2)
        return 0

    # --- stop --------------------------------------------------------------------------------
    def _stop_child(self, name: str, grace: float) -> None:
        pid = self.children.get(name)
        if pid is None or pid in self.exited:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while pid not in self.exited and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        if pid not in self.exited:
            _log(f"{name} did not stop in {grace:.0f}s; killing it")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self._stop_child("kubelet", grace=10)
        hostsys.kill_cgroup(self.spec["cgroup_root"])
        self._stop_child("containerd", grace=5)
        # Shims and anything else left: as subreaper, this process is their parent now.
        hostsys.kill_until_gone(lambda: _children_of(os.getpid()), timeout=5, between=self._reap)
        left = hostsys.remove_cgroup(self.spec["cgroup_root"])
        if left:
            _log(f"could not remove cgroups: {', '.join(left[:3])}")
        _log("node stopped")


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
    return found


def _accepts(path: str) -> bool:
    """Whether a server listens on the unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:  # missing, or there but not listening yet (ECONNREFUSED)
            return False
    return True


def sweep(node_dir: Path, cgroup_root: str) -> None:
    """Kill whatever a node left when its supervisor could not stop it (killed, or crashed):
    every process in the node's mount namespace (kubelet, containerd, shims) and its cgroups."""
    try:
        mntns = int((node_dir / "mntns").read_text())
    except (OSError, ValueError):
        mntns = None
    if mntns is not None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.stat(entry / "ns" / "mnt").st_ino == mntns:
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                continue
    hostsys.kill_cgroup(cgroup_root)
    hostsys.remove_cgroup(cgroup_root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m draconf.testbed.node")
    parser.add_argument("--node-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    supervisor = Supervisor(args.node_dir)

    def on_signal(*_):
        supervisor.stopping = True

    def on_hangup(*_):
        supervisor.restart_containerd = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    code = 1
    try:
        supervisor.become_the_node()
        supervisor.start()
        code = supervisor.run()
    except Exception as err:  # noqa: BLE001 - reported in the node's log, then the node stops
        _log(f"error: {err}")
    finally:
        supervisor.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
