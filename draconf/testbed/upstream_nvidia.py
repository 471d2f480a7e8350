"""NVIDIA's own DRA driver release on the bed's real nodes, over NVIDIA's mock NVML.

``draconf testbed up --driver nvidia-v0.4.0`` (or ``nvidia-v25.12.0``) runs a released NVIDIA
DRA driver, built here from its source archive, and installed from the release's own Helm
chart; only the GPUs are simulated, by the mock ``libnvidia-ml.so`` of NVIDIA's k8s-test-infra
(``pkg/gpu/mocknvml``), which reads its GPUs from a YAML profile.  The driver's own CPU-only CI
lane pairs the same two (``hack/ci/mock-nvml/setup-mock-gpu.sh`` in the driver's source): a
driver root holding the library under ``usr/lib64``, its profile at ``config/config.yaml`` (the
library finds it from its own path, ``engine/config.go`` discoverConfigPath), device nodes
under ``dev/`` and files under ``proc/driver/nvidia``.  The bed does the same on each real node,
with a profile per node from the bed's inventory, so nodes differ in model and memory.

Nothing of upstream is in this repository.  The archives are read where a setting says
(:func:`sources_dir`: ``--upstream-sources``, else ``$DRACONF_UPSTREAM_SOURCES``, else
``../shared/upstream`` beside the repository), unpacked into the user cache keyed by their
sha256, and built there; the chart is rendered from the unpacked tree.  What goes into the
plugin's image follows the release's ``deployments/container/Dockerfile``: the plugin, built
with cgo as its Makefile builds it; ``nvidia-cdi-hook`` (there taken from the container
toolkit's image, here built from the toolkit's Go module at the version the driver's go.mod
pins, as its ``hack/toolkit-container-image.sh`` picks the image); a static bash (Debian's
bash-static, as that Dockerfile does); glibc and busybox in place of ``distroless/cc:debug``;
the release's ``hack/kubelet-plugin-prestart.sh`` and ``templates/``.

Which release a ``--driver`` choice names:

>>> RELEASES[DRIVER_CHOICES["nvidia-v0.4.0"]].chart_dir
'deployments/helm/dra-driver-nvidia-gpu'
>>> image_ref(RELEASES["v25.12.0"])
'draconf.local/k8s-dra-driver-gpu:v25.12.0'
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path


from draconf.errors import DraconfError

#: Where the driver root appears on a node (the bed mounts each node's own there), and the
#: chart value ``nvidiaDriverRoot`` naming it, as with the GPU Operator's containerized driver.
DRIVER_ROOT = "/run/nvidia/driver"
#: The environment variable that says where the upstream archives are.
SOURCES_ENV = "DRACONF_UPSTREAM_SOURCES"
#: k8s-test-infra's mock NVML (``pkg/gpu/mocknvml``), the simulated GPUs.
MOCK_NVML_ARCHIVE = "k8s-test-infra-v0.3.0.tar.xz"
MOCKNVML_DIR = "pkg/gpu/mocknvml"
#: Its mock libcuda.so (``pkg/gpu/mockcuda``, docs/cuda-mock.md: a few CUDA entry points, no
#: real CUDA workload).  The driver root needs a libcuda.so.<driver version>: the container
#: toolkit v1.18.2 of v25.12.0 finds the driver's library directory by it, and refuses every
#: claim without it ("failed to locate libcuda.so: pattern libcuda.so.580.95.05 not found").
MOCKCUDA_DIR = "pkg/gpu/mockcuda"
#: The chart's feature gates the bed turns on: GPU sharing, which the suite's nvidia profile
#: checks (both Alpha and off by default in pkg/featuregates/featuregates.go of v0.4.0).
FEATURE_GATES = {"TimeSlicingSettings": True, "MPSSupport": True}
#: The gate by which a release taints an unhealthy GPU in its ResourceSlice (v0.4.0:
#: cmd/gpu-kubelet-plugin/device_health.go, Alpha and off by default), on for the suite's
#: device-taint checks.  v25.12.0's gate of that name publishes no taint (it takes the GPU out of
#: the slice), so its bed leaves the gate at its default.  Over the mock NVML the gate runs, but
#: hears nothing: see :data:`MOCK_NVML_LIMITS`.
HEALTH_GATES = {"NVMLDeviceHealthCheck": True}
#: What a bed over the mock NVML cannot have (``draconf run`` says it in the feature's skip:
#: ``--draconf-target-limit``): MIG whatever the release; device taints where the release has
#: them (:func:`mock_nvml_limits`).
MOCK_NVML_LIMITS = {
    "mig": "on this test bed the GPUs are NVIDIA's mock NVML (k8s-test-infra v0.3.0, pkg/gpu/mocknvml), "
           "which has no MIG: nvmlDeviceGetGpuInstanceProfileInfo, the placement and GPU-instance calls and "
           "nvmlDeviceGetVirtualizationMode answer NOT_SUPPORTED (bridge/stubs_generated.go), so the "
           "release finds no MIG profile to publish, DynamicMIG on or off",
    # Seen on the bed: an NVML client that registers for events and waits gets ERROR_TIMEOUT, then
    # the Xid right after its own nvmlDeviceGetMemoryInfo of that GPU.
    "device-taints": "on this test bed the GPUs are NVIDIA's mock NVML (k8s-test-infra v0.3.0, "
                     "pkg/gpu/mocknvml), which raises a GPU's configured Xid only in an NVML session that "
                     "has itself queried that GPU (a guarded call such as nvmlDeviceGetMemoryInfo trips the "
                     "failure: engine/failure_injector.go, engine/engine.go PendingXidEvent); the release's "
                     "health monitor waits for events in a session of its own, opened after its start-up "
                     "queries, and queries no GPU there (cmd/gpu-kubelet-plugin/device_health.go), so no Xid "
                     "reaches it and no GPU is tainted here",
}


def mock_nvml_limits(release: "Release") -> dict[str, str]:
    """What a bed of ``release`` over the mock NVML cannot have, by the suite's feature name.

    >>> sorted(mock_nvml_limits(RELEASES["v0.4.0"])), sorted(mock_nvml_limits(RELEASES["v25.12.0"]))
    (['device-taints', 'mig'], ['mig'])
    """
    return {feature: why for feature, why in MOCK_NVML_LIMITS.items()
            if feature != "device-taints" or release.taints_unhealthy}
#: Debian packages whose files make the image's C runtime and shell (bookworm's names).
DEBIAN_FILES = {
    "bash-static": ["bin/bash-static"],
    "libc6": ["lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
              "lib/x86_64-linux-gnu/libdl.so.2", "lib/x86_64-linux-gnu/libpthread.so.0",
              "lib/x86_64-linux-gnu/libm.so.6", "lib/x86_64-linux-gnu/libresolv.so.2"],
}


@dataclass(frozen=True)
class Release:
    """One released NVIDIA DRA driver, as its archive holds it."""
    version: str
    archive: str
    module: str
    commit: str
    #: The chart, relative to the source root, and the image name its values default to.
    chart_dir: str
    image_name: str
    #: Where ``helm install`` would put it (the release's own docs and tests use these).
    namespace: str
    release_name: str
    #: The chart's ``nameOverride``: the prefix of its objects' names when not the chart's own
    #: (an upgrade across the chart's rename keeps the old names by it; see upstream_upgrade).
    name_override: str = ""
    #: Whether the release taints an unhealthy GPU (its HEALTH_GATES then go on).
    taints_unhealthy: bool = False

    @property
    def chart_name(self) -> str:
        return self.chart_dir.rsplit("/", 1)[1]

    @property
    def object_prefix(self) -> str:
        """What the chart names its objects after (``<prefix>-kubelet-plugin``, templates/_helpers.tpl)."""
        return self.name_override or self.chart_name


RELEASES = {
    # sigs.k8s.io/dra-driver-nvidia-gpu: the project after its move to kubernetes-sigs.
    "v0.4.0": Release("v0.4.0", "dra-driver-nvidia-gpu-v0.4.0.tar.xz", "sigs.k8s.io/dra-driver-nvidia-gpu",
                      "6910a2bea298933cf64cfb061ddf88b6e17743ff", "deployments/helm/dra-driver-nvidia-gpu",
                      "dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu",
                      taints_unhealthy=True),
    # github.com/NVIDIA/k8s-dra-driver-gpu: the last release under NVIDIA's name and chart.
    "v25.12.0": Release("v25.12.0", "k8s-dra-driver-gpu-v25.12.0.tar.xz", "github.com/NVIDIA/k8s-dra-driver-gpu",
                        "0882da8720c28763137e0987778ec476ec4cf8df", "deployments/helm/nvidia-dra-driver-gpu",
                        "k8s-dra-driver-gpu", "nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu"),
}
#: ``--driver`` choices: the driver's name with the release, one word, so that a bed's state
#: (and ``testbed status``) says which release runs, and the choices sit beside ``nvidia``
#: (the simulated driver) and ``example`` without a second flag meaningless for those.
DRIVER_CHOICES = {f"nvidia-{version}": version for version in RELEASES}


#: Where a bed's state records how its release is placed when that differs from a fresh
#: install of it (after ``draconf testbed upgrade``): release name, namespace, nameOverride.
PLACEMENT_KEY = "upstream_release"


def installed_release(state: dict) -> Release:
    """The release a bed's state says runs, as it is placed there.

    >>> installed_release({"driver": "nvidia-v0.4.0"}).object_prefix
    'dra-driver-nvidia-gpu'
    >>> installed_release({"driver": "nvidia-v0.4.0", PLACEMENT_KEY: {
    ...     "namespace": "nvidia-dra-driver-gpu", "name_override": "nvidia-dra-driver-gpu"}}).object_prefix
    'nvidia-dra-driver-gpu'
    """
    return replace(RELEASES[DRIVER_CHOICES[state["driver"]]], **state.get(PLACEMENT_KEY, {}))


def image_ref(release: Release) -> str:
    return f"draconf.local/{release.image_name}:{release.version}"


#: The kubelet-plugin pods' label in both releases' ``kubeletplugin.yaml`` (v0.4.0 sets it beside
#: its renamed selector label, for the suite's and users' selectors that predate the rename).
PLUGIN_SELECTOR = "nvidia-dra-driver-gpu-component=kubelet-plugin"


# --- where the sources are, and their cache ---------------------------------------------------

def sources_dir(flag: str | Path | None = None) -> Path:
    """The directory holding the upstream archives: the flag, ``$DRACONF_UPSTREAM_SOURCES``,
    or ``../shared/upstream`` beside the repository.

    >>> str(sources_dir("/srv/up"))
    '/srv/up'
    >>> sources_dir().parts[-2:]
    ('shared', 'upstream')
    """
    if flag:
        return Path(flag)
    if os.environ.get(SOURCES_ENV):
        return Path(os.environ[SOURCES_ENV])
    return Path(__file__).resolve().parents[2].parent / "shared" / "upstream"


def cache_dir() -> Path:
    from draconf.testbed import pins
    return pins.cache_root() / "upstream"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def archive_path(sources: Path, name: str) -> Path:
    path = Path(sources) / name
    if not path.is_file():
        raise DraconfError(
            f"upstream archive {name} is not in {sources}; point --upstream-sources (or "
            f"${SOURCES_ENV}) at the directory holding it (docs/testbed.md: how to make it with git archive)")
    return path


def extract(archive: Path, cache: Path | None = None) -> Path:
    """Unpack ``archive`` once into ``<cache>/<sha256>/src``; return the tree's top directory.

    An archive of another content gets another directory, so a cache never mixes sources."""
    digest = sha256_of(archive)
    base = (cache or cache_dir()) / digest
    src = base / "src"
    if not src.is_dir():
        partial = base / "src.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
        os.replace(partial, src)
    tops = [p for p in src.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise DraconfError(f"{archive.name} should hold one top directory (git archive --prefix), "
                           f"found {[p.name for p in tops]}")
    return tops[0]


# --- building ---------------------------------------------------------------------------------

def _go_env(**extra: str) -> dict[str, str]:
    """Go's environment for an offline vendored build: no proxy, no toolchain download."""
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=vendor -buildvcs=false", "GOPROXY": "off"})
    env.update(extra)
    return env


