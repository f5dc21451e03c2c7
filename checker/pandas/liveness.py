"""The liveness figures (:data:`checker.liveness.LIVENESS_COLUMNS`) on pandas frames.

The oracle of :mod:`checker.spark.liveness`, written as the same three aggregations:

* **gaps** -- per (run, partition), the progress points (``ok`` send completions), the send
  period's two ends and the fault windows clipped to the period, as intervals ordered by start:
  a gap is an interval's start minus the highest end before it (a running maximum), so windows
  and progress both close a gap and overlapping windows count once;
* **recovery** -- the first ``ok`` send at or after the last heal, and the first ``ok`` poll record
  at or after it above the highest offset acknowledged before it;
* **unpolled** -- per (run, partition, value), acknowledged and never polled, by age at the end of
  the send period.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pandas as pd

from checker.definitions import STALLED, TYPE_OK, UNPOLLED_AGE_EDGES_S
from checker.liveness import LIVENESS_COLUMNS, NS, UNPOLLED_AGE_COLUMNS

SEND_COLUMNS = ["run_id", "partition", "type", "time", "offset", "value"]
"""The send rows' columns (every send row with a partition)."""
POLL_COLUMNS = ["run_id", "partition", "time", "offset", "value"]
"""The poll records' columns (``ok`` poll rows carrying a record)."""
IMPLEMENTS: Final[frozenset[str]] = frozenset({STALLED})
"""The registry entries (:mod:`checker.anomalies`) decided from these figures (by :mod:`checker.liveness`)."""
_KEYS = ["run_id", "partition"]


def _gaps(sends: pd.DataFrame, periods: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """``run_id, partition, gap, gap_from``: the longest stretch without progress or fault."""
    acks = sends[sends["type"] == TYPE_OK]
    points = acks[_KEYS].assign(start=acks["time"], end=acks["time"])
    ends = pd.concat(
        [
            periods[_KEYS].assign(start=periods["period_start"], end=periods["period_start"]),
            periods[_KEYS].assign(start=periods["period_end"], end=periods["period_end"]),
        ]
    )
    clipped = periods.merge(windows, on="run_id")
    clipped = clipped.assign(
        start=np.maximum(clipped["start"], clipped["period_start"]),
        end=np.minimum(clipped["end"], clipped["period_end"]),
    )
    clipped = clipped[clipped["start"] <= clipped["end"]][[*_KEYS, "start", "end"]]
    items = pd.concat([points, ends, clipped], ignore_index=True).astype("int64")
    items = items.sort_values([*_KEYS, "start", "end"], kind="stable", ignore_index=True)
    before = items.groupby(_KEYS, sort=False)["end"].cummax().groupby([items[k] for k in _KEYS]).shift(1)
    items = items.assign(gap_from=before, gap=items["start"] - before)
    items = items[items["gap"] > 0]
    # The longest gap, and of equal ones the earliest (Spark: max of (gap, -gap_from)).
    best = items.sort_values([*_KEYS, "gap", "gap_from"], ascending=[True, True, False, True], kind="stable")
    best = best.drop_duplicates(_KEYS)[[*_KEYS, "gap", "gap_from"]]
    found = periods[_KEYS].merge(best, on=_KEYS, how="left")
    return found.assign(gap=found["gap"].fillna(0))


def _recovery(sends: pd.DataFrame, polls: pd.DataFrame, heals: pd.DataFrame) -> pd.DataFrame:
    """``run_id, partition, first_send, first_poll`` after the last heal."""
    acks = sends[sends["type"] == TYPE_OK].merge(heals, on="run_id")
    after = acks[acks["time"] >= acks["last_heal"]]
    first_send = after.groupby(_KEYS)["time"].min().rename("first_send")
    known = acks[(acks["offset"] >= 0) & (acks["time"] < acks["last_heal"])]
    end = known.groupby(_KEYS)["offset"].max().rename("end_at_heal").reset_index()
    reads = polls.merge(heals, on="run_id").merge(end, on=_KEYS, how="left")
    new = reads[(reads["time"] >= reads["last_heal"]) & (reads["offset"] > reads["end_at_heal"].fillna(-1))]
    first_poll = new.groupby(_KEYS)["time"].min().rename("first_poll")
    return pd.concat([first_send, first_poll], axis=1).reset_index()


def _unpolled(sends: pd.DataFrame, polls: pd.DataFrame, periods: pd.DataFrame) -> pd.DataFrame:
    """``run_id, partition, unpolled, unpolled_age_*, unpolled_oldest``."""
    acks = sends[(sends["type"] == TYPE_OK) & sends["value"].notna()]
    acked = acks.groupby([*_KEYS, "value"])["time"].min().rename("acked").reset_index()
    polled = polls[polls["value"].notna()][[*_KEYS, "value"]].drop_duplicates().assign(polled=True)
    values = acked.merge(polled, on=[*_KEYS, "value"], how="left")
    values = values[values["polled"].isna()].merge(periods[[*_KEYS, "period_end"]], on=_KEYS)
    age = (values["period_end"] - values["acked"]).astype("int64")
    bucket = sum((age >= edge * NS).astype("int64") for edge in UNPOLLED_AGE_EDGES_S)
    values = values.assign(
        age=age, **{name: (bucket == i).astype("int64") for i, name in enumerate(UNPOLLED_AGE_COLUMNS)}
    )
    grouped = values.groupby(_KEYS)
    found = grouped[list(UNPOLLED_AGE_COLUMNS)].sum()
    found["unpolled"] = grouped.size()
    found["unpolled_oldest"] = grouped["age"].max()
    return found.reset_index()


def liveness(
    sends: pd.DataFrame, polls: pd.DataFrame, windows: pd.DataFrame, heals: pd.DataFrame
) -> pd.DataFrame:
    """``run_id`` + :data:`checker.liveness.LIVENESS_COLUMNS`, one row per (run, partition) with a
    send row, ordered by both.  ``sends``: :data:`SEND_COLUMNS` of every send row with a partition;
    ``polls``: :data:`POLL_COLUMNS` of the ``ok`` poll records; ``windows``/``heals``:
    :func:`checker.liveness.fault_tables`."""
    output = ["run_id", *LIVENESS_COLUMNS]
    if sends.empty:
        return pd.DataFrame({name: pd.Series(dtype="Int64") for name in output})
    by_run = sends.groupby("run_id")["time"]
    periods = sends[_KEYS].drop_duplicates()
    periods = periods.merge(by_run.min().rename("period_start").reset_index(), on="run_id")
    periods = periods.merge(by_run.max().rename("period_end").reset_index(), on="run_id")
    found = periods.merge(_gaps(sends, periods, windows), on=_KEYS)
    found = found.merge(_recovery(sends, polls, heals.dropna()), on=_KEYS, how="left")
    found = found.merge(_unpolled(sends, polls, periods), on=_KEYS, how="left")
    counts = ["unpolled", *UNPOLLED_AGE_COLUMNS]
    found[counts] = found[counts].fillna(0)
    found = found.sort_values(_KEYS, ignore_index=True)
    return found[output].astype({name: "Int64" for name in output})
