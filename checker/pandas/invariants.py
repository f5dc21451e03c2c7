"""The white-box checks with pandas: Kafka's replication invariants on the brokers' event logs.

The definitions (and the terms *before*, *exposure*, *lineage epoch*, *established*, *current
leader*) are :mod:`checker.definitions`'; this module is their oracle, written for clarity over a
pass's ``events.parquet`` tables (:mod:`testbed.record.event_table`, a few thousand rows per run),
and the Spark engine (:mod:`checker.spark.invariants`) computes the same rows with the same steps:

1. :func:`prepare` -- each log's ``ts`` lifted to its running maximum in ``seq`` order (``t``), and
   every event's place ``order`` in the run: rank by (``t``, ``node_name``, ``seq``);
2. the run's topic only; *exposures* are ``become-leader`` rows and leader ``hw`` rows;
3. truncated-committed and incomplete-leader join their events with the exposures before them
   (of epochs up to the lineage epoch, resp. below the new epoch) and take the highest HW;
4. hw-regression marks each exposure current or not (the newest epoch a ``become-leader``
   announced before it) and established or not (its tenure's LEO at election), and compares it
   with the running maximum of the current exposures before it;
5. min-isr-violation filters leader ``hw`` rows;
   epoch-reuse and metadata-rollback compare each of the controller's partition states (its
   starts) with the running maximum of the leader epochs (metadata versions) it published before,
   and find the first event that published it (:mod:`checker.controller_log`);
6. isr-divergence takes the controller's last published leader and ISR before the first broker
   ``shutdown`` and compares the members' dumped records below the leader's dumped HW
   (:func:`final_isr` here, the records by the engine).

Every answer is a frame of ``run_id`` (the events' run id), ``kind``, ``total`` and
:data:`checker.definitions.INVARIANT_EXAMPLE_COLUMNS`, ``limit`` examples per (run, kind) in
:data:`checker.definitions.INVARIANT_ORDER`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from checker.controller_log import PARTITION_STATE_KINDS, VERSION_COLUMNS, reused_epochs, rollbacks
from checker.definitions import (
    EPOCH_REUSE,
    HW_REGRESSION,
    INCOMPLETE_LEADER,
    INVARIANT_EXAMPLE_COLUMNS,
    INVARIANT_ORDER,
    ISR_DIVERGENCE,
    METADATA_ROLLBACK,
    MIN_ISR_VIOLATION,
    TRUNCATED_COMMITTED,
)
from checker.engine import to_pandas
from checker.evidence import RunInput
from checker.run_reads import read_run_table, read_runs
from checker.txn import white_box
from testbed.record.packed import RowSlice

EVENT_COLUMNS = (
    "run_id",
    "node_name",
    "process",
    "node",
    "seq",
    "ts",
    "kind",
    "topic",
    "partition",
    "role",
    "epoch",
    "leo",
    "hw",
    "old_leo",
    "old_hw",
    "queried_epoch",
    "min_isr",
    "isr",
    "leader",
    "lineage_epoch",
)
"""The columns of ``events.parquet`` the checks read (``line`` only for examples)."""
OUTPUT = ["run_id", "kind", "total", *INVARIANT_EXAMPLE_COLUMNS]
IMPLEMENTS: Final[frozenset[str]] = frozenset(
    {TRUNCATED_COMMITTED, INCOMPLETE_LEADER, HW_REGRESSION, MIN_ISR_VIOLATION, ISR_DIVERGENCE}
    | {EPOCH_REUSE, METADATA_ROLLBACK}  # the controller's log (checker.controller_log)
    | white_box.CHECKS
)
"""The registry entries (:mod:`checker.anomalies`) this module flags."""
_NONE = -1
"""Stands for "no epoch" and "no HW" in running maxima (epochs and HWs are >= 0)."""


def read_events(sources: Sequence[tuple[Path, RowSlice | None]]) -> pd.DataFrame:
    """The check columns of every ``events.parquet`` of a pass (or a run's rows of a packed
    file, :mod:`testbed.record.packed`), as one frame."""
    if not sources:
        return pd.DataFrame(columns=list(EVENT_COLUMNS))
    return to_pandas(read_runs(sources, EVENT_COLUMNS, ()))


def prepare(events: pd.DataFrame) -> pd.DataFrame:
    """Add ``t`` (``ts`` lifted to its running maximum within each log) and ``order`` (the
    0-based rank in the run by ``t``, ``node_name``, ``seq``); rows come back in that order."""
    events = events.sort_values(["run_id", "node_name", "seq"], kind="stable").reset_index(drop=True)
    events["t"] = events.groupby(["run_id", "node_name"], sort=False)["ts"].cummax().astype("int64")
    events = events.sort_values(["run_id", "t", "node_name", "seq"], kind="stable").reset_index(drop=True)
    events["order"] = events.groupby("run_id", sort=False).cumcount().astype("int64")
    return events


def of_topics(events: pd.DataFrame, topics: dict[int, str]) -> pd.DataFrame:
    """The rows of each run's own topic that name a partition."""
    wanted = events["topic"].notna() & events["partition"].notna()
    wanted &= events["topic"].to_numpy(dtype=object) == events["run_id"].map(topics).to_numpy(dtype=object)
    return events[wanted].reset_index(drop=True)