def _run(cmd: list[str], cwd: Path, env: dict, what: str, log) -> None:
    """Run a build step with a progress line every 30 s; its output's tail on failure."""
    started = time.monotonic()
    proc = subprocess.Popen(["nice", "-n", "10", *cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)

    def progress() -> None:
        while proc.poll() is None:
            time.sleep(30)
            if proc.poll() is None:
                log(f"[upstream] {what}: {time.monotonic() - started:.0f}s")

    threading.Thread(target=progress, daemon=True).start()
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-30:]
    if proc.wait() != 0:
        raise DraconfError(f"{what} failed ({' '.join(cmd)} in {cwd}, exit {proc.returncode}); "
                           "last output:\n  " + "\n  ".join(tail))
    log(f"[upstream] {what}: built in {time.monotonic() - started:.0f}s")


def _stamped(out: Path, key: dict, build) -> Path:
    """``build(out)`` unless ``out/.stamp`` holds ``key`` already; return ``out``."""
    stamp = out / ".stamp"
    text = json.dumps(key, sort_keys=True)
    if stamp.is_file() and stamp.read_text() == text:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    build(out)
    stamp.write_text(text)
    return out


def go_version() -> str:
    try:
        return subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise DraconfError("the upstream driver is built from source, but `go` is not on PATH") from None


