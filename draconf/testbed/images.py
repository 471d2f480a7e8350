"""Container images for the test bed's real nodes, built from local files as OCI archives.

The bed has no registry and no Docker: each node's containerd gets its images with
``ctr -n k8s.io images import <archive>``.  This module writes those archives: an OCI
image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) in one uncompressed tar,
for linux/amd64, with one gzip layer made from a list of :class:`Entry` (files, directories,
symlinks).  The manifest carries ``io.containerd.image.name`` (the full reference, which
``ctr import`` names the image after) and ``org.opencontainers.image.ref.name`` (the tag).

Only the standard library is used (tarfile, gzip, hashlib, json): there is no maintained
Python library for writing OCI layouts, and the format is small.  Archives are
deterministic -- fixed mtimes, uid/gid 0, sorted entries, gzip mtime 0, canonical JSON -- so
the same inputs give the same manifest digest (on a given zlib).

Recipes for the bed: :func:`pause_image` (the pod sandbox), :func:`workload_image` (the image
GPU workloads run in place of ``ubuntu:24.04``, a static busybox) and
:func:`gpu_plugin_image` (the simulated GPU kubelet plugin).  Each returns an
:class:`ImageArchive`, i.e. ``(path, ref)``::

    archive, ref = images.workload_image(bindir / "busybox", cache / "images")
    # then, per node:  ctr -n k8s.io images import --platform linux/amd64 <archive>

A generic image:

>>> import tarfile, tempfile
>>> out = Path(tempfile.mkdtemp())
>>> img = build_archive("draconf.local/hello:1", [text("etc/motd", "hi\\n")],
...                     ImageConfig(cmd=["cat", "/etc/motd"]), out / "hello.tar")
>>> img.ref, img.path.name
('draconf.local/hello:1', 'hello.tar')
>>> sorted(tarfile.open(img.path).getnames())[:3]  # doctest: +ELLIPSIS
['blobs', 'blobs/sha256', 'blobs/sha256/...']
>>> img.digest() == build_archive(img.ref, [text("etc/motd", "hi\\n")],
...                               ImageConfig(cmd=["cat", "/etc/motd"]), out / "again.tar").digest()
True
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, NamedTuple

from draconf.errors import DraconfError
from draconf.profile import TESTBED_IMAGE
from draconf.testbed.nvidia import PLUGIN_IMAGE

PAUSE_REF = "draconf.local/pause:3.10"
#: The suite's workloads run it on the bed in place of ubuntu:24.04 (see profile.for_target).
WORKLOAD_REF = TESTBED_IMAGE
#: The kubelet-plugin DaemonSet names it (see nvidia.plugin_daemonset).
GPU_PLUGIN_REF = PLUGIN_IMAGE
#: dra-example-driver's plugin, built from its module (the chart runs `dra-example-kubeletplugin`
#: from PATH, as its own Dockerfile installs it).
EXAMPLE_PLUGIN_REF = "draconf.local/dra-example-driver:v0.2.1"
EXAMPLE_PLUGIN_PATH = "/usr/bin/dra-example-kubeletplugin"

#: Where the GPU kubelet plugin binary sits in its image (and its entrypoint).
GPU_PLUGIN_PATH = "/usr/bin/gpu-kubelet-plugin"

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

#: Every file in a layer gets this mtime (2000-01-01 UTC): fixed for reproducible digests,
#: and not 0, which some tools print as "no date".
FIXED_MTIME = 946684800

#: Bumped whenever the archive format written here changes, so cached archives are rebuilt.
_FORMAT_VERSION = "1"


# --- what goes into a layer ------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One path in the image's filesystem; build it with :func:`file`, :func:`text`,
    :func:`directory` or :func:`symlink`."""
    path: str                      # relative to the image root, no leading "/"
    kind: str                      # "file", "dir" or "symlink"
    mode: int = 0o755
    source: Path | None = None     # host file, for kind "file"
    content: bytes | None = None   # literal content, for kind "file"
    target: str = ""               # for kind "symlink"

    def data(self) -> bytes:
        if self.content is not None:
            return self.content
        assert self.source is not None
        try:
            return Path(self.source).read_bytes()
        except OSError as err:
            raise DraconfError(f"cannot read {self.source} for image path /{self.path}: "
                               f"{err.strerror}") from None


