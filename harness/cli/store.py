"""``tidemark store``: the packed store, for checking thousands of small runs at once.

* ``tidemark store pack RUN_DIR_OR_GLOB... --out PACKED_DIR [--skip-bad-lines]`` -- load every
  run named (run directories, directories of runs, globs: as ``tidemark check``; JSON lines and
  dumps converted where needed) and write their tables into ``PACKED_DIR``: a few Parquet files
  per table, bucketed by run id, and the index ``runs.parquet`` (:mod:`testbed.record.packed`).
  The packed rows are verified against every run directory before the index is written; the run
  directories are never modified.
* ``tidemark store verify PACKED_DIR`` -- verify a packed store against its run directories again
  (a run directory changed since it was packed is named; one moved away is named with the path
  the index expects it at).

``tidemark check PACKED_DIR`` then checks the packed runs, writing each ``results.json`` to its
run directory.  Bad arguments, bad input, runs that cannot be packed and a store that does not
match its runs are one line on stderr naming what and where, exit code 254.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from checker.api import load_runs, resolve_runs
from checker.evidence import InputError
from checker.pack import PackError, pack_runs, remove_partial, verify_pack
from checker.packed_runs import read_index, run_dir_of
from harness.cli.errors import UsageError
from testbed.record.packed import is_packed
from testbed.record.rundir import RunDirectoryError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="store_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    pack = sub.add_parser("pack", help="pack many runs' tables into a few Parquet files for batch checks")
    pack.add_argument(
        "paths", nargs="+", metavar="RUN_DIR_OR_GLOB", help="run directories, directories of runs, or globs"
    )
    pack.add_argument(
        "--out", required=True, metavar="PACKED_DIR", help="the packed store to write (new or empty)"
    )
    pack.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip and count bad history.jsonl lines (as tidemark check does)",
    )
    verify = sub.add_parser("verify", help="verify a packed store against its run directories")
    verify.add_argument("store", metavar="PACKED_DIR")


def run(args: argparse.Namespace) -> int:
    try:
        if args.store_command == "pack":
            return _pack(args)
        store = Path(args.store)
        if not is_packed(store):
            raise UsageError(f"{store}: not a packed store (no runs.parquet)")
        started = time.perf_counter()
        _check_run_directories(store)
        runs = verify_pack(store)
        print(f"{store}: {runs} run(s) match their run directories ({time.perf_counter() - started:.1f} s)")
        return 0
    except (InputError, PackError, RunDirectoryError) as error:
        raise UsageError(str(error)) from None


def _check_run_directories(store: Path) -> None:
    """A :class:`UsageError` when a run directory the index names is not where the index expects
    it -- moved or removed since packing --, naming where it was expected and how many more are
    missing, before the table-by-table comparison would call it a missing file."""
    missing = [run_dir for row in read_index(store) if not (run_dir := run_dir_of(row, store)).is_dir()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UsageError(
            f"{store}: a run directory moved or was removed since packing: the index expects it at"
            f" {missing[0]}{more}; move it back or pack again"
        )


def _pack(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: --out exists and is not an empty directory")
    started = time.perf_counter()
    runs = load_runs(resolve_runs(args.paths), skip_bad_lines=args.skip_bad_lines)
    loaded = time.perf_counter()
    try:
        summary = pack_runs(runs, out)
    except BaseException:
        remove_partial(out)
        raise
    rows = ", ".join(f"{table} {count:,}" for table, count in summary.rows.items())
    print(
        f"{out}: {summary.runs} run(s) in {summary.buckets} bucket(s); rows: {rows}"
        f" (loaded in {loaded - started:.1f} s, packed and verified in {time.perf_counter() - loaded:.1f} s)"
    )
    return 0
