"""What draconf adds to an Allure results directory: ``categories.json`` (one category per
diagnosis code, and one for no verdict) and ``environment.properties`` (the run info)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from draconf.reporting.diagnoses import DIAGNOSES


def allure_categories() -> list[dict[str, Any]]:
    """One Allure category per diagnosis, matching messages that carry ``[code]``.

    Allure 2 (Java) requires the regex to match the whole message, Allure 3 searches for it,
    so the pattern allows anything around the tag: allure-pytest's message starts with the
    exception type ("AssertionError: [code] ..."; a diagnosed failure's message gets the tag
    from :class:`draconf.reporting.verdict.AllureMessages` when the test's own lacks it). Only
    ``messageRegex`` is set because a ``traceRegex`` too would have to match as well, which only
    narrows the category.
    """
    return [{"name": code, "description": meaning,
             "matchedStatuses": ["failed", "broken"],
             "messageRegex": category_regex(code)}
            for code, meaning in DIAGNOSES.items()] + [NO_VERDICT_CATEGORY]


#: Allure files a NoVerdict as skipped with the message "NoVerdict: <cause>"; this category
#: sets them apart from checks that do not apply.
NO_VERDICT_CATEGORY = {
    "name": "no verdict",
    "description": "The check applies but could reach no verdict; the message names the cause "
                   "that blocked it (e.g. the workload never started). Not a pass.",
    "matchedStatuses": ["skipped"], "messageRegex": r"\s*NoVerdict: [\s\S]*"}


def category_regex(code: str) -> str:
    r"""A regex, valid in Java, JavaScript and Python, for a message containing ``[code]``.

    ``[\s\S]`` rather than ``.`` so that it spans lines without a DOTALL flag.

    >>> import re
    >>> bool(re.fullmatch(category_regex("timeout"), "AssertionError: [timeout] pod\nassert 0"))
    True
    >>> bool(re.fullmatch(category_regex("timeout"), "AssertionError: timeout"))
    False
    """
    escaped = "".join("\\" + ch if ch in "[]().*+?{}|^$\\" else ch for ch in code)
    return rf"[\s\S]*\[{escaped}\][\s\S]*"


def environment_properties(info: Mapping[str, Any]) -> str:
    """Run info as Java properties lines for Allure's Environment widget.

    Lists are joined with ", ", a dict becomes one ``key.subkey`` line per entry, None is
    left out.

    >>> print(environment_properties({"target": "testbed", "driver": None,
    ...        "inventory": ["node-a", "node-b"], "gpus": {"node-a": 2}}), end="")
    target=testbed
    inventory=node-a, node-b
    gpus.node-a=2
    """
    lines = []
    for key, value in _flatten_properties(info):
        lines.append(f"{_escape_property(key, is_key=True)}={_escape_property(value)}\n")
    return "".join(lines)


def _flatten_properties(info: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    pairs = []
    for key, value in info.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            pairs += _flatten_properties(value, prefix=f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", _property_text(value)))
    return pairs


def _property_text(value: Any) -> str:
    """One property value: lists joined with ", ", dicts inside them in parentheses.

    >>> _property_text([{"name": "n1", "gpus": 2}, "n2"])
    '(name: n1, gpus: 2), n2'
    """
    if isinstance(value, (list, tuple, set)):
        return ", ".join(_property_text(item) for item in value)
    if isinstance(value, Mapping):
        return "(" + ", ".join(f"{k}: {_property_text(v)}" for k, v in value.items()) + ")"
    return str(value)


def _escape_property(text: str, is_key: bool = False) -> str:
    # Java properties treat backslash as an escape and a newline as the end of the entry;
    # in keys, '=', ':' and spaces would also end the key early.
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if is_key:
        for ch in "=: ":
            text = text.replace(ch, "\\" + ch)
    return text


def write_allure_extras(allure_dir: Path, info: Mapping[str, Any]) -> None:
    """Write ``environment.properties`` and ``categories.json`` into an Allure results dir."""
    allure_dir.mkdir(parents=True, exist_ok=True)
    (allure_dir / "environment.properties").write_text(environment_properties(info),
                                                       encoding="utf-8")
    (allure_dir / "categories.json").write_text(json.dumps(allure_categories(), indent=2),
                                                encoding="utf-8")