def _clean(path: str) -> str:
    """``/usr/bin/`` -> ``usr/bin``; refuses paths that leave the image root."""
    parts = [p for p in PurePosixPath("/" + path).parts[1:] if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"not a path inside an image: {path!r}")
    return "/".join(parts)


def file(path: str, source: Path | str, mode: int = 0o755) -> Entry:
    """The host file *source* at *path* in the image (executable unless *mode* says not)."""
    return Entry(_clean(path), "file", mode, source=Path(source))


def text(path: str, content: str | bytes, mode: int = 0o644) -> Entry:
    """A file with literal *content*."""
    data = content.encode() if isinstance(content, str) else content
    return Entry(_clean(path), "file", mode, content=data)


def directory(path: str, mode: int = 0o755) -> Entry:
    return Entry(_clean(path), "dir", mode)


def symlink(path: str, target: str) -> Entry:
    return Entry(_clean(path), "symlink", 0o777, target=target)


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of the OCI image config (``config`` in the config blob)."""
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: [DEFAULT_PATH])
    working_dir: str = "/"
    user: str = ""

    def to_json(self) -> dict:
        config: dict = {"WorkingDir": self.working_dir}
        if self.env:
            config["Env"] = list(self.env)
        if self.entrypoint:
            config["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.user:
            config["User"] = self.user
        return config


def import_command(ctr, address, archive) -> list[str]:
    """``ctr images import`` of ``archive`` into the containerd at ``address``, as a node
    imports its images at start and an upgrade imports a new one into a running node.

    >>> import_command("ctr", "/run/containerd/containerd.sock", "a.tar")[3:]
    ['-n', 'k8s.io', 'images', 'import', '--platform', 'linux/amd64', '--snapshotter', 'overlayfs', 'a.tar']
    """
    return [str(ctr), "--address", str(address), "-n", "k8s.io", "images", "import",
            "--platform", "linux/amd64", "--snapshotter", "overlayfs", str(archive)]


class ImageArchive(NamedTuple):
    """An OCI archive on disk and the reference ``ctr import`` gives the image."""
    path: Path
    ref: str

    def digest(self) -> str:
        """The manifest digest (``sha256:...``), as ``ctr images ls`` shows it."""
        with tarfile.open(self.path) as tar:
            index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        return index["manifests"][0]["digest"]


# --- writing the archive ---------------------------------------------------------------------

def _canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """All entries plus a 0755 directory for each missing parent, sorted so parents come first.

    Later entries for the same path replace earlier ones, so a recipe can override a default.
    """
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
    for path in list(by_path):
        parent = PurePosixPath(path).parent
        while str(parent) != ".":
            by_path.setdefault(str(parent), directory(str(parent)))
            parent = parent.parent
    return sorted(by_path.values(), key=lambda e: e.path.split("/"))


def _tarinfo(name: str, kind: str, mode: int, size: int = 0, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}[kind]
    info.mode, info.size, info.linkname = mode, size, target
    info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
    return info


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """The uncompressed layer: a tar of *entries* and their parents, deterministic."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in _with_parents(entries):
            if entry.kind == "file":
                data = entry.data()
                tar.addfile(_tarinfo(entry.path, "file", entry.mode, len(data)), io.BytesIO(data))
            else:
                tar.addfile(_tarinfo(entry.path, entry.kind, entry.mode, target=entry.target))
    return buf.getvalue()


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    # filename="" and mtime=0 keep the gzip header free of anything that changes between runs.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def _descriptor(media_type: str, blob: bytes) -> dict:
    return {"mediaType": media_type, "digest": _sha256(blob), "size": len(blob)}