def plugin_ldflags(release: Release) -> str:
    """As the release's Makefile links its commands (``cmd-%``): stripped, with its version.

    >>> plugin_ldflags(RELEASES["v0.4.0"]).split()[3]
    'sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.gitCommit=6910a2bea298933cf64cfb061ddf88b6e17743ff'
    """
    pkg = f"{release.module}/internal/info"
    return f"-s -w -X {pkg}.gitCommit={release.commit} -X {pkg}.version={release.version}"


def toolkit_version(src: Path) -> str:
    """The nvidia-container-toolkit version the driver's go.mod requires (whose
    ``nvidia-cdi-hook`` its image carries).

    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> _ = (d / "go.mod").write_text("require (\\n\\tgithub.com/NVIDIA/nvidia-container-toolkit v1.19.0\\n)\\n")
    >>> toolkit_version(d)
    'v1.19.0'
    """
    match = re.search(r"github\.com/NVIDIA/nvidia-container-toolkit\s+(v\S+)", (src / "go.mod").read_text())
    if not match:
        raise DraconfError(f"{src / 'go.mod'} requires no github.com/NVIDIA/nvidia-container-toolkit")
    return match.group(1)


@dataclass(frozen=True)
class Built:
    """What a bed with an upstream release needs, all in the user cache."""
    release: Release
    src: Path
    plugin: Path
    cdi_hook: Path
    mock_nvml: Path
    mock_nvml_src: Path
    image: Path
    #: Our nvidia-smi stand-in over NVML (gomod/nvml-smi).
    nvidia_smi: Path
    #: The workloads' image with the C library (WORKLOAD_GLIBC_REF).
    workload_image: Path
    #: k8s-test-infra's mock libcuda.so (MOCKCUDA_DIR).
    mock_cuda: Path | None = None

    @property
    def chart(self) -> Path:
        return self.src / self.release.chart_dir


