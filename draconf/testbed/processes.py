"""The bed's own processes, seen from the process that starts them: free loopback ports, whether
a component still runs (and is still the one started), its log's last lines, reaping it."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1 (all held open until all are chosen)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


#: Popen objects of the components started by this process, to report how one exited.
CHILDREN: dict[int, subprocess.Popen] = {}


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def child_alive(pid: int) -> bool:
    """For a component this process started: its own exit status is the authority.

    Its ``/proc`` command line is not: right after ``Popen`` returns, the kernel may not have
    filled in the new program's arguments yet, and an empty command line looked like an exit.
    """
    return CHILDREN[pid].poll() is None


def pid_alive(pid: int, marker: str) -> bool:
    """True if ``pid`` runs and is still the process we started (its cmdline names ``marker``)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return marker in cmdline and ") Z " not in stat


def tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line[:300] for line in text[-lines:])


def reap(pid: int) -> None:
    child = CHILDREN.pop(pid, None)  # a later process may get the same pid
    if child is not None:
        child.poll()
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
