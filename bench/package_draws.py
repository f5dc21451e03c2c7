"""Per fault package: how often a hunt drew it, and how often it ran its whole choreography.

    .venv/bin/python -m bench.package_draws STORE [STORE ...] [--json FILE]

Reads every ``history.jsonl`` under the given directories (hunt stores, e.g. ``bench/mutants.py``'s
``--store``, a campaign's ``runs/``) and pairs each ``package`` op with its completion (the
nemesis is one process and runs one package at a time: an invoke's completion is the next
``package`` completion of the same process).  A package ``ok`` ran every step; ``info`` stopped
at a step (a wait timed out, a role had no node) or was cut by the run's end -- counted apart,
since a cut says nothing of whether the choreography works; an invoke with no completion (the
run was killed) is ``open``.  The first words of each stop's reason are tallied, so "timed out
after 20 s waiting for leader-is ..." shows as one line per package however many times it
happened.  An ``ok`` whose value lists ``unmet`` waits (``required = false``: the broker refused
what the package waited for last, e.g. KAFKA-7128's joiner elected) is a completion, counted apart.

Why a bench and not a test: whether a package completes depends on timing under the settings it is
hunted with (issue 35: in 16 nightly runs ``stale-leader-lagging-joiner`` ended ``info`` in all 8
draws) -- a measurement of a hunt, printed beside the draws so a share is read against its count.
A history with a bad line is reported on one line (file:line) and left out, never half-read.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

# The repository first: bench/checker.py would otherwise shadow the checker package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nemesis.package_run import PACKAGE_OP
from testbed.record.history_lines import HistoryFormatError, read_history
from testbed.record.ops import Op

RUN_END = "the run ended before the package did"
"""The reason :func:`nemesis.package_run.run_package` gives a package cut by the run's end."""
REASON_WORDS = 10
"""How many words of a stop's reason make its tally key (the rest names nodes and offsets)."""


@dataclasses.dataclass
class Tally:
    """One package's draws and outcomes over every history read."""

    draws: int = 0
    completed: int = 0
    unmet: int = 0
    """Completed with a wait of ``required = false`` unmet: the system refused what the package
    waited for last (an election it may rightly refuse), counted among the completions."""
    stopped: int = 0
    cut_by_run_end: int = 0
    open: int = 0
    reasons: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    @property
    def completion_share(self) -> float | None:
        """Completed among the draws that had the chance to (not cut by the run's end, not open)."""
        judged = self.completed + self.stopped
        return None if judged == 0 else self.completed / judged


def reason_key(error: object) -> str:
    """The first :data:`REASON_WORDS` words of a stop's reason after the ``fault package NAME:``
    prefix the scenario runner puts first (``step 6: timed out after 20 s waiting for ...``),
    node names folded."""
    text = re.sub(r"^fault package [\w-]+: ", "", str(error))
    return re.sub(r"\b[nN]\d+\b", "<node>", " ".join(text.split()[:REASON_WORDS]))


def tally_history(ops: Iterable[Op], tallies: dict[str, Tally]) -> None:
    """Add one history's package ops to ``tallies`` (package name -> its tally)."""
    pending: dict[object, str] = {}
    for op in ops:
        if op.f != PACKAGE_OP:
            continue
        name = str(op.value.get("package")) if isinstance(op.value, dict) else "?"
        if op.type == "invoke":
            pending[op.process] = name
            tallies.setdefault(name, Tally()).draws += 1
            continue
        pending.pop(op.process, None)
        tally = tallies.setdefault(name, Tally())
        if op.type == "ok":
            tally.completed += 1
            if isinstance(op.value, dict) and op.value.get("unmet"):
                tally.unmet += 1
        elif op.error == RUN_END:
            tally.cut_by_run_end += 1
        else:
            tally.stopped += 1
            tally.reasons[reason_key(op.error)] += 1
    for name in pending.values():
        tallies[name].open += 1


def histories(stores: Sequence[Path]) -> list[Path]:
    found: list[Path] = []
    for store in stores:
        found.extend(sorted(store.rglob("history.jsonl")))
    return found


def tally_stores(stores: Sequence[Path]) -> tuple[dict[str, Tally], int, list[str]]:
    """(tallies, histories read, one line per history left out)."""
    tallies: dict[str, Tally] = {}
    read = 0
    problems: list[str] = []
    for path in histories(stores):
        try:
            ops, _ = read_history(path)
        except HistoryFormatError as error:
            problems.append(f"{path}: left out: {error}")
            continue
        tally_history(ops, tallies)
        read += 1
    return tallies, read, problems


def table(tallies: dict[str, Tally]) -> list[str]:
    lines = [
        f"{'package':<36} {'draws':>5} {'ok':>4} {'unmet':>5} {'stopped':>7} {'cut':>4} {'open':>4} {'ok share':>8}  why stopped",
    ]
    for name in sorted(tallies, key=lambda n: (-tallies[n].draws, n)):
        tally = tallies[name]
        share = tally.completion_share
        shown = "-" if share is None else f"{share:.0%}"
        why = "; ".join(f"{count}x {reason}" for reason, count in tally.reasons.most_common(3))
        lines.append(
            f"{name:<36} {tally.draws:>5} {tally.completed:>4} {tally.unmet:>5} {tally.stopped:>7} "
            f"{tally.cut_by_run_end:>4} {tally.open:>4} {shown:>8}  {why}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", nargs="+", type=Path, metavar="STORE", help="directories holding runs")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the tallies to FILE")
    args = parser.parse_args(argv)
    missing = [str(store) for store in args.stores if not store.is_dir()]
    if missing:
        parser.error(f"no such directory: {', '.join(missing)}")
    tallies, read, problems = tally_stores(args.stores)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{read} histories read, {sum(t.draws for t in tallies.values())} package draws")
    print("\n".join(table(tallies)))
    if args.json:
        data = {name: {**dataclasses.asdict(t), "reasons": dict(t.reasons)} for name, t in tallies.items()}
        args.json.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