def exposures(rows: pd.DataFrame) -> pd.DataFrame:
    """The HWs leaders advertised: ``become-leader`` rows and leader ``hw`` rows (with epoch and HW)."""
    leader = (rows["kind"] == "become-leader") | ((rows["kind"] == "hw") & (rows["role"] == "leader"))
    return rows[leader & rows["hw"].notna() & rows["epoch"].notna()].reset_index(drop=True)


def _highest_before(queries: pd.DataFrame, shown: pd.DataFrame, below: str, inclusive: bool) -> pd.DataFrame:
    """Per query row (``key``): the highest exposure ``hw`` before it (``order``) whose epoch is
    below (or, ``inclusive``, at most) the query's column ``below``, and the first exposure of
    that HW (``prev_node``, ``prev_seq``); queries without one are dropped."""
    exposed = shown[["run_id", "partition", "order", "epoch", "hw", "node_name", "seq"]].rename(
        columns={
            "order": "x_order",
            "epoch": "x_epoch",
            "hw": "bound",
            "node_name": "prev_node",
            "seq": "prev_seq",
        }
    )
    pairs = queries[["key", "run_id", "partition", "order", below]].merge(exposed, on=["run_id", "partition"])
    limit = pairs[below].astype("int64")
    epoch_ok = pairs["x_epoch"] <= limit if inclusive else pairs["x_epoch"] < limit
    pairs = pairs[(pairs["x_order"] < pairs["order"]) & epoch_ok.fillna(False).astype(bool)]
    if pairs.empty:
        return pd.DataFrame(columns=["key", "bound", "prev_node", "prev_seq"])
    pairs = pairs.sort_values(["key", "bound", "x_order"], ascending=[True, False, True], kind="stable")
    return pairs.drop_duplicates("key")[["key", "bound", "prev_node", "prev_seq"]]


def lineage(rows: pd.DataFrame) -> pd.Series:
    """Each row's replica lineage epoch as tracked from its own node's events (see the definitions):
    the running maximum, since the node last opened the replica, of the epoch cache's last epoch at
    ``replica-opened``, the epochs it led and those whose leader it learned a HW from."""
    kind = rows["kind"]
    evidence = pd.Series(np.full(len(rows), _NONE, dtype=np.int64), index=rows.index)
    opened = kind == "replica-opened"
    led = kind == "become-leader"
    followed = (kind == "hw") & (rows["role"] == "follower")
    evidence[opened] = rows.loc[opened, "lineage_epoch"].fillna(_NONE).astype("int64")
    evidence[led | followed] = rows.loc[led | followed, "epoch"].fillna(_NONE).astype("int64")
    frame = rows[["run_id", "node_name", "partition", "order"]].assign(
        evidence=evidence, opened=opened.astype("int64")
    )
    frame = frame.sort_values(["run_id", "node_name", "partition", "order"], kind="stable")
    frame["incarnation"] = frame.groupby(["run_id", "node_name", "partition"], sort=False)["opened"].cumsum()
    keys = ["run_id", "node_name", "partition", "incarnation"]
    return frame.groupby(keys, sort=False)["evidence"].cummax().reindex(rows.index)


