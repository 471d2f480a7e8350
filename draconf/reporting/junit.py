"""What pytest's own JUnit writer leaves out or doubles: an interrupted run (a suite property
saying so, a skipped test case for each test that never ran), and one test case per test when
a test was run again (``--reruns``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


def interruption_line(interruption: Mapping[str, Any]) -> str:
    """One line for the terminal and JUnit.

    >>> interruption_line({"while_running": "t.py::a", "never_ran": ["t.py::b", "t.py::c"]})
    'INTERRUPTED while running t.py::a; 2 test(s) never ran: not a conformance verdict'
    """
    running = interruption.get("while_running")
    return (f"INTERRUPTED{' while running ' + running if running else ''}; "
            f"{len(interruption.get('never_ran') or [])} test(s) never ran: not a conformance verdict")


def _suite_properties(root):
    """The first test suite of a JUnit tree and its ``<properties>`` (made if missing)."""
    import xml.etree.ElementTree as ET
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None, None
    properties = suite.find("properties")
    if properties is None:
        properties = ET.Element("properties")
        suite.insert(0, properties)
    return suite, properties


def mark_junit_verdict(path: Path, line: str) -> None:
    """The run's verdict (:mod:`.run_verdict`) as the suite property ``draconf.verdict``: a CI
    system that counts skipped cases as fine still reads INCONCLUSIVE there."""
    import xml.etree.ElementTree as ET
    tree = ET.parse(path)
    suite, properties = _suite_properties(tree.getroot())
    if suite is None:
        return
    ET.SubElement(properties, "property", name="draconf.verdict", value=line)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def mark_junit_interrupted(path: Path, interruption: Mapping[str, Any]) -> None:
    """Add to a JUnit file what pytest's own writer leaves out of an interrupted run: a suite
    property saying so, and a skipped test case for each test that never ran."""
    import xml.etree.ElementTree as ET
    tree = ET.parse(path)
    suite, properties = _suite_properties(tree.getroot())
    if suite is None:
        return
    ET.SubElement(properties, "property", name="draconf.interrupted", value=interruption_line(interruption))
    for nodeid in interruption.get("never_ran") or []:
        module, _, name = nodeid.partition("::")
        case = ET.SubElement(suite, "testcase", classname=module.removesuffix(".py").replace("/", "."),
                             name=name, time="0")
        ET.SubElement(case, "skipped", type="pytest.skip", message="never ran: the run was interrupted")
    suite.set("skipped", str(int(suite.get("skipped", "0")) + len(interruption.get("never_ran") or [])))
    suite.set("tests", str(int(suite.get("tests", "0")) + len(interruption.get("never_ran") or [])))
    tree.write(path, encoding="utf-8", xml_declaration=True)


def keep_final_attempts(path: Path) -> int:
    """One test case per test: when ``--reruns`` ran a test again, pytest-rerunfailures (16.6.1
    and later) hands junitxml each earlier attempt's teardown too, which it writes as a test case
    of its own, with no outcome, that a CI system counts as a pass.  The final attempt (the
    last case of that name, which carries the ``draconf.flaky`` property) is the test's; the
    earlier ones are removed.  Returns how many were.
    """
    import xml.etree.ElementTree as ET
    tree = ET.parse(path)
    root = tree.getroot()
    removed = 0
    for suite in ([root] if root.tag == "testsuite" else root.findall("testsuite")):
        cases = suite.findall("testcase")
        final = {(c.get("classname"), c.get("name")): c for c in cases}
        for case in cases:
            if final[(case.get("classname"), case.get("name"))] is not case:
                suite.remove(case)
                removed += 1
    if removed:
        tree.write(path, encoding="utf-8", xml_declaration=True)
    return removed
