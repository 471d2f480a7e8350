"""draconf.testbed.debs against stand-in apt-get, dpkg-deb and ldd: no network, no Debian needed.

The stand-ins are small shell scripts on a private PATH that behave like the real tools for
the calls debs makes; a call counter shows the stamp makes a second fetch free.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from draconf.errors import DraconfError
from draconf.testbed import debs

FAKE_APT_GET = """#!/bin/sh
echo call >> "$FAKE_LOG"
for pkg; do :; done
if [ "$pkg" = missing ]; then
    echo "E: Unable to locate package missing" >&2; exit 100
fi
if [ "$pkg" = offline ]; then
    echo "E: Failed to fetch http://deb.debian.org/x.deb  Temporary failure resolving 'deb.debian.org'" >&2
    exit 100
fi
: > "${pkg}_1.0-1_amd64.deb"
"""

FAKE_DPKG_DEB = """#!/bin/sh
case "$1" in
    -f) case "$3" in Version) echo 1.0-1;; Depends) echo "libc6 (>= 2.34), libseccomp2 (>= 2.5.0)";; esac;;
    -x) mkdir -p "$3/usr/sbin" && printf '#!/bin/sh\\necho runc\\n' > "$3/usr/sbin/runc" && chmod 755 "$3/usr/sbin/runc";;
esac
"""

FAKE_LDD = """#!/bin/sh
if [ -n "$FAKE_LDD_MISSING" ]; then
    printf '\\tlinux-vdso.so.1 (0x0)\\n\\tlibseccomp.so.2 => not found\\n'
else
    echo "not a dynamic executable" >&2; exit 1
fi
"""


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    for name, script in (("apt-get", FAKE_APT_GET), ("dpkg-deb", FAKE_DPKG_DEB), ("ldd", FAKE_LDD)):
        path = bindir / name
        path.write_text(script)
        path.chmod(0o755)
    log = tmp_path / "apt-calls"
    log.touch()
    # /bin is kept for sh, mkdir, printf, chmod; the stand-ins come first.
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.delenv("FAKE_LDD_MISSING", raising=False)
    return log


def test_fetch_copies_executable_and_reports_version(fake_tools, tmp_path):
    dest = tmp_path / "cache"
    versions = debs.fetch({"runc": ["usr/sbin/runc"]}, dest, log=lambda msg: None)
    assert versions == {"runc": "1.0-1"}
    runc = dest / "runc"
    assert runc.read_text().startswith("#!/bin/sh")
    assert runc.stat().st_mode & stat.S_IXUSR


def test_second_fetch_is_free(fake_tools, tmp_path):
    dest = tmp_path / "cache"
    first = debs.fetch({"runc": ["usr/sbin/runc"]}, dest, log=lambda msg: None)
    second = debs.fetch({"runc": ["usr/sbin/runc"]}, dest, log=lambda msg: None)
    assert first == second
    assert len(fake_tools.read_text().splitlines()) == 1
    (dest / "runc").unlink()   # a lost file is fetched again despite the stamp
    debs.fetch({"runc": ["usr/sbin/runc"]}, dest, log=lambda msg: None)
    assert len(fake_tools.read_text().splitlines()) == 2


def test_unknown_package_says_apt_get_update(fake_tools, tmp_path):
    with pytest.raises(DraconfError, match=r"run `apt-get update`"):
        debs.fetch({"missing": ["bin/x"]}, tmp_path, log=lambda msg: None)


def test_download_failure_is_one_line(fake_tools, tmp_path):
    with pytest.raises(DraconfError) as err:
        debs.fetch({"offline": ["bin/x"]}, tmp_path, log=lambda msg: None)
    assert "Temporary failure resolving" in str(err.value) and "\n" not in str(err.value)


def test_file_not_in_package(fake_tools, tmp_path):
    with pytest.raises(DraconfError, match=r"has no file /usr/bin/runc .*usr/sbin/runc"):
        debs.fetch({"runc": ["usr/bin/runc"]}, tmp_path, log=lambda msg: None)


def test_missing_library_names_the_package(fake_tools, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LDD_MISSING", "1")
    with pytest.raises(DraconfError, match=r"libseccomp\.so\.2.*`apt-get install libseccomp2`"):
        debs.fetch({"runc": ["usr/sbin/runc"]}, tmp_path / "cache", log=lambda msg: None)
    assert not (tmp_path / "cache" / "runc").exists()


def test_no_apt_get(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DraconfError, match=r"`apt-get` is not on PATH"):
        debs.fetch({"runc": ["usr/sbin/runc"]}, tmp_path / "cache", log=lambda msg: None)


@pytest.mark.parametrize("soname, package", [
    ("libseccomp.so.2", "libseccomp2"),
    ("libc.so.6", "libc6"),
    ("libfoo1.so.3", "libfoo1-3"),
    ("libssl.so.3", "libssl3"),
])
def test_library_package(soname, package):
    assert debs.library_package(soname) == package


def test_real_host_libraries_resolve():
    """ldd on a binary of this host finds nothing missing (guards the "=> not found" parsing)."""
    if not os.path.exists("/bin/sh") or not any(
            os.access(os.path.join(d, "ldd"), os.X_OK) for d in os.environ["PATH"].split(":")):
        pytest.skip("no ldd on this host")
    assert debs.missing_libraries(Path("/bin/sh").resolve()) == []
