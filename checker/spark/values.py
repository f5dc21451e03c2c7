"""The value checks' aggregation in Spark: one ``groupBy(run_id, partition, value)`` answers
lost-write, unseen, aborted-read, lost-read, unexpected and duplicate at once -- instead of one
anti-join per check, which measured 2-3x slower.  :class:`checker.spark.engine.SparkEngine`
joins the drains' completeness, stacks the flagged values and keeps the examples."""

from __future__ import annotations

import functools
from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checker.definitions import (
    ABORTED_READ,
    DUPLICATE,
    G1A,
    LOST_READ,
    LOST_WRITE,
    TYPE_FAIL,
    TYPE_OK,
    UNEXPECTED,
    UNSEEN,
)
from testbed.record.history import F_DRAIN, F_SEND, F_TXN_SEND, POLL_CODES, SEND_CODES

_FACT_ROWS: dict[str, frozenset[str]] = {
    LOST_WRITE: frozenset({"ok", "drain"}),
    UNSEEN: frozenset({"ok", "poll", "drain"}),
    ABORTED_READ: frozenset({"fail", "poll", "drain"}),
    G1A: frozenset({"aborted", "poll", "drain"}),
    LOST_READ: frozenset({"send", "poll", "drain"}),
    UNEXPECTED: frozenset({"send", "poll", "drain"}),
    DUPLICATE: frozenset({"poll", "drain"}),
}
"""The history rows each value check's facts come from (see :func:`value_flags`):
sends of any outcome, acknowledged sends, failed sends, poll records, drain records."""
IMPLEMENTS: Final[frozenset[str]] = frozenset(_FACT_ROWS)
"""The registry entries (:mod:`checker.anomalies`) this module flags: the value checks."""


def value_facts(history: DataFrame, checks: frozenset[str]) -> DataFrame:
    """Per (run, partition, value): ``sent, acked, failed, aborted, polled, drained`` (0 or 1) and
    the lowest and highest offset it was read at, from the rows the asked checks' facts come from.

    ``failed``: a plain send that definitely failed; ``aborted``: a send of a transaction that
    aborted (a ``txn`` op's send micro-op, ``fail``).  A read of the first is an aborted-read, of
    the second a G1a."""
    f, kind = F.col("f"), F.col("type")
    send, poll, drain = f.isin(*SEND_CODES), f.isin(*POLL_CODES), f == F_DRAIN
    ok, read = send & (kind == TYPE_OK), poll | drain
    failed = (f == F_SEND) & (kind == TYPE_FAIL)
    aborted = (f == F_TXN_SEND) & (kind == TYPE_FAIL)
    # Only the rows the asked checks' facts come from are aggregated: lost-write and
    # duplicate alone need no send invokes, 39 % of the rows at 50 M ops.
    kinds_needed = set().union(*(_FACT_ROWS[check] for check in checks if check in _FACT_ROWS))
    needed = {
        "send": send,
        "ok": ok,
        "fail": failed,
        "aborted": aborted,
        "poll": poll,
        "drain": drain,
    }
    wanted = functools.reduce(
        lambda left, right: left | right,
        [needed[name] for name in sorted(kinds_needed)],
        F.lit(False),
    )
    rows = history.where(wanted & F.col("value").isNotNull())
    # The six yes/no facts travel as bits of one byte (bit_or), which keeps the shuffled
    # rows narrow; the pandas engine computes the same facts column by column.
    bits = (
        send.cast("byte")
        + ok.cast("byte") * 2
        + failed.cast("byte") * 4
        + poll.cast("byte") * 8
        + drain.cast("byte") * 16
        + aborted.cast("byte") * 32
    ).cast("byte")
    # Only what decides the flags is aggregated here.  The example columns (send and read
    # indexes, ack and poll offsets) are computed on the driver for the few values shown:
    # four more aggregates over every value cost a third of this job.
    read_offset = F.when(read, F.col("offset"))
    values = rows.groupBy("run_id", "partition", "value").agg(
        F.bit_or(bits).alias("facts"),
        F.min(read_offset).alias("read_min_offset"),
        F.max(read_offset).alias("read_max_offset"),
    )
    fact = F.col("facts")
    return values.select(
        "*",
        *[
            ((fact.bitwiseAND(bit)) != 0).cast("int").alias(name)
            for name, bit in (
                ("sent", 1),
                ("acked", 2),
                ("failed", 4),
                ("polled", 8),
                ("drained", 16),
                ("aborted", 32),
            )
        ],
    )


def value_flags() -> dict[str, Column]:
    """Each value check's flag over :func:`value_facts` joined with the drains' ``complete``."""
    done = F.coalesce(F.col("complete"), F.lit(False))
    acked, sent, undrained = F.col("acked") == 1, F.col("sent") == 1, F.col("drained") == 0
    read_any = F.col("polled") + F.col("drained") > 0
    return {
        LOST_WRITE: acked & undrained & done,
        UNSEEN: acked & undrained & (F.col("polled") == 0) & ~done,
        ABORTED_READ: (F.col("failed") == 1) & read_any,
        G1A: (F.col("aborted") == 1) & read_any,
        LOST_READ: sent & (F.col("polled") > 0) & undrained & done,
        UNEXPECTED: ~sent & read_any,
        DUPLICATE: F.col("read_min_offset") != F.col("read_max_offset"),
    }