def truncated_committed(rows: pd.DataFrame, shown: pd.DataFrame) -> pd.DataFrame:
    cut = (rows["kind"] == "truncate") & rows["leo"].notna() & rows["old_leo"].notna()
    cut &= (rows["leo"] < rows["old_leo"]).fillna(False).astype(bool)
    tracked = lineage(rows)
    truncations = rows[cut].assign(
        lineage=rows.loc[cut, "queried_epoch"].astype("Int64").fillna(tracked[cut]).astype("int64")
    )
    truncations = truncations.assign(key=np.arange(len(truncations)))
    found = truncations.merge(_highest_before(truncations, shown, "lineage", inclusive=True), on="key")
    found = found[found["leo"] < found["bound"]]
    committed_end = np.minimum(found["old_leo"].to_numpy(np.int64), found["bound"].to_numpy(np.int64))
    return _examples(found, TRUNCATED_COMMITTED, "leo", committed_end - found["leo"].to_numpy(np.int64))


def incomplete_leader(shown: pd.DataFrame) -> pd.DataFrame:
    elections = shown[(shown["kind"] == "become-leader") & shown["leo"].notna()]
    elections = elections.assign(key=np.arange(len(elections)))
    found = elections.merge(_highest_before(elections, shown, "epoch", inclusive=False), on="key")
    found = found[found["leo"] < found["bound"]]
    return _examples(found, INCOMPLETE_LEADER, "leo", (found["bound"] - found["leo"]).to_numpy(np.int64))


def hw_regression(shown: pd.DataFrame) -> pd.DataFrame:
    """Current, established exposures below the running maximum of the current exposures before
    them; one per leader tenure (its first)."""
    frame = shown.sort_values(["run_id", "partition", "order"], kind="stable").reset_index(drop=True)
    partition = ["run_id", "partition"]
    announced = frame["epoch"].where(frame["kind"] == "become-leader", _NONE).astype("int64")
    elected = frame.assign(a=announced).groupby(partition, sort=False)["a"].cummax()
    elected_before = elected.groupby([frame[c] for c in partition], sort=False).shift(1).fillna(_NONE)
    current = frame["epoch"].astype("int64") >= elected_before.astype("int64")
    # The tenure's LEO at election: the node's latest become-leader, if it is of this epoch.
    by_node = frame.sort_values(["run_id", "partition", "node_name", "order"], kind="stable")
    tenure = ["run_id", "partition", "node_name"]
    is_election = by_node["kind"] == "become-leader"
    start_leo = by_node["leo"].where(is_election).groupby([by_node[c] for c in tenure], sort=False).ffill()
    start_epoch = (
        by_node["epoch"].where(is_election).groupby([by_node[c] for c in tenure], sort=False).ffill()
    )
    start_leo, start_epoch = start_leo.reindex(frame.index), start_epoch.reindex(frame.index)
    established = (start_epoch == frame["epoch"]).fillna(False) & (frame["hw"] >= start_leo).fillna(False)
    current_hw = frame["hw"].where(current, _NONE).astype("int64")
    running = frame.assign(c=current_hw).groupby(partition, sort=False)["c"].cummax()
    highest_before = running.groupby([frame[c] for c in partition], sort=False).shift(1).fillna(_NONE)
    frame = frame.assign(bound=highest_before.astype("int64"), current=current)
    regressed = frame[current & established.astype(bool) & (frame["hw"] < frame["bound"])]
    first = regressed.sort_values("order", kind="stable").drop_duplicates(
        ["run_id", "partition", "node_name", "epoch"]
    )
    earlier = frame[frame["current"]][["run_id", "partition", "order", "hw", "node_name", "seq"]]
    first = first.assign(key=np.arange(len(first)))
    pairs = first[["key", "run_id", "partition", "order", "bound"]].merge(
        earlier, on=["run_id", "partition"], suffixes=("", "_x")
    )
    pairs = pairs[(pairs["order_x"] < pairs["order"]) & (pairs["hw"] == pairs["bound"])]
    prev = (
        pairs.sort_values(["key", "order_x"], kind="stable")
        .drop_duplicates("key")
        .rename(columns={"node_name": "prev_node", "seq": "prev_seq"})[["key", "prev_node", "prev_seq"]]
    )
    found = first.merge(prev, on="key", how="left")
    return _examples(found, HW_REGRESSION, "hw", (found["bound"] - found["hw"]).to_numpy(np.int64))


