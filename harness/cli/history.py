"""``tidemark history``: tools for history files.

* ``tidemark history convert RUN_DIR|FILE [--skip-bad-lines] [-o OUT]`` -- ``history.jsonl``
  to ``history.parquet`` (in the run directory, or beside the file).
* ``tidemark history replicas RUN_DIR [--skip-bad-dumps]`` -- rebuild ``replicas.parquet``
  and ``replica_partitions.parquet`` from ``nodes/<node>/dump.jsonl``.

Bad input (a garbage or torn line, a wrong schema version, a missing file) is one line on
stderr naming file and line, exit code 254.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.errors import UsageError
from testbed.record.history import HistoryFormatError, convert_history
from testbed.record.replicas import build_replicas
from testbed.record.rundir import REPLICA_PARTITIONS_FILE, REPLICAS_FILE, RunDir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="history_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    convert = sub.add_parser("convert", help="convert history.jsonl to history.parquet")
    convert.add_argument("path", metavar="RUN_DIR|FILE", help="a run directory or a history.jsonl file")
    convert.add_argument(
        "-o", "--output", metavar="FILE", help="Parquet file to write (default: beside the input)"
    )
    convert.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip and count bad lines (a run with any line skipped can then not be judged valid)",
    )
    replicas = sub.add_parser("replicas", help="build replicas.parquet from nodes/<node>/dump.jsonl")
    replicas.add_argument("run_dir", metavar="RUN_DIR")
    replicas.add_argument(
        "--skip-bad-dumps", action="store_true", help="count a damaged dump as a missing node"
    )


def _history_paths(path: Path, output: str | None) -> tuple[Path, Path]:
    source = RunDir(path).history_jsonl if path.is_dir() else path
    if not source.is_file():
        raise UsageError(f"{source}: no such history file")
    target = Path(output) if output else source.with_suffix(".parquet")
    if not target.parent.is_dir():
        raise UsageError(f"-o {target}: no such directory {target.parent}")
    return source, target


def run(args: argparse.Namespace) -> int:
    try:
        if args.history_command == "convert":
            source, target = _history_paths(Path(args.path), args.output)
            summary = convert_history(source, target, skip_bad_lines=args.skip_bad_lines)
            skipped = f", skipped {len(summary.skipped)} bad line(s)" if summary.skipped else ""
            print(f"{summary.target}: {summary.ops} ops, {summary.rows} rows{skipped}")
            for line in summary.skipped[:10]:
                print(f"  skipped {source}:{line.line}: {line.reason}")
            return 0
        run_dir = Path(args.run_dir)
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir}: no such run directory")
        if not RunDir(run_dir).spec_file.is_file():
            # a directory that is not a run gets no Parquet files written into it
            raise UsageError(f"{run_dir}: not a run directory (no {RunDir(run_dir).spec_file.name})")
        built = build_replicas(run_dir, skip_bad_dumps=args.skip_bad_dumps)
        print(
            f"{run_dir / REPLICAS_FILE}: {built.records} records; {run_dir / REPLICA_PARTITIONS_FILE}: {built.partitions} partitions"
        )
        for node, reason in sorted(built.missing_nodes.items()):
            print(f"  node {node}: {reason} (replica evidence incomplete)")
        return 0
    except HistoryFormatError as error:
        raise UsageError(str(error)) from None
