"""Synthetic stored runs at scale, with planted anomalies: for benchmarks and for warming Spark.

:func:`generate_run` writes one run directory -- ``test.json``, ``history.parquet``,
``replicas.parquet`` and ``replica_partitions.parquet`` -- straight from numpy columns, fast
enough for campaigns of 50 M ops (``bench/checker.py``).  Each run has sends (invoke + ok),
consumer polls of half of each partition's log, a final drain of every partition, and three
replicas; a fixed fraction of values is planted as lost writes, duplicates and divergent
replica positions, and the counts are returned (and stored as ``planted.json``) so that a
checker's answer can be compared with them.

The test suite builds its runs differently (``tests/checker/synthetic.py``: through the real
history writer and dump format, one planted anomaly of every kind); this module trades that
fidelity for speed and size.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from checker.definitions import DUPLICATE, LOST_WRITE, REPLICA_DIVERGENCE
from testbed.record.history import HISTORY_SCHEMA, parquet_metadata, write_parquet
from testbed.record.replicas import REPLICA_PARTITIONS_SCHEMA, REPLICAS_SCHEMA, record_identity
from testbed.record.rundir import RunDir

PARTITIONS = 8
NODES = ("n1", "n2", "n3")
PLANT_RATE = 1e-4  # of values: lost writes, duplicates, divergent positions each


def _column(
    values: np.ndarray[Any, Any] | None, kind: pa.DataType, n: int, mask: np.ndarray[Any, Any] | None = None
) -> pa.Array:
    if values is None:
        return pa.nulls(n, kind)
    return pa.array(values, type=kind, mask=mask)


def _keys(values: np.ndarray[Any, Any]) -> pa.Array:
    dictionary = pa.array([f"k{i}" for i in range(16)])
    return pa.DictionaryArray.from_arrays(pa.array(values % 16, pa.int32()), dictionary).dictionary_decode()


@dataclasses.dataclass(frozen=True)
class _Values:
    """Every value of a run (one send each) with its partition and offset, and which are planted."""

    value: np.ndarray[Any, Any]
    partition: np.ndarray[Any, Any]
    offset: np.ndarray[Any, Any]
    planted: int
    """How many values of each planted kind."""
    kept: np.ndarray[Any, Any]
    """Not lost: in the final log."""
    duplicated: np.ndarray[Any, Any]
    """Positions of kept values that the final log holds twice."""


@dataclasses.dataclass(frozen=True)
class _Log:
    """The final log: every kept value plus the duplicates, by (partition, offset)."""

    rows: np.ndarray[Any, Any]
    """Positions in :class:`_Values` of the values it holds."""
    partition: np.ndarray[Any, Any]
    offset: np.ndarray[Any, Any]


def _values(rows: int, seed: int, rng: np.random.Generator) -> _Values:
    values_n = int(rows / 3.5)
    planted = max(1, int(values_n * PLANT_RATE))
    lost = np.zeros(values_n, dtype=bool)
    lost[rng.choice(values_n, planted, replace=False)] = True
    kept = ~lost
    return _Values(
        value=np.arange(values_n, dtype=np.int64) + seed * 10_000_000_000,
        partition=(np.arange(values_n) % PARTITIONS).astype(np.int32),
        offset=(np.arange(values_n) // PARTITIONS).astype(np.int64),
        planted=planted,
        kept=kept,
        duplicated=rng.choice(np.flatnonzero(kept), planted, replace=False),
    )


def _final_log(values: _Values) -> _Log:
    """Every kept record at its offset, the duplicates appended past the end of each partition."""
    rows = np.concatenate([np.flatnonzero(values.kept), values.duplicated])
    offset = np.concatenate([values.offset[values.kept], values.offset.max() + 1 + np.arange(values.planted)])
    partition = values.partition[rows]
    order = np.lexsort((offset, partition))
    return _Log(rows[order], partition[order], offset[order])


def _history(values: _Values, log: _Log, run_id: int) -> pa.Table:
    """Sends (invoke + ok), polls of the first half of each partition's kept records (10 per
    poll op) and one drain op per partition reading the final log."""
    value, partition, offset = values.value, values.partition, values.offset
    values_n = len(value)
    send_n = 2 * values_n  # indexes 0 .. 2V-1
    s_index = np.arange(send_n, dtype=np.int64)
    s_type = np.tile(np.array([0, 1], dtype=np.int8), values_n)
    poll_rows = np.flatnonzero(values.kept & (offset < offset.max() // 2))
    p_n = len(poll_rows)
    p_index = send_n + np.arange(p_n, dtype=np.int64) // 10
    d_n, d_partition, d_offset = len(log.rows), log.partition, log.offset
    d_index = p_index[-1] + 1 + d_partition.astype(np.int64) if p_n else send_n + d_partition.astype(np.int64)
    n = send_n + p_n + d_n
    f = np.concatenate([np.zeros(send_n, np.int8), np.ones(p_n, np.int8), np.full(d_n, 2, np.int8)])
    all_values = np.concatenate([np.repeat(value, 2), value[poll_rows], value[log.rows]])
    index = np.concatenate([s_index, p_index, d_index])
    columns = {
        "run_id": pa.array(np.full(n, run_id, np.int64)),
        "index": pa.array(index),
        "time": pa.array(index * 1000),
        "process": pa.array(
            np.concatenate(
                [np.repeat(value % 64, 2), 1000 + partition[poll_rows], 2000 + d_partition]
            ).astype(np.int32)
        ),
        "type": pa.array(np.concatenate([s_type, np.ones(p_n + d_n, np.int8)])),
        "f": pa.array(f),
        "f_name": pa.DictionaryArray.from_arrays(
            pa.array(f.astype(np.int32)), pa.array(["send", "poll", "drain"])
        ).dictionary_decode(),
        "shape": pa.array(
            np.concatenate([np.full(send_n, 2, np.int8), np.full(p_n, 3, np.int8), np.full(d_n, 4, np.int8)])
        ),
        "item": _column(
            np.concatenate(
                [np.zeros(send_n, np.int32), np.arange(p_n, dtype=np.int32) % 10, d_offset.astype(np.int32)]
            ),
            pa.int32(),
            n,
            np.concatenate([np.ones(send_n, bool), np.zeros(p_n + d_n, bool)]),
        ),
        "partition": pa.array(np.concatenate([np.repeat(partition, 2), partition[poll_rows], d_partition])),
        "offset": _column(
            np.concatenate([np.repeat(offset, 2), offset[poll_rows], d_offset]),
            pa.int64(),
            n,
            np.concatenate([s_type == 0, np.zeros(p_n + d_n, bool)]),
        ),
        "key": _keys(all_values),
        "value": pa.array(all_values),
        "value_text": pa.nulls(n, pa.string()),
        "end_offset": _column(np.full(n, offset.max() + 1 + values.planted), pa.int64(), n, f != 2),
        "complete": _column(np.ones(n, bool), pa.bool_(), n, f != 2),
        "inherited": pa.array(np.zeros(n, bool)),
        "error": pa.nulls(n, pa.string()),
        "node": pa.nulls(n, pa.string()),
        "payload": pa.nulls(n, pa.string()),
    }
    return pa.table(columns, schema=HISTORY_SCHEMA).replace_schema_metadata(
        parquet_metadata(run_id, "history", {"skipped_line_count": "0", "skipped_lines": "[]"})
    )


def _replicas(values: _Values, log: _Log, run_id: int, rng: np.random.Generator) -> pa.Table:
    """Every node holds the final log; n3 differs at ``planted`` positions."""
    log_values = values.value[log.rows]
    m = len(log_values)
    text = pc.cast(pa.array(log_values), pa.string())
    diverged = np.zeros(m, bool)
    diverged[rng.choice(m, values.planted, replace=False)] = True
    n3_text = pc.if_else(pa.array(diverged), pc.binary_join_element_wise("x", text, ""), text)
    replica = {
        "run_id": pa.array(np.full(3 * m, run_id, np.int64)),
        "node": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(3, dtype=np.int32), m)), pa.array(list(NODES))
        ).dictionary_decode(),
        "topic": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(3 * m, np.int32)), pa.array(["queue"])
        ).dictionary_decode(),
        "partition": pa.array(np.tile(log.partition, 3)),
        "offset": pa.array(np.tile(log.offset, 3)),
        "leader_epoch": pa.array(np.ones(3 * m, np.int32)),
        "key": pa.concat_arrays([_keys(log_values)] * 3),
        "value": pa.concat_arrays([text, text, n3_text]),
        "value_int": pa.concat_arrays([pa.array(log_values)] * 2 + [pa.array(log_values, mask=diverged)]),
    }
    keys = replica["key"]
    replica["record_id"] = pa.array(record_identity(keys, replica["value"]))
    replica["node_index"] = pa.array(np.repeat(np.arange(3, dtype=np.int16), m))
    replicas = pa.table(replica, schema=REPLICAS_SCHEMA).sort_by(
        [("partition", "ascending"), ("offset", "ascending"), ("node_index", "ascending")]
    )
    return replicas.replace_schema_metadata(parquet_metadata(run_id, "replicas", _REPLICA_META))


_REPLICA_META = {"nodes": json.dumps(list(NODES)), "missing_nodes": "{}"}


def _replica_partitions(run_id: int, end: int) -> pa.Table:
    """Every replica's partition line: HW and LEO at ``end``, one epoch."""
    parts = [
        {
            "run_id": run_id,
            "node": node,
            "topic": "queue",
            "partition": p,
            "high_watermark": end,
            "log_end_offset": end,
            "log_start_offset": 0,
            "epochs": "[[1, 0]]",
        }
        for node in NODES
        for p in range(PARTITIONS)
    ]
    return pa.Table.from_pylist(parts, schema=REPLICA_PARTITIONS_SCHEMA).replace_schema_metadata(
        parquet_metadata(run_id, "replica-partitions", _REPLICA_META)
    )


