"""The code is grouped into rooms by job, and imports point one way: down.

A *room* is a package with one job (``testbed.record``: the run record; ``checker``: the checks;
...).  Each room has a rank; a module may import modules of its own room and of rooms listed as
allowed for it, which by default are all rooms of a lower rank.  An import that points up or
sideways is a layering bug even when it happens to work: it drags a heavy room (the CLI, Docker,
Spark) into a light one, it creates cycles that only lazy imports keep from exploding, and it
makes a room impossible to ship or test alone (``broker_impl`` and ``nemesis.lazyfs`` run inside
the node image, where nothing else exists).

The check reads the source with :mod:`ast` only (nothing is imported or run): every ``import`` and
``from ... import`` statement, at module level or inside a function, relative ones resolved, and
``from X import Y`` counted as an import of ``X.Y`` when ``Y`` is a submodule.  The rules live in
:data:`ROOMS`, once; the tests at the bottom plant bad imports in a small fake tree to prove the
check catches them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE_ROOT = Path(__file__).resolve().parents[1]
TOP_PACKAGES: tuple[str, ...] = ("testbed", "harness", "nemesis", "workloads", "checker", "broker_impl")
CLI_ROOM = "harness.cli"


@dataclass(frozen=True)
class Room:
    rank: int
    #: The rooms this one may import, besides itself; ``None``: every room of a lower rank.
    may_import: frozenset[str] | None = None


ROOMS: dict[str, Room] = {
    # rank 0: the bottom; each ships or is read on its own.
    "testbed.record": Room(0),
    "broker_impl": Room(0, frozenset()),
    "nemesis.lazyfs": Room(0, frozenset()),
    # rank 1..2: reaching nodes, setting up clusters.
    "testbed.nodes": Room(1),
    "testbed.cluster": Room(2),
    # rank 3: what runs against a cluster, and what judges the record.
    "workloads": Room(3),
    "checker": Room(3, frozenset({"testbed.record", "checker.pandas", "checker.spark"})),
    "checker.pandas": Room(3, frozenset({"testbed.record", "checker"})),
    "checker.spark": Room(3, frozenset({"testbed.record", "checker", "checker.pandas"})),
    # rank 4: faults.
    "nemesis": Room(4, frozenset({"testbed.record", "testbed.nodes", "testbed.cluster", "nemesis.lazyfs"})),
    # rank 5..8: reading runs back, the systems under test, orchestrating, the command line.
    "harness.report": Room(5),
    "harness.targets": Room(6),
    "harness.run": Room(7),
    CLI_ROOM: Room(8),
}
"""Every room, its rank and (where narrower than "every lower rank") what it may import.