def _inputs_key(ref: str, entries: list[Entry], config: ImageConfig) -> str:
    """A hash of everything that decides the archive's bytes, to skip rebuilding it."""
    h = hashlib.sha256(f"{_FORMAT_VERSION}\0{ref}\0".encode())
    h.update(_canonical_json(config.to_json()))
    for entry in entries:
        h.update(_canonical_json([entry.path, entry.kind, entry.mode, entry.target]))
        if entry.kind == "file":
            h.update(hashlib.sha256(entry.data()).digest())
    return h.hexdigest()


def build_archive(ref: str, entries: Iterable[Entry], config: ImageConfig, archive: Path) -> ImageArchive:
    """Write an OCI image-layout tar of one linux/amd64 image named *ref* to *archive*.

    If *archive* already holds exactly these inputs (a ``.key`` file next to it says so), it is
    left alone and returned at once.
    """
    if ":" not in ref.rsplit("/", 1)[-1]:
        raise ValueError(f"image reference needs a tag: {ref!r}")
    entries = _with_parents(entries)
    archive = Path(archive)
    key_file = archive.with_name(archive.name + ".key")
    key = _inputs_key(ref, entries, config)
    if archive.is_file() and key_file.is_file() and key_file.read_text().strip() == key:
        return ImageArchive(archive, ref)

    layer = layer_tar(entries)
    layer_gz = _gzip(layer)
    config_blob = _canonical_json({
        "architecture": "amd64",
        "os": "linux",
        "config": config.to_json(),
        "rootfs": {"type": "layers", "diff_ids": [_sha256(layer)]},
        "history": [{"created_by": "draconf.testbed.images"}],
    })
    manifest_blob = _canonical_json({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": _descriptor(MEDIA_CONFIG, config_blob),
        "layers": [_descriptor(MEDIA_LAYER, layer_gz)],
    })
    index_blob = _canonical_json({
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            **_descriptor(MEDIA_MANIFEST, manifest_blob),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": ref,
                "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
            },
        }],
    })

    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    blobs = {_sha256(b).split(":")[1]: b for b in (layer_gz, config_blob, manifest_blob)}
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("blobs", "blobs/sha256"):
            tar.addfile(_tarinfo(name, "dir", 0o755))
        for hexdigest in sorted(blobs):
            data = blobs[hexdigest]
            tar.addfile(_tarinfo(f"blobs/sha256/{hexdigest}", "file", 0o644, len(data)), io.BytesIO(data))
        for name, data in (("index.json", index_blob),
                           ("oci-layout", _canonical_json({"imageLayoutVersion": "1.0.0"}))):
            tar.addfile(_tarinfo(name, "file", 0o644, len(data)), io.BytesIO(data))
    os.replace(partial, archive)
    key_file.write_text(key + "\n")
    return ImageArchive(archive, ref)


def archive_name(ref: str) -> str:
    """``draconf.local/busybox:1.35.0`` -> ``busybox-1.35.0.oci.tar``."""
    name, tag = ref.rsplit("/", 1)[-1].rsplit(":", 1)
    return f"{name}-{tag}.oci.tar"


# --- the bed's images ------------------------------------------------------------------------

