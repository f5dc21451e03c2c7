"""The mutation bench's patches and its pure parts (no Docker: nothing here hunts).

Every patch in ``bench/mutants/`` must apply to the current working tree -- a patch that stopped
applying because someone edited ``broker_impl`` would make the bench fail at its start, or worse,
measure nothing -- must name a title, must be a small change to ``broker_impl`` only, and must
change something.  The bench's own logic (patch discovery, ``--only``, scratch copies, turning a
hunt record into a matrix row, the matrix text) is tested on small inputs built here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.run.campaign import load_campaign

REPO = Path(__file__).resolve().parents[1]
PATCHES = sorted((REPO / "bench" / "mutants").glob("*.patch"))
MAX_CHANGED_LINES = 10
"""A mutant is "a few lines": more than this many added plus removed lines is a rewrite."""


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_mutants", REPO / "bench" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def _changed_paths_and_lines(text: str) -> tuple[set[str], int]:
    paths = set()
    changed = 0
    in_diff = False
    for line in text.splitlines():
        if line.startswith("diff --git "):
            in_diff = True
            paths.add(line.split()[2].removeprefix("a/"))
        elif not in_diff or line.startswith(("--- ", "+++ ")):
            continue
        elif line.startswith(("+", "-")):
            changed += 1
    return paths, changed


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch copy of the working tree for the ``--check`` tests (they do not write to it)."""
    destination = tmp_path_factory.mktemp("scratch")
    bench.make_scratch_copy(destination)
    return destination


# ---- the patches ----------------------------------------------------------------------------------


def test_there_are_at_least_eight_mutants() -> None:
    assert len(PATCHES) >= 8, [path.name for path in PATCHES]
    assert [mutant.path for mutant in bench.discover()] == PATCHES


@pytest.mark.parametrize("patch", PATCHES, ids=[path.stem for path in PATCHES])
def test_patch_applies_to_the_working_tree(patch: Path, scratch: Path) -> None:
    bench.apply_patch(patch, scratch, check_only=True)


@pytest.mark.parametrize("patch", PATCHES, ids=[path.stem for path in PATCHES])
def test_patch_header_names_a_title_and_its_exposure(patch: Path) -> None:
    text = patch.read_text(encoding="utf-8")
    header = text.split("diff --git ", 1)[0]
    assert bench.read_title(text), f"{patch.name}: no 'Title:' line before the diff"
    hunts = {hunt.key for hunt in load_campaign(bench.DEFAULT_PROFILE).hunts}
    hunt = bench.read_field(text, bench.HUNT_FIELD)
    assert hunt in hunts, (
        f"{patch.name}: 'Hunt: {hunt}' is not a [[hunt]] of the nightly profile {sorted(hunts)}"
    )
    for field in ("Kafka analogue:", "What goes wrong:", "Exposed by:", "Anomalies:"):
        assert field in header, f"{patch.name}: the header does not say {field!r}"


@pytest.mark.parametrize("patch", PATCHES, ids=[path.stem for path in PATCHES])
def test_patch_is_a_small_change_to_the_broker(patch: Path) -> None:
    paths, changed = _changed_paths_and_lines(patch.read_text(encoding="utf-8"))
    assert paths and all(path.startswith("broker_impl/") for path in paths), paths
    assert 0 < changed <= MAX_CHANGED_LINES, f"{patch.name}: {changed} lines changed"


@pytest.mark.parametrize("patch", PATCHES, ids=[path.stem for path in PATCHES])
def test_applying_a_patch_changes_the_copy_and_never_the_tree(patch: Path, tmp_path: Path) -> None:
    paths, _ = _changed_paths_and_lines(patch.read_text(encoding="utf-8"))
    before = {path: hashlib.sha256((REPO / path).read_bytes()).hexdigest() for path in paths}
    bench.make_scratch_copy(tmp_path)
    bench.apply_patch(patch, tmp_path)
    for path, digest in before.items():
        assert hashlib.sha256((REPO / path).read_bytes()).hexdigest() == digest, f"{path} changed in the tree"
        assert hashlib.sha256((tmp_path / path).read_bytes()).hexdigest() != digest, f"{path}: a no-op patch"


# ---- discovery and selection ----------------------------------------------------------------------

DIFF = """diff --git a/broker_impl/x.py b/broker_impl/x.py
--- a/broker_impl/x.py
+++ b/broker_impl/x.py
@@ -1 +1 @@
-a = 1
+a = 2
"""


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_title_reads_the_header_only() -> None:
    assert bench.read_title("Title:  HW rule  \nKafka analogue: x\n\n" + DIFF) == "HW rule"
    assert bench.read_title("Kafka analogue: x\n" + DIFF + "Title: inside the diff\n") is None
    assert bench.read_title("Title:\n" + DIFF) is None
    assert bench.read_field("Title: t\nHunt:  membership \n" + DIFF, bench.HUNT_FIELD) == "membership"
    assert bench.read_field("Title: t\n" + DIFF + "Hunt: inside the diff\n", bench.HUNT_FIELD) is None


