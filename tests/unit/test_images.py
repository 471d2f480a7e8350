"""draconf.testbed.images: the OCI archives the bed imports into each node's containerd.

Built from small stand-in binaries in tmp_path (a shell script plays busybox and answers
``--list-full``), so these run anywhere in well under a second.  The one test with the real
Debian busybox-static is skipped where apt-get is missing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import shutil
import tarfile
from pathlib import Path

import pytest

from draconf.testbed import images

FAKE_APPLETS = ["bin/sh", "bin/ash", "bin/sleep", "bin/hostname", "bin/ls", "bin/cat",
                "usr/bin/env", "usr/bin/awk", "bin/busybox", "usr/bin/[", "sbin/init", "linuxrc"]


@pytest.fixture
def fake_busybox(tmp_path) -> Path:
    path = tmp_path / "busybox"
    path.write_text("#!/bin/sh\n[ \"$1\" = --list-full ] && printf '%s\\n' "
                    + " ".join(f"'{a}'" for a in FAKE_APPLETS) + "\n")
    path.chmod(0o755)
    return path


def fake_binary(tmp_path: Path, name: str, content: bytes = b"\x7fELF fake") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    path.chmod(0o755)
    return path


# --- reading an archive back -----------------------------------------------------------------

class Opened:
    """An OCI archive read back: its blobs by digest, the image's manifest, config and layer."""

    def __init__(self, archive: Path):
        with tarfile.open(archive) as tar:
            self.names = tar.getnames()
            self.files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        self.index = json.loads(self.files["index.json"])
        self.layout = json.loads(self.files["oci-layout"])
        self.manifest_desc = self.index["manifests"][0]
        self.manifest = json.loads(self.blob(self.manifest_desc))
        self.config = json.loads(self.blob(self.manifest["config"]))
        self.layer_gz = self.blob(self.manifest["layers"][0])
        self.layer = gzip.decompress(self.layer_gz)
        with tarfile.open(fileobj=io.BytesIO(self.layer)) as tar:
            self.members = {m.name.rstrip("/"): m for m in tar.getmembers()}
            self.contents = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}

    def blob(self, descriptor: dict) -> bytes:
        algorithm, hexdigest = descriptor["digest"].split(":")
        assert algorithm == "sha256"
        return self.files[f"blobs/sha256/{hexdigest}"]

    def resolve(self, path: str, hops: int = 10) -> tarfile.TarInfo:
        """Follow symlinks inside the layer, as the container's filesystem would."""
        name = path.lstrip("/")
        for _ in range(hops):
            member = self.members[name]
            if not member.issym():
                return member
            target = member.linkname
            name = (target if target.startswith("/")
                    else posixpath.join(posixpath.dirname(name), target)).lstrip("/")
            name = posixpath.normpath(name)
        raise AssertionError(f"symlink loop at {path}")

    def on_path(self, command: str) -> tarfile.TarInfo:
        """The executable a shell finds for *command* with the image's PATH."""
        env = dict(e.split("=", 1) for e in self.config["config"]["Env"])
        for directory in env["PATH"].split(":"):
            candidate = f"{directory}/{command}".lstrip("/")
            if candidate in self.members:
                member = self.resolve(candidate)
                assert member.isfile() and member.mode & 0o111, candidate
                return member
        raise AssertionError(f"{command} is not on PATH in the image")


def small_image(tmp_path: Path, name: str = "a.tar", tool: bytes = b"\x7fELF fake") -> images.ImageArchive:
    entries = [
        images.file("usr/bin/tool", fake_binary(tmp_path, "tool", tool)),
        images.text("etc/conf", "x=1\n", 0o600),
        images.symlink("bin/tool", "/usr/bin/tool"),
        images.directory("tmp", 0o1777),
    ]
    config = images.ImageConfig(entrypoint=["/usr/bin/tool"], cmd=["--help"], working_dir="/tmp",
                                user="1000:1000", env=["PATH=/usr/bin", "A=b"])
    return images.build_archive("draconf.local/small:1.0", entries, config, tmp_path / name)


# --- structure and digests -------------------------------------------------------------------

def test_archive_is_an_oci_layout(tmp_path):
    image = Opened(small_image(tmp_path).path)
    assert image.layout == {"imageLayoutVersion": "1.0.0"}
    assert {"oci-layout", "index.json", "blobs", "blobs/sha256"} <= set(image.names)
    assert image.index["schemaVersion"] == 2
    assert image.index["mediaType"] == images.MEDIA_INDEX
    assert len(image.index["manifests"]) == 1
    desc = image.manifest_desc
    assert desc["mediaType"] == images.MEDIA_MANIFEST
    assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
    assert desc["annotations"] == {"io.containerd.image.name": "draconf.local/small:1.0",
                                   "org.opencontainers.image.ref.name": "1.0"}
    assert image.manifest["config"]["mediaType"] == images.MEDIA_CONFIG
    assert [layer["mediaType"] for layer in image.manifest["layers"]] == [images.MEDIA_LAYER]
    assert image.config["architecture"] == "amd64" and image.config["os"] == "linux"
    assert image.config["config"] == {"Entrypoint": ["/usr/bin/tool"], "Cmd": ["--help"],
                                      "Env": ["PATH=/usr/bin", "A=b"], "WorkingDir": "/tmp",
                                      "User": "1000:1000"}


