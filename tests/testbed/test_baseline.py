"""The upgrade gate end to end on a bed: baseline, a change made from outside, compare."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from draconf import baseline
from draconf.errors import EXIT_BAD_INPUT
from draconf.profile import builtin

from .test_cli import draconf


def test_compare_is_clean_then_names_exactly_a_changed_deviceclass(tmp_path, healthy_bed, api):
    before = tmp_path / "before.json"
    result = draconf("compare", "--name", healthy_bed.name, "/dev/null")
    assert result.returncode == EXIT_BAD_INPUT and "not JSON" in result.stderr  # bad input: its own exit code

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


def test_a_run_compared_with_a_baseline_lists_each_regression_as_its_own_entry(tmp_path, healthy_bed, api):
    """``draconf run --compare``: the regression is a failed case of its own in junit.xml, a
    failed Allure result and ``run.regressions`` in summary.json, so CI systems show it."""
    before = tmp_path / "before.json"
    before.write_text(json.dumps(baseline.snapshot(api, builtin("nvidia"))))
    original = api.resource.read_device_class("vfio.gpu.nvidia.com").spec.selectors[0].cel.expression
    changed = original + " && device.attributes['gpu.nvidia.com'].brand == 'Nvidia'"
    api.resource.patch_device_class("vfio.gpu.nvidia.com", {"spec": {"selectors": [{"cel": {"expression": changed}}]}})
    reports = tmp_path / "reports"
    try:
        run = draconf("run", "--testbed-name", healthy_bed.name, "--reports", str(reports),
                      "--compare", str(before), "-k", "server-version")
    finally:
        api.resource.patch_device_class("vfio.gpu.nvidia.com",
                                        {"spec": {"selectors": [{"cel": {"expression": original}}]}})
    assert run.returncode == 1, run.stdout + run.stderr
    junit = ET.parse(reports / "junit.xml").getroot()
    (suite,) = [s for s in junit.iter("testsuite") if s.get("name") == "draconf.regressions"]
    (case,) = suite.iter("testcase")
    assert case.get("name") == "DeviceClass vfio.gpu.nvidia.com" and case.find("failure") is not None
    results = [json.loads(p.read_text()) for p in (reports / "allure-results").glob("*-result.json")]
    (regression,) = [r for r in results if r["name"].startswith("regression:")]
    assert regression["status"] == "failed" and "selectors" in regression["statusDetails"]["message"]
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["run"]["regressions"]["changes"] == [
        f"REGRESSION DeviceClass vfio.gpu.nvidia.com: selectors [{original!r}] -> [{changed!r}]"]
