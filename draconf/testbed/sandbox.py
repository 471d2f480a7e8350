"""Run a program in a throwaway root: its own user, mount and PID namespaces, nothing of the host.

kwok plays kubelet for KWOK nodes and runs every ``kubectl exec`` into their pods as a process
of its own.  Started on the host, that process would be the host's: ``kubectl exec pod --
/bin/sh`` would give a root shell on the developer's machine.  The bed therefore starts kwok
through this module, inside namespaces that ``unshare(1)`` creates::

    unshare --user --map-root-user --mount --pid --fork --kill-child --propagation private -- \\
        python -m draconf.testbed.sandbox --root ROOT --bind SRC:DST:ro ... --path /kwok-node/bin \\
        -- /kwok-node/kwok --config ...

This module then, in those namespaces: bind-mounts each ``--bind`` into ``ROOT``, gives it a
fresh ``/proc`` (of the new PID namespace), a few character devices (``/dev/null``, ...) and an
empty ``/tmp``, makes ``ROOT`` the root with ``pivot_root(2)``, detaches the host's tree, makes
the new root read-only, and executes the program with only ``PATH`` and ``HOME`` in its
environment.  Whatever that program starts sees only ``ROOT``: a command not placed there does
not exist ("no such file or directory"), wherever its path points.

The user namespace maps root to root, so the sandbox can read the bed's files (owned by root)
but holds no capability over the host's namespaces: no mounting on the host, no devices, no
other processes (its PID namespace shows only its own).

Example (what the bed runs)::

    cmd = sandbox.command(root, binds=[(bed_dir, bed_dir, True)], path="/kwok-node/bin",
                          program=["/kwok-node/kwok", "--config=..."], workdir=bed_dir)
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import sys
from pathlib import Path

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2
SYS_PIVOT_ROOT = 155  # x86_64

#: Character devices a Go program (and ``os/exec``) expects; bound from the host's /dev.
DEVICES = ("null", "zero", "random", "urandom")

#: statvfs flags the kernel locks on a bind mount made in a user namespace: a read-only
#: remount must repeat them or it is refused (EPERM).
_LOCKED_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC}

UNSHARE = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child",
           "--propagation", "private", "--"]


def command(root: Path, binds: list[tuple[Path, Path, bool]], path: str, program: list[str],
            workdir: Path | None = None) -> list[str]:
    """The command line that runs ``program`` sandboxed in ``root``.

    ``binds`` are ``(host path, path inside, read-only)``; ``path`` is the program's whole PATH.

    >>> command(Path("/r"), [(Path("/bed"), Path("/bed"), True)], "/bin", ["/bin/kwok", "-v"])[-10:]
    ['draconf.testbed.sandbox', '--root', '/r', '--bind', '/bed:/bed:ro', '--path', '/bin', '--', '/bin/kwok', '-v']
    """
    args = [*UNSHARE, sys.executable, "-m", "draconf.testbed.sandbox", "--root", str(root)]
    for src, dst, read_only in binds:
        args += ["--bind", f"{src}:{dst}:{'ro' if read_only else 'rw'}"]
    args += ["--path", path]
    if workdir is not None:
        args += ["--workdir", str(workdir)]
    return [*args, "--", *program]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       ctypes.c_ulong(flags), None), f"mount {source or fstype} on {target}")


def _bind(source: str, target: Path, read_only: bool) -> None:
    if Path(source).is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    _mount(source, str(target), None, MS_BIND)
    if read_only:
        locked = os.statvfs(target).f_flag
        extra = sum(ms for st, ms in _LOCKED_FLAGS.items() if locked & st)
        _mount(None, str(target), None, MS_BIND | MS_REMOUNT | MS_RDONLY | extra)


def enter(root: Path, binds: list[tuple[str, str, bool]], workdir: str) -> None:
    """Make ``root`` this process's whole filesystem (call in fresh user+mount+PID namespaces)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root.mkdir(parents=True, exist_ok=True)
    _mount(str(root), str(root), None, MS_BIND)  # pivot_root needs a mount point
    (root / "proc").mkdir(exist_ok=True)
    _mount("proc", str(root / "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    (root / "tmp").mkdir(exist_ok=True)
    _mount("tmpfs", str(root / "tmp"), "tmpfs", MS_NOSUID | MS_NODEV)
    for name in DEVICES:
        _bind(f"/dev/{name}", root / "dev" / name, read_only=False)
    # Binds last: one may lie under /tmp (a bed in a temporary state dir).
    for src, dst, read_only in binds:
        _bind(src, root / dst.lstrip("/"), read_only)
    os.chdir(root)
    # pivot_root(".", "."): the old root ends up stacked on the new one; detaching it leaves
    # only the new root (the way runc does it, without a directory for the old root).
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host's root")
    os.chdir("/")
    try:
        _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY
               | sum(ms for st, ms in _LOCKED_FLAGS.items() if os.statvfs("/").f_flag & st))
    except OSError as err:
        if err.errno != errno.EPERM:
            raise
    os.chdir(workdir)


def _parse_bind(text: str) -> tuple[str, str, bool]:
    src, dst, mode = text.rsplit(":", 2)
    if mode not in ("ro", "rw"):
        raise argparse.ArgumentTypeError(f"bind mode must be ro or rw: {text}")
    return src, dst, mode == "ro"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m draconf.testbed.sandbox")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--bind", type=_parse_bind, action="append", default=[])
    parser.add_argument("--path", required=True, help="the program's whole PATH")
    parser.add_argument("--workdir", default="/")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program given after --")
    try:
        enter(args.root, args.bind, args.workdir)
    except OSError as err:
        print(f"sandbox: {err}", file=sys.stderr)
        return 1
    env = {"PATH": args.path, "HOME": "/nonexistent"}
    os.execve(program[0], program, env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
