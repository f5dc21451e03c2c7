"""Which stored rows an example shows: the keys of ``Engine.fetch_ops`` and the exact rules.

The aggregations name each example by (run, op index) or (run, partition, offset); an example
then shows some rows of those ops -- a few hundred rows out of millions.  This module says which:

* :func:`example_op_keys` turns the answers of the value, order and group checks into op keys
  (``run_id, index, partition, value, value_text, offset, null_value``);
* :func:`select_example_rows` is the exact rule of ``Engine.fetch_ops`` (record-less rows, or
  records matching a key), :func:`at_positions` that of ``fetch_observations`` and
  ``fetch_replica_records``, :func:`observations` which history rows observe a position;
* :func:`key_rows`, :func:`position_rows` and :func:`op_superset` narrow rows in Arrow to a
  *superset* of what the exact rules keep.  Within an op's row groups, its index matches *all*
  its rows (a drain op holds every record of its partition), so rows are narrowed in Arrow
  first -- record-less rows and records carrying one of the keys' values or offsets -- and only
  those become pandas rows for the exact rule.

The rules take any Arrow table or frame, wherever it came from: the pandas engine applies them to
the pass it holds in memory, the driver-side fetches (:mod:`checker.fetch`,
:mod:`checker.value_details`) to the rows they read from files.  One rule for both engines is
what keeps their ``results.json`` byte-equal; where rows come from is not this module's concern.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from checker.definitions import TYPE_OK
from checker.engine import HISTORY_ROW_COLUMNS, OP_KEY_COLUMNS
from checker.run_reads import decoded, positions_where
from testbed.record.history import F_DRAIN, F_POLL, F_SEND

POSITION = ["run_id", "partition", "offset"]

OP_FILTER_COLUMNS = ("run_id", "index", "item", "value", "offset", "value_text")
"""The columns :func:`key_rows` reads."""


def key_rows(table: pa.Table, keys: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Positions in ``table`` (:data:`OP_FILTER_COLUMNS` suffice) of a superset of the rows :func:`ops_in` keeps."""
    return positions_where(pc.and_kleene(key_filter(table, keys, ["run_id", "index"]), may_show(table, keys)))


