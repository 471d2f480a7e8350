"""Binaries for the test bed taken out of Debian packages, without installing the packages.

The bed's real nodes need ``runc`` (containerd's runtime) and a static ``busybox`` (the GPU
workloads' image).  Both come from the host's Debian archive: ``apt-get download`` (no root
needed), ``dpkg-deb -x`` into a temporary directory, and the named files copied into a cache
directory.  A stamp there records what was fetched, so asking again costs one file read.

Example::

    from draconf.testbed import debs
    versions = debs.fetch(pins.DEBIAN_PACKAGES, cache / "bin")
    # {'runc': '1.1.5+ds1-1+deb12u1', 'busybox-static': '1:1.35.0-4+deb12u1+b1'}
    # cache/bin/runc and cache/bin/busybox are now there, executable

A dynamically linked binary (Debian's runc needs libseccomp) is checked with ``ldd``; a
missing library is reported with the package that provides it, by Debian's naming rule:

>>> library_package("libseccomp.so.2")
'libseccomp2'
>>> library_package("libfoo1.so.3")
'libfoo1-3'
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePosixPath

from draconf.errors import DraconfError


STAMP = ".debs.json"


def fetch(packages: dict[str, list[str]], dest: Path, log=print) -> dict[str, str]:
    """Put the named files of each Debian package into *dest*; return package -> version.

    *packages* maps a package name to paths inside it (``usr/sbin/runc``); each file lands as
    ``dest/<file name>``, executable.  Packages already fetched with the same files (per the
    stamp in *dest*) are not downloaded again.
    """
    dest = Path(dest)
    stamp = _read_stamp(dest)
    versions: dict[str, str] = {}
    for package, paths in packages.items():
        known = stamp.get(package)
        if (known and known.get("files") == list(paths)
                and all((dest / PurePosixPath(p).name).is_file() for p in paths)):
            versions[package] = known["version"]
            continue
        versions[package] = _fetch_one(package, list(paths), dest, log)
        stamp[package] = {"files": list(paths), "version": versions[package]}
        _write_stamp(dest, stamp)
    return versions


def _read_stamp(dest: Path) -> dict:
    try:
        return json.loads((dest / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def _write_stamp(dest: Path, stamp: dict) -> None:
    (dest / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")


def _require(tool: str, why: str) -> None:
    if shutil.which(tool) is None:
        raise DraconfError(
            f"the test bed takes {why} from Debian packages, but `{tool}` is not on PATH: "
            "run it on a Debian or Ubuntu host (or one with apt-get and dpkg-deb installed)")


def _fetch_one(package: str, paths: list[str], dest: Path, log) -> str:
    what = ", ".join(PurePosixPath(p).name for p in paths)
    _require("apt-get", what)
    _require("dpkg-deb", what)
    with tempfile.TemporaryDirectory(prefix=f"draconf-deb-{package}-") as tmp:
        deb = _download(package, Path(tmp))
        version = _dpkg_field(deb, "Version")
        log(f"[debs] {package} {version}: {what}")
        root = Path(tmp) / "root"
        _run(["dpkg-deb", "-x", str(deb), str(root)], f"unpacking {deb.name}")
        dest.mkdir(parents=True, exist_ok=True)
        for path in paths:
            inside = root / path
            if not inside.is_file():
                raise DraconfError(
                    f"Debian package {package} {version} has no file /{path} (its programs: "
                    f"{', '.join(_programs(root)) or 'none'}); fix the path in draconf.testbed.debs")
            check_libraries(inside, package, deb)
            target = dest / inside.name
            partial = target.with_name(target.name + ".partial")
            shutil.copyfile(inside, partial)
            partial.chmod(0o755)
            os.replace(partial, target)
    return version


def _programs(root: Path) -> list[str]:
    """Up to six executables in an unpacked package, for an error message."""
    found = [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
             if p.is_file() and os.access(p, os.X_OK)]
    return found[:6]


def _download(package: str, workdir: Path) -> Path:
    cmd = ["apt-get", "download", "-q", package]
    if os.geteuid() == 0:
        # As root apt drops to the _apt user, who cannot write to our private temp dir.
        cmd[1:1] = ["-o", "APT::Sandbox::User=root"]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    debs = sorted(workdir.glob("*.deb"))
    if proc.returncode == 0 and debs:
        return debs[0]
    err = proc.stderr.strip()
    if ("Unable to locate package" in err or "has no installation candidate" in err
            or "404" in err or "Can't select candidate" in err):
        raise DraconfError(
            f"`apt-get download {package}` failed: the package lists are missing or out of date "
            f"({_last_line(err)}); run `apt-get update` (as root) and try again")
    raise DraconfError(
        f"`apt-get download {package}` failed (exit {proc.returncode}): {_last_line(err)}; "
        "check that this host can reach its Debian mirror")


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("W:")]
    return lines[-1].strip() if lines else "no message"


def _run(cmd: list[str], doing: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DraconfError(f"{doing} failed: `{' '.join(cmd)}` exited {proc.returncode}: "
                           f"{_last_line(proc.stderr)}")
    return proc.stdout


def _dpkg_field(deb: Path, name: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), name], f"reading {name} of {deb.name}").strip()


def library_package(soname: str) -> str:
    """The Debian package that ships a shared library, by policy 8.1: ``libfoo.so.2`` is in
    ``libfoo2``, ``libfoo1.so.3`` in ``libfoo1-3``."""
    match = re.fullmatch(r"(.+?)\.so\.(\d+)(?:\..*)?", soname)
    if not match:
        return soname.split(".so")[0]
    base, version = match.groups()
    return f"{base}-{version}" if base[-1].isdigit() else f"{base}{version}"


def missing_libraries(binary: Path) -> list[str]:
    """The shared libraries *binary* needs that this host's loader cannot find (ldd)."""
    if shutil.which("ldd") is None:
        return []   # not glibc: nothing to ask; the binary fails loudly when run if it must
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    # A static binary makes ldd exit 1 with "not a dynamic executable": nothing is missing.
    return [line.split("=>")[0].strip() for line in proc.stdout.splitlines()
            if "=> not found" in line]


def check_libraries(binary: Path, package: str, deb: Path | None = None) -> None:
    """Raise if *binary* (from *package*) would not start on this host for want of a library."""
    missing = missing_libraries(binary)
    if not missing:
        return
    wanted = [library_package(lib) for lib in missing]
    depends = _dpkg_field(deb, "Depends") if deb else ""
    named = [p for p in wanted if re.search(rf"(^|[ ,]){re.escape(p)}([ ,:(]|$)", depends)]
    install = " ".join(named or wanted)
    raise DraconfError(
        f"{binary.name} from Debian package {package} needs {', '.join(missing)}, which this "
        f"host lacks; install it with `apt-get install {install}`")
