"""The pandas engine: the checks of :mod:`checker.definitions` for small runs, without a JVM.

It is also the oracle the Spark engine is tested against, so it is written for clarity
first: each check is one ``groupby`` on integer keys, exactly the aggregation the Spark
engine performs.  Nullable integer columns use pandas' masked dtypes so that 64-bit values
never pass through float.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from checker import fetch
from checker.definitions import (
    ABORTED_READ,
    DIVERGENCE_EXAMPLE_COLUMNS,
    DUPLICATE,
    LOST_READ,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    OFFSET_EXAMPLE_COLUMNS,
    POLL_EXAMPLE_COLUMNS,
    POLL_SKIP,
    TYPE_FAIL,
    TYPE_INVOKE,
    TYPE_OK,
    UNEXPECTED,
    UNSEEN,
    VALUE_EXAMPLE_COLUMNS,
)
from checker.engine import to_pandas
from checker.evidence import RunInput
from harness.history import F_DRAIN, F_POLL, F_SEND

_CHECK_COLUMNS = [
    "run_id",
    "index",
    "process",
    "type",
    "f",
    "item",
    "partition",
    "offset",
    "value",
    "value_text",
    "end_offset",
    "complete",
]


def hash_strings(values: pd.Series) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """64-bit hashes of a string column (nulls hash alike): identity without string comparisons."""
    hashed: np.ndarray[Any, np.dtype[np.uint64]] = pd.util.hash_array(
        values.astype(object).to_numpy(), categorize=True
    )
    return hashed


def _top(frame: pd.DataFrame, group: list[str], order: list[str], limit: int) -> pd.DataFrame:
    """Keep the first ``limit`` rows per group in ``order`` and attach each group's ``total``."""
    if frame.empty:
        return frame.assign(total=pd.Series(dtype="int64"))
    frame = frame.sort_values([*group, *order], na_position="first", kind="stable")
    frame = frame.assign(total=frame.groupby(group, sort=False)[group[0]].transform("size").astype("int64"))
    return frame[frame.groupby(group, sort=False).cumcount() < limit].reset_index(drop=True)