def test_discover_orders_by_file_name_and_refuses_bad_patches(tmp_path: Path) -> None:
    _write(tmp_path, "02-b.patch", "Title: second\nHunt: membership\n" + DIFF)
    _write(tmp_path, "01-a.patch", "Title: first\nHunt: random-faults\n" + DIFF)
    _write(tmp_path, "notes.txt", "not a patch")
    assert [(m.name, m.title, m.hunt) for m in bench.discover(tmp_path)] == [
        ("01-a", "first", "random-faults"),
        ("02-b", "second", "membership"),
    ]
    _write(tmp_path, "03-untitled.patch", "Hunt: membership\nKafka analogue: none\n" + DIFF)
    with pytest.raises(
        bench.BenchError, match=re.escape("03-untitled.patch: the header has no 'Title:' line")
    ):
        bench.discover(tmp_path)
    _write(tmp_path, "03-untitled.patch", "Title: no hunt\n" + DIFF)
    with pytest.raises(
        bench.BenchError, match=re.escape("03-untitled.patch: the header has no 'Hunt:' line")
    ):
        bench.discover(tmp_path)
    (tmp_path / "03-untitled.patch").unlink()
    _write(tmp_path, "04-nodiff.patch", "Title: prose only\nHunt: membership\n")
    with pytest.raises(bench.BenchError, match=re.escape("04-nodiff.patch: no 'diff --git' section")):
        bench.discover(tmp_path)
    with pytest.raises(bench.BenchError, match=re.escape("no *.patch files")):
        bench.discover(tmp_path / "empty-does-not-exist")


def test_select_by_file_name_number_or_name() -> None:
    mutants = [
        bench.Mutant(name, Path(f"{name}.patch"), name, "random-faults")
        for name in ("01-hw-rule", "02-isr", "03-fsync")
    ]
    assert bench.select(mutants, "") == mutants
    assert bench.select(mutants, "none") == []  # the baseline alone
    assert [m.name for m in bench.select(mutants, "03-fsync, 01")] == ["01-hw-rule", "03-fsync"]
    assert [m.name for m in bench.select(mutants, "isr")] == ["02-isr"]
    with pytest.raises(bench.BenchError, match=r"no mutant 04, nope .*known: 01-hw-rule, 02-isr, 03-fsync"):
        bench.select(mutants, "04,nope")


def test_hunt_of_the_nightly_profile_by_name_or_the_first() -> None:
    profile = REPO / "harness" / "run" / "campaigns" / "nightly.toml"
    hunts = load_campaign(profile).hunts
    assert bench.pick_hunt(hunts, "", profile).key == "random-faults"
    membership = bench.pick_hunt(hunts, "membership", profile)
    assert membership.spec.node_count == 4 and "decommission" in membership.spec.nemesis.faults
    with pytest.raises(bench.BenchError, match=r"--hunt 'nope': .* \(it has: random-faults, transactions"):
        bench.pick_hunt(hunts, "nope", profile)


def _mutant(name: str, hunt: str) -> Any:
    return bench.Mutant(name, Path(f"/m/{name}.patch"), name, hunt)


def test_each_mutant_is_hunted_with_its_header_hunt_after_that_hunts_baseline() -> None:
    profile = REPO / "harness" / "run" / "campaigns" / "nightly.toml"
    hunts = load_campaign(profile).hunts
    mutants = [
        _mutant("01-a", "random-faults"),
        _mutant("12-t", "transactions"),
        _mutant("14-m", "membership"),
    ]
    mutants.append(_mutant("16-b", "random-faults"))
    steps = bench.plan_steps(mutants, hunts, profile)
    assert [(step.name, step.hunt.key) for step in steps] == [
        ("baseline", "random-faults"),
        ("01-a", "random-faults"),
        ("16-b", "random-faults"),
        ("baseline", "transactions"),
        ("12-t", "transactions"),
        ("baseline", "membership"),
        ("14-m", "membership"),
    ]
    assert [step.patch for step in steps if step.name == "baseline"] == [None, None, None]
    assert steps[1].patch == Path("/m/01-a.patch")
    skipped = bench.plan_steps(mutants, hunts, profile, baseline=False)
    assert [step.name for step in skipped] == ["01-a", "16-b", "12-t", "14-m"]
    # --hunt hunts every mutant with one hunt, under one baseline.
    overridden = bench.plan_steps(mutants, hunts, profile, override="membership")
    assert {step.hunt.key for step in overridden} == {"membership"}
    assert [step.name for step in overridden] == ["baseline", "01-a", "12-t", "14-m", "16-b"]
    # --only none: the baseline alone, under the first hunt or --hunt's.
    assert [(s.name, s.hunt.key) for s in bench.plan_steps([], hunts, profile)] == [
        ("baseline", "random-faults")
    ]
    alone = bench.plan_steps([], hunts, profile, override="transactions")
    assert [(s.name, s.hunt.key) for s in alone] == [("baseline", "transactions")]
    with pytest.raises(bench.BenchError, match=r"^x\.patch: Hunt: 'nope': .* has no such \[\[hunt\]\]"):
        bench.plan_steps([bench.Mutant("x", Path("x.patch"), "x", "nope")], hunts, profile)


