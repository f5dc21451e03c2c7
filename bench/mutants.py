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

The hunt is the first ``[[hunt]]`` table of the ``--profile`` campaign file, or the one ``--hunt``
names (:func:`harness.run.campaign.load_campaign`; the nightly profile has one hunt per fault surface,
and a mutant is hunted with the one that reaches it -- ``bench/mutants/README.md``): its test spec (settings, workload, fault mix) as
planned there, under the bench's ``--budget`` instead of the table's own.  A hunt stops at its
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
    """One patch of ``bench/mutants``: its file name without ``.patch``, path and header title."""

    name: str
    path: Path
    title: str


# ---- patches ----------------------------------------------------------------------------------


def read_title(text: str) -> str | None:
    """The ``Title:`` of a patch's header (the lines before its first ``diff --git``, which
    ``git apply`` ignores), or None when the header names none."""
    for line in text.splitlines():
        if line.startswith(DIFF_START):
            break
        if line.startswith(TITLE_FIELD) and line[len(TITLE_FIELD) :].strip():
            return line[len(TITLE_FIELD) :].strip()
    return None


def discover(directory: Path = MUTANT_DIRECTORY) -> list[Mutant]:
    """Every ``*.patch`` in ``directory``, in file-name order (``NN-`` prefixes set the order).

    A patch without a title or without any ``diff --git`` section is an error, not skipped: a
    bench that silently ran fewer mutants would report a better hunt than it measured.
    """
    mutants = []
    for path in sorted(directory.glob("*.patch")):
        text = path.read_text(encoding="utf-8")
        title = read_title(text)
        if title is None:
            raise BenchError(f"{path}: the header names no title (a {TITLE_FIELD!r} line before the diff)")
        if not any(line.startswith(DIFF_START) for line in text.splitlines()):
            raise BenchError(f"{path}: no {DIFF_START.strip()!r} section: not a git patch")
        mutants.append(Mutant(path.stem, path, title))
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


def pick_hunt(hunts: Sequence[PlannedHunt], name: str, profile: Path) -> PlannedHunt:
    """The hunt named ``name`` (its ``name`` key), or the first when ``name`` is empty; a name the
    profile lacks is a one-line error listing the ones it has."""
    if not name:
        return hunts[0]
    for hunt in hunts:
        if hunt.key == name:
            return hunt
    raise BenchError(
        f"--hunt {name!r}: {profile} has no such [[hunt]] (it has: {', '.join(h.key for h in hunts)})"
    )


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
        help="the profile's [[hunt]] of this name (default: its first)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the matrix to FILE as JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    try:
        budget = parse_duration(args.budget)
        campaign = load_campaign(args.profile)
        if not campaign.hunts:
            raise BenchError(f"{args.profile}: no [[hunt]] table; the bench hunts with the first one")
        planned = pick_hunt(campaign.hunts, args.hunt, args.profile)
        mutants = select(discover(), args.only)
        with tempfile.TemporaryDirectory(prefix="tidemark-mutant-check-") as check:
            make_scratch_copy(Path(check))
            for mutant in mutants:
                apply_patch(mutant.path, Path(check), check_only=True)
    except (BenchError, CampaignError, ValueError, subprocess.CalledProcessError) as error:
        print(f"mutants: {error}", file=sys.stderr)
        return 2
    store = (args.store or Path(tempfile.mkdtemp(prefix="tidemark-mutants-"))).resolve()
    spec = planned.spec
    print(
        f"mutants: hunt {planned.key!r} of {args.profile} ({', '.join(spec.nemesis.faults)}; settings "
        f"{spec.settings or '{}'}), {budget / 60:g} min each; runs under {store}",
        file=sys.stderr,
    )
    plan: list[tuple[str, str, Path | None]] = (
        [] if args.skip_baseline else [(BASELINE, "the unmutated broker", None)]
    )
    plan += [(mutant.name, mutant.title, mutant.path) for mutant in mutants]
    rows: list[Row] = []
    interrupted = False
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        for name, title, patch in plan:
            print(f"mutants: hunting on {name}: {title}", file=sys.stderr, flush=True)
            try:
                record = run_hunt(spec, patch, store / name, budget)
            except (BenchError, OSError, subprocess.CalledProcessError) as error:
                # The tree changed under the bench (a patch stopped applying) or a copy failed:
                # this row has no answer, the others still do.
                rows.append(Row(name, title, None, None, 0, 0, (), None, str(error)))
                continue
            rows.append(row_from_record(name, title, record))
    except KeyboardInterrupt:
        interrupted = True
    print(format_matrix(rows))
    if interrupted:
        print(f"(interrupted after {len(rows)} of {len(plan)} hunts)")
    if args.json:
        args.json.write_text(
            json.dumps(matrix_json(rows, args.profile, planned.key, budget, store), indent=1),
            encoding="utf-8",
        )
    if interrupted:
        return 130
    return 1 if any(row.false_positive for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