_SPEC = {
    "schema_version": 1,
    "name": "bench",
    "topic": "queue",
    "workload": {"name": "queue", "partitions": PARTITIONS, "acks": "all"},
    "broker_config": {},
    "nemesis": {"faults": ["kill"]},
    "scenario": None,
    "nodes": list(NODES),
}


def generate_run(run_dir: Path, rows: int, seed: int) -> dict[str, int]:
    """One run of about ``rows`` history rows; returns the planted counts."""
    rng = np.random.default_rng(seed)
    run_id = seed + 1
    values = _values(rows, seed, rng)
    log = _final_log(values)
    history = _history(values, log, run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_parquet(history, RunDir(run_dir).history_parquet)
    replicas = _replicas(values, log, run_id, rng)
    write_parquet(replicas, RunDir(run_dir).replicas)
    end = int(values.offset.max() + 1 + values.planted)
    write_parquet(_replica_partitions(run_id, end), RunDir(run_dir).replica_partitions)
    RunDir(run_dir).spec_file.write_text(json.dumps(_SPEC))
    counts = {
        LOST_WRITE: values.planted,
        DUPLICATE: values.planted,
        REPLICA_DIVERGENCE: values.planted,
        "history_rows": history.num_rows,
        "replica_rows": replicas.num_rows,
    }
    (run_dir / "planted.json").write_text(json.dumps(counts))
    return counts
