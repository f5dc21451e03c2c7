"""The consumer-group checks of :mod:`checker.definitions` on pandas frames.

The group ops (``assign``, ``revoke``, ``commit``) are stored as "other client op" rows whose
value is JSON text in ``payload`` (``docs/history.md``): there are few of them -- at most one
commit per non-empty poll, one assign and one revoke per rebalance -- so they are decoded
here, once per pass, rather than given columns of their own.  :func:`decode_payload` reads a
value exactly as Spark's ``from_json`` does with :mod:`checker.spark.groups`' schema (a field
that is not a JSON integer is unknown; an ``offsets`` object holding anything but integers
and nulls is unknown as a whole), so both engines see the same ops.

The steps, each the counterpart of one Spark query:

* :func:`group_ops` -- one row per group-op invoke, with its completion's index and outcome
  (a process's next row is its completion: it has one op pending at a time);
* :func:`members` -- each member process with its takeover chain and generation;
* :func:`commits` -- one row per (commit, partition);
* :func:`evidence` -- the known committed positions: ``ok`` commits and resume positions;
* :func:`group_anomalies` -- the five checks, one row per anomaly with ``kind`` and
  :data:`checker.definitions.GROUP_EXAMPLE_COLUMNS` (generation-regression reads the assigns
  alone: :func:`_generation_regressions`).

:class:`checker.pandas.engine.PandasEngine` keeps the first examples of each kind.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pandas as pd

from checker.definitions import (
    ASSIGN,
    COMMIT,
    COMMIT_REGRESSION,
    COMMITTED_BEYOND_READ,
    GENERATION_REGRESSION,
    GROUP_EXAMPLE_COLUMNS,
    GROUP_REDELIVERY,
    GROUP_SKIP,
    PARTITION_KEY_PATTERN,
    REVOKE,
    TYPE_INVOKE,
    TYPE_OK,
)
from checker.pandas.candidates import Columns
from testbed.record.history import F_OTHER, POLL_CODES, SEND_CODES

GROUP_OPS = (ASSIGN, REVOKE, COMMIT)
OP_COLUMNS = ["run_id", "process", "index", "type", "f_name", "payload"]
"""The columns of the group-op rows (``f`` = other client op, ``f_name`` one of :data:`GROUP_OPS`)."""
READ_COLUMNS = ["run_id", "process", "partition", "index", "item", "offset"]
"""The columns of the ``ok`` poll records the group checks read."""
ACK_COLUMNS = ["run_id", "partition", "offset", "index"]
"""The columns of the ``ok`` sends with an offset >= 0 that group-skip reads."""
OUTPUT = ["run_id", "kind", *GROUP_EXAMPLE_COLUMNS]
ANSWER = ["run_id", "kind", "total", *GROUP_EXAMPLE_COLUMNS]
"""What ``Engine.group_anomalies`` answers (``total``: the anomalies of the kind in the run)."""
IMPLEMENTS: Final[frozenset[str]] = frozenset(
    {GROUP_SKIP, GROUP_REDELIVERY, COMMIT_REGRESSION, COMMITTED_BEYOND_READ, GENERATION_REGRESSION}
)
"""The registry entries (:mod:`checker.anomalies`) this module flags."""
FIELDS = ("generation", "takeover", "consumer", "polled_by")
"""The integer fields of a group op's value that the checks read."""

_INT64 = (-(2**63), 2**63 - 1)
_PARTITION_KEY = re.compile(PARTITION_KEY_PATTERN)


def _integer(value: Any) -> int | None:
    """A JSON integer that fits 64 bits, else None (booleans, floats, text: unknown)."""
    return value if type(value) is int and _INT64[0] <= value <= _INT64[1] else None


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order: duplicate keys kept, as Spark's parser sees them."""


def _last(pairs: _Pairs, name: str, readable: Callable[[Any], bool]) -> Any:
    """The last value of field ``name`` that ``readable`` accepts (null included), else None:
    a value Spark cannot convert leaves the field as it was, a null sets it to null."""
    found = None
    for key, value in pairs:
        if key == name and (value is None or readable(value)):
            found = value
    return found


