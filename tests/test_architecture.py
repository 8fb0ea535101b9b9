"""The package's import graph: every import points down the declared layers, and no module
imports itself back through others; the same for the benchmark scripts in ``bench/``.

The graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` of an ``image_project`` module in every ``.py`` file under the package,
relative imports resolved. ``from pkg import name`` is an edge to ``pkg.name`` when that is a
module, else to ``pkg``. Each edge has a kind:

* ``module`` — runs when the importing module is imported (top level, including the bodies
  of top-level ``if`` / ``try`` / ``with`` and of classes);
* ``function`` — inside a function (a lazy import, made to keep start-up light);
* ``type-checking`` — inside ``if TYPE_CHECKING:``; never runs.

Rules (one test each):

1. Every module belongs to exactly one declared *unit* (a top-level module or subpackage, or
   a module singled out, such as ``backends.base``: the longest declared name that is the
   module or one of its packages), and every unit is in :data:`LAYERS`.
2. An import stays inside its own unit, or points to a unit of a *lower* layer. Units of the
   same layer do not import each other (that is what putting them side by side declares).
   This holds for all three kinds: a lazy import is still a dependency, and a type named only
   for the type checker still ties the importer to the concept it names.
3. No import cycle between modules, through imports of any kind: a cycle through a lazy
   import still means neither module can be read or tested without the other, and one
   through a ``type-checking`` import ties them as tightly for a reader and the type checker
   (where a module needs only part of another, it names that part in a protocol of its own,
   as ``engine.scope.ScopeRunner`` does for the runner).
4. A unit singled out of another's package (``backends.base``) does not load that package:
   Python runs a package's ``__init__`` before any of its modules, so those ``__init__`` files
   import nothing of ours at run time.

An import of ``a.b.c`` is an edge to ``a.b.c`` only: the ``__init__`` of ``a`` and ``a.b`` run
first, but a package gathering its own modules is the normal shape, not a cycle (rule 4
covers the one place where it would matter).

``bench/`` is a folder of scripts that import each other as top-level modules (``import
floor``, ``from runs import Scenario``: the running script puts ``bench/`` on ``sys.path``).
Its graph is read the same way, each file named by its stem, and rule 3 holds for it: no
cycle between bench modules, through imports of any kind.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import image_project

PACKAGE = "image_project"

# Lowest first. A unit may import its own modules and the units of any lower layer, nothing
# else. The order follows STYLE.md habit 1 (engine <- stages <- app; backends only at the
# edge): plain data at the bottom, then the three independent concerns the pipeline is made
# of, then the parts a run is assembled from, then the commands that assemble them.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Import nothing of ours: the error tree, seeded randomness, the markers of the scoring
    # prompts (read by the code that writes a prompt and by the code that reads one, such as
    # the offline backend), and the optional extras' messages.
    ("foundation", ("errors", "extras", "markers", "seeding")),
    # The model I/O seam: the TextBackend / ImageBackend protocols and their plain request and
    # reply types. A module of backends/ but a layer of its own, so that the record can carry
    # its Usage and the engine can call a model without knowing which one.
    ("seam", ("backends.base",)),
    # The typed run record: what every later layer writes or reads.
    ("record", ("record",)),
    # Three concerns that must not know each other: what the user asked for (config), files
    # on disk (artifacts), the step-tree runner (engine: no configuration, no files, no art).
    ("core", ("config", "artifacts", "engine")),
    # What a run is assembled from, none aware of another: the prompt stages, the context
    # injectors (lines of guidance from the date and plugins; the stages take their text as a
    # plain string), the model backends (at the edge: only the commands pick one), the run
    # store, the judge-panel statistics, the input checks, live progress.
    (
        "parts",
        ("stages", "context", "backends", "store", "analysis", "preflight", "cli.progress"),
    ),
    # Readers of finished runs: the review site, the summary lines.
    ("readers", ("review", "cli.summary")),
    # The commands' work: a generation (run); `runs ...` and `review` over the store.
    ("commands", ("run", "cli.runs")),
    # A campaign: runs queued in the store's PostgreSQL and made by workers through the run
    # driver (the `campaign` and `worker` commands).
    ("campaign", ("campaign",)),
    # The command line: arguments, configuration, exit codes; picks a command. Its package
    # also holds the modules singled out above (cli.progress, cli.summary, cli.runs,
    # cli.launch), each in its own layer; its __init__ imports nothing (rule 4).
    ("cli", ("cli",)),
    # The start of every way in (a Ctrl-C during start-up exits 130), which imports the CLI.
    ("launch", ("cli.launch",)),
    # The fake OpenAI server (tests and image_project.testing serve it; bench/ under uvicorn).
    ("fake server", ("_fake_openai",)),
    # Nothing in the package imports these: `python -m image_project` and the public fakes
    # for tests.
    ("entry", ("__main__", "testing")),
    # The package root: the public names (docs/api.md), gathered from the layers below on
    # first use; no module of the package imports it.
    ("surface", ("__init__",)),
)

Kind = Literal["module", "function", "type-checking"]


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: Kind
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.kind} import, line {self.line})"


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package at ``root``."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Collects a module's imports of the package, each with its kind."""

    def __init__(self, module: str, is_package: bool, known: Mapping[str, Path]) -> None:
        self.module = module
        self.here = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.kind: Kind = "module"
        self.edges: list[Edge] = []

    def _visit_as(self, nodes: Sequence[ast.AST], kind: Kind) -> None:
        outer, self.kind = self.kind, kind
        for node in nodes:
            self.visit(node)
        self.kind = outer

    def _function(self, node: ast.AST) -> None:
        kind: Kind = "type-checking" if self.kind == "type-checking" else "function"
        self._visit_as(list(ast.iter_child_nodes(node)), kind)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._visit_as(node.body, "type-checking")
            self._visit_as(node.orelse, self.kind)
        else:
            self.generic_visit(node)

    def _add(self, target: str, line: int) -> None:
        while target not in self.known and "." in target:
            target = target.rpartition(".")[0]
        edge = Edge(self.module, target, self.kind, line)
        if target in self.known and target != self.module and edge not in self.edges:
            self.edges.append(edge)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.here.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        for alias in node.names:
            self._add(
                f"{target}.{alias.name}" if f"{target}.{alias.name}" in self.known else target,
                node.lineno,
            )


