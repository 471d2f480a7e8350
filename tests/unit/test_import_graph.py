"""The import drawing of draconf/ has no cycle (ARCHITECTURE.md: a layer imports only from the
layers below it).  Every import counts, a function's own and a type checker's too: an import
deferred into a function to dodge a cycle is still an arrow back up."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "draconf"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "gomod" in path.parts or "_bundle" in path.parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The draconf modules ``path`` imports anywhere in its body (``from a import b`` is the
    module ``a.b`` when that is one, else ``a``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known.keys()
            found.update(subs or {node.module})
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_cycle_through_three_modules():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_draconf_has_no_import_cycle():
    known = modules()
    edges = {m: imports(p, known) - {m} for m, p in known.items()}
    found = cycles(edges)
    assert not found, "import cycles in draconf/ (every import counts, a function's own too): " + "; ".join(
        " <-> ".join(c) for c in found)