def min_isr_violation(shown: pd.DataFrame) -> pd.DataFrame:
    advances = shown[(shown["kind"] == "hw") & shown["isr"].notna() & shown["min_isr"].notna()]
    sizes = pd.Series([len(isr) for isr in advances["isr"]], index=advances.index, dtype="int64")
    found = advances.assign(size=sizes, bound=advances["min_isr"].astype("int64"))
    found = found[found["size"] < found["bound"]]
    found = found.assign(prev_node=None, prev_seq=pd.NA)
    return _examples(found, MIN_ISR_VIOLATION, "size", (found["hw"] - found["old_hw"]).to_numpy())


def epoch_reuse(rows: pd.DataFrame) -> pd.DataFrame:
    found = reused_epochs(rows)
    return _examples(found, EPOCH_REUSE, "epoch", np.ones(len(found), dtype=np.int64))


def final_isr(events: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``run_id, partition, leader, member, prev_node, prev_seq``: each member (besides the leader)
    of the controller's last published ISR before the first broker ``shutdown``, node names from
    the brokers' own logs (an id no log names is left out: its log is missing, which the evidence
    already reports); partitions without a leader are left out."""
    shutdowns = events[(events["kind"] == "shutdown") & (events["process"] == "broker")]
    cutoff = shutdowns.groupby("run_id")["order"].min()
    states = rows[(rows["process"] == "controller") & rows["kind"].isin(PARTITION_STATE_KINDS)]
    states = states[states["leader"].notna() & states["isr"].notna()]
    limit = states["run_id"].map(cutoff)  # NaN: no broker shut down cleanly, every state counts
    states = states[(limit.isna() | (states["order"] < limit)).astype(bool)]
    last = states.sort_values("order", kind="stable").drop_duplicates(["run_id", "partition"], keep="last")
    last = last[last["leader"] >= 0]
    names = events[events["process"] == "broker"].groupby(["run_id", "node"])["node_name"].min()
    members = [
        (run_id, partition, leader, member, node_name, seq)
        for run_id, partition, leader, isr, node_name, seq in last[
            ["run_id", "partition", "leader", "isr", "node_name", "seq"]
        ].itertuples(index=False)
        for member in isr
        if member != leader
    ]
    frame = pd.DataFrame(
        members, columns=["run_id", "partition", "leader_id", "member_id", "prev_node", "prev_seq"]
    )
    frame["leader"] = [
        names.get((r, int(i))) for r, i in zip(frame["run_id"], frame["leader_id"], strict=True)
    ]
    frame["member"] = [
        names.get((r, int(i))) for r, i in zip(frame["run_id"], frame["member_id"], strict=True)
    ]
    frame = frame[frame["leader"].notna() & frame["member"].notna()]
    return frame[["run_id", "partition", "leader", "member", "prev_node", "prev_seq"]].reset_index(drop=True)


def isr_divergence(pairs: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """Positions below the leader's HW where a member's record differs from the leader's or is missing.

    ``pairs``: :func:`final_isr` plus ``hw`` (the leader's dumped HW); ``records``: ``run_id``
    (the events' run id), ``node``, ``partition``, ``offset``, ``record_id`` of those nodes."""
    if pairs.empty or records.empty:
        return pd.DataFrame(columns=OUTPUT)
    keyed = pairs.assign(key=np.arange(len(pairs)))
    led = keyed.merge(
        records.rename(columns={"node": "leader", "record_id": "leader_record"}),
        on=["run_id", "partition", "leader"],
    )
    led = led[led["offset"] < led["hw"]]
    held = led.merge(
        records.rename(columns={"node": "member", "record_id": "member_record"}),
        on=["run_id", "partition", "member", "offset"],
        how="left",
    )
    differ = held["member_record"].isna() | (held["member_record"] != held["leader_record"]).fillna(True)
    held = held[differ.astype(bool)]
    if held.empty:
        return pd.DataFrame(columns=OUTPUT)
    grouped = held.groupby("key").agg(offset=("offset", "min"), positions=("offset", "size")).reset_index()
    found = keyed.merge(grouped, on="key")
    found = found.assign(ts=pd.NA, seq=pd.NA, node=found["member"], peer=found["leader"], bound=found["hw"])
    return _examples(found, ISR_DIVERGENCE, "offset", found["positions"].to_numpy(np.int64))


def _examples(found: pd.DataFrame, kind: str, value: str, positions: np.ndarray) -> pd.DataFrame:
    """``found`` as example rows of ``kind`` (``value``: the column compared; ``positions`` per row)."""
    if found.empty:
        return pd.DataFrame(columns=OUTPUT)
    found = found.reset_index(drop=True)
    isr = kind == ISR_DIVERGENCE
    missing = pd.Series([None] * len(found), dtype=object)
    frame = pd.DataFrame(
        {
            "run_id": found["run_id"].to_numpy(np.int64),
            "kind": kind,
            "partition": pd.array(found["partition"], dtype="Int32"),
            "ts": pd.array(found["ts"] if isr else found["t"], dtype="Int64"),
            "node": (found["node"] if isr else found["node_name"]).astype(object),
            "seq": pd.array(found["seq"], dtype="Int64"),
            "value": pd.array(found[value], dtype="Int64"),
            "bound": pd.array(found["bound"], dtype="Int64"),
            "positions": pd.array(positions, dtype="Int64"),
            "prev_node": found.get("prev_node", missing).astype(object),
            "prev_seq": pd.array(found.get("prev_seq", missing), dtype="Int64"),
            "peer": found.get("peer", missing).astype(object),
        }
    )
    for column in ("node", "prev_node", "peer"):  # merges leave NaN for a missing name: None, as Spark's null
        frame[column] = [None if pd.isna(name) else str(name) for name in frame[column]]
    return frame


def top(found: pd.DataFrame, limit: int) -> pd.DataFrame:
    """The first ``limit`` rows per (run, kind) in :data:`INVARIANT_ORDER`, each with its ``total``
    (rows; for isr-divergence, positions)."""
    if found.empty:
        return pd.DataFrame(columns=OUTPUT)
    found = found.sort_values(["run_id", "kind", *INVARIANT_ORDER], na_position="first", kind="stable")
    # Each row counts once, but an isr-divergence row is a (partition, member): its positions count.
    weight = found["positions"].where(found["kind"] == ISR_DIVERGENCE, 1).astype("int64")
    total = weight.groupby([found["run_id"], found["kind"]], sort=False).transform("sum").astype("int64")
    found = found.assign(total=total)
    return found[found.groupby(["run_id", "kind"], sort=False).cumcount() < limit][OUTPUT].reset_index(
        drop=True
    )


def event_anomalies(events: pd.DataFrame, topics: dict[int, str], checks: frozenset[str]) -> pd.DataFrame:
    """Every example row of the event-only checks among ``checks`` (all, not yet limited)."""
    rows = of_topics(events, topics)
    shown = exposures(rows)
    found = []
    if TRUNCATED_COMMITTED in checks:
        found.append(truncated_committed(rows, shown))
    if INCOMPLETE_LEADER in checks:
        found.append(incomplete_leader(shown))
    if HW_REGRESSION in checks:
        found.append(hw_regression(shown))
    if MIN_ISR_VIOLATION in checks:
        found.append(min_isr_violation(shown))
    if EPOCH_REUSE in checks:
        found.append(epoch_reuse(rows))
    found = [frame for frame in found if not frame.empty]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=OUTPUT)


def replica_records(path: Path, rows: RowSlice | None, topic: str, nodes: list[str]) -> pd.DataFrame:
    """``node, partition, offset, record_id`` of ``nodes`` in the run's topic, from ``replicas.parquet``
    (or the run's ``rows`` of a packed file)."""
    table = read_run_table(path, rows, ["node", "topic", "partition", "offset", "record_id"], ())
    table = table.filter(pc.and_(pc.equal(table["topic"], topic), pc.is_in(table["node"], pa.array(nodes))))
    return to_pandas(table.drop(["topic"]))


def isr_pairs(runs: Sequence[RunInput], pairs: pd.DataFrame) -> pd.DataFrame:
    """:func:`final_isr` pairs whose leader and member were both dumped, with the leader's dumped
    HW (``hw``; a dump without a line for the partition counts 0, as for replica-divergence)."""
    by_run = {run.events_run_id: run for run in runs}
    keep, marks = [], []
    for run_id, partition, leader, member in pairs[["run_id", "partition", "leader", "member"]].itertuples(
        index=False
    ):
        run = by_run[int(run_id)]
        dumped = set(run.replica_nodes) - set(run.missing_nodes) if run.replicas_path is not None else set()
        keep.append(leader in dumped and member in dumped)
        marks.append(run.high_watermarks.get(leader, {}).get(int(partition), 0))
    return pairs.assign(hw=pd.array(marks, dtype="Int64"))[np.array(keep, dtype=bool)].reset_index(drop=True)


def pass_anomalies(runs: Sequence[RunInput], checks: frozenset[str], limit: int) -> pd.DataFrame:
    """The white-box checks among ``checks`` for the runs with event logs (``events_path``)."""
    runs = [run for run in runs if run.events_path is not None and run.events_run_id is not None]
    if not runs:
        return pd.DataFrame(columns=OUTPUT)
    events = prepare(
        read_events([(run.events_path, run.events_slice) for run in runs if run.events_path is not None])
    )
    topics = {int(run.events_run_id): run.topic for run in runs if run.events_run_id is not None}
    found = [event_anomalies(events, topics, checks)]
    if checks & white_box.CHECKS:
        found.append(white_box.pass_anomalies(runs, checks & white_box.CHECKS))
    if METADATA_ROLLBACK in checks:
        sources = [(run.events_path, run.events_slice) for run in runs if run.events_path is not None]
        lost = rollbacks(to_pandas(read_runs(sources, VERSION_COLUMNS, ())))
        found.append(
            _examples(
                lost, METADATA_ROLLBACK, "version", (lost["bound"] - lost["version"]).to_numpy(np.int64)
            )
        )
    if ISR_DIVERGENCE in checks:
        pairs = isr_pairs(runs, final_isr(events, of_topics(events, topics)))
        records = []
        for run in runs:
            of_run = pairs[pairs["run_id"] == run.events_run_id]
            if of_run.empty or run.replicas_path is None:
                continue
            nodes = sorted(set(of_run["leader"]) | set(of_run["member"]))
            records.append(
                replica_records(run.replicas_path, run.replicas_slice, run.topic, nodes).assign(
                    run_id=run.events_run_id
                )
            )
        if records:
            found.append(isr_divergence(pairs, pd.concat(records, ignore_index=True)))
    found = [frame for frame in found if not frame.empty]
    return top(pd.concat(found, ignore_index=True), limit) if found else pd.DataFrame(columns=OUTPUT)
