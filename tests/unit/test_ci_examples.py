"""The CI recipes under examples/ci call draconf with options it really has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from draconf.cli import build_parser

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "ci").glob("*.yml"))


def draconf_commands(text: str) -> list[list[str]]:
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return [shlex.split(m.group(0).replace("$compare", "--compare baseline.json"))
            for m in re.finditer(r"draconf (run|report|compare)[^\n|&;]*", code)]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_each_recipe_is_yaml_and_its_draconf_commands_parse(path):
    yaml.safe_load(path.read_text())
    commands = draconf_commands(path.read_text())
    assert any(c[1] == "run" for c in commands)
    parser = build_parser()
    for command in commands:
        args, rest = parser.parse_known_args(command[1:])
        assert not rest, (command, rest)
