"""The examples of the white-box checks: one engine row plus the events (and records) it names.

An engine answers with example rows (:data:`checker.definitions.INVARIANT_EXAMPLE_COLUMNS`):
which event is in question (``node``, ``seq``), what was compared (``value``, ``bound``,
``positions``) and which event it was compared with (``prev_node``, ``prev_seq``).  The driver
fetches those events' lines from ``events.parquet`` (:func:`fetch_events`, on the driver, the same
for both engines: a few rows) and, for isr-divergence, both replicas' records at the first
divergent offset; :func:`invariant_example` turns them into the example of ``results.json``, each
event shown whole, as its broker or controller wrote it (``ts``, ``node``, ``seq`` included):

* truncated-committed: the ``truncate`` and the exposure of the HW it cut below
  (``exposed_by``), ``new_leo``, ``committed_hw``, ``committed_cut`` (offsets);
* incomplete-leader: the ``become-leader`` (``election``) and the exposure (``exposed_by``),
  ``leo``, ``exposed_hw``, ``missing`` (offsets);
* hw-regression: the regressed exposure (``exposure``) and the earlier, higher one
  (``previous``), ``hw``, ``previous_hw``, ``regressed_by``;
* min-isr-violation: the ``hw`` event, ``isr_size``, ``min_isr``, ``advanced_by``;
* epoch-reuse: the controller event (``published``), its ``epoch``, the ``highest_before`` and the
  first event that published that epoch (``first_published``);
* metadata-rollback: the controller's ``start`` (``restart``), the ``loaded_version``, the
  ``published_version`` it fell below, ``versions_lost`` and the first event of that version
  (``published``);
* lso-past-open-transaction: the event that recorded the LSO (``lso_event``) and the one that opened
  the transaction or handed it to the new leader (``opened``), ``lso``, ``first_offset``,
  ``passed_by``, ``outcome`` (``commit``, ``abort`` or null: never closed);
* isr-divergence: ``member``, ``leader``, the first divergent ``offset``, ``positions``,
  ``leader_hw``, the controller event that published the final ISR (``isr_from``) and both
  records (``replicas``: node -> record, null where the node has none).

An event about several partitions (``topic-created``) shows only the example's partition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from checker.definitions import (
    EPOCH_REUSE,
    HANGING_TRANSACTION,
    HW_REGRESSION,
    INCOMPLETE_LEADER,
    ISR_DIVERGENCE,
    LSO_PAST_OPEN_TRANSACTION,
    METADATA_ROLLBACK,
    TRUNCATED_COMMITTED,
    UNMARKED_TRANSACTION,
)
from checker.run_reads import read_run_table
from testbed.record.packed import RowSlice

EventKey = tuple[int, str, int]
"""(events run id, node name, seq)."""


def event_keys(rows: Iterable[dict[str, Any]]) -> set[EventKey]:
    """Every event an example row names (its own and the one it is compared with)."""
    keys: set[EventKey] = set()
    for row in rows:
        for node, seq in ((row["node"], row["seq"]), (row["prev_node"], row["prev_seq"])):
            if node is not None and seq is not None:
                keys.add((int(row["run_id"]), str(node), int(seq)))
    return keys


def fetch_events(
    paths: dict[int, tuple[Path, RowSlice | None]], keys: set[EventKey]
) -> dict[EventKey, dict[str, Any]]:
    """The events ``keys`` name, parsed from the ``line`` column of each run's ``events.parquet``
    (``paths``: events run id -> file, and the run's rows in it when it is packed)."""
    found: dict[EventKey, dict[str, Any]] = {}
    for run_id in sorted({key[0] for key in keys}):
        wanted = sorted({key[2] for key in keys if key[0] == run_id})
        table = read_run_table(*paths[run_id], ["node_name", "seq", "line"], ())
        table = table.filter(pc.is_in(table["seq"], pa.array(wanted, pa.int64())))
        for node, seq, line in zip(
            *(table[name].to_pylist() for name in ("node_name", "seq", "line")), strict=True
        ):
            if (run_id, node, seq) in keys:
                found[(run_id, node, seq)] = json.loads(line)
    return found


def _event(
    events: dict[EventKey, dict[str, Any]], run_id: int, node: Any, seq: Any, partition: int
) -> dict[str, Any] | None:
    """The event, an event about several partitions (``topic-created``, ``shutdown``) trimmed to
    the example's partition."""
    if node is None or seq is None:
        return None
    event = events.get((run_id, str(node), int(seq)))
    if event is None or not isinstance(event.get("partitions"), list):
        return event
    if not all(isinstance(entry, dict) for entry in event["partitions"]):
        return event  # a coordinator's [topic, partition] pairs: the transaction's, all shown
    shown = [
        entry
        for entry in event["partitions"]
        if isinstance(entry, dict) and entry.get("partition") == partition
    ]
    return {**event, "partitions": shown}


def invariant_example(
    kind: str,
    row: dict[str, Any],
    events: dict[EventKey, dict[str, Any]],
    records: dict[tuple[int, int], dict[str, dict[str, Any]]],
) -> dict[str, Any]:
    """The example of one engine row (``records``: (partition, offset) -> node -> record, the
    replica records fetched for isr-divergence)."""
    run_id, partition = int(row["run_id"]), row["partition"]
    own = _event(events, run_id, row["node"], row["seq"], partition)
    other = _event(events, run_id, row["prev_node"], row["prev_seq"], partition)
    value, bound, positions = row["value"], row["bound"], row["positions"]
    if kind == ISR_DIVERGENCE:
        at = records.get((partition, value), {})
        return {
            "partition": partition,
            "member": row["node"],
            "leader": row["peer"],
            "offset": value,
            "positions": positions,
            "leader_hw": bound,
            "isr_from": other,
            "replicas": {row["peer"]: at.get(row["peer"]), row["node"]: at.get(row["node"])},
        }
    example: dict[str, Any] = {"partition": partition, "node": row["node"]}
    if kind == HANGING_TRANSACTION:
        example.update(first_offset=value, lso=bound, held=positions, opened=own, coordinator_last=other)
    elif kind == UNMARKED_TRANSACTION:
        example.update(
            transactional_id=row["peer"],
            producer_id=value,
            producer_epoch=bound,
            missing_markers=positions,
            completed=own,
            prepared=other,
        )
    elif kind == LSO_PAST_OPEN_TRANSACTION:
        example.update(
            lso=value,
            first_offset=bound,
            passed_by=positions,
            outcome=row["peer"],
            lso_event=own,
            opened=other,
        )
    elif kind == TRUNCATED_COMMITTED:
        example.update(
            new_leo=value, committed_hw=bound, committed_cut=positions, truncate=own, exposed_by=other
        )
    elif kind == INCOMPLETE_LEADER:
        example.update(leo=value, exposed_hw=bound, missing=positions, election=own, exposed_by=other)
    elif kind == HW_REGRESSION:
        example.update(hw=value, previous_hw=bound, regressed_by=positions, exposure=own, previous=other)
    elif kind == METADATA_ROLLBACK:
        example.update(
            loaded_version=value,
            published_version=bound,
            versions_lost=positions,
            restart=own,
            published=other,
        )
    elif kind == EPOCH_REUSE:
        example.update(epoch=value, highest_before=bound, published=own, first_published=other)
    else:  # min-isr-violation
        example.update(isr_size=value, min_isr=bound, advanced_by=positions, hw=own)
    return example
