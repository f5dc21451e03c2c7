"""``history.jsonl``: the history as JSON lines, written while a test runs and read back.

During a run the history is a header line ``{"format": "tidemark-history", "schema_version": 1}``
followed by one ``Op.to_dict()`` JSON object per line, appended and flushed as each op happens,
so a killed run still has every op it completed (:class:`HistoryWriter`).  A file without the
header line is read as version 1 (producers that only follow the op contract work too).

This module is the bottom of the history format (``docs/history.md``): the version, the error
that names a bad file and line (:class:`HistoryFormatError`, also raised for the record's Parquet
files and the replica dumps) and the validation of one op line (:func:`op_from_dict`).  The
columnar side -- ``history.parquet`` -- is :mod:`testbed.record.history`; the Parquet files'
common writing and footer reading is :mod:`testbed.record.parquet_files`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from testbed.record.ops import NEMESIS_PROCESS, OP_TYPES, Op

HISTORY_SCHEMA_VERSION = 1
"""The version of the history format: the JSON lines' header and every Parquet file's metadata."""
HISTORY_FORMAT = "tidemark-history"


class HistoryFormatError(ValueError):
    """A history or dump file that does not follow the format; the message names file and line."""

    def __init__(self, path: Path | str, line: int | None, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


@dataclasses.dataclass(frozen=True, slots=True)
class SkippedLine:
    line: int
    reason: str


# ---------------------------------------------------------------- writing JSON lines


class HistoryWriter:
    """Appends ops to ``history.jsonl``, one flushed line per op; safe to share between threads.

    The header line is written when the file is new or empty.  ``durable=True`` also fsyncs
    every line (for a controller host that may itself lose power); flushing alone already
    survives the harness being killed.
    """

    def __init__(self, path: Path | str, *, durable: bool = False) -> None:
        self.path = Path(path)
        self._durable = durable
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8")
        if self._file.tell() == 0:
            self._write_line(json.dumps({"format": HISTORY_FORMAT, "schema_version": HISTORY_SCHEMA_VERSION}))

    def _write_line(self, text: str) -> None:
        self._file.write(text + "\n")
        self._file.flush()
        if self._durable:
            os.fsync(self._file.fileno())

    def append(self, op: Op) -> None:
        line = json.dumps(op.to_dict(), separators=(",", ":"), allow_nan=False)
        with self._lock:
            self._write_line(line)

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# ---------------------------------------------------------------- reading JSON lines


def is_json_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def op_from_dict(obj: Any) -> Op:
    """Validate one decoded history line; raises ``ValueError`` with the reason."""
    if not isinstance(obj, dict):
        raise ValueError("an op must be a JSON object")
    unknown = set(obj) - {"index", "time", "process", "type", "f", "value", "error", "node"}
    if unknown:
        raise ValueError(f"unknown op field(s) {sorted(unknown)}")
    for name in ("index", "time"):
        if not is_json_int(obj.get(name)):
            raise ValueError(f"op field {name!r} must be an integer, got {obj.get(name)!r}")
    process: Any = obj.get("process")
    valid_process = process == NEMESIS_PROCESS or (is_json_int(process) and process >= 0)
    if not valid_process:
        raise ValueError(f"op field 'process' must be a non-negative integer or 'nemesis', got {process!r}")
    if obj.get("type") not in OP_TYPES:
        raise ValueError(f"op field 'type' must be one of {list(OP_TYPES)}, got {obj.get('type')!r}")
    if not isinstance(obj.get("f"), str) or not obj["f"]:
        raise ValueError(f"op field 'f' must be a non-empty string, got {obj.get('f')!r}")
    for name in ("error", "node"):
        if obj.get(name) is not None and not isinstance(obj[name], str):
            raise ValueError(f"op field {name!r} must be a string, got {obj[name]!r}")
    return Op(
        index=obj["index"],
        time=obj["time"],
        process=process,
        type=obj["type"],
        f=obj["f"],
        value=obj.get("value"),
        error=obj.get("error"),
        node=obj.get("node"),
    )


def _check_header(obj: dict[str, Any], path: Path) -> None:
    version = obj.get("schema_version")
    if version != HISTORY_SCHEMA_VERSION:
        raise HistoryFormatError(
            path,
            1,
            f"history schema version {version!r} is not supported (this Tidemark reads version {HISTORY_SCHEMA_VERSION})",
        )


def iter_history(path: Path | str, skipped: list[SkippedLine] | None = None) -> Iterator[tuple[int, Op]]:
    """Yield ``(line number, op)`` for every op line of a ``history.jsonl``.

    A line that is not valid JSON (a garbage line, or the torn last line of a killed run)
    or not a valid op raises :class:`HistoryFormatError` naming file and line -- unless
    ``skipped`` is a list, in which case the line is recorded there and skipped.  A wrong
    schema version in the header is never skippable.
    """
    path = Path(path)
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, start=1):
            text = raw.strip()
            if not text:
                continue
            try:
                obj = json.loads(text)
                if number == 1 and isinstance(obj, dict) and obj.get("format") == HISTORY_FORMAT:
                    _check_header(obj, path)
                    continue
                op = op_from_dict(obj)
            except HistoryFormatError:
                raise
            except ValueError as error:  # json.JSONDecodeError is a ValueError
                torn = "" if raw.endswith("\n") else " (the last line is incomplete: was the run killed?)"
                reason = f"{error}{torn}"
                if skipped is None:
                    raise HistoryFormatError(path, number, reason) from None
                skipped.append(SkippedLine(number, reason))
                continue
            yield number, op


def read_history(path: Path | str, *, skip_bad_lines: bool = False) -> tuple[list[Op], list[SkippedLine]]:
    """All ops of a ``history.jsonl`` (see :func:`iter_history`) and the skipped lines."""
    skipped: list[SkippedLine] | None = [] if skip_bad_lines else None
    ops = [op for _, op in iter_history(path, skipped)]
    return ops, skipped or []