def script_files(folder: Path) -> dict[str, Path]:
    """Module name (the file's stem) -> file, for every ``.py`` file directly in ``folder``:
    scripts that import each other as top-level modules, as ``bench/``'s do."""
    return {path.stem: path for path in sorted(folder.glob("*.py"))}


def import_edges(root: Path, known: Mapping[str, Path] | None = None) -> list[Edge]:
    """Every import of one of the ``known`` modules (default: the package at ``root``,
    :func:`module_files`) by another (see the module docstring)."""
    known = module_files(root) if known is None else known
    edges = []
    for module, path in known.items():
        visitor = _Imports(module, path.name == "__init__.py", known)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        edges += visitor.edges
    return edges


def unit_of(module: str, layers: Sequence[tuple[str, Sequence[str]]] = LAYERS) -> str | None:
    """The declared unit ``module`` belongs to (the longest match), or None."""
    relative = module.removeprefix(PACKAGE).removeprefix(".") or "__init__"
    matches = [
        unit
        for _, units in layers
        for unit in units
        if relative == unit or relative.startswith(unit + ".")
    ]
    return max(matches, key=len, default=None)


def layer_index(layers: Sequence[tuple[str, Sequence[str]]]) -> dict[str, tuple[int, str]]:
    """Unit -> (its layer's position, lowest 0; the layer's name)."""
    return {unit: (i, name) for i, (name, units) in enumerate(layers) for unit in units}


