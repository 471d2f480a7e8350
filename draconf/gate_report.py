"""The upgrade gate's regressions as entries of their own in the run's reports.

``draconf run --compare BASELINE`` finds regressions after pytest has written its reports, so
they are added here: a ``draconf.regressions`` test suite with one failed case per regression
in junit.xml (what CI systems list), one failed Allure result each (feature "upgrade
regressions", story = the kind of change), and ``run.regressions`` in summary.json.

>>> from draconf.baseline import Change
>>> case_name(Change("node", "node gpu-b", "GPUs 4 -> 2", True))
'node gpu-b'
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable

SUITE = "draconf.regressions"


def case_name(change) -> str:
    return change.subject


def add_to_junit(path: Path, regressions: list, against: str) -> None:
    """A ``draconf.regressions`` suite with a failed case per regression, counted in the totals."""
    tree = ET.parse(path)
    root = tree.getroot()
    suites = root if root.tag == "testsuites" else None
    if suites is None:  # a lone <testsuite>: wrap it, as pytest's junit_family=xunit2 may write
        suites = ET.Element("testsuites")
        suites.append(root)
        tree = ET.ElementTree(suites)
    suite = ET.SubElement(suites, "testsuite", name=SUITE, tests=str(len(regressions)),
                          failures=str(len(regressions)), errors="0", skipped="0", time="0")
    for change in regressions:
        case = ET.SubElement(suite, "testcase", classname=f"{SUITE}.{change.kind}", name=case_name(change),
                             time="0")
        failure = ET.SubElement(case, "failure", message=f"regression against {against}: {change.what}")
        failure.text = str(change)
    for attribute in ("tests", "failures"):
        if attribute in suites.attrib:
            suites.set(attribute, str(int(suites.get(attribute) or 0) + len(regressions)))
    tree.write(path, encoding="utf-8", xml_declaration=True)


def add_to_allure(results_dir: Path, regressions: list, against: str) -> None:
    """One failed Allure result per regression."""
    results_dir.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    for change in regressions:
        history_id = hashlib.md5(f"{SUITE}/{change.kind}/{change.subject}".encode()).hexdigest()
        result = {
            "uuid": str(uuid.uuid4()), "historyId": history_id, "testCaseId": history_id,
            "name": f"regression: {change.subject}", "fullName": f"{SUITE}#{change.kind}#{change.subject}",
            "status": "failed", "stage": "finished", "start": now, "stop": now,
            "statusDetails": {"message": f"regression against {against}: {change.what}"},
            "labels": [{"name": "suite", "value": SUITE}, {"name": "feature", "value": "upgrade regressions"},
                       {"name": "story", "value": change.kind}],
        }
        (results_dir / f"{result['uuid']}-result.json").write_text(json.dumps(result), encoding="utf-8")


def add_to_summary(path: Path, regressions: Iterable, against: str) -> None:
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary["run"]["regressions"] = {"against": against, "changes": [str(c) for c in regressions]}
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")


def record(reports: Path, regressions: list, against: str) -> None:
    """Add ``regressions`` to every report of the run in ``reports`` that exists."""
    if not regressions:
        return
    if (reports / "junit.xml").is_file():
        add_to_junit(reports / "junit.xml", regressions, against)
    if (reports / "allure-results").is_dir():
        add_to_allure(reports / "allure-results", regressions, against)
    if (reports / "summary.json").is_file():
        add_to_summary(reports / "summary.json", regressions, against)
