"""No module outside the target modules (``harness/targets/``) branches on which system it tests.

Before targets were objects, ``spec.target == "tansu"`` and ``spec.bootstrap is None`` decided at 26
places (runner, spec, ``cli/run``, ``cli/image``) what to check, start and record; a new system
meant finding them all.  Now the target answers, and this test keeps it so: it reads the source
(nothing is imported) for a comparison with a target's name or the default target, and for a test
of a spec's ``bootstrap``/``inventory`` (which pick and shape the external target).
"""

from __future__ import annotations

import re
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("harness", "testbed", "nemesis", "workloads", "checker", "broker_impl", "bench")
TARGET_MODULES = "harness/targets/"
TARGET_BRANCH = re.compile(
    "|".join(
        f"(?:{pattern})"
        for pattern in (
            r"""(==|!=)\s*["'](bundled|tansu|external)["']""",
            r"""["'](bundled|tansu|external)["']\s*(==|!=)""",
            r"""(==|!=)\s*DEFAULT_TARGET|DEFAULT_TARGET\s*(==|!=)""",
            r"""\b(spec|args)\.(bootstrap|inventory)\s+is\s+(not\s+)?None""",
            r"""\b(if|not|and|or|elif)\s+(spec|args)\.(bootstrap|inventory)\b""",
            r"""\b(spec|args)\.(bootstrap|inventory)\s+(and|or|if)\b""",
        )
    )
)


def target_branches(root: Path, skip: str = TARGET_MODULES) -> list[str]:
    """``path:line: text`` of every branch on the target outside ``skip`` (inside the test spec's
    own class, ``self`` is the spec)."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(skip):
                continue
            text = path.read_text(encoding="utf-8")
            is_spec = "class TestSpec" in text
            for number, line in enumerate(text.splitlines(), start=1):
                if TARGET_BRANCH.search(line.replace("self.", "spec.") if is_spec else line):
                    found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_no_module_outside_the_target_modules_branches_on_the_target() -> None:
    assert target_branches(SOURCE_ROOT) == []


def test_the_check_finds_the_branches_it_forbids(tmp_path: Path) -> None:
    planted = tmp_path / "harness" / "run" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(
        'if spec.target == "tansu":\n    pass\n'
        "if spec.bootstrap is None:\n    pass\n"
        "x = a if spec.inventory else b\n"
        "if args.target != DEFAULT_TARGET:\n    pass\n"
        "address = bootstrap or self.bootstrap\n",  # a workload's own address: not a target branch
        encoding="utf-8",
    )
    (tmp_path / "harness" / "targets").mkdir()
    (tmp_path / "harness" / "targets" / "tansu.py").write_text(
        'ok = spec.target == "tansu"\n', encoding="utf-8"
    )
    assert [line.split(": ", 1)[0] for line in target_branches(tmp_path)] == [
        "harness/run/planted.py:1",
        "harness/run/planted.py:3",
        "harness/run/planted.py:5",
        "harness/run/planted.py:6",
    ]