def build_plugin(release: Release, src: Path, log=print) -> Path:
    """``gpu-kubelet-plugin`` from the archive, with cgo and ``-mod=vendor``, offline."""
    ldflags = plugin_ldflags(release)
    key = {"go": go_version(), "ldflags": ldflags, "what": "gpu-kubelet-plugin"}
    out = src.parent.parent / "build" / "gpu-kubelet-plugin"

    def go_build(outdir: Path) -> None:
        log(f"[upstream] building gpu-kubelet-plugin {release.version} (about 10 minutes on 2 cores)")
        # The Makefile's cmd-% rule allows this linker flag for go-nvml's cgo part.
        env = _go_env(CGO_ENABLED="1", CGO_LDFLAGS_ALLOW="-Wl,--unresolved-symbols=ignore-in-object-files")
        _run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(outdir / "gpu-kubelet-plugin"),
              "./cmd/gpu-kubelet-plugin"], src, env, f"gpu-kubelet-plugin {release.version}", log)

    return _stamped(out, key, go_build) / "gpu-kubelet-plugin"


def build_cdi_hook(version: str, log=print) -> Path:
    """``nvidia-cdi-hook`` of nvidia-container-toolkit ``version``, from its Go module (the Go
    proxy).  With cgo, as go-nvml needs: runc runs it on the node, whose C library it links, as
    the OCI hook the driver's CDI specs name (the plugin copies it out of its image)."""
    out = cache_dir() / "nvidia-container-toolkit" / version
    key = {"go": go_version(), "what": "nvidia-cdi-hook", "version": version}

    def go_install(outdir: Path) -> None:
        env = dict(os.environ, GOBIN=str(outdir), CGO_ENABLED="1", GOFLAGS="-buildvcs=false",
                   GOTOOLCHAIN="local")
        _run(["go", "install", "-trimpath", "-ldflags", "-s -w",
              f"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@{version}"],
             outdir, env, f"nvidia-cdi-hook {version}", log)

    return _stamped(out, key, go_install) / "nvidia-cdi-hook"