def position_rows(table: pa.Table, keys: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Positions in ``table`` (``run_id, partition, offset`` suffice) of a superset of the rows :func:`at_positions` keeps."""
    return positions_where(key_filter(table, keys[POSITION].drop_duplicates(), POSITION))


def may_show(table: pa.Table, keys: pd.DataFrame) -> pa.ChunkedArray:
    """A superset of the rows :func:`select_example_rows` keeps: record-less, or a key's value or offset
    (or a null value, when a key asks for one)."""
    texts = pa.array(sorted({str(v) for v in keys["value_text"].dropna()}), pa.string())
    shown = pc.or_kleene(
        pc.or_kleene(pc.is_null(table["item"]), pc.is_in(table["value"], pa.array(ints(keys["value"])))),
        pc.or_kleene(
            pc.is_in(table["offset"], pa.array(ints(keys["offset"]))),
            pc.is_in(table["value_text"], texts),
        ),
    )
    if bool(keys["null_value"].fillna(False).any()):
        shown = pc.or_kleene(
            shown, pc.and_kleene(pc.is_null(table["value"]), pc.is_null(table["value_text"]))
        )
    return shown


def select_example_rows(rows: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """The rule of ``Engine.fetch_ops``: record-less rows, or records matching a key."""
    renamed = keys.rename(
        columns={c: f"k_{c}" for c in ("partition", "value", "value_text", "offset", "null_value")}
    )
    joined = rows.merge(renamed, on=["run_id", "index"])
    same_partition = joined["partition"] == joined["k_partition"]
    null_value = joined["value"].isna() & joined["value_text"].isna() & joined["k_null_value"].fillna(False)
    matches = (
        joined["item"].isna()
        | (same_partition & (joined["value"] == joined["k_value"]))
        | (same_partition & (joined["value_text"] == joined["k_value_text"]))
        | (same_partition & (joined["offset"] == joined["k_offset"]))
        | (same_partition & null_value.astype(bool))
    )
    chosen = joined[matches.fillna(False).astype(bool)].drop_duplicates(["run_id", "index", "item"])
    return chosen[list(HISTORY_ROW_COLUMNS)].reset_index(drop=True)


def ints(column: pd.Series) -> list[int]:
    return sorted({int(v) for v in column.dropna()})


def key_filter(table: pa.Table, keys: pd.DataFrame, columns: Sequence[str]) -> pa.ChunkedArray:
    """Rows whose every one of ``columns`` holds some key's value: a superset of the keyed rows."""
    wanted = [pc.is_in(table[column], pa.array(ints(keys[column]))) for column in columns]
    mask = wanted[0]
    for more in wanted[1:]:
        mask = pc.and_kleene(mask, more)
    return mask


def ops_in(table: pa.Table, keys: pd.DataFrame) -> pd.DataFrame:
    """``Engine.fetch_ops`` on rows already read (a file's rows, or a whole pass in memory)."""
    return select_example_rows(decoded(op_superset(table, keys)), keys)


def op_superset(table: pa.Table, keys: pd.DataFrame) -> pa.Table:
    """The rows of ``table`` of the keys' ops that may be shown: a superset of what
    :func:`select_example_rows` keeps, narrowed in Arrow."""
    table = table.filter(key_filter(table, keys, ["run_id", "index"]))
    return table.filter(may_show(table, keys))


def at_positions(table: pa.Table, keys: pd.DataFrame, topic: str | None = None) -> pd.DataFrame:
    """Rows of ``table`` at ``keys[run_id, partition, offset]`` (and of ``topic``, for replica rows)."""
    keys = keys[POSITION].drop_duplicates()
    table = table.filter(key_filter(table, keys, POSITION))
    if topic is not None:
        table = table.filter(pc.equal(table["topic"], topic))
    return decoded(table).merge(keys, on=POSITION)


def observations(rows: pd.DataFrame) -> pd.DataFrame:
    """Of history rows, those that observe a position: send acks with a known offset (>= 0) and read records."""
    send_ack = (rows["f"] == F_SEND) & (rows["type"] == TYPE_OK) & (rows["offset"] >= 0).fillna(False)
    record = ((rows["f"] == F_POLL) | (rows["f"] == F_DRAIN)) & rows["item"].notna()
    return rows[(send_ack | record).astype(bool)].reset_index(drop=True)


OP_KEY_TYPES = {
    "run_id": "int64",
    "index": "int64",
    "partition": "Int32",
    "value": "Int64",
    "value_text": object,
    "offset": "Int64",
    "null_value": bool,
}


def example_op_keys(
    values: pd.DataFrame, orders: pd.DataFrame | None = None, groups: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Which ops, and which of their records, examples show (the keys of ``Engine.fetch_ops``).

    A value-check example (``values``: ``run_id, send_index, read_index, partition, value,
    value_text``) shows its send and the records of its value in its first read (a value that
    is neither integer nor text is a null: its key asks for the null-value records, so that
    the read shows what was read rather than nothing); an order
    example (``orders``: ``run_id, index, prev_index, partition, offset, prev_offset,
    invoke_index``) the records at both offsets in both reads (a send op is record-less:
    all of it), and the invoke at ``invoke_index`` when there is one; a group example
    (``groups``: ``run_id, index, prev_index, partition, offset, prev_offset``) the same,
    without an invoke (a commit op is record-less: all of it).
    """
    missing = pd.NA
    parts = []
    if not values.empty:
        parts.append(
            pd.DataFrame({"run_id": values["run_id"], "index": values["send_index"]}).assign(
                partition=missing, value=missing, value_text=None, offset=missing, null_value=False
            )
        )
        parts.append(
            pd.DataFrame(
                {
                    "run_id": values["run_id"],
                    "index": values["read_index"],
                    "partition": values["partition"],
                    "value": values["value"],
                    "value_text": values["value_text"],
                    "null_value": (values["value"].isna() & values["value_text"].isna()).astype(bool),
                }
            ).assign(offset=missing)
        )
    for compared in (orders, groups):
        if compared is None or compared.empty:
            continue
        for index, offset in (("index", "offset"), ("prev_index", "prev_offset")):
            parts.append(
                pd.DataFrame(
                    {
                        "run_id": compared["run_id"],
                        "index": compared[index],
                        "partition": compared["partition"],
                        "offset": compared[offset],
                    }
                ).assign(value=missing, value_text=None, null_value=False)
            )
        if "invoke_index" in compared:
            parts.append(
                pd.DataFrame({"run_id": compared["run_id"], "index": compared["invoke_index"]}).assign(
                    partition=missing, value=missing, value_text=None, offset=missing, null_value=False
                )
            )
    if not parts:
        return pd.DataFrame({name: pd.Series(dtype=kind) for name, kind in OP_KEY_TYPES.items()})
    # Typed before the concatenation: all-missing columns then keep their type.
    typed = [part[list(OP_KEY_COLUMNS)].astype({**OP_KEY_TYPES, "index": "Int64"}) for part in parts]
    keys = pd.concat(typed, ignore_index=True)
    return keys[keys["index"].notna()].astype(OP_KEY_TYPES).reset_index(drop=True)