Why this order: the run record (ops, history, replica tables, run directory) is the one format
everything else writes or reads, so it sits at the bottom and imports nothing.  The broker and the
power-loss filesystem ship alone in the node image, so they import nothing of ours at all.  Remotes
only move commands and files; clusters are set up through remotes.  Workloads and the checker are
peers that never meet: they share only the record (the checker reads stored runs, never a live
cluster, and must not pull in Kafka clients or Docker).  Inside the checker, the engines build on
the shared core (whose :mod:`checker.api` picks an engine), and Spark may reuse pandas'
aggregations but never the reverse: the pandas engine must run without a JVM.
The nemesis acts on clusters through remotes and writes to the record, but knows nothing of the
workload it disturbs.  Reports read stored runs; the targets say what each system under test
checks, starts and offers (below the runner and its spec, which ask them); the runner orchestrates
everything below it; the CLI sits on top and no library code ever imports it.
"""

TOP_RANKS: dict[str, int] = {
    "broker_impl": 0,
    "testbed": 1,
    "workloads": 2,
    "checker": 2,
    "nemesis": 3,
    "harness": 4,
}
"""The top-level packages and their ranks: no top-level package imports one of a higher rank, nor
a peer of the same rank (``workloads`` and ``checker`` never meet).  ``testbed`` is the floor
(record, nodes, clusters), ``harness`` the roof (reports, runs, the command line).  The room table
above refines this inside each package; this table is what a reader sees from the top."""


UMBRELLAS: frozenset[str] = frozenset({"harness", "testbed"})
"""Packages that are not rooms but only hold rooms: their ``__init__`` must import nothing."""

IMPORT_FREE_INITS: frozenset[str] = UMBRELLAS | {CLI_ROOM, "nemesis"}
"""Package ``__init__`` files that must import nothing: the umbrella; ``harness.cli``, so the
entry point ``harness.cli.main:main`` stays light; ``nemesis``, because importing the node-side
``nemesis.lazyfs`` runs it on the host (in the image ``nemesis`` is a namespace package)."""


@dataclass(frozen=True)
class Violation:
    path: str  # relative to the source root
    line: int
    importer: str  # module
    importer_room: str
    imported: str  # module
    imported_room: str
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.importer_room} -> {self.imported_room} "
            f"({self.importer} imports {self.imported}: {self.reason})"
        )


def allowed_rooms(room: str, rooms: Mapping[str, Room]) -> frozenset[str]:
    """The rooms ``room`` may import besides itself."""
    rule = rooms[room]
    if rule.may_import is not None:
        return rule.may_import
    return frozenset(name for name, other in rooms.items() if other.rank < rule.rank)


def room_of(module: str, rooms: Mapping[str, Room]) -> str | None:
    """The room holding ``module``: the longest room name equal to it or a dotted prefix of it."""
    best: str | None = None
    for name in rooms:
        if (module == name or module.startswith(name + ".")) and (best is None or len(name) > len(best)):
            best = name
    return best


def source_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: dotted name -> file (``pkg/__init__.py`` is ``pkg``)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imports(
    tree: ast.AST, module: str, is_package: bool, known: Mapping[str, Path]
) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import statement anywhere in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base_parts = package[: len(package) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = {f"{base}.{alias.name}" for alias in node.names} & known.keys()
            if len(targets) < len(node.names):
                targets.add(base)  # some name is not a submodule: it comes from base itself
            for target in sorted(targets):
                yield node.lineno, target
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value  # importlib.import_module("literal")


def import_violations(
    root: Path,
    rooms: Mapping[str, Room] = ROOMS,
    packages: tuple[str, ...] = TOP_PACKAGES,
    cli_room: str = CLI_ROOM,
) -> list[Violation]:
    """Every import under ``root`` that points up or sideways, or into the CLI from outside it."""
    known = source_modules(root, packages)
    violations: list[Violation] = []
    for module, path in known.items():
        importer_room = room_of(module, rooms)
        if importer_room is None:
            continue  # an umbrella's __init__, or an unassigned module: see unassigned_modules()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, imported in _imports(tree, module, path.name == "__init__.py", known):
            if imported.split(".")[0] not in packages:
                continue  # standard library or third party
            imported_room = room_of(imported, rooms)
            if imported_room is None or imported_room == importer_room:
                continue
            if imported_room == cli_room:
                reason = "library code never imports a CLI module"
            elif imported_room in allowed_rooms(importer_room, rooms):
                continue
            elif rooms[imported_room].rank > rooms[importer_room].rank:
                reason = "points up"
            elif rooms[imported_room].rank == rooms[importer_room].rank:
                reason = "points sideways (same rank, not listed)"
            else:
                reason = "points down, but not to a room this one may import"
            rel = path.relative_to(root).as_posix()
            violations.append(Violation(rel, line, module, importer_room, imported, imported_room, reason))
    return sorted(violations, key=lambda v: (v.path, v.line, v.imported))


def unassigned_modules(
    root: Path,
    rooms: Mapping[str, Room] = ROOMS,
    packages: tuple[str, ...] = TOP_PACKAGES,
    umbrellas: frozenset[str] = UMBRELLAS,
) -> list[str]:
    """Modules that belong to no room (an umbrella package's own ``__init__`` excepted)."""
    return [
        module
        for module in source_modules(root, packages)
        if room_of(module, rooms) is None and module not in umbrellas
    ]


def _imports_of(path: Path) -> list[str]:
    """Every module ``path`` imports (``from __future__`` aside), as written."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            found.append("." * node.level + (node.module or ""))
    return found


def top_level_violations(
    root: Path, top_ranks: Mapping[str, int] = TOP_RANKS, packages: tuple[str, ...] = TOP_PACKAGES
) -> list[str]:
    """Every import by which a top-level package reaches one of a higher or the same rank."""
    known = source_modules(root, packages)
    found: list[str] = []
    for module, path in known.items():
        importer_top = module.split(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, imported in _imports(tree, module, path.name == "__init__.py", known):
            imported_top = imported.split(".")[0]
            if imported_top not in top_ranks or imported_top == importer_top:
                continue
            if top_ranks[imported_top] >= top_ranks[importer_top]:
                rel = path.relative_to(root).as_posix()
                found.append(f"{rel}:{line}: {importer_top} -> {imported_top} ({module} imports {imported})")
    return sorted(found)


def import_cycles(root: Path, packages: tuple[str, ...] = TOP_PACKAGES) -> list[list[str]]:
    """The import circles among the modules under ``root``: every strongly connected component of
    more than one module in the graph of all imports (module level, in functions and under
    ``TYPE_CHECKING`` alike -- a lazy import hides a circle, it does not remove it).

    A package's ``__init__`` importing its own submodules is left out: that edge is how a package
    re-exports, and the submodule importing a sibling through the package is the circle, not this.
    Tarjan's algorithm, iterative, so a deep chain does not hit the recursion limit."""
    known = source_modules(root, packages)
    graph: dict[str, set[str]] = {module: set() for module in known}
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for _line, imported in _imports(tree, module, is_package, known):
            if imported in known and imported != module:
                if is_package and imported.startswith(module + "."):
                    continue
                graph[module].add(imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


# -- the real tree ------------------------------------------------------------------------------------


def test_top_level_packages_import_only_lower_ones() -> None:
    violations = top_level_violations(SOURCE_ROOT)
    assert not violations, f"{len(violations)} top-level back arrow(s):\n" + "\n".join(violations)


def test_every_top_level_package_has_a_rank() -> None:
    assert set(TOP_RANKS) == set(TOP_PACKAGES)


def test_no_import_circles() -> None:
    cycles = import_cycles(SOURCE_ROOT)
    assert not cycles, f"{len(cycles)} import circle(s):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_imports_point_down() -> None:
    violations = import_violations(SOURCE_ROOT)
    assert not violations, f"{len(violations)} import(s) break the layout:\n" + "\n".join(
        str(v) for v in violations
    )


def test_every_module_is_in_a_room() -> None:
    assert unassigned_modules(SOURCE_ROOT) == []


def test_room_table_is_consistent() -> None:
    for name, room in ROOMS.items():
        for other in room.may_import or ():
            assert other in ROOMS, f"{name} may import unknown room {other}"
            assert ROOMS[other].rank <= room.rank, (
                f"{name} (rank {room.rank}) may not list a higher room {other}"
            )
            assert other != CLI_ROOM, f"{name} may not list the CLI"


@pytest.mark.parametrize("room", sorted(ROOMS) + sorted(UMBRELLAS))
def test_room_is_a_documented_package(room: str) -> None:
    init = SOURCE_ROOT.joinpath(*room.split("."), "__init__.py")
    assert init.is_file(), f"{room} is not a package: {init} is missing"
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    lines = [line for line in docstring.splitlines() if line.strip()]
    assert len(lines) >= 3, f"{init.relative_to(SOURCE_ROOT)}: the docstring must say what the room is for"


@pytest.mark.parametrize("package", sorted(IMPORT_FREE_INITS))
def test_package_init_imports_nothing(package: str) -> None:
    init = SOURCE_ROOT.joinpath(*package.split("."), "__init__.py")
    assert _imports_of(init) == []


# -- the check itself, on a fake tree ----------------------------------------------------------------

FAKE_ROOMS: dict[str, Room] = {
    "low": Room(0),
    "mid": Room(1),
    "side": Room(1),
    "top.cli": Room(3),
    "top": Room(2),
    "top.narrow": Room(2, frozenset({"low"})),
}
FAKE_PACKAGES = ("low", "mid", "side", "top")


def _write(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for directory in [p for p in root.rglob("*") if p.is_dir()]:  # every directory a package
        (directory / "__init__.py").touch()
    return root


def _fake(tmp_path: Path, files: Mapping[str, str]) -> list[str]:
    root = _write(tmp_path, files)
    return [str(v) for v in import_violations(root, FAKE_ROOMS, FAKE_PACKAGES, "top.cli")]


def test_fake_tree_downward_imports_pass(tmp_path: Path) -> None:
    files = {
        "low/a.py": "import os\nfrom . import b\n",
        "low/b.py": "",
        "mid/m.py": "import low.a\nfrom low import b\nfrom low.a import thing\n",
        "top/t.py": "from mid import m\n",
        "top/cli/main.py": "from top import t\nfrom ..narrow import n\n",
        "top/narrow/n.py": "from low.b import x\n",
    }
    assert _fake(tmp_path, files) == []


def test_fake_tree_library_importing_the_cli_fails(tmp_path: Path) -> None:
    files = {"low/a.py": "", "top/t.py": "from top.cli import main\n", "top/cli/main.py": "import low.a\n"}
    assert _fake(tmp_path, files) == [
        "top/t.py:1: top -> top.cli (top.t imports top.cli.main: library code never imports a CLI module)"
    ]


def test_fake_tree_planted_upward_import_fails(tmp_path: Path) -> None:
    files = {
        "low/a.py": "def f():\n    from mid import m  # function-level, submodule via from-import\n",
        "mid/m.py": "",
    }
    assert _fake(tmp_path, files) == ["low/a.py:2: low -> mid (low.a imports mid.m: points up)"]


def test_fake_tree_sideways_relative_and_narrowed(tmp_path: Path) -> None:
    files = {
        "mid/m.py": "from ..side import s\n",  # relative, sideways
        "side/s.py": "",
        "top/narrow/n.py": "import mid.m\nimport low\n",  # lower rank, but not in its list
        "top/x.py": "import importlib\nimportlib.import_module('top.cli')\n",
        "top/cli/main.py": "",
    }
    assert _fake(tmp_path, files) == [
        "mid/m.py:1: mid -> side (mid.m imports side.s: points sideways (same rank, not listed))",
        "top/narrow/n.py:1: top.narrow -> mid (top.narrow.n imports mid.m: points down, but not to a room this one may import)",
        "top/x.py:2: top -> top.cli (top.x imports top.cli: library code never imports a CLI module)",
    ]


def test_fake_tree_unassigned_module(tmp_path: Path) -> None:
    _write(tmp_path, {"low/a.py": "", "stray/s.py": ""})
    assert unassigned_modules(tmp_path, FAKE_ROOMS, ("low", "stray"), frozenset()) == ["stray", "stray.s"]


def test_real_rules_catch_a_planted_arrow(tmp_path: Path) -> None:
    # The real table on a fake tree: a record module reaching up into the runner and the CLI.
    files = {
        "testbed/record/ops.py": "from harness.run import runner\nfrom harness import cli\n",
        "harness/run/runner.py": "",
        "harness/cli/__init__.py": "",
        "checker/engine.py": "from workloads.queue import QueueSpec\n",
        "checker/pandas/engine.py": "from checker.spark import session\n",
        "checker/spark/session.py": "from checker.pandas import engine\nfrom checker import engine as e\n",
        "workloads/queue.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert [str(v) for v in import_violations(tmp_path)] == [
        "checker/engine.py:1: checker -> workloads (checker.engine imports workloads.queue: points sideways (same rank, not listed))",
        "checker/pandas/engine.py:1: checker.pandas -> checker.spark (checker.pandas.engine imports checker.spark.session: points sideways (same rank, not listed))",
        "testbed/record/ops.py:1: testbed.record -> harness.run (testbed.record.ops imports harness.run.runner: points up)",
        "testbed/record/ops.py:2: testbed.record -> harness.cli (testbed.record.ops imports harness.cli: library code never imports a CLI module)",
    ]


def test_fake_tree_top_level_back_arrow_fails(tmp_path: Path) -> None:
    _write(tmp_path, {"low/a.py": "import high.b\n", "high/b.py": "import low.a\n"})
    found = top_level_violations(tmp_path, {"low": 0, "high": 1}, ("low", "high"))
    assert found == ["low/a.py:1: low -> high (low.a imports high.b)"]


def test_fake_tree_import_circle_found(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "from . import b\n",
        "pkg/b.py": "def f() -> None:\n    from pkg import c\n",
        "pkg/c.py": "import pkg.a\n",
        "pkg/d.py": "import pkg.a\n",
    }
    _write(tmp_path, files)
    assert import_cycles(tmp_path, ("pkg",)) == [["pkg.a", "pkg.b", "pkg.c"]]
