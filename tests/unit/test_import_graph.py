"""The import drawing of draconf/ has no cycle and no arrow upward (ARCHITECTURE.md: a layer
imports only from the layers below it).  Every import counts, a function's own and a type
checker's too: an import deferred into a function to dodge a cycle is still an arrow back up."""

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


#: The conformance suite's layers as ARCHITECTURE.md draws them, top first: a module (or a
#: package, with every module in it) per name.  A new module goes where the drawing puts it.
LAYERS = {
    "scenarios": "scenarios",
    "plugin, reporting, diagnosis, CLI": "pytest_plugin fixtures xdist_hooks target reporting htmlreport diagnosis "
                                         "cli cli_testbed lint run_args",
    "checks": "workload startup builder sweep watched allocation availability preflight audit sharing "
              "capabilities expectations applied release baseline history gate_report permissions injection",
    "models": "claims pods devices selectors taints plugins mig cel controlplane namespaces waits manifests "
              "profile quantity kube errors reflector admission podsecurity runinfo answers refusals breaker "
              "nodescope tables runstate cachedir parallel bundle",
}
#: The layer that drives the embedded test bed (``draconf run``'s default target, ``draconf
#: testbed``); the bed itself (draconf/testbed/) reads only the models layer.
DRIVES_THE_BED = "plugin, reporting, diagnosis, CLI"


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer in :data:`LAYERS` (0: the top), None when unassigned.

    >>> layer_of("draconf.reporting.junit"), layer_of("draconf.claims"), layer_of("draconf.nope")
    (1, 3, None)
    """
    name = module.removeprefix("draconf.")
    if module == "draconf":
        return list(LAYERS).index(DRIVES_THE_BED)
    for index, members in enumerate(LAYERS.values()):
        if any(name == m or name.startswith(m + ".") for m in members.split()):
            return index
    return None


def test_every_module_has_its_layer_and_the_drawing_names_it():
    drawing = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    suite = [m for m in modules() if not m.startswith("draconf.testbed")]
    assert not [m for m in suite if layer_of(m) is None], "modules in no layer of LAYERS (and ARCHITECTURE.md)"
    unnamed = [m for m in suite if m != "draconf" and f"{m.rsplit('.', 1)[-1]}.py" not in drawing
               and f"{m.replace('.', '/')}/" not in drawing and f"draconf/{m.split('.')[1]}/" not in drawing]
    assert not unnamed, f"ARCHITECTURE.md does not name these modules: {unnamed}"


def test_no_import_points_up_a_layer():
    known = modules()
    upward, into_the_bed, out_of_the_bed = [], [], []
    bed_driver = list(LAYERS).index(DRIVES_THE_BED)
    models = len(LAYERS) - 1
    for module, path in known.items():
        here = layer_of(module)
        for target in imports(path, known) - {module}:
            if module.startswith("draconf.testbed"):
                if not target.startswith("draconf.testbed") and layer_of(target) != models:
                    out_of_the_bed.append(f"{module} -> {target}")
            elif target.startswith("draconf.testbed"):
                if here != bed_driver:
                    into_the_bed.append(f"{module} -> {target}")
            elif here is not None and (there := layer_of(target)) is not None and there < here:
                upward.append(f"{module} -> {target}")
    assert not upward, f"imports that point up a layer: {sorted(upward)}"
    assert not into_the_bed, f"only the CLI and the plugin drive the test bed: {sorted(into_the_bed)}"
    assert not out_of_the_bed, f"the test bed reads only the models layer: {sorted(out_of_the_bed)}"