# ---- scratch copies --------------------------------------------------------------------------------


def _git(directory: Path, *arguments: str) -> None:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *arguments]
    subprocess.run(command, cwd=directory, check=True, capture_output=True)


def test_scratch_copy_holds_the_working_tree_as_on_disk(tmp_path: Path) -> None:
    repo, copy = tmp_path / "repo", tmp_path / "copy"
    (repo / "pkg").mkdir(parents=True)
    _write(repo, ".gitignore", "store/\n")
    _write(repo / "pkg", "edited.py", "committed\n")
    _write(repo / "pkg", "deleted.py", "committed\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _write(repo / "pkg", "edited.py", "uncommitted edit\n")
    _write(repo / "pkg", "new.py", "untracked\n")
    (repo / "pkg" / "deleted.py").unlink()
    (repo / "store").mkdir()
    _write(repo / "store", "run.json", "ignored\n")
    copy.mkdir()
    bench.make_scratch_copy(copy, repo=repo)
    assert (copy / "pkg" / "edited.py").read_text() == "uncommitted edit\n"
    assert (copy / "pkg" / "new.py").read_text() == "untracked\n"
    assert not (copy / "pkg" / "deleted.py").exists()
    assert not (copy / "store").exists()
    assert (copy / ".git").is_dir(), "git apply needs the copy to be a repository of its own"


def test_apply_patch_names_a_patch_that_does_not_apply(tmp_path: Path) -> None:
    (tmp_path / "broker_impl").mkdir()
    _write(tmp_path / "broker_impl", "x.py", "a = 3\n")
    _git(tmp_path, "init", "-q")
    patch = _write(tmp_path, "07-stale.patch", "Title: stale\n" + DIFF)
    with pytest.raises(
        bench.BenchError, match=re.escape("07-stale.patch does not apply to the working tree")
    ):
        bench.apply_patch(patch, tmp_path, check_only=True)
    _write(tmp_path / "broker_impl", "x.py", "a = 1\n")
    bench.apply_patch(patch, tmp_path)
    assert (tmp_path / "broker_impl" / "x.py").read_text() == "a = 2\n"


# ---- rows and the matrix ------------------------------------------------------------------------


def _run(run_dir: str, verdict: bool | str, anomalies: dict[str, int] | None = None) -> dict[str, Any]:
    return {"seed": 1, "run_dir": run_dir, "verdict": verdict, "anomalies": anomalies or {}, "faults": 3}


def _record(runs: list[dict[str, Any]], first: str | None, seconds: float | None) -> dict[str, Any]:
    return {
        "directory": "/store/m/hunt-1",
        "finished": True,
        "runs": runs,
        "first_invalid": first,
        "seconds_to_first_anomaly": seconds,
    }


def _results(run_dir: Path) -> dict[str, Any] | None:
    if run_dir == Path("/store/m/r2"):
        return {
            "anomalies": {
                "lost-write": {"count": 2, "expected": False, "rule": None},
                "duplicate": {"count": 1, "expected": True, "rule": "acks=1"},
            }
        }
    return None


def test_row_of_a_hunt_that_found_an_anomaly() -> None:
    runs = [_run("/store/m/r1", "unknown"), _run("/store/m/r2", False, {"lost-write": 2, "duplicate": 1})]
    row = bench.row_from_record("01-hw", "HW rule", _record(runs, "/store/m/r2", 250.0), _results)
    assert row.detected is True
    assert row.seconds_to_detection == 250.0
    assert (row.runs, row.unknown_runs) == (2, 1)
    assert row.anomalies == ("lost-write x2", "duplicate x1 (expected: acks=1)")
    assert row.run_dir == "/store/m/r2"
    assert not row.false_positive


def test_row_of_a_hunt_that_found_nothing_or_failed() -> None:
    runs = [_run("/store/m/r1", True), _run("/store/m/r2", True)]
    missed = bench.row_from_record("05-isr", "ISR rule", _record(runs, None, None), _results)
    assert (missed.detected, missed.runs, missed.anomalies) == (False, 2, ())
    assert missed.run_dir == "/store/m/hunt-1"
    failed = bench.row_from_record("06-x", "x", None, _results)
    assert failed.detected is None and failed.problem


def test_matrix_puts_the_baseline_first_and_shouts_a_false_positive() -> None:
    mutant = bench.Row("01-hw", "HW rule", True, 90.0, 3, 0, ("lost-write x2",), "/store/01/r3")
    missed = bench.Row("05-isr", "ISR rule", False, None, 9, 2, (), "/store/05/hunt")
    clean = bench.Row(bench.BASELINE, "unmutated", False, None, 8, 0, (), "/store/base/hunt")
    text = bench.format_matrix([mutant, missed, clean])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["mutant", "hunt", "detected"]
    assert lines[2].startswith("baseline") and "no (clean)" in lines[2]
    assert "01-hw" in lines[3] and "yes" in lines[3] and "1.5 min" in lines[3] and "lost-write x2" in lines[3]
    assert "05-isr" in lines[4] and "9 (2 unknown)" in lines[4]
    assert "detected 1 of 2 mutants (0 by the client-side checks alone)" in text
    assert "FALSE POSITIVE" not in text

    dirty = bench.Row(bench.BASELINE, "unmutated", True, 30.0, 1, 0, ("duplicate x1",), "/store/base/r1")
    shouted = bench.format_matrix([mutant, dirty])
    assert "YES: FALSE POSITIVE" in shouted.splitlines()[2]
    assert "!!! FALSE POSITIVE" in shouted
    assert bench.Row(bench.BASELINE, "", True, None, 1, 0, (), None).false_positive
    assert not mutant.false_positive


def test_matrix_groups_rows_by_hunt_each_under_its_baseline() -> None:
    def row(name: str, hunt: str, detected: bool = True) -> Any:
        return bench.Row(name, name, detected, 60.0, 1, 0, (), "/r", hunt=hunt)

    base = bench.BASELINE
    rows = [row("14-m", "membership"), row("01-a", "random-faults"), row(base, "membership", False)]
    rows += [row(base, "random-faults", False), row("16-b", "random-faults")]
    lines = bench.format_matrix(rows).splitlines()
    assert [line.split()[:2] for line in lines[2:7]] == [
        ["baseline", "membership"],
        ["14-m", "membership"],
        ["baseline", "random-faults"],
        ["01-a", "random-faults"],
        ["16-b", "random-faults"],
    ]
    assert "detected 3 of 3 mutants" in "\n".join(lines)


def test_matrix_json_keeps_every_row() -> None:
    row = bench.Row("01-hw", "HW rule", True, 90.0, 3, 0, ("lost-write x2",), "/r3", hunt="random-faults")
    data = bench.matrix_json([row], Path("nightly.toml"), 600.0, Path("/store"))
    assert data["hunts"] == ["random-faults"] and data["budget_seconds"] == 600.0
    assert data["rows"] == [
        {
            "mutant": "01-hw",
            "title": "HW rule",
            "detected": True,
            "seconds_to_detection": 90.0,
            "runs": 3,
            "unknown_runs": 0,
            "anomalies": ["lost-write x2"],
            "run_dir": "/r3",
            "problem": None,
            "client_detected": None,
            "client_seconds": None,
            "hunt": "random-faults",
            "false_positive": False,
        }
    ]


def test_a_run_only_the_invariant_checks_flagged_is_a_detection_but_not_a_client_side_one() -> None:
    """The hunt goes on past a run only the white-box checks flagged (it ends at a client-side
    find): the row gives both times, the first from the run times that led to it."""
    runs = [
        {**_run("/store/m/r1", True), "seconds": 40.0},
        {**_run("/store/m/r2", False, {"truncated-committed": 1}), "seconds": 45.0},
        {**_run("/store/m/r3", False, {"lost-write": 2, "truncated-committed": 2}), "seconds": 50.0},
    ]
    row = bench.row_from_record("04-hw", "HW rule", _record(runs, "/store/m/r3", 140.0), _results)
    assert (row.detected, row.seconds_to_detection, row.run_dir) == (True, 85.0, "/store/m/r2")
    assert row.anomalies == ("truncated-committed x1",)
    assert (row.client_detected, row.client_seconds) == (True, 140.0)
    white_box_only = bench.row_from_record("08-x", "x", _record(runs[:2], None, None), _results)
    assert (white_box_only.detected, white_box_only.client_detected) == (True, False)
    cells = bench.format_matrix([row, white_box_only]).splitlines()
    assert "1.4 min" in cells[2] and "2.3 min" in cells[2]
    assert "not found" in cells[3]
    assert "detected 2 of 2 mutants (1 by the client-side checks alone)" in "\n".join(cells)
    assert set(bench.CLIENT_SIDE_CHECKS) & {"truncated-committed", "incomplete-leader"} == set()
    assert "lost-write" in bench.CLIENT_SIDE_CHECKS