def layer_violations(
    edges: Sequence[Edge], layers: Sequence[tuple[str, Sequence[str]]] = LAYERS
) -> list[str]:
    """One line per import that leaves its unit for a unit not in a lower layer."""
    index = layer_index(layers)
    found = []
    for edge in edges:
        source, target = unit_of(edge.source, layers), unit_of(edge.target, layers)
        if source is None or target is None or source == target:
            continue  # an undeclared module is rule 1's failure
        (to_rank, to_layer), (from_rank, from_layer) = index[target], index[source]
        if to_rank < from_rank:
            continue
        how = "upward" if to_rank > from_rank else f"sideways, unit {source} to unit {target}"
        found.append(
            f"{edge.source} (layer {from_layer}) imports {edge.target} (layer {to_layer}), "
            f"line {edge.line}, {edge.kind} import: {how}"
        )
    return found


def _strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return found


def _one_cycle(component: Sequence[str], edges: Mapping[tuple[str, str], Edge]) -> list[Edge]:
    """A shortest cycle through the first module of ``component`` (breadth-first)."""
    members = set(component)
    start = component[0]
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for (source, target), edge in sorted(edges.items()):
                if source != node or target not in members:
                    continue
                if target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                if target not in came:
                    came[target] = edge
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # unreachable for a real component


def import_cycles(edges: Sequence[Edge]) -> list[str]:
    """One line per cycle of imports (of any kind), naming every step of one cycle through
    it."""
    first: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        first.setdefault((edge.source, edge.target), edge)
    graph: dict[str, set[str]] = {}
    for source, target in first:
        graph.setdefault(source, set()).add(target)
    found = []
    for component in _strongly_connected(graph):
        cycle = _one_cycle(component, first)
        steps = [f"{e.target} ({e.kind} import, line {e.line})" for e in cycle]
        found.append("import cycle: " + " -> ".join([cycle[0].source, *steps]))
    return found


def loaded_packages(
    modules: Sequence[str],
    edges: Sequence[Edge],
    layers: Sequence[tuple[str, Sequence[str]]] = LAYERS,
) -> list[str]:
    """Rule 4: what the ``__init__`` of another unit's package, which Python runs before a
    singled-out unit's module, imports at run time."""
    found = []
    for module in modules:
        unit = unit_of(module, layers)
        parts = module.split(".")
        for depth in range(2, len(parts)):
            package = ".".join(parts[:depth])
            if unit_of(package, layers) == unit:
                continue
            found += [
                f"importing {module} (unit {unit}) runs the __init__ of {package} "
                f"(unit {unit_of(package, layers)}), which imports {e.target} at line {e.line}"
                for e in edges
                if e.source == package and e.kind != "type-checking"
            ]
    return found


ROOT = Path(image_project.__file__).parent
MODULES = module_files(ROOT)
EDGES = import_edges(ROOT)
BENCH = ROOT.parent / "bench"
BENCH_EDGES = import_edges(BENCH, script_files(BENCH))


def test_every_module_is_in_a_declared_layer() -> None:
    declared = [unit for _, units in LAYERS for unit in units]
    assert len(declared) == len(set(declared)), "a unit is declared twice"
    missing = [m for m in MODULES if unit_of(m) is None]
    assert not missing, f"modules in no layer (add their unit to LAYERS): {missing}"
    unused = [u for u in declared if not any(unit_of(m) == u for m in MODULES)]
    assert not unused, f"declared units with no module: {unused}"


def test_imports_point_down_the_layers() -> None:
    found = layer_violations(EDGES)
    assert not found, "\n".join(["imports against the layer order:", *found])


def test_no_import_cycle_between_modules() -> None:
    found = import_cycles(EDGES)
    assert not found, "\n".join(found)


def test_no_import_cycle_between_bench_modules() -> None:
    found = import_cycles(BENCH_EDGES)
    assert not found, "\n".join(found)


def test_a_unit_singled_out_of_a_package_does_not_load_the_rest_of_it() -> None:
    found = loaded_packages(list(MODULES), EDGES)
    assert not found, "\n".join(found)