def _build_mock_library(src: Path, subdir: str, name: str, make_args: list[str], log) -> Path:
    out = src.parent.parent / "build" / Path(subdir).name
    key = {"go": go_version(), "what": subdir, "make": make_args}

    def make(outdir: Path) -> None:
        moddir = src / subdir
        _run(["make", *make_args], moddir, _go_env(CGO_ENABLED="1"), f"mock {name}", log)
        built = sorted(p for p in moddir.glob(f"{name}.*.*") if p.is_file() and not p.is_symlink())
        if not built:
            raise DraconfError(f"make in {moddir} left no {name}.<version>")
        shutil.copyfile(built[0], outdir / name)

    return _stamped(out, key, make) / name


def build_mock_nvml(src: Path, log=print) -> Path:
    """The mock ``libnvidia-ml.so`` by its own Makefile (``make NO_PADDING=1``), offline."""
    return _build_mock_library(src, MOCKNVML_DIR, "libnvidia-ml.so", ["NO_PADDING=1"], log)


def build_mock_cuda(src: Path, log=print) -> Path:
    """The mock ``libcuda.so`` by its own Makefile (``make``), offline."""
    return _build_mock_library(src, MOCKCUDA_DIR, "libcuda.so", [], log)


#: Our own nvidia-smi stand-in over NVML (Go, go-nvml from the Go proxy).
NVML_SMI_MODULE = Path(__file__).parent / "gomod" / "nvml-smi"


def build_nvidia_smi(log=print) -> Path:
    """The bed's nvidia-smi stand-in over NVML (``gomod/nvml-smi``), with cgo as go-nvml needs;
    rebuilt when its module's files change."""
    h = hashlib.sha256()
    for path in sorted(NVML_SMI_MODULE.glob("*")):
        if path.suffix in {".go", ".mod", ".sum"}:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    out = cache_dir() / "nvml-smi" / h.hexdigest()[:12]
    key = {"go": go_version(), "what": "nvml-smi"}

    def go_build(outdir: Path) -> None:
        env = dict(os.environ, CGO_ENABLED="1", GOTOOLCHAIN="local", GOFLAGS="-buildvcs=false",
                   CGO_CFLAGS="-O2 -Wno-deprecated-declarations")
        _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(outdir / "nvidia-smi"), "."],
             NVML_SMI_MODULE, env, "nvidia-smi stand-in (NVML)", log)

    return _stamped(out, key, go_build) / "nvidia-smi"


