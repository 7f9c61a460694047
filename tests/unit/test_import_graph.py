"""The import graph holds the layers: models, hardware <- rules <- solver, nothing imports back up, and
no two modules import each other, directly or round a longer circle (issue 11, acceptance 5).

The graph is read from the source with ``ast``, not by importing: every ``import`` statement counts,
at the top of a file, inside a function body or under ``if TYPE_CHECKING``, since each one is a
dependency a reader has to follow. Importing a submodule also runs its parent package's
``__init__``; those implicit edges are left out (every package would otherwise sit on a circle with
its own submodules).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.unit.source_tree import CODE_FOLDERS, source_modules

MODULES = source_modules()


def _imported_names(module: str) -> Iterator[str]:
    """The dotted names ``module`` imports, relative imports resolved; ``from P import n`` yields
    ``P.n`` when ``n`` is a submodule, else ``P``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield submodule if submodule in MODULES else source


def _owning_module(name: str) -> str | None:
    """The library module that defines ``name`` (itself, or the longest module prefix), or None
    for a third-party or standard-library name."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """Library module -> the library modules it imports (not itself)."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        targets = {_owning_module(name) for name in _imported_names(module)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


GRAPH = import_graph()


def layer_of(module: str) -> str:
    return module.split(".")[1]


def imports_into(layer: str, forbidden: set[str]) -> list[str]:
    """``importer -> imported`` for every import from ``layer`` into one of the ``forbidden`` layers."""
    return sorted(
        f"{source} -> {target}"
        for source, targets in GRAPH.items()
        if layer_of(source) == layer
        for target in targets
        if layer_of(target) in forbidden
    )


def test_the_graph_sees_every_layer_and_its_imports():
    # Guards the test itself: a mapping gone wrong would find no modules or no edges and pass vacuously.
    assert {layer_of(m) for m in MODULES} == set(CODE_FOLDERS)
    assert "shardplan.solver.cost.evaluate" in MODULES and "shardplan.rules.dag" in MODULES
    assert imports_into("solver", {"rules"}) and imports_into("rules", {"models", "hardware"})
    assert sum(len(targets) for targets in GRAPH.values()) > 100


def test_models_import_nothing_of_ours():
    assert imports_into("models", {"hardware", "rules", "solver"}) == []


def test_hardware_imports_neither_rules_nor_solver():
    assert imports_into("hardware", {"rules", "solver"}) == []


def test_hardware_takes_only_the_error_type_from_models():
    # DESIGN.md says hardware depends on nothing of ours; today it raises models' SpecError for bad
    # input (one error type for every "bad spec" the CLI turns into exit code 2), and its frozen specs
    # (ClusterSpec, Profile) hash once like the models' (models.frozen.HashOnce: plumbing, no model
    # data), and a profile file is read by the one strict JSON reader every input file goes through
    # (models.files.parse_json: plumbing too, importing only models.errors). This holds it to those three
    # modules, so hardware cannot start depending on the model description itself.
    into_models = imports_into("hardware", {"models"})
    allowed = {"shardplan.models.errors", "shardplan.models.frozen", "shardplan.models.files"}
    assert {edge.split(" -> ")[1] for edge in into_models} <= allowed, into_models


def test_rules_import_no_solver():
    assert imports_into("rules", {"solver"}) == []


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; a module
    importing itself is already dropped from the graph."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowlink[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                lowlink[module] = min(lowlink[module], lowlink[target])
            elif target in on_stack:
                lowlink[module] = min(lowlink[module], index[target])
        if lowlink[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(components)


def test_no_import_cycles():
    assert import_cycles(GRAPH) == []


def test_the_cycle_finder_finds_direct_and_longer_circles():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert import_cycles(graph) == [["a", "b"], ["c", "d", "e"]]