def test_digests_and_sizes_match_content(tmp_path):
    image = Opened(small_image(tmp_path).path)
    blobs = {name: data for name, data in image.files.items() if name.startswith("blobs/")}
    assert len(blobs) == 3   # manifest, config, layer
    for name, data in blobs.items():
        assert name == "blobs/sha256/" + hashlib.sha256(data).hexdigest()
    for desc in [image.manifest_desc, image.manifest["config"], *image.manifest["layers"]]:
        assert len(image.blob(desc)) == desc["size"]
    assert image.config["rootfs"] == {
        "type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(image.layer).hexdigest()]}


def test_layer_gzip_header_has_no_mtime_or_name(tmp_path):
    layer_gz = Opened(small_image(tmp_path).path).layer_gz
    assert layer_gz[:2] == b"\x1f\x8b"
    assert layer_gz[4:8] == b"\0\0\0\0"       # MTIME
    assert not layer_gz[3] & 0x08             # no FNAME


def test_same_inputs_same_digest(tmp_path):
    first = small_image(tmp_path, "first.tar")
    second = small_image(tmp_path, "second.tar")
    assert first.digest() == second.digest()
    assert first.path.read_bytes() == second.path.read_bytes()


def test_entry_order_does_not_matter(tmp_path):
    tool = fake_binary(tmp_path, "tool")
    entries = [images.file("usr/bin/tool", tool), images.symlink("bin/t", "/usr/bin/tool"),
               images.directory("var/empty")]
    config = images.ImageConfig()
    a = images.build_archive("x.local/y:1", entries, config, tmp_path / "a.tar")
    b = images.build_archive("x.local/y:1", entries[::-1], config, tmp_path / "b.tar")
    assert a.digest() == b.digest()


def test_different_content_different_digest(tmp_path):
    first = small_image(tmp_path, "first.tar").digest()
    assert small_image(tmp_path, "second.tar", tool=b"\x7fELF other").digest() != first


def test_unchanged_inputs_are_not_rebuilt(tmp_path):
    image = small_image(tmp_path)
    before = image.path.stat().st_ino   # a rebuild replaces the file
    assert small_image(tmp_path).path.stat().st_ino == before
    rebuilt = small_image(tmp_path, tool=b"\x7fELF changed")
    assert Opened(rebuilt.path).contents["usr/bin/tool"] == b"\x7fELF changed"


def test_members_are_normalised_and_modes_kept(tmp_path):
    image = Opened(small_image(tmp_path).path)
    names = list(image.members)
    assert names == sorted(names, key=lambda n: n.split("/"))
    # Parents are made even when not listed, before their children.
    assert names.index("usr") < names.index("usr/bin") < names.index("usr/bin/tool")
    for member in image.members.values():
        assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
        assert member.mtime == images.FIXED_MTIME
        assert not member.name.startswith("/")
    assert image.members["usr/bin/tool"].mode == 0o755
    assert image.members["etc/conf"].mode == 0o600
    assert image.contents["etc/conf"] == b"x=1\n"
    assert image.members["tmp"].isdir() and image.members["tmp"].mode == 0o1777
    assert image.members["usr"].isdir() and image.members["usr"].mode == 0o755
    link = image.members["bin/tool"]
    assert link.issym() and link.linkname == "/usr/bin/tool"


def test_paths_outside_the_root_are_refused():
    with pytest.raises(ValueError):
        images.text("../etc/passwd", "")
    with pytest.raises(ValueError):
        images.directory("/")


# --- the bed's three images ------------------------------------------------------------------

def test_pause_image(tmp_path):
    archive, ref = images.pause_image(fake_binary(tmp_path, "pause"), tmp_path / "out")
    assert ref == "draconf.local/pause:3.10"
    assert archive.name == "pause-3.10.oci.tar"
    image = Opened(archive)
    assert image.config["config"]["Entrypoint"] == ["/pause"]
    assert image.members["pause"].mode == 0o755
    assert image.contents["pause"] == b"\x7fELF fake"
    assert image.manifest_desc["annotations"]["io.containerd.image.name"] == ref


def test_workload_image_commands_resolve(tmp_path, fake_busybox):
    archive, ref = images.workload_image(fake_busybox, tmp_path / "out")
    assert ref == "draconf.local/busybox:1.35.0"
    image = Opened(archive)
    assert image.config["config"]["Cmd"] == ["sh"]
    assert image.config["config"]["Env"] == [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    busybox = image.members["bin/busybox"]
    for command in ["sleep", "printenv", "hostname", "ls", "cat", "env", "sh", "bash"]:
        target = image.on_path(command)
        if command not in ("bash", "printenv"):
            assert target is busybox, command
    for applet in FAKE_APPLETS:
        if applet != "bin/busybox":
            assert image.members[applet].linkname == "/bin/busybox", applet


def test_workload_image_wrappers_where_busybox_lacks_applets(tmp_path, fake_busybox):
    image = Opened(images.workload_image(fake_busybox, tmp_path / "out").path)
    bash = image.contents["bin/bash"].decode()
    assert bash == '#!/bin/sh\nexec /bin/sh "$@"\n' and image.members["bin/bash"].mode == 0o755
    printenv = image.contents["usr/bin/printenv"].decode()
    assert printenv.startswith("#!/bin/sh\n") and "ENVIRON" in printenv


def test_workload_image_uses_real_applets_when_busybox_has_them(tmp_path):
    busybox = tmp_path / "busybox"
    busybox.write_text("#!/bin/sh\nprintf '%s\\n' bin/busybox bin/sh bin/bash usr/bin/printenv\n")
    busybox.chmod(0o755)
    image = Opened(images.workload_image(busybox, tmp_path / "out").path)
    assert image.members["bin/bash"].linkname == "/bin/busybox"
    assert image.members["usr/bin/printenv"].linkname == "/bin/busybox"


def test_workload_image_filesystem(tmp_path, fake_busybox):
    image = Opened(images.workload_image(fake_busybox, tmp_path / "out").path)
    passwd = image.contents["etc/passwd"].decode().splitlines()
    assert [line.split(":")[0] for line in passwd] == ["root", "nobody"]
    assert passwd[0].split(":")[2:4] == ["0", "0"]
    groups = image.contents["etc/group"].decode().splitlines()
    assert [line.split(":")[0] for line in groups] == ["root", "nobody"]
    assert image.members["tmp"].mode == 0o1777
    assert image.members["root"].mode == 0o700
    for directory in ["usr/bin", "dev", "proc", "sys", "tmp", "root"]:
        assert image.members[directory].isdir(), directory
    assert "usr/bin/nvidia-smi" not in image.members   # CDI mounts it; the parent must exist


def test_not_busybox_is_a_clear_error(tmp_path):
    from draconf.errors import DraconfError
    fake = fake_binary(tmp_path, "busybox", b"#!/bin/sh\nexit 3\n")
    with pytest.raises(DraconfError, match="listed no applets"):
        images.workload_image(fake, tmp_path / "out")


def test_gpu_plugin_image(tmp_path):
    plugin = fake_binary(tmp_path, "gpu-kubelet-plugin", b"\x7fELF plugin")
    archive, ref = images.gpu_plugin_image(plugin, tmp_path / "out")
    assert ref == "draconf.local/dra-driver-nvidia-gpu-sim:v0.4.1"
    image = Opened(archive)
    assert image.config["config"]["Entrypoint"] == ["/usr/bin/gpu-kubelet-plugin"]
    assert image.contents["usr/bin/gpu-kubelet-plugin"] == b"\x7fELF plugin"
    assert image.members["usr/bin/gpu-kubelet-plugin"].mode == 0o755
    assert image.members["tmp"].mode == 0o1777
    assert image.contents["etc/passwd"].startswith(b"root:x:0:0:")


# --- with the real Debian busybox-static -----------------------------------------------------

def test_workload_image_with_debian_busybox(tmp_path):
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get/dpkg-deb not available: not a Debian host, so no busybox-static to fetch")
    from draconf.testbed import debs
    debs.fetch({"busybox-static": ["bin/busybox"]}, tmp_path / "bin", log=lambda msg: None)
    image = Opened(images.workload_image(tmp_path / "bin" / "busybox", tmp_path / "out").path)
    for command in ["sleep", "printenv", "hostname", "ls", "cat", "env", "sh", "bash", "awk"]:
        image.on_path(command)
    assert len([m for m in image.members.values() if m.issym()]) > 200


def test_the_mps_daemon_runs_the_beds_image():
    """nvidia.MPS_DAEMON_IMAGE repeats profile.TESTBED_IMAGE (nvidia cannot import profile: a
    cycle through images.py); the daemon Deployment must run the image every real node has."""
    from draconf.profile import TESTBED_IMAGE
    from draconf.testbed.nvidia import MPS_DAEMON_IMAGE
    assert MPS_DAEMON_IMAGE == TESTBED_IMAGE