def _offsets(value: Any) -> bool:
    return isinstance(value, _Pairs) and all(v is None or _integer(v) is not None for _, v in value)


def decode_payload(payload: str | None) -> dict[str, Any]:
    """The fields of :data:`FIELDS` (int or None) and ``offsets`` (a list of (partition, offset)).

    Spark's ``from_json`` rules, kept here for the pandas engine (``tests/checker/spark/
    test_groups.py`` compares them): a value that is not an object has no fields; a field given
    twice takes its last value that converts (a null does; text, a float, an object do not);
    ``offsets`` converts when every value is an integer or null, and keeps every entry, a key
    given twice included; keys that are not plain decimal numbers and null offsets are left out.
    """
    try:
        value = json.loads(payload, object_pairs_hook=_Pairs) if payload is not None else None
    except ValueError:
        value = None
    pairs = value if isinstance(value, _Pairs) else _Pairs()
    fields: dict[str, Any] = {name: _last(pairs, name, lambda v: _integer(v) is not None) for name in FIELDS}
    offsets = _last(pairs, "offsets", _offsets) or _Pairs()
    fields["offsets"] = [(int(k), v) for k, v in offsets if v is not None and _PARTITION_KEY.match(k)]
    return fields


def group_ops(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per group-op invoke: ``run_id, process, f_name, invoke_index, complete_index,
    outcome`` (null: no completion, read as ``info``) and the decoded fields of its value."""
    rows = rows.sort_values(["run_id", "process", "index"], kind="stable", ignore_index=True)
    after = rows.groupby(["run_id", "process"], sort=False)[["index", "type", "f_name"]].shift(-1)
    completed = ((after["f_name"] == rows["f_name"]) & (after["type"] != TYPE_INVOKE)).fillna(False)
    ops = rows.assign(
        complete_index=after["index"].where(completed.astype(bool)),
        outcome=after["type"].where(completed.astype(bool)),
    )[(rows["type"] == TYPE_INVOKE).to_numpy()]
    decoded = [decode_payload(text) for text in ops["payload"].tolist()]
    frame = pd.DataFrame(
        {
            "run_id": ops["run_id"].astype("int64").to_numpy(),
            "process": ops["process"].astype("int64").to_numpy(),
            "f_name": ops["f_name"].astype(object).to_numpy(),
            "invoke_index": ops["index"].astype("int64").to_numpy(),
            "complete_index": pd.array(ops["complete_index"], dtype="Int64"),
            "outcome": pd.array(ops["outcome"], dtype="Int64"),
            **{name: pd.array([d[name] for d in decoded], dtype="Int64") for name in FIELDS},
        }
    )
    frame["offsets"] = [d["offsets"] for d in decoded]
    return frame


def members(ops: pd.DataFrame) -> pd.DataFrame:
    """``run_id, process, root, generation, fresh`` for each process with an ``assign`` (its first).

    ``root`` names the takeover chain: a takeover assign continues the chain of its consumer's
    last assign that was not a takeover (none, or no consumer recorded: its own); ``fresh``:
    the chain's first assign is not a takeover, so its first reads are resume positions.
    """
    assigns = ops[(ops["f_name"] == ASSIGN).to_numpy()].sort_values(["run_id", "invoke_index"], kind="stable")
    assigns = assigns.drop_duplicates(["run_id", "process"]).reset_index(drop=True)
    anchor = assigns["process"].astype("Int64").where(assigns["takeover"].isna())
    chained = anchor.groupby([assigns["run_id"], assigns["consumer"]], sort=False).ffill()
    root = chained.where(assigns["consumer"].notna()).fillna(assigns["process"]).astype("int64")
    return pd.DataFrame(
        {
            "run_id": assigns["run_id"],
            "process": assigns["process"],
            "root": root,
            "generation": assigns["generation"],
            "fresh": ((root != assigns["process"]) | assigns["takeover"].isna()).astype(bool),
        }
    )


def chains(members_: pd.DataFrame) -> pd.DataFrame:
    """``run_id, process, chain``: the takeover processes, each with its chain's first process
    (the order checks read a chain as one consumer; every other process is its own chain)."""
    moved = members_[(members_["root"] != members_["process"]).to_numpy()]
    return moved[["run_id", "process"]].assign(chain=moved["root"]).reset_index(drop=True)


def with_chain(reads: pd.DataFrame, chained: pd.DataFrame) -> pd.DataFrame:
    """``reads`` with a ``chain`` column: the takeover chain's first process, or its own process."""
    joined = reads.merge(chained, on=["run_id", "process"], how="left")
    return joined.assign(chain=joined["chain"].fillna(joined["process"]).astype("int64"))


def commits(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per (commit, partition named in its offsets): ``run_id, process, reader``
    (``polled_by``, else the committer), ``invoke_index, complete_index, outcome, generation,
    partition, offset``."""
    rows = ops[(ops["f_name"] == COMMIT).to_numpy()]
    exploded = rows.explode("offsets")
    exploded = exploded[exploded["offsets"].notna().to_numpy()]
    entries = exploded["offsets"].tolist()
    return pd.DataFrame(
        {
            "run_id": exploded["run_id"].to_numpy(),
            "process": exploded["process"].to_numpy(),
            "reader": pd.array(exploded["polled_by"].fillna(exploded["process"]), dtype="int64"),
            "invoke_index": exploded["invoke_index"].to_numpy(),
            "complete_index": pd.array(exploded["complete_index"], dtype="Int64"),
            "outcome": pd.array(exploded["outcome"], dtype="Int64"),
            "generation": pd.array(exploded["generation"], dtype="Int64"),
            "partition": pd.array([p for p, _ in entries], dtype="int64"),
            "offset": pd.array([o for _, o in entries], dtype="int64"),
        }
    )


def evidence(member_reads: pd.DataFrame, members_: pd.DataFrame, ok: pd.DataFrame) -> pd.DataFrame:
    """The known committed positions: ``run_id, partition, offset, generation, index`` of each
    ``ok`` commit (its completion) and each resume position (the first read of a fresh chain)."""
    roots = members_[(members_["fresh"] & (members_["root"] == members_["process"])).to_numpy()]
    first = member_reads.sort_values(["run_id", "root", "partition", "index", "item"], kind="stable")
    first = first.drop_duplicates(["run_id", "root", "partition"])
    resumed = first[["run_id", "root", "partition", "offset", "index"]].merge(
        roots[["run_id", "process", "generation"]].rename(columns={"process": "root"}), on=["run_id", "root"]
    )
    parts = [
        ok[["run_id", "partition", "offset", "generation", "complete_index"]].rename(
            columns={"complete_index": "index"}
        ),
        resumed.drop(columns=["root"]),
    ]
    frame = pd.concat([part for part in parts if not part.empty] or parts[:1], ignore_index=True)
    return frame.astype(
        {"run_id": "int64", "partition": "int64", "offset": "int64", "generation": "Int64", "index": "int64"}
    )


def _found(rows: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Anomaly rows of ``kind`` with every output column (missing ones null)."""
    rows = rows.assign(kind=kind)
    for name in ("run_id", *GROUP_EXAMPLE_COLUMNS):
        if name not in rows:
            rows[name] = pd.NA
    return rows[OUTPUT].astype({"run_id": "int64", **dict.fromkeys(GROUP_EXAMPLE_COLUMNS, "Int64")})


def _highest_so_far(frame: pd.DataFrame, keys: list[str], carried: list[str]) -> pd.DataFrame:
    """Per ``keys`` (rows in order): ``prev_offset``, the running maximum of ``offset``, and
    ``prev_index`` plus ``carried`` of the first row that reached it -- as Spark's
    ``max(struct(offset, -index, ...))`` over the rows so far."""
    groups = [frame[key] for key in keys]
    running = frame.groupby(groups, sort=False)["offset"].cummax()
    raised = ~frame.duplicated(keys) | (running != running.groupby(groups, sort=False).shift(1))
    raised = raised.fillna(True).astype(bool)
    out = frame[keys].assign(prev_offset=running.astype("int64"))
    for name, column in (("prev_index", "index"), *((c, c) for c in carried)):
        out[name] = frame[column].astype("Int64").where(raised).groupby(groups, sort=False).ffill()
    return out


def _explained(candidates: pd.DataFrame, late: pd.DataFrame, at: str) -> pd.Series:
    """Which ``candidates`` (``run_id, partition, offset``, the op index ``at`` and the known
    position's ``known_generation``) a late commit explains: one of ``late`` (the commits that
    did not end ``ok``) of the partition, invoked before ``at``, at or below ``offset``, whose
    generation is not older than ``known_generation`` (either unknown: it may be)."""
    if candidates.empty or late.empty:
        return pd.Series(False, index=candidates.index)
    pairs = (
        candidates.rename_axis("row")
        .reset_index()
        .merge(
            late[["run_id", "partition", "invoke_index", "offset", "generation"]].rename(
                columns={"invoke_index": "i_at", "offset": "i_offset", "generation": "i_generation"}
            ),
            on=["run_id", "partition"],
        )
    )
    newer = (pairs["i_generation"] >= pairs["known_generation"]).fillna(True).astype(bool)
    hit = (
        (pairs["i_at"] < pairs[at]).astype(bool) & (pairs["i_offset"] <= pairs["offset"]).astype(bool) & newer
    )
    return pd.Series(candidates.index.isin(pairs.loc[hit.to_numpy(), "row"].unique()), index=candidates.index)


def _skips(acks: pd.DataFrame, member_reads: pd.DataFrame, known: pd.DataFrame) -> pd.DataFrame:
    """Acknowledged positions below the highest known committed position that no member read."""
    top = known.sort_values(["run_id", "partition", "offset", "index"], ascending=[True, True, False, True])
    top = top.drop_duplicates(["run_id", "partition"]).rename(
        columns={"offset": "prev_offset", "index": "prev_index"}
    )
    acks = acks.astype({"run_id": "int64", "partition": "int64", "offset": "int64", "index": "int64"})
    acked = acks.groupby(["run_id", "partition", "offset"], as_index=False)["index"].min()
    below = acked.merge(top[["run_id", "partition", "prev_offset", "prev_index"]], on=["run_id", "partition"])
    below = below[(below["offset"] < below["prev_offset"]).to_numpy()]
    read = member_reads[["run_id", "partition", "offset"]].drop_duplicates().assign(read=True)
    below = below.merge(read, on=["run_id", "partition", "offset"], how="left")
    return _found(below[below["read"].isna().to_numpy()], GROUP_SKIP)


def _redeliveries(member_reads: pd.DataFrame, known: pd.DataFrame, late: pd.DataFrame) -> pd.DataFrame:
    """Member reads below a known committed position of an older generation, not explained."""
    known = known[known["generation"].notna().to_numpy()].astype({"generation": "int64"})
    reads = member_reads[member_reads["generation"].notna().to_numpy()].astype({"generation": "int64"})
    if known.empty or reads.empty:
        return _found(pd.DataFrame(), GROUP_REDELIVERY)
    keys = ["run_id", "partition"]
    known = known.sort_values([*keys, "generation", "index"], kind="stable", ignore_index=True)
    floors = _highest_so_far(known, keys, ["generation"]).rename(columns={"generation": "known_generation"})
    floors = floors.assign(generation=known["generation"]).sort_values("generation", kind="stable")
    matched = pd.merge_asof(
        reads.sort_values("generation", kind="stable"),
        floors,
        on="generation",
        by=keys,
        allow_exact_matches=False,  # strictly older generations
    )
    candidates = matched[(matched["offset"] < matched["prev_offset"]).fillna(False).astype(bool).to_numpy()]
    candidates = candidates[~_explained(candidates, late, "index").to_numpy()]
    first = candidates.sort_values(["run_id", "process", "partition", "index", "item"], kind="stable")
    return _found(first.drop_duplicates(["run_id", "process", "partition", "index"]), GROUP_REDELIVERY)


def _regressions(ok: pd.DataFrame, late: pd.DataFrame) -> pd.DataFrame:
    """``ok`` commits below the highest offset ``ok``-committed before their invoke, not explained."""
    if ok.empty:
        return _found(pd.DataFrame(), COMMIT_REGRESSION)
    keys = ["run_id", "partition"]
    done = ok.assign(index=ok["complete_index"].astype("int64"))
    done = done.sort_values([*keys, "index"], kind="stable", ignore_index=True)
    known = _highest_so_far(done, keys, ["generation"]).rename(columns={"generation": "known_generation"})
    known = known.assign(at=done["index"]).sort_values("at", kind="stable")
    later = ok.assign(at=ok["invoke_index"].astype("int64")).sort_values("at", kind="stable")
    matched = pd.merge_asof(later, known, on="at", by=keys, allow_exact_matches=False)
    candidates = matched[(matched["offset"] < matched["prev_offset"]).fillna(False).astype(bool).to_numpy()]
    candidates = candidates[~_explained(candidates, late, "invoke_index").to_numpy()]
    return _found(candidates.assign(index=candidates["complete_index"]), COMMIT_REGRESSION)


def _generation_regressions(ops: pd.DataFrame) -> pd.DataFrame:
    """``ok`` assigns (not takeovers) below the highest generation an ``ok`` assign of the same
    consumer completed before their invoke; null generations and consumers take no part."""
    ok = (ops["f_name"] == ASSIGN) & (ops["outcome"] == TYPE_OK) & ops["generation"].notna()
    assigns = ops[(ok & ops["consumer"].notna()).fillna(False).astype(bool).to_numpy()]
    if assigns.empty:
        return _found(pd.DataFrame(), GENERATION_REGRESSION)
    keys = ["run_id", "consumer"]
    assigns = assigns.astype({"consumer": "int64", "generation": "int64", "complete_index": "int64"})
    done = assigns.assign(index=assigns["complete_index"], offset=assigns["generation"])
    done = done.sort_values([*keys, "index"], kind="stable", ignore_index=True)
    known = _highest_so_far(done, keys, []).assign(at=done["index"]).sort_values("at", kind="stable")
    fresh = assigns[assigns["takeover"].isna().to_numpy()]
    later = fresh.assign(at=fresh["invoke_index"].astype("int64")).sort_values("at", kind="stable")
    matched = pd.merge_asof(later, known, on="at", by=keys, allow_exact_matches=False)
    below = matched[(matched["generation"] < matched["prev_offset"]).fillna(False).astype(bool).to_numpy()]
    return _found(
        below.assign(index=below["complete_index"], offset=below["generation"]), GENERATION_REGRESSION
    )


def _beyond_read(ok: pd.DataFrame, reads: pd.DataFrame) -> pd.DataFrame:
    """``ok`` commits (with their reader's ``chain``) past the highest offset that chain had read + 1."""
    if ok.empty:
        return _found(pd.DataFrame(), COMMITTED_BEYOND_READ)
    keys = ["run_id", "chain", "partition"]
    per_op = reads.groupby([*keys, "index"], sort=True, as_index=False)["offset"].max()
    read = _highest_so_far(per_op, keys, []).assign(at=per_op["index"].astype("int64"))
    later = ok.assign(at=ok["invoke_index"].astype("int64")).sort_values("at", kind="stable")
    if read.empty:
        matched = later.assign(prev_offset=pd.NA, prev_index=pd.NA)
    else:
        matched = pd.merge_asof(
            later, read.sort_values("at", kind="stable"), on="at", by=keys, allow_exact_matches=False
        )
    allowed = (matched["prev_offset"].astype("Int64") + 1).fillna(0)
    beyond = matched[(matched["offset"] > allowed).astype(bool).to_numpy()]
    return _found(beyond.assign(index=beyond["complete_index"]), COMMITTED_BEYOND_READ)


def group_anomalies(
    ops: pd.DataFrame, reads: pd.DataFrame, acks: pd.DataFrame, checks: frozenset[str]
) -> pd.DataFrame:
    """Every group anomaly among ``checks`` in one pass: from its group ops (:func:`group_ops`),
    ``ok`` poll records (:data:`READ_COLUMNS`) and acknowledged sends (:data:`ACK_COLUMNS`)."""
    members_ = members(ops)
    reads = reads.astype({"run_id": "int64", "process": "int64", "partition": "int64", "offset": "int64"})
    member_reads = reads.merge(
        members_[["run_id", "process", "root", "generation"]], on=["run_id", "process"]
    )
    commits_ = commits(ops)
    is_ok = (commits_["outcome"] == TYPE_OK).fillna(False).astype(bool).to_numpy()
    ok, late = commits_[is_ok], commits_[~is_ok]
    known = evidence(member_reads, members_, ok)
    parts = []
    if GROUP_SKIP in checks:
        parts.append(_skips(acks, member_reads, known))
    if GROUP_REDELIVERY in checks:
        parts.append(_redeliveries(member_reads, known, late))
    if COMMIT_REGRESSION in checks:
        parts.append(_regressions(ok, late))
    if COMMITTED_BEYOND_READ in checks:
        chained = chains(members_)
        by_reader = with_chain(ok.rename(columns={"process": "committer", "reader": "process"}), chained)
        by_reader = by_reader.rename(columns={"process": "reader", "committer": "process"})
        parts.append(_beyond_read(by_reader, with_chain(reads, chained)))
    if GENERATION_REGRESSION in checks:
        parts.append(_generation_regressions(ops))
    found = [part for part in parts if not part.empty]
    return pd.concat(found, ignore_index=True) if found else _found(pd.DataFrame(), GROUP_SKIP)


Rows = Callable[[np.ndarray[Any, Any], list[str]], pd.DataFrame]
"""Reads the named columns of the pass's rows that a mask (or ascending positions) picks."""


_DECODED: weakref.WeakKeyDictionary[Columns, pd.DataFrame | None] = weakref.WeakKeyDictionary()
"""The group ops of each pass, decoded once: kept with the pass's columns (the order question
and the group question both read them, from the engine's one thread of history questions)."""


def pass_group_ops(columns: Columns, rows: Rows) -> pd.DataFrame | None:
    """The group ops of a pass (:func:`group_ops`), or None when it has none: then only the
    ``f`` column, which every other question reads too, was looked at."""
    if columns not in _DECODED:
        other = columns.ints("f") == F_OTHER
        found = rows(np.flatnonzero(other & columns.valid("process")), OP_COLUMNS) if other.any() else None
        found = None if found is None else found[found["f_name"].isin(GROUP_OPS).to_numpy()]
        _DECODED[columns] = None if found is None or found.empty else group_ops(found)
    return _DECODED[columns]


def chained(reads: pd.DataFrame, columns: Columns, rows: Rows) -> pd.DataFrame:
    """``reads`` with the ``chain`` each process belongs to (:func:`with_chain`): the order checks'
    consumer.  Without group ops every process is its own chain (no column added)."""
    ops = pass_group_ops(columns, rows)
    return reads if ops is None else with_chain(reads, chains(members(ops)))


def pass_anomalies(columns: Columns, rows: Rows, checks: frozenset[str]) -> pd.DataFrame:
    """:func:`group_anomalies` on a pass: its ``ok`` poll records and acknowledged sends (none
    read when the pass has no group ops)."""
    ops = pass_group_ops(columns, rows)
    if ops is None:
        return _found(pd.DataFrame(), GROUP_SKIP)
    f, ok = columns.ints("f"), columns.ints("type") == TYPE_OK
    placed = columns.valid("item") & columns.valid("partition") & columns.valid("offset")
    reads = rows(np.isin(f, POLL_CODES) & ok & placed & columns.valid("process"), READ_COLUMNS)
    sent = np.isin(f, SEND_CODES) & ok
    acked = rows(sent & (columns.ints("offset") >= 0) & columns.valid("partition"), ACK_COLUMNS)
    return group_anomalies(ops, reads, acked, checks)
