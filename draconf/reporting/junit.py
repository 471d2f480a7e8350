"""An interrupted run in the JUnit file: what pytest's own writer leaves out (a suite property
saying so, a skipped test case for each test that never ran)."""

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


def mark_junit_interrupted(path: Path, interruption: Mapping[str, Any]) -> None:
    """Add to a JUnit file what pytest's own writer leaves out of an interrupted run: a suite
    property saying so, and a skipped test case for each test that never ran."""
    import xml.etree.ElementTree as ET
    tree = ET.parse(path)
    root = tree.getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return
    properties = suite.find("properties")
    if properties is None:
        properties = ET.Element("properties")
        suite.insert(0, properties)
    ET.SubElement(properties, "property", name="draconf.interrupted", value=interruption_line(interruption))
    for nodeid in interruption.get("never_ran") or []:
        module, _, name = nodeid.partition("::")
        case = ET.SubElement(suite, "testcase", classname=module.removesuffix(".py").replace("/", "."),
                             name=name, time="0")
        ET.SubElement(case, "skipped", type="pytest.skip", message="never ran: the run was interrupted")
    suite.set("skipped", str(int(suite.get("skipped", "0")) + len(interruption.get("never_ran") or [])))
    suite.set("tests", str(int(suite.get("tests", "0")) + len(interruption.get("never_ran") or [])))
    tree.write(path, encoding="utf-8", xml_declaration=True)
