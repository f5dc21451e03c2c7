"""Mutation bench: does a hunt with the nightly profile find realistic replication bugs?

    .venv/bin/python bench/mutants.py [--budget 10m] [--only 01,09-producer-state-reset-on-leader-change]
                                      [--skip-baseline] [--store DIR] [--json FILE]
                                      [--profile harness/run/campaigns/nightly.toml] [--hunt NAME]

Needs Docker (every hunt run starts a cluster).  ``bench/mutants/NN-name.patch`` are realistic
replication bugs, each a few lines changed in ``broker_impl`` (a wrong HW rule, an ISR rule, an
epoch-lookup off-by-one, a skipped fsync, ...; ``bench/mutants/README.md`` lists them with the
fault that should expose each).  For the unmutated broker first (the *baseline*) and then for
every patch in turn, the bench

1. copies the working tree -- every file git tracks or would track (``git ls-files --cached
   --others --exclude-standard``), as it is on disk, so uncommitted edits are included -- to a
   scratch directory, and ``git apply``-s the patch there (the original tree is never written);
2. runs a hunt (:func:`harness.run.hunt.hunt`) **from the scratch copy**, in a child Python process
   whose working directory and ``PYTHONPATH`` are the copy: the node image is built from the
   copy's ``broker_impl`` (its tag is a hash of that content, so every mutant gets its own image)
   and the checker, nemesis and workload are the copy's too;
3. removes the scratch copy (also after an error or Ctrl-C, once the processes it started have
   stopped).

Each mutant is hunted with the ``[[hunt]]`` table of the ``--profile`` campaign file that its patch's
``Hunt:`` header names (:func:`harness.run.campaign.load_campaign`; the nightly profile has one hunt
per fault surface, and the patch is the one place that says which reaches it), or with the one
``--hunt`` names for all of them: its test spec (settings, workload, fault mix) as planned there,
under the bench's ``--budget`` instead of the table's own.  The unmutated broker is hunted once per
hunt the selected mutants use, before them (``--only none``: the first hunt, or ``--hunt``'s), so
every detection has a clean baseline under the same mix beside it.  A hunt stops at its
first run that a client-side check flagged (:data:`CLIENT_SIDE_CHECKS`); a run before it that
only the white-box invariant checks (the brokers' event logs) flagged counts as a detection too,
so each row gives the time to detection with the invariant checks and without them.

What it prints is the **detection matrix**: per mutant, whether the hunt found an anomaly, the time
from the hunt's start to the end of its first invalid run, the runs it took, the anomalies of that
run (annotated ``expected: RULE`` when the profile's configuration permits them, see
:mod:`checker.expectations`), and that run's directory.  The baseline must find nothing: an anomaly
there is a *false positive* of the harness (or a profile that permits loss), printed loudly, and it
makes every detection below it meaningless.  The figures are measurements, not assertions: a
mutant that survives its budget is a finding about the hunt, not a failure of the bench.

Run directories stay under ``--store`` (default: a new directory in ``$TMPDIR``, printed at the
start), one sub-directory per mutant.  Exit status: 0 when the matrix is complete and the baseline
clean (or skipped), 1 when the baseline found an anomaly, 2 when the bench could not start (a patch
that does not apply, a profile without a hunt), 130 after Ctrl-C (the matrix so far is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The repository first: bench/checker.py would otherwise shadow the checker package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checker.definitions import ALL_CHECKS, INVARIANT_CHECKS
from harness.run.campaign import CampaignError, PlannedHunt, load_campaign
from harness.run.hunt import parse_duration
from harness.run.spec import TestSpec

sys.path.insert(1, str(Path(__file__).resolve().parent))  # the bench's own modules, after the repository
from mutant_matrix import BASELINE, Row, format_matrix, matrix_json, row_from_record

REPO = Path(__file__).resolve().parent.parent
MUTANT_DIRECTORY = REPO / "bench" / "mutants"
DEFAULT_PROFILE = REPO / "harness" / "run" / "campaigns" / "nightly.toml"
TITLE_FIELD = "Title:"
HUNT_FIELD = "Hunt:"
CLIENT_SIDE_CHECKS = tuple(check for check in ALL_CHECKS if check not in INVARIANT_CHECKS)
"""What the checker finds without the brokers' event logs.  A hunt ends only at a run that
reports one of these, so a run that only the white-box invariant checks flagged is recorded and
passed: one hunt gives the time to detection with the invariant checks (its first invalid run)
and without them (the run that ended it)."""
DIFF_START = "diff --git "
STRAGGLER_GRACE_SECONDS = 60.0
"""How long a run left behind by an interrupted hunt gets to tear its cluster down after SIGTERM
(the hunt gives a timed-out run as long) before SIGKILL."""

CHILD_PROGRAM = """\
import json, sys
from pathlib import Path