class PandasEngine:
    """Loads each pass's histories once and answers the engine questions from memory."""

    name = "pandas"
    concurrent = False  # one thread: the frames it caches are not shared safely

    def __init__(self) -> None:
        self._history: dict[tuple[str, ...], pd.DataFrame] = {}
        self._replicas: dict[tuple[str, ...], pd.DataFrame] = {}

    # ---------------------------------------------------------------- loading

    def _rows(self, runs: list[RunInput]) -> pd.DataFrame:
        key = tuple(str(run.history_path) for run in runs)
        if key not in self._history:
            tables = [pq.read_table(run.history_path, columns=_CHECK_COLUMNS) for run in runs]
            self._history = {key: to_pandas(pa.concat_tables(tables))}
        return self._history[key]

    def _replica_rows(self, runs: list[RunInput]) -> pd.DataFrame:
        """``run_id, node, partition, offset, record_id`` of each run's topic (no strings but the node)."""
        key = tuple(str(run.replicas_path) for run in runs)
        if key not in self._replicas:
            tables = []
            for run in runs:
                if run.replicas_path is None:
                    continue
                table = pq.read_table(
                    run.replicas_path, columns=["run_id", "node", "topic", "partition", "offset", "record_id"]
                )
                tables.append(table.filter(pc.equal(table["topic"], run.topic)).drop_columns(["topic"]))
            columns = ["run_id", "node", "partition", "offset", "record_id"]
            frame = to_pandas(pa.concat_tables(tables)) if tables else pd.DataFrame(columns=columns)
            self._replicas = {key: frame}
        return self._replicas[key]

    # ---------------------------------------------------------------- questions

    def row_counts(self, runs: list[RunInput]) -> pd.DataFrame:
        rows = self._rows(runs)
        # One small integer per (f, type, is_record): grouping on it is much cheaper than on three columns.
        code = (
            rows["f"].to_numpy("int64") * 8
            + rows["type"].to_numpy("int64") * 2
            + rows["item"].notna().to_numpy("int64")
        )
        counted = (
            pd.DataFrame({"run_id": rows["run_id"].to_numpy("int64"), "code": code})
            .groupby(["run_id", "code"])
            .size()
        )
        frame = counted.rename("rows").reset_index()
        return frame.assign(
            f=frame["code"] // 8, type=(frame["code"] % 8) // 2, is_record=(frame["code"] % 2).astype(bool)
        )[["run_id", "f", "type", "is_record", "rows"]]

    def drain_status(self, runs: list[RunInput]) -> pd.DataFrame:
        rows = self._rows(runs)
        drains = rows[(rows["f"] == F_DRAIN) & (rows["type"] == TYPE_OK)]
        return (
            drains.assign(is_record=drains["item"].notna().astype("int64"))
            .groupby(["run_id", "partition"])
            .agg(complete=("complete", "max"), end_offset=("end_offset", "max"), records=("is_record", "sum"))
            .reset_index()
        )

    def value_anomalies(
        self, runs: list[RunInput], complete: pd.DataFrame, checks: frozenset[str], limit: int
    ) -> pd.DataFrame:
        rows = self._rows(runs)
        rows = rows[(rows["f"] <= F_DRAIN) & rows["value"].notna()]
        f, kind = rows["f"], rows["type"]
        send, poll, drain = f == F_SEND, f == F_POLL, f == F_DRAIN
        ok = send & (kind == TYPE_OK)
        read = poll | drain
        grouped = rows.assign(
            sent=send.astype("int8"),
            acked=ok.astype("int8"),
            failed=(send & (kind == TYPE_FAIL)).astype("int8"),
            ack_offset=rows["offset"].where(ok),
            send_index=rows["index"].where(send & (kind != TYPE_INVOKE)),
            polled=poll.astype("int64"),
            drained=drain.astype("int64"),
            read_index=rows["index"].where(read),
            poll_offset=rows["offset"].where(poll),
            read_offset=rows["offset"].where(read),
        ).groupby(["run_id", "partition", "value"])
        values = grouped.agg(
            sent=("sent", "max"),
            acked=("acked", "max"),
            failed=("failed", "max"),
            ack_offset=("ack_offset", "max"),
            send_index=("send_index", "max"),
            polled=("polled", "sum"),
            drained=("drained", "sum"),
            read_index=("read_index", "min"),
            poll_offset=("poll_offset", "min"),
            read_min_offset=("read_offset", "min"),
            read_max_offset=("read_offset", "max"),
        ).reset_index()
        values = values.merge(complete, on=["run_id", "partition"], how="left")
        is_complete = values["complete"].fillna(False).astype(bool)
        acked, sent = values["acked"] == 1, values["sent"] == 1
        unread_by_drain = values["drained"] == 0
        flags = {
            LOST_WRITE: acked & unread_by_drain & is_complete,
            UNSEEN: acked & unread_by_drain & (values["polled"] == 0) & ~is_complete,
            ABORTED_READ: (values["failed"] == 1) & (values["polled"] + values["drained"] > 0),
            LOST_READ: sent & (values["polled"] > 0) & unread_by_drain & is_complete,
            UNEXPECTED: ~sent & (values["polled"] + values["drained"] > 0),
            DUPLICATE: values["read_min_offset"] != values["read_max_offset"],
        }
        parts = [
            values[flag.fillna(False)].assign(kind=name) for name, flag in flags.items() if name in checks
        ]
        if UNEXPECTED in checks:
            parts.append(self._unexpected_text(runs))
        stacked = (
            pd.concat([p for p in parts if not p.empty], ignore_index=True)
            if any(not p.empty for p in parts)
            else None
        )
        columns = ["run_id", "kind", "total", *VALUE_EXAMPLE_COLUMNS]
        if stacked is None:
            return pd.DataFrame(columns=columns)
        if "value_text" not in stacked:
            stacked["value_text"] = None
        return _top(stacked, ["run_id", "kind"], ["partition", "value", "value_text"], limit)[columns]

    def _unexpected_text(self, runs: list[RunInput]) -> pd.DataFrame:
        """Read records whose value is not an integer: nobody sent them (sends carry integers)."""
        rows = self._rows(runs)
        reads = rows[
            ((rows["f"] == F_POLL) | (rows["f"] == F_DRAIN)) & rows["item"].notna() & rows["value"].isna()
        ]
        if reads.empty:
            return pd.DataFrame()
        found = (
            reads.assign(poll_offset=reads["offset"].where(reads["f"] == F_POLL))
            .groupby(["run_id", "partition", "value_text"], dropna=False)
            .agg(
                read_index=("index", "min"),
                poll_offset=("poll_offset", "min"),
                read_min_offset=("offset", "min"),
                read_max_offset=("offset", "max"),
            )
            .reset_index()
        )
        missing = pd.array([pd.NA] * len(found), dtype="Int64")
        return found.assign(kind=UNEXPECTED, value=missing, ack_offset=missing, send_index=missing)

    def offset_anomalies(self, runs: list[RunInput], limit: int) -> pd.DataFrame:
        rows = self._rows(runs)
        observing = ((rows["f"] == F_SEND) & (rows["type"] == TYPE_OK) & rows["offset"].notna()) | (
            ((rows["f"] == F_POLL) | (rows["f"] == F_DRAIN)) & rows["item"].notna()
        )
        rows = rows[observing]
        text_hash = pd.Series(hash_strings(rows["value_text"]).view(np.int64), index=rows.index).where(
            rows["value_text"].notna()
        )
        grouped = rows.assign(text_hash=text_hash).groupby(["run_id", "partition", "offset"])
        positions = grouped.agg(
            observations=("index", "size"),
            n_int=("value", "count"),
            int_min=("value", "min"),
            int_max=("value", "max"),
            n_text=("text_hash", "count"),
            text_min=("text_hash", "min"),
            text_max=("text_hash", "max"),
        ).reset_index()
        n, n_int, n_text = positions["observations"], positions["n_int"], positions["n_text"]
        inconsistent = (
            (positions["int_min"] != positions["int_max"]).fillna(False)
            | ((n_int > 0) & (n_int < n))
            | (
                (n_int == 0)
                & (
                    (positions["text_min"] != positions["text_max"]).fillna(False)
                    | ((n_text > 0) & (n_text < n))
                )
            )
        )
        found = positions[inconsistent.astype(bool)].assign(
            observations=lambda p: p["observations"].astype("int64")
        )
        return _top(found, ["run_id"], ["partition", "offset"], limit)[
            ["run_id", "total", *OFFSET_EXAMPLE_COLUMNS]
        ]

    def poll_anomalies(self, runs: list[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
        rows = self._rows(runs)
        reads = rows[(rows["f"] == F_POLL) & (rows["type"] == TYPE_OK) & rows["item"].notna()]
        reads = reads.sort_values(["run_id", "process", "partition", "index", "item"], kind="stable")
        previous = reads.groupby(["run_id", "process", "partition"], sort=False)[["index", "offset"]].shift(1)
        reads = reads.assign(prev_index=previous["index"], prev_offset=previous["offset"])
        reads = reads[reads["prev_offset"].notna()]
        delta = reads["offset"] - reads["prev_offset"]
        parts = []
        if POLL_SKIP in checks:
            parts.append(reads[(delta > 1).astype(bool)].assign(kind=POLL_SKIP))
        if NONMONOTONIC_POLL in checks:
            parts.append(reads[(delta < 1).astype(bool)].assign(kind=NONMONOTONIC_POLL))
        columns = ["run_id", "kind", "total", *POLL_EXAMPLE_COLUMNS]
        found = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
        return _top(found, ["run_id", "kind"], ["process", "partition", "index", "item"], limit)[columns]

    def divergence(self, runs: list[RunInput], limit: int) -> pd.DataFrame:
        replicas = self._replica_rows(runs)
        columns = ["run_id", "total", *DIVERGENCE_EXAMPLE_COLUMNS]
        if replicas.empty:
            return pd.DataFrame(columns=columns)
        spread = replicas.groupby(["run_id", "partition", "offset"])["record_id"].agg(["min", "max"])
        divergent = spread[spread["min"] != spread["max"]].reset_index()[["run_id", "partition", "offset"]]
        if divergent.empty:
            return pd.DataFrame(columns=columns)
        totals = divergent.groupby("run_id").size().rename("total").reset_index()
        at = replicas.merge(divergent, on=["run_id", "partition", "offset"]).rename(
            columns={"record_id": "identity"}
        )
        at = at[["run_id", "partition", "offset", "node", "identity"]]
        pairs = at.merge(at, on=["run_id", "partition", "offset"], suffixes=("_a", "_b"))
        pairs = pairs[(pairs["node_a"] < pairs["node_b"]) & (pairs["identity_a"] != pairs["identity_b"])]
        first = (
            pairs.groupby(["run_id", "partition", "node_a", "node_b"])
            .agg(offset=("offset", "min"), positions=("offset", "size"))
            .reset_index()
        )
        first = first.assign(positions=first["positions"].astype("int64"))
        top = _top(first, ["run_id"], ["partition", "node_a", "node_b"], limit).drop(columns=["total"])
        return top.merge(totals, on="run_id")[columns]

    # ---------------------------------------------------------------- example rows

    def fetch_ops(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        return fetch.fetch_ops(runs, keys)

    def fetch_observations(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        return fetch.fetch_observations(runs, keys)

    def fetch_replica_records(self, runs: list[RunInput], keys: pd.DataFrame) -> pd.DataFrame:
        return fetch.fetch_replica_records(runs, keys)
