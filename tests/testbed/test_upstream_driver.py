"""NVIDIA's own DRA driver release on the bed (``draconf testbed up --driver nvidia-v0.4.0``):
its kubelet plugin built from the release's source archive, installed from its own chart over
NVIDIA's mock NVML on the real nodes; the suite run against it unchanged (``draconf run``, the
``nvidia`` profile) must pass every walkthrough workload.

Needs the archives (../shared/upstream, or $DRACONF_UPSTREAM_SOURCES); builds are cached by
archive hash (cold: about 12 minutes on 2 cores; warm: seconds)."""

from __future__ import annotations

import json

import pytest

from draconf.testbed.upstream_nvidia import sources_dir

from .conftest import _start, _stop
from .test_cli import draconf

RELEASE = "nvidia-v0.4.0"
ARCHIVE = "dra-driver-nvidia-gpu-v0.4.0.tar.xz"


@pytest.fixture(scope="module")
def upstream_bed():
    if not (sources_dir() / ARCHIVE).is_file():
        pytest.skip(f"NVIDIA's release archive {ARCHIVE} is not in {sources_dir()} (set $DRACONF_UPSTREAM_SOURCES)")
    bed = _start("upstream-v040", [], driver=RELEASE)
    yield bed
    _stop(bed)


def test_the_suite_passes_unchanged_against_nvidias_released_driver(upstream_bed, tmp_path):
    result = draconf("run", "--testbed-name", upstream_bed.name, "--reports", str(tmp_path),
                     "-k", "test_preflight or TestWorkload or test_jobs or TestGpuSharing", timeout=1200)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    rows = json.loads((tmp_path / "summary.json").read_text())["tests"]
    walkthrough = [r for r in rows if r["workload"] in ("single-gpu", "model-selected", "memory-selected",
                                                         "two-gpu", "shared-claim", "deployment")]
    assert len(walkthrough) == 18 and all(r["outcome"] == "passed" for r in walkthrough), walkthrough
    assert all(r["outcome"] == "passed" for r in rows if r["workload"] in ("job", "gpu-sharing")), rows
