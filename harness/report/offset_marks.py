"""Which records the offset plot marks: every lost and divergent record the checker found.

The checker owns the fact (:mod:`checker.records`: ``anomaly_records.parquet`` beside
``results.json``); the report reads it and never decides loss again.  A run checked before that
file existed has only ``results.json``'s examples (at most ``--examples`` of each kind): the marks
then come from those, and :attr:`Marks.complete` is false so the page can say that only examples
are marked and how to get every one (check the run again).

What is marked where (:mod:`harness.report.offsets` draws it): a lost-write at its value's
acknowledged send, a lost-read at each poll that returned its value, a replica-divergence
position as a band across its partition's panel at that offset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from checker.definitions import LOST_READ, LOST_WRITE, REPLICA_DIVERGENCE
from checker.records import read_records

MARKED_KINDS: Final = (LOST_WRITE, LOST_READ, REPLICA_DIVERGENCE)
_FIELD: Final = {LOST_WRITE: "value", LOST_READ: "value", REPLICA_DIVERGENCE: "offset"}


@dataclasses.dataclass(frozen=True)
class Marks:
    """Per kind of :data:`MARKED_KINDS`: partition -> the values (lost kinds) or offsets (divergence)."""

    by_kind: dict[str, dict[int, list[int]]]
    complete: bool
    """Every record the checker found (``anomaly_records.parquet``), not only the examples."""

    def of(self, kind: str, partition: int) -> list[int]:
        return self.by_kind.get(kind, {}).get(partition, [])

    def count(self, kind: str) -> int:
        return sum(len(marks) for marks in self.by_kind.get(kind, {}).values())


def marked(results: Mapping[str, Any] | None, kind: str, field: str) -> dict[int, list[int]]:
    """partition -> the ``field`` (``value`` or ``offset``) of each example of ``kind`` in ``results.json``."""
    marks: dict[int, list[int]] = {}
    for example in ((results or {}).get("anomalies", {}).get(kind) or {}).get("examples", []):
        partition, mark = example.get("partition"), example.get(field)
        if isinstance(partition, int) and isinstance(mark, int):
            marks.setdefault(partition, []).append(mark)
    return marks


def load_marks(run_dir: Path, results: Mapping[str, Any] | None) -> Marks:
    """The run's marks: from ``anomaly_records.parquet`` when the checker wrote one, else from
    ``results.json``'s examples (see the module docstring)."""
    records = read_records(run_dir)
    if records is None:
        return Marks({kind: marked(results, kind, _FIELD[kind]) for kind in MARKED_KINDS}, complete=False)
    by_kind: dict[str, dict[int, list[int]]] = {}
    for (kind, partition), rows in records.groupby(["kind", "partition"]):
        if kind in _FIELD:
            values = rows[_FIELD[kind]].dropna().astype("int64").tolist()
            by_kind.setdefault(str(kind), {})[int(partition)] = values
    return Marks(by_kind, complete=True)


def offset_ranges(offsets: list[int]) -> list[tuple[int, int]]:
    """Consecutive offsets as ``(first, last)`` ranges, ascending: a band per range draws thousands
    of divergent positions as a few shapes, dense where they are."""
    if not offsets:
        return []
    ordered = np.unique(np.asarray(offsets, dtype=np.int64))
    breaks = np.flatnonzero(np.diff(ordered) > 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(ordered) - 1]])
    return [(int(ordered[s]), int(ordered[e])) for s, e in zip(starts, ends, strict=True)]


def marked_rows(frame: pd.DataFrame, values: list[int]) -> pd.DataFrame:
    """The rows of ``frame`` (sends or polls of one partition) whose value is one of ``values``."""
    return frame[frame["value"].isin(values)] if values else frame.iloc[:0]