def test_the_graph_sees_each_kind_of_import() -> None:
    """The walk itself: known edges of each kind, from the real package."""
    kinds = {(e.source, e.target): e.kind for e in EDGES}
    assert kinds[("image_project.engine.runner", "image_project.backends.base")] == "module"
    assert kinds[("image_project.cli.launch", "image_project.cli.command")] == "function"
    assert kinds[("image_project.engine.nodes", "image_project.engine.context")] == (
        "type-checking"
    )
    assert {"image_project", "image_project.backends.base", "image_project.cli.command"} <= set(
        MODULES
    )
    bench = {(e.source, e.target): e.kind for e in BENCH_EDGES}
    assert bench[("batch", "runs")] == "module"
    assert bench[("latency", "batch")] == "function"
    assert bench[("runs", "simulator")] == "type-checking"
    assert not any(e.target.startswith(PACKAGE) for e in BENCH_EDGES)


def _write(root: Path, files: Mapping[str, str]) -> Path:
    for name, source in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root / PACKAGE


def test_the_checks_catch_each_kind_of_mistake(tmp_path: Path) -> None:
    """The checks themselves, on a small package with one case of each."""
    root = _write(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "from image_project import high\n",
            "side.py": "def f():\n    from image_project.high import x\n",
            "high.py": "x = 1\ndef g():\n    from . import low\n",
            "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import image_project.high\n",
            "pkg/__init__.py": "",
            "pkg/a.py": "from image_project.pkg import b\n",
            "pkg/b.py": "import typing\nif typing.TYPE_CHECKING:\n    from .a import A\n",
            "outer/__init__.py": "from image_project import low\n",
            "outer/seam.py": "",
        },
    )
    layers = (
        ("bottom", ("__init__", "low", "typed", "pkg", "outer.seam")),
        ("top", ("high", "side", "outer")),
    )
    edges = import_edges(root)
    assert layer_violations(edges, layers) == [
        "image_project.low (layer bottom) imports image_project.high (layer top), line 1, "
        "module import: upward",
        "image_project.side (layer top) imports image_project.high (layer top), line 2, "
        "function import: sideways, unit side to unit high",
        "image_project.typed (layer bottom) imports image_project.high (layer top), line 3, "
        "type-checking import: upward",
    ]
    # high -> low runs only when g() is called, and pkg.b -> pkg.a only for the type
    # checker, but each closes a cycle all the same.
    assert import_cycles(edges) == [
        "import cycle: image_project.high -> image_project.low (function import, line 3) -> "
        "image_project.high (module import, line 1)",
        "import cycle: image_project.pkg.a -> image_project.pkg.b (module import, line 1) -> "
        "image_project.pkg.a (type-checking import, line 3)",
    ]
    assert loaded_packages(list(module_files(root)), edges, layers) == [
        "importing image_project.outer.seam (unit outer.seam) runs the __init__ of "
        "image_project.outer (unit outer), which imports image_project.low at line 1"
    ]


def test_the_cycle_check_reads_scripts_that_import_each_other_by_name(tmp_path: Path) -> None:
    """bench/'s shape: top-level modules by file name; a lazy import closing a cycle is
    found, an import of the package or of a library is no edge."""
    for name, source in {
        "shared.py": "import json\nfrom image_project.engine import Context\n",
        "report.py": "import shared\nfrom scenario import run\n",
        "scenario.py": "from shared import x\ndef run():\n    from report import table\n",
    }.items():
        (tmp_path / name).write_text(source, encoding="utf-8")
    edges = import_edges(tmp_path, script_files(tmp_path))
    assert sorted(map(str, edges)) == [
        "report -> scenario (module import, line 2)",
        "report -> shared (module import, line 1)",
        "scenario -> report (function import, line 3)",
        "scenario -> shared (module import, line 1)",
    ]
    assert import_cycles(edges) == [
        "import cycle: report -> scenario (module import, line 2) -> "
        "report (function import, line 3)"
    ]