def ensure_built(version: str, sources: Path, bindir: Path, log=print) -> Built:
    """Build everything a bed with ``version`` needs, once per archive content."""
    from draconf.testbed import debs, images
    release = RELEASES[version]
    src = extract(archive_path(sources, release.archive))
    mock_src = extract(archive_path(sources, MOCK_NVML_ARCHIVE))
    started = time.monotonic()
    plugin = build_plugin(release, src, log)
    hook = build_cdi_hook(toolkit_version(src), log)
    mock = build_mock_nvml(mock_src, log)
    cuda = build_mock_cuda(mock_src, log)
    smi = build_nvidia_smi(log)
    debdir = cache_dir() / "debs"
    debs.fetch(DEBIAN_FILES, debdir, log=log)
    busybox = bindir / "busybox"
    entries = image_entries(plugin, hook, src, debdir, busybox, images.busybox_applets(busybox))
    archive = images.build_archive(image_ref(release), entries, images.ImageConfig(),
                                   src.parent.parent / "image" / images.archive_name(image_ref(release)))
    workload = images.build_archive(WORKLOAD_GLIBC_REF, workload_entries(busybox, images.busybox_applets(busybox), debdir),
                                    images.ImageConfig(cmd=["sh"]),
                                    cache_dir() / "images" / images.archive_name(WORKLOAD_GLIBC_REF))
    log(f"[upstream] {release.module} {release.version}: image {archive.ref} "
        f"({time.monotonic() - started:.0f}s)")
    return Built(release, src, plugin, hook, mock, mock_src, archive.path, smi, workload.path, cuda)


def image_entries(plugin: Path, hook: Path, src: Path, debdir: Path, busybox: Path,
                  applets: list[str]) -> list:
    """The plugin image's filesystem, after the release's Dockerfile: what the chart's
    commands run (``bash``, ``gpu-kubelet-plugin``, ``kubelet-plugin-prestart.sh``, which needs
    coreutils) and what the plugin reads (``/usr/bin/nvidia-cdi-hook``, ``/templates``)."""
    from draconf.testbed import images
    entries = [images.text("etc/passwd", images.PASSWD), images.text("etc/group", images.GROUP),
               images.directory("tmp", 0o1777), images.directory("root", 0o700),
               images.file("bin/bash", debdir / "bash-static"),
               images.file("bin/busybox", busybox)]
    for path in applets:
        name = path.lstrip("/")
        if name not in ("bin/busybox", "bin/bash"):
            entries.append(images.symlink(name, "/bin/busybox"))
    for paths in DEBIAN_FILES.values():
        for path in paths:
            if path.startswith("lib/"):
                entries.append(images.file(path, debdir / Path(path).name))
    entries.append(images.symlink("lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"))
    entries += [images.file("usr/bin/gpu-kubelet-plugin", plugin),
                images.file("usr/bin/nvidia-cdi-hook", hook),
                images.file("usr/bin/kubelet-plugin-prestart.sh", src / "hack" / "kubelet-plugin-prestart.sh")]
    for template in sorted((src / "templates").glob("*")):
        entries.append(images.file(f"templates/{template.name}", template, 0o644))
    return entries


#: The image the suite's workloads run on this bed (``draconf run --image``): the bed's busybox
#: image with the C library, as ubuntu:24.04 has it -- what NVIDIA's nvidia-smi, and our
#: stand-in over NVML, and the NVML library itself need from a container.
WORKLOAD_GLIBC_REF = "draconf.local/busybox-glibc:1.35.0"


def workload_entries(busybox: Path, applets: list[str], debdir: Path) -> list:
    from draconf.testbed import images
    entries = images.workload_entries(busybox, applets)
    for path in DEBIAN_FILES["libc6"]:
        entries.append(images.file(path, debdir / Path(path).name))
    entries.append(images.symlink("lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"))
    return entries
