"""The upgrade gate end to end on a bed: baseline, a change made from outside, compare."""

from __future__ import annotations

import json

from draconf import baseline
from draconf.profile import builtin

from .test_cli import draconf


def test_compare_is_clean_then_names_exactly_a_changed_deviceclass(tmp_path, healthy_bed, api):
    before = tmp_path / "before.json"
    result = draconf("compare", "--name", healthy_bed.name, "/dev/null")
    assert result.returncode == 2 and "not JSON" in result.stderr  # bad input: its own exit code

    # A baseline without a run: the state alone (`draconf run --save-baseline` adds verdicts).
    before.write_text(json.dumps(baseline.snapshot(api, builtin("nvidia"))))
    clean = draconf("compare", "--name", healthy_bed.name, str(before))
    assert clean.returncode == 0 and "0 regression(s), 0 other change(s)" in clean.stdout, clean.stdout

    original = api.resource.read_device_class("vfio.gpu.nvidia.com").spec.selectors[0].cel.expression
    changed = original + " && device.attributes['gpu.nvidia.com'].brand == 'Nvidia'"
    api.resource.patch_device_class("vfio.gpu.nvidia.com", {"spec": {"selectors": [{"cel": {"expression": changed}}]}})
    try:
        regressed = draconf("compare", "--name", healthy_bed.name, str(before))
    finally:
        api.resource.patch_device_class("vfio.gpu.nvidia.com",
                                        {"spec": {"selectors": [{"cel": {"expression": original}}]}})
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    lines = [line.strip() for line in regressed.stdout.splitlines() if line.startswith("  ")]
    assert lines == [f"REGRESSION DeviceClass vfio.gpu.nvidia.com: selectors [{original!r}] -> [{changed!r}]"]