PASSWD = ("root:x:0:0:root:/root:/bin/sh\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
GROUP = "root:x:0:\nnobody:x:65534:\n"

#: Debian's busybox has no ``bash`` applet (and a ``bash`` symlink to it fails with "applet not
#: found"), but the suite's manifests run ``bash -c "..."``: busybox's ash understands that.
BASH_WRAPPER = '#!/bin/sh\nexec /bin/sh "$@"\n'

#: Debian's busybox-static has no ``printenv`` applet; the bed's agent execs ``printenv NAME``.
#: awk's ENVIRON handles any variable name, which a shell ``eval`` would not.
PRINTENV_WRAPPER = (
    "#!/bin/sh\n"
    "# printenv [NAME...]: busybox-static has no printenv applet.\n"
    '[ $# -eq 0 ] && exec env\n'
    "exec awk 'BEGIN { status = 0; for (i = 1; i < ARGC; i++) "
    "if (ARGV[i] in ENVIRON) print ENVIRON[ARGV[i]]; else status = 1; exit status }' \"$@\"\n")


def _base_files() -> list[Entry]:
    return [text("etc/passwd", PASSWD), text("etc/group", GROUP), directory("tmp", 0o1777)]


def pause_image(pause: Path, out_dir: Path) -> ImageArchive:
    """The pod sandbox image: the static pause binary as ``/pause``, its entrypoint.

    Like registry.k8s.io/pause it runs as 65535:65535 (pause needs no privilege).
    """
    entries = [file("pause", pause)]
    config = ImageConfig(entrypoint=["/pause"], env=[], user="65535:65535")
    return build_archive(PAUSE_REF, entries, config,
                         Path(out_dir) / archive_name(PAUSE_REF))


def busybox_applets(busybox: Path) -> list[str]:
    """The install paths of every applet, e.g. ``bin/sh``, from ``busybox --list-full``."""
    try:
        proc = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, timeout=30)
    except OSError as err:
        raise DraconfError(f"cannot run {busybox} --list-full: {err.strerror}; the workload image "
                           "needs a static busybox built for this host (Debian busybox-static)") from None
    paths = [line.strip().lstrip("/") for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not paths:
        raise DraconfError(f"{busybox} --list-full listed no applets (exit {proc.returncode}); "
                           "is it busybox? The workload image needs Debian's busybox-static")
    return paths


def workload_entries(busybox: Path, applets: list[str]) -> list[Entry]:
    """The workload image's filesystem, given busybox and its applet paths."""
    entries = [*_base_files(), file("bin/busybox", busybox)]
    for path in applets:
        if _clean(path) != "bin/busybox":
            entries.append(symlink(path, "/bin/busybox"))
    names = {PurePosixPath(p).name for p in applets}
    if "bash" not in names:
        entries.append(text("bin/bash", BASH_WRAPPER, 0o755))
    if "printenv" not in names:
        entries.append(text("usr/bin/printenv", PRINTENV_WRAPPER, 0o755))
    entries += [directory("root", 0o700), directory("usr/bin"), directory("dev"),
                directory("proc"), directory("sys")]
    return entries


def workload_image(busybox: Path, out_dir: Path) -> ImageArchive:
    """The image the suite's GPU workloads run in on the bed: static busybox with every applet
    linked, ``bash`` and ``printenv`` (wrappers where busybox lacks them), root and nobody.

    ``/usr/bin`` exists so that a CDI bind mount of ``/usr/bin/nvidia-smi`` has a parent.
    """
    entries = workload_entries(busybox, busybox_applets(busybox))
    return build_archive(WORKLOAD_REF, entries, ImageConfig(cmd=["sh"]),
                         Path(out_dir) / archive_name(WORKLOAD_REF))


def gpu_plugin_image(plugin: Path, out_dir: Path) -> ImageArchive:
    """The simulated GPU kubelet plugin's image: the given static binary as its entrypoint."""
    entries = [*_base_files(), file(GPU_PLUGIN_PATH, plugin)]
    return build_archive(GPU_PLUGIN_REF, entries, ImageConfig(entrypoint=[GPU_PLUGIN_PATH]),
                         Path(out_dir) / archive_name(GPU_PLUGIN_REF))


def example_plugin_image(plugin: Path, out_dir: Path) -> ImageArchive:
    """dra-example-driver's kubelet plugin image: its static binary on PATH."""
    entries = [*_base_files(), file(EXAMPLE_PLUGIN_PATH, plugin)]
    return build_archive(EXAMPLE_PLUGIN_REF, entries, ImageConfig(),
                         Path(out_dir) / archive_name(EXAMPLE_PLUGIN_REF))
