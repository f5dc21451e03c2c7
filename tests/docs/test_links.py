"""No document of the repository points a reader outside it, or at a file that is not there.

Checked in every tracked Markdown file: each Markdown link or image whose target is a path
(``[text](docs/bugs.md)``, ``#anchor`` suffixes ignored) must resolve to a file or directory
inside the repository, and so must each relative path written as code that climbs out of its
folder (`` `../x/y.md` ``): both once named files on their author's machine only
(``../shared/BUG-CATALOGUE.md``, issue 36).

External ``http``/``https`` links are allowed, as citations: they name a public source (a
project's home page, a specification, a bug tracker) that any reader can open, and a document
about Kafka's bugs must be able to cite Kafka's.  What a reader cannot follow is a path into
somebody's workspace, which is what this test refuses.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CLIMBING_CODE = re.compile(r"`(\.\./[^`\s]+\.(?:md|py|toml|sh|yml|json|txt))`")
"""A file path written as code that climbs out of its folder; one without such an extension is an
example value (``../runs/run-0001``, a packed index's run directory), not a reference."""
EXTERNAL = ("http://", "https://", "mailto:")


def documents() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True, cwd=ROOT, check=True)
    return sorted(name for name in listed.stdout.splitlines() if (ROOT / name).is_file())


def broken_links(document: Path, root: Path = ROOT) -> list[str]:
    """``line: target (why)`` for every path link or climbing code path of ``document`` that
    leaves ``root`` or names nothing."""
    problems = []
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), start=1):
        targets = [match.group(1) for match in LINK.finditer(line)]
        targets += [match.group(1) for match in CLIMBING_CODE.finditer(line)]
        for target in targets:
            if target.startswith(EXTERNAL) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            resolved = (document.parent / path).resolve()
            if not resolved.is_relative_to(root):
                problems.append(f"{number}: {target} (outside the repository)")
            elif not resolved.exists():
                problems.append(f"{number}: {target} (no such file)")
    return problems


PENDING: dict[str, str] = {}
"""Documents known to break the rule, with why (an xfail that fails once they are fixed)."""


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=PENDING[name]))
        if name in PENDING
        else name
        for name in documents()
    ],
)
def test_no_link_leaves_the_repository_or_names_nothing(name: str) -> None:
    assert broken_links(ROOT / name) == [], name


def test_the_check_finds_what_it_refuses(tmp_path: Path) -> None:
    """The check itself, on a planted tree: climbing out, a missing file, and what passes."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bugs.md").write_text("# bugs\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("# readme\n", encoding="utf-8")
    document = tmp_path / "docs" / "planted.md"
    document.write_text(
        "[ok](bugs.md#rates) [web](https://kafka.apache.org) `../README.md` `../runs/run-0001`\n"
        "[out](../../elsewhere/x.md) `../../shared/BUG-CATALOGUE.md` [gone](no-such.md)\n",
        encoding="utf-8",
    )
    assert broken_links(document, tmp_path) == [
        "2: ../../elsewhere/x.md (outside the repository)",
        "2: no-such.md (no such file)",
        "2: ../../shared/BUG-CATALOGUE.md (outside the repository)",
    ]