from testbed.cluster.image import source_root
from harness.run.hunt import hunt
from harness.run.spec import TestSpec

spec_file, store, budget, out, stop_on = sys.argv[1:6]
here = Path.cwd().resolve()
if source_root().resolve() != here:
    sys.exit(f"mutants bench: the harness was imported from {source_root()}, not the scratch copy {here}")
spec = TestSpec.from_dict(json.loads(Path(spec_file).read_text(encoding="utf-8")))
result = hunt(spec, Path(store), float(budget), stop_on=frozenset(filter(None, stop_on.split(","))))
record = {"directory": str(result.directory), **result.to_dict()}
Path(out).write_text(json.dumps(record), encoding="utf-8")
"""
"""The hunt, as run by ``python -c`` inside a scratch copy: ``SPEC_JSON STORE BUDGET_SECONDS OUT_JSON
STOP_ON`` (comma-separated anomaly names: only a run reporting one of them ends the hunt).

It refuses to hunt when the image would not be built from the copy it runs in (an installed
``harness`` shadowing the copy's would test the unmutated broker and report a miss).  It writes
the hunt's ``hunt.json`` record plus the hunt's directory to ``OUT_JSON``."""


class BenchError(Exception):
    """The bench cannot run as asked; the message says why (and names the patch or file)."""


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One patch of ``bench/mutants``: its file name without ``.patch``, path, header title, and the
    name of the profile's ``[[hunt]]`` that reaches it (its ``Hunt:`` header)."""

    name: str
    path: Path
    title: str
    hunt: str


# ---- patches ----------------------------------------------------------------------------------


def read_field(text: str, field: str) -> str | None:
    """The one-line value of ``field`` (``"Title:"``, ``"Hunt:"``) in a patch's header (the lines
    before its first ``diff --git``, which ``git apply`` ignores), or None when the header has no
    such line with a value."""
    for line in text.splitlines():
        if line.startswith(DIFF_START):
            break
        if line.startswith(field) and line[len(field) :].strip():
            return line[len(field) :].strip()
    return None


def read_title(text: str) -> str | None:
    """The ``Title:`` of a patch's header, or None when the header names none."""
    return read_field(text, TITLE_FIELD)


def discover(directory: Path = MUTANT_DIRECTORY) -> list[Mutant]:
    """Every ``*.patch`` in ``directory``, in file-name order (``NN-`` prefixes set the order).

    A patch without a title, without a hunt or without any ``diff --git`` section is an error, not
    skipped: a bench that silently ran fewer mutants, or hunted one with a mix that cannot reach it,
    would report a different hunt than it measured.
    """
    mutants = []
    for path in sorted(directory.glob("*.patch")):
        text = path.read_text(encoding="utf-8")
        fields = {field: read_field(text, field) for field in (TITLE_FIELD, HUNT_FIELD)}
        for field, value in fields.items():
            if value is None:
                raise BenchError(f"{path}: the header has no {field!r} line before the diff")
        if not any(line.startswith(DIFF_START) for line in text.splitlines()):
            raise BenchError(f"{path}: no {DIFF_START.strip()!r} section: not a git patch")
        mutants.append(Mutant(path.stem, path, str(fields[TITLE_FIELD]), str(fields[HUNT_FIELD])))
    if not mutants:
        raise BenchError(f"{directory}: no *.patch files")
    return mutants


def select(mutants: Sequence[Mutant], only: str) -> list[Mutant]:
    """The mutants ``--only`` names (comma-separated; each a file name without ``.patch``, its
    ``NN`` number, or its name without the number), in their file order; all when ``only`` is
    empty; none for ``none`` (the baseline alone).  An unknown name is an error listing the known
    ones."""
    if only.strip() == "none":
        return []
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    if not wanted:
        return list(mutants)

    def names(mutant: Mutant) -> set[str]:
        number, _, rest = mutant.name.partition("-")
        return {mutant.name, number, rest}

    unknown = [name for name in wanted if not any(name in names(mutant) for mutant in mutants)]
    if unknown:
        known = ", ".join(mutant.name for mutant in mutants)
        raise BenchError(f"--only: no mutant {', '.join(unknown)} (known: {known})")
    return [mutant for mutant in mutants if any(name in names(mutant) for name in wanted)]


# ---- scratch copies ---------------------------------------------------------------------------


def source_files(repo: Path = REPO) -> list[str]:
    """The working tree's files as git sees them: tracked ones (minus those deleted on disk) and
    untracked ones not ignored, so a colleague's new, uncommitted module comes along with the
    uncommitted edits that import it; ``.venv``, stores and caches are ignored and stay behind."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8", "surrogateescape")
    names = sorted({name for name in listing.split("\0") if name})
    return [name for name in names if (repo / name).is_file() or (repo / name).is_symlink()]


def make_scratch_copy(destination: Path, repo: Path = REPO) -> None:
    """Copy :func:`source_files` of ``repo`` into ``destination`` (contents as on disk, modes and
    symlinks kept) and make it a git repository of its own, so that ``git apply`` there resolves
    paths against the copy even when ``destination`` lies inside another repository."""
    for name in source_files(repo):
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target, follow_symlinks=False)
    subprocess.run(["git", "init", "-q"], cwd=destination, check=True)


def apply_patch(patch: Path, tree: Path, *, check_only: bool = False) -> None:
    """``git apply`` ``patch`` inside ``tree`` (all hunks or none); BenchError naming the patch and
    git's reason when it does not apply."""
    command = ["git", "apply", *(["--check"] if check_only else []), str(patch.resolve())]
    outcome = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    if outcome.returncode != 0:
        reason = outcome.stderr.strip() or f"git apply exited with {outcome.returncode}"
        raise BenchError(f"{patch.name} does not apply to the working tree: {reason}")


def processes_in(directory: Path) -> list[int]:
    """Our processes (same user) whose working directory is ``directory`` or below it: what a
    hunt started from a scratch copy and left running (Linux ``/proc``; elsewhere none found)."""
    found = []
    directory = directory.resolve()
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd == directory or directory in cwd.parents:
            found.append(int(entry.name))
    return found


def stop_stragglers(directory: Path, grace: float = STRAGGLER_GRACE_SECONDS) -> None:
    """SIGTERM what still runs from ``directory`` -- after Ctrl-C a hunt's run worker, which lives
    in a session of its own, outlives the hunt; on SIGTERM it tears its cluster down -- then
    SIGKILL what is left after ``grace`` seconds.  Only then may the copy be removed."""
    stragglers = processes_in(directory)
    if not stragglers:
        return
    print(f"mutants: stopping {len(stragglers)} process(es) still running from {directory}", file=sys.stderr)
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        for pid in stragglers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            stragglers = processes_in(directory)
            if not stragglers:
                return
            time.sleep(0.5)


# ---- one hunt ---------------------------------------------------------------------------------


def run_hunt(
    spec: TestSpec,
    patch: Path | None,
    store: Path,
    budget_seconds: float,
    scratch_parent: Path | None = None,
) -> dict[str, Any] | None:
    """Hunt with ``spec`` on a scratch copy of the working tree with ``patch`` applied (None: the
    unmutated tree); return the hunt's record (``hunt.json`` plus ``directory``), or None when the
    hunt process failed (its output went to this process's stderr).  The copy is removed before
    this returns, also after Ctrl-C (KeyboardInterrupt is re-raised once the child has stopped)."""
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-mutant-", dir=scratch_parent))
    try:
        make_scratch_copy(scratch)
        if patch is not None:
            apply_patch(patch, scratch)
        store.mkdir(parents=True, exist_ok=True)
        spec_file = scratch / "bench-mutant-spec.json"
        out_file = scratch / "bench-mutant-hunt.json"
        spec_file.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(scratch), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        command = [
            sys.executable,
            "-c",
            CHILD_PROGRAM,
            str(spec_file),
            str(store.resolve()),
            repr(budget_seconds),
            str(out_file),
            ",".join(CLIENT_SIDE_CHECKS),
        ]
        child = subprocess.Popen(command, cwd=scratch, env=environment)
        try:
            code = child.wait()
        except KeyboardInterrupt:
            _stop_child(child)
            raise
        if code != 0 or not out_file.exists():
            return None
        record: dict[str, Any] = json.loads(out_file.read_text(encoding="utf-8"))
        return record
    finally:
        stop_stragglers(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    """Stop the hunt process after this one was interrupted: a terminal's Ctrl-C reached it too
    (same process group), a SIGTERM sent to the bench alone did not, so it gets a SIGINT of its
    own if it is still running after a moment, then SIGTERM if it ignores that."""
    for signum, grace in ((None, 2.0), (signal.SIGINT, 30.0), (signal.SIGTERM, 30.0)):
        if signum is not None and child.poll() is None:
            child.send_signal(signum)
        try:
            child.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
    child.kill()
    child.wait()


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM handler: stop like Ctrl-C, so scratch copies are removed and the matrix printed."""
    raise KeyboardInterrupt


# ---- main ---------------------------------------------------------------------------------------


def pick_hunt(hunts: Sequence[PlannedHunt], name: str, profile: Path, where: str = "--hunt") -> PlannedHunt:
    """The hunt named ``name`` (its ``name`` key), or the first when ``name`` is empty; a name the
    profile lacks is a one-line error naming ``where`` it was asked for and the hunts it has."""
    if not name:
        return hunts[0]
    for hunt in hunts:
        if hunt.key == name:
            return hunt
    raise BenchError(
        f"{where} {name!r}: {profile} has no such [[hunt]] (it has: {', '.join(h.key for h in hunts)})"
    )


@dataclasses.dataclass(frozen=True)
class PlannedStep:
    """One hunt of the bench: a mutant (``patch``) or the baseline (no patch) under ``hunt``."""

    name: str
    title: str
    patch: Path | None
    hunt: PlannedHunt


def plan_steps(
    mutants: Sequence[Mutant],
    hunts: Sequence[PlannedHunt],
    profile: Path,
    *,
    override: str = "",
    baseline: bool = True,
) -> list[PlannedStep]:
    """The bench's hunts in order: per hunt the mutants use (in the profile's order), the baseline
    under it first, then its mutants in file order.  Each mutant gets its ``Hunt:`` header's hunt,
    or ``override``'s when given; with no mutant, the baseline alone under ``override``'s hunt or
    the profile's first.  A hunt the profile lacks is a BenchError naming the patch."""
    if override:
        chosen = pick_hunt(hunts, override, profile)
        assigned = [(mutant, chosen) for mutant in mutants]
    else:
        assigned = [
            (mutant, pick_hunt(hunts, mutant.hunt, profile, where=f"{mutant.path.name}: Hunt:"))
            for mutant in mutants
        ]
    used = {hunt.key for _, hunt in assigned} or {pick_hunt(hunts, override, profile).key}
    steps = []
    for hunt in (hunt for hunt in hunts if hunt.key in used):
        if baseline:
            steps.append(PlannedStep(BASELINE, "the unmutated broker", None, hunt))
        steps += [
            PlannedStep(mutant.name, mutant.title, mutant.path, hunt)
            for mutant, its_hunt in assigned
            if its_hunt.key == hunt.key
        ]
    return steps


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/mutants.py",
        description="Detection matrix of the mutants in bench/mutants/ (needs Docker).",
    )
    parser.add_argument("--budget", default="10m", help="hunting time per mutant and for the baseline (10m)")
    parser.add_argument(
        "--only",
        default="",
        metavar="NAME[,NAME]",
        help="these mutants only (file, NN or name); none: the baseline alone",
    )
    parser.add_argument("--skip-baseline", action="store_true", help="do not hunt on the unmutated broker")
    parser.add_argument(
        "--store", type=Path, help="where runs are stored (default: a new temporary directory)"
    )
    parser.add_argument(
        "--profile", type=Path, default=DEFAULT_PROFILE, help="campaign file whose [[hunt]] is the hunt"
    )
    parser.add_argument(
        "--hunt",
        default="",
        metavar="NAME",
        help="hunt every mutant with the profile's [[hunt]] of this name (default: each patch's Hunt: header)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the matrix to FILE as JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    try:
        budget = parse_duration(args.budget)
        campaign = load_campaign(args.profile)
        if not campaign.hunts:
            raise BenchError(f"{args.profile}: no [[hunt]] table; the bench hunts with its hunts")
        mutants = select(discover(), args.only)
        plan = plan_steps(
            mutants, campaign.hunts, args.profile, override=args.hunt, baseline=not args.skip_baseline
        )
        with tempfile.TemporaryDirectory(prefix="tidemark-mutant-check-") as check:
            make_scratch_copy(Path(check))
            for mutant in mutants:
                apply_patch(mutant.path, Path(check), check_only=True)
    except (BenchError, CampaignError, ValueError, subprocess.CalledProcessError) as error:
        print(f"mutants: {error}", file=sys.stderr)
        return 2
    store = (args.store or Path(tempfile.mkdtemp(prefix="tidemark-mutants-"))).resolve()
    hunts = list({step.hunt.key: step.hunt for step in plan}.values())
    for hunt in hunts:
        print(
            f"mutants: hunt {hunt.key!r} of {args.profile} ({', '.join(hunt.spec.nemesis.faults)}; "
            f"settings {hunt.spec.settings or '{}'})",
            file=sys.stderr,
        )
    print(f"mutants: {len(plan)} hunts of {budget / 60:g} min each; runs under {store}", file=sys.stderr)
    rows: list[Row] = []
    interrupted = False
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        for step in plan:
            name, title, key = step.name, step.title, step.hunt.key
            print(f"mutants: hunting on {name} with {key!r}: {title}", file=sys.stderr, flush=True)
            try:
                record = run_hunt(step.hunt.spec, step.patch, store / key / name, budget)
            except (BenchError, OSError, subprocess.CalledProcessError) as error:
                # The tree changed under the bench (a patch stopped applying) or a copy failed:
                # this row has no answer, the others still do.
                rows.append(Row(name, title, None, None, 0, 0, (), None, str(error), hunt=key))
                continue
            rows.append(row_from_record(name, title, record, hunt=key))
    except KeyboardInterrupt:
        interrupted = True
    print(format_matrix(rows))
    if interrupted:
        print(f"(interrupted after {len(rows)} of {len(plan)} hunts)")
    if args.json:
        args.json.write_text(
            json.dumps(matrix_json(rows, args.profile, budget, store), indent=1),
            encoding="utf-8",
        )
    if interrupted:
        return 130
    return 1 if any(row.false_positive for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
