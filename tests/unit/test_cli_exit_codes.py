"""The exit codes draconf documents are the ones it returns: every number a command's --help (or
the docs) gives a meaning is draconf's constant for that meaning, and the preflight suite ends
an unusable target's run with draconf's code, not pytest's."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest

from draconf import cli
from draconf.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TARGET_UNUSABLE
from draconf.preflight import BLOCKING, CHECKS, SEVERITY, CheckResult
from draconf.reporting.run_verdict import EXIT_INCONCLUSIVE

ROOT = Path(__file__).resolve().parents[2]

#: What a help text or doc says a code means -> the code that means it.
MEANINGS = {
    "bad input": EXIT_BAD_INPUT,
    "target unusable": EXIT_TARGET_UNUSABLE,
    "the target cannot be used": EXIT_TARGET_UNUSABLE,
    "interrupted": EXIT_INTERRUPTED,
    "INCONCLUSIVE": EXIT_INCONCLUSIVE,
    "internal error": int(pytest.ExitCode.INTERNAL_ERROR),
}
NUMBERED = re.compile(r"\b(\d+)\s+(" + "|".join(map(re.escape, MEANINGS)) + ")")

#: Commands that read a cluster: their --help names both codes of the error contract.
READING = ("run", "compare", "sweep", "audit", "lint")


def helps(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Every command's --help, by its words after ``draconf``."""
    found = {path: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(helps(sub, (*path, name)))
    return found


def numbered(text: str) -> list[tuple[int, str]]:
    """``(code, meaning)`` for each "<code> <meaning>" in ``text`` (table cells joined)."""
    flat = " ".join(re.sub(r"\s*\|\s*", " ", text).split())
    return [(int(code), meaning) for code, meaning in NUMBERED.findall(flat)]


def test_numbered():
    assert numbered("(exit 0 ok, 1 findings, 2 bad\n   input, 3 target unusable)") == [
        (2, "bad input"), (3, "target unusable")]
    assert numbered("| 12 | the target cannot be used |") == [(12, "the target cannot be used")]


def test_every_code_a_help_text_names_is_the_real_one():
    every = helps(cli.build_parser())
    wrong = [f"{' '.join(('draconf', *cmd))}: {code} {meaning} (is {MEANINGS[meaning]})"
             for cmd, text in every.items() for code, meaning in numbered(text)
             if code != MEANINGS[meaning]]
    assert not wrong, wrong
    for cmd in READING:
        said = {meaning for _, meaning in numbered(every[(cmd,)])}
        assert "bad input" in said and said & {"target unusable", "the target cannot be used"}, (
            f"draconf {cmd} --help names no exit code for bad input or an unusable target")


def test_every_code_the_docs_name_is_the_real_one():
    wrong = [f"{path.relative_to(ROOT)}: {code} {meaning}"
             for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
             for code, meaning in numbered(path.read_text(encoding="utf-8"))
             if code != MEANINGS[meaning]]
    assert not wrong, wrong


def test_an_unreachable_server_in_preflight_ends_the_run_as_target_unusable():
    """pytest.exit(returncode=3) read as pytest's INTERNAL_ERROR: draconf's 12 instead."""
    spec = importlib.util.spec_from_file_location("_suite_preflight", ROOT / "suites" / "test_preflight.py")
    assert spec and spec.loader
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    name = next(n for n in CHECKS if SEVERITY[n] == BLOCKING)
    down = CheckResult(name, False, BLOCKING, "cannot reach the API server at https://x: timed out",
                       inconclusive=True, unreachable=True)
    with pytest.raises(pytest.exit.Exception) as ended:
        suite.test_preflight(None, [down], name)
    assert ended.value.returncode == EXIT_TARGET_UNUSABLE
    assert str(ended.value.msg) == "draconf: cannot reach the API server at https://x: timed out"
