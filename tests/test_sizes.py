"""Modules stay at most 500 lines and functions at most 80: past that, a unit holds more than one job.

The limits are the project's style rule (a module has one job; a function reads in one screen).
The check reads the source with :mod:`ast` only, over the same top-level packages as
``tests/test_layout.py``.  A module's size is its number of lines; a function's (or method's) runs
from its ``def`` line to its last line, docstring and nested functions included -- a nested
function is also measured on its own, under its qualified name.

Exceptions live in :data:`ALLOWED`, each with one sentence saying why.  The list can only shrink:
an entry whose unit is back within the limits (or gone) fails :func:`test_allowlist_has_no_stale_entries`,
so the one who fixed the unit also deletes its entry.  The tests at the bottom plant oversized
units in a small fake tree to prove the check catches them, and only them.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.test_layout import SOURCE_ROOT, TOP_PACKAGES

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

SPLIT_THIS_SESSION = "being split this session (issue 31)"

ALLOWED: dict[str, str] = {}
"""The units allowed past the limits: ``path`` for a module, ``path::Qualified.name`` for a
function, each with one sentence why.  Meant to end up empty."""


@dataclass(frozen=True)
class Oversize:
    """A unit past its limit: ``key`` as :data:`ALLOWED` spells it."""

    key: str
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.key}: {self.lines} lines (limit {self.limit})"


def _functions(
    node: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method under ``node``, nested ones too."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _functions(child, f"{name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def oversized(
    root: Path,
    packages: tuple[str, ...] = TOP_PACKAGES,
    max_module_lines: int = MAX_MODULE_LINES,
    max_function_lines: int = MAX_FUNCTION_LINES,
) -> list[Oversize]:
    """Every module and function of ``packages`` under ``root`` past its limit, sorted by key."""
    found: list[Oversize] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            relative = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            module_lines = len(text.splitlines())
            if module_lines > max_module_lines:
                found.append(Oversize(relative, module_lines, max_module_lines))
            for name, function in _functions(ast.parse(text, filename=str(path))):
                lines = (function.end_lineno or function.lineno) - function.lineno + 1
                if lines > max_function_lines:
                    found.append(Oversize(f"{relative}::{name}", lines, max_function_lines))
    return sorted(found, key=lambda oversize: oversize.key)


def unallowed(found: list[Oversize], allowed: Mapping[str, str]) -> list[str]:
    """The oversized units with no entry in ``allowed``."""
    return [str(oversize) for oversize in found if oversize.key not in allowed]


def stale(found: list[Oversize], allowed: Mapping[str, str]) -> list[str]:
    """The entries of ``allowed`` no unit needs any more: within the limits now, renamed or gone."""
    needed = {oversize.key for oversize in found}
    return sorted(key for key in allowed if key not in needed)


# -- the real tree ------------------------------------------------------------------------------------


@functools.cache
def _real_tree() -> list[Oversize]:
    """The real tree's oversized units, read once for the tests below."""
    return oversized(SOURCE_ROOT)


def test_no_module_or_function_past_the_limits() -> None:
    problems = unallowed(_real_tree(), ALLOWED)
    assert not problems, (
        f"{len(problems)} unit(s) past the limits ({MAX_MODULE_LINES} lines a module, "
        f"{MAX_FUNCTION_LINES} a function): split them by job, or add an entry to ALLOWED with "
        "a sentence why:\n" + "\n".join(problems)
    )


def test_allowlist_has_no_stale_entries() -> None:
    entries = stale(_real_tree(), ALLOWED)
    assert not entries, "within the limits now (or gone): delete from ALLOWED:\n" + "\n".join(entries)


def test_every_allowance_says_why() -> None:
    for key, reason in ALLOWED.items():
        assert reason.strip(), f"{key}: an allowance needs a sentence saying why"
        path = key.split("::")[0]
        assert path.split("/")[0] in TOP_PACKAGES and path.endswith(".py"), f"{key}: not a module path"


# -- the check itself, on a fake tree ----------------------------------------------------------------


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines (its ``def`` line included)."""
    body = "".join(f"{indent}    x = {number}\n" for number in range(lines - 1))
    return f"{indent}def {name}() -> None:\n{body}"


def _plant(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_fake_tree_units_at_the_limits_pass(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "pkg/full.py": _function("f", 80) + "\n" * (500 - 80),
            "pkg/method.py": "class C:\n" + _function("m", 80, "    "),
        },
    )
    assert oversized(root, ("pkg",)) == []


def test_fake_tree_planted_oversizes_are_caught(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "pkg/long.py": "x = 1\n" * 501,
            "pkg/sub/long_function.py": _function("f", 81),
            "pkg/method.py": "class C:\n" + _function("m", 81, "    "),
            "pkg/nested.py": "def outer() -> None:\n" + _function("inner", 81, "    "),
            "pkg/ok.py": _function("g", 10),
            "other/ignored.py": "x = 1\n" * 900,  # not a package the check was asked about
        },
    )
    assert [str(oversize) for oversize in oversized(root, ("pkg",))] == [
        "pkg/long.py: 501 lines (limit 500)",
        "pkg/method.py::C.m: 81 lines (limit 80)",
        "pkg/nested.py::outer: 82 lines (limit 80)",
        "pkg/nested.py::outer.inner: 81 lines (limit 80)",
        "pkg/sub/long_function.py::f: 81 lines (limit 80)",
    ]


def test_fake_tree_allowlist_covers_and_goes_stale(tmp_path: Path) -> None:
    root = _plant(tmp_path, {"pkg/long.py": "x = 1\n" * 501, "pkg/f.py": _function("f", 81)})
    found = oversized(root, ("pkg",))
    allowed = {"pkg/long.py": "a reason", "pkg/gone.py::h": "a reason"}
    assert unallowed(found, allowed) == ["pkg/f.py::f: 81 lines (limit 80)"]
    assert stale(found, allowed) == ["pkg/gone.py::h"]
    (root / "pkg" / "long.py").write_text("x = 1\n" * 500, encoding="utf-8")  # fixed: its entry is stale
    assert stale(oversized(root, ("pkg",)), allowed) == ["pkg/gone.py::h", "pkg/long.py"]
