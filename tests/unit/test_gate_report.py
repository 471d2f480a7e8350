"""Regressions of draconf run --compare as entries of their own in junit.xml, Allure, summary.json."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from draconf import gate_report
from draconf.baseline import Change

PYTEST_JUNIT = ('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
                '<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="1" time="1.0">'
                '<testcase classname="suites.test_preflight" name="test_preflight[server-version]" time="0.1"/>'
                '</testsuite></testsuites>')


def test_each_regression_is_a_failed_case_of_its_own(tmp_path):
    (tmp_path / "junit.xml").write_text(PYTEST_JUNIT)
    (tmp_path / "allure-results").mkdir()
    (tmp_path / "summary.json").write_text(json.dumps({"run": {}, "tests": []}))
    lost = Change("node", "node gpu-b", "GPUs 4 -> 2", True)
    renamed = Change("attribute", "attribute gpu.nvidia.com/productName", "gone from every device", True)
    gate_report.record(tmp_path, [lost, renamed], "before.json")

    root = ET.parse(tmp_path / "junit.xml").getroot()
    (suite,) = [s for s in root.iter("testsuite") if s.get("name") == "draconf.regressions"]
    assert [c.get("name") for c in suite.iter("testcase")] == ["node gpu-b", "attribute gpu.nvidia.com/productName"]
    assert suite.get("failures") == "2"
    assert all("regression against before.json" in c.find("failure").get("message") for c in suite.iter("testcase"))
    results = [json.loads(p.read_text()) for p in (tmp_path / "allure-results").glob("*-result.json")]
    assert sorted(r["name"] for r in results) == ["regression: attribute gpu.nvidia.com/productName",
                                                  "regression: node gpu-b"]
    assert all(r["status"] == "failed" for r in results)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["regressions"]["changes"] == [str(lost), str(renamed)]


def test_no_regression_changes_nothing(tmp_path):
    (tmp_path / "junit.xml").write_text(PYTEST_JUNIT)
    gate_report.record(tmp_path, [], "before.json")
    assert (tmp_path / "junit.xml").read_text() == PYTEST_JUNIT
