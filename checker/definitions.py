"""The anomalies the checker looks for: one definition, shared by the pandas and Spark engines.

Names follow Jepsen's Kafka workload.  Notation in the tiny examples: ``send p0 v=7 ok @3``
is an acknowledged send of value 7 to partition 0 that the broker placed at offset 3;
``poll p0 [@3 v=7]`` a consumer poll that returned that record; ``drain p0 [...] complete``
the final read of partition 0 after every fault healed, up to its high watermark.

* **lost-write** -- an ``ok`` send whose value is absent from the complete final drain of
  its partition.  ``send p0 v=7 ok @3``; ``drain p0 [@0 v=1, @1 v=2] complete`` -> v=7 lost.
  Counted only in partitions whose drain is complete (elsewhere it is *unseen*).
* **replica-divergence** -- two replicas' final logs hold different records (key or value)
  at the same (partition, offset).  ``n1 p0 @1 v=2``, ``n2 p0 @1 v=3`` -> diverged at 1.
  The count is the number of divergent positions; each example is the first divergent
  offset of one (partition, replica pair), with both records.
* **inconsistent-offsets** -- one (partition, offset) observed with different values anywhere
  in the history: send acks, polls and drains.  ``send p0 v=7 ok @3``; ``drain p0 [.., @3
  v=9]`` -> offset 3 holds 7 and 9.  Counted per position.
* **duplicate** -- one value read at more than one offset of its partition.  ``drain p0
  [@3 v=7, @4 v=7]`` -> v=7 duplicated.
* **aborted-read** -- a read (poll or drain) of a value whose send definitely failed.
  ``send p0 v=7 fail``; ``poll p0 [@3 v=7]``.
* **lost-read** -- a value that a consumer poll returned but that is absent from the
  complete final drain (uncommitted data was exposed, then lost).  ``poll p0 [@5 v=8]``;
  ``drain p0 [@0..@4] complete`` (v=8 nowhere).
* **unexpected** -- a read value that no one sent to that partition (including values that
  are not integers).  ``drain p0 [@0 v=99]`` with no send of 99 to p0.
* **poll-skip** -- between two successive polls of a partition by one consumer process, the
  offsets jump forward by more than one: the first record of the partition in the later poll
  is more than one past the last record of the partition in the earlier poll.  ``poll p0
  [@3]``, then ``poll p0 [@5]`` -> 4 skipped.
* **nonmonotonic-poll** -- between two such polls, the offsets do not move forward.  ``poll
  p0 [@5]``, then ``poll p0 [@3]`` (or ``[@5]`` again).
* **int-poll-skip** -- inside one poll, two consecutive records of a partition are more than
  one offset apart.  ``poll p0 [@3, @5]`` -> 4 skipped.  In Kafka a gap can be legitimate:
  transaction markers (control records) and compaction consume offsets that no consumer
  sees.  Not here: the bundled broker refuses transactional producers and neither compacts
  nor deletes, and the workload sends one plain record per send, so every offset below the
  high watermark holds one data record and a gap is a record the consumer never got.
* **int-nonmonotonic-poll** -- inside one poll, a record's offset is not above that of the
  partition's record before it.  ``poll p0 [@5, @3]``.
* **stale-read** -- a read (an ``ok`` poll, or an ``ok`` chunk of the final drain) returned a
  record of a partition at or below the highest offset of that partition that *earlier* reads of the
  same consumer process had returned: below the position they had already shown committed
  (a consumer is served only records below the high watermark, so every record it reads is
  committed; the one after the highest is where its position stands).  ``poll p0 [@5]``,
  ``poll p0 [@3]``, ``poll p0 [@4]`` -> both later polls are stale (3 and 4 are at or below
  5), though only the second went backwards.  A process id is one consumer assignment: the
  workload assigns a consumer once per process and continues under a fresh id after an
  error.  Counted once per (read op, partition); each example is the op's first stale
  record and the earliest read that had returned the highest offset.  Every
  nonmonotonic-poll is also a stale-read (of its later poll); a stale-read counts every read that stays below,
  such as the polls that re-read committed data after a consumer reset to the log start.
* **nonmonotonic-send** -- one producer process's successive acknowledged sends to a
  partition got offsets that do not increase.  ``send p0 v=7 ok @5``, then (same process)
  ``send p0 v=8 ok @4``.
* **realtime-order** -- a send invoked after another send to the same partition had been
  acknowledged got an offset at or below that send's.  ``send p0 v=7 ok @5`` completes;
  later any process invokes ``send p0 v=8``, acknowledged ``@3``.  "After" is history order:
  the recorder numbers and timestamps ops under one lock, so an op's ``index`` orders it in
  real time.  Each late send counts once, against the highest offset acknowledged before its
  invoke (the example shows the first send acknowledged with that offset, and the late
  send's invoke).  A process's sends are sequential, so every nonmonotonic-send is also a
  realtime-order.

  Both send checks read only acknowledgements that carry an offset >= 0 (an ``acks=0``
  producer is answered offset -1: none known) and a send completion's own partition; a
  completion whose invoke is not the process's previous send op takes part only as an
  earlier send.
* **unseen** -- acknowledged but never read by anyone, in a partition whose drain is not
  complete: loss cannot be proven there.  A *warning*: it never makes a run invalid (the
  incomplete drain already makes it at best unknown).

Every definition treats a value as the pair (partition, value): the workload sends each
integer value once, to one partition.
"""

from __future__ import annotations

from typing import Final

LOST_WRITE: Final = "lost-write"
REPLICA_DIVERGENCE: Final = "replica-divergence"
INCONSISTENT_OFFSETS: Final = "inconsistent-offsets"
DUPLICATE: Final = "duplicate"
ABORTED_READ: Final = "aborted-read"
LOST_READ: Final = "lost-read"
UNEXPECTED: Final = "unexpected"
POLL_SKIP: Final = "poll-skip"
NONMONOTONIC_POLL: Final = "nonmonotonic-poll"
INT_POLL_SKIP: Final = "int-poll-skip"
INT_NONMONOTONIC_POLL: Final = "int-nonmonotonic-poll"
STALE_READ: Final = "stale-read"
NONMONOTONIC_SEND: Final = "nonmonotonic-send"
REALTIME_ORDER: Final = "realtime-order"
UNSEEN: Final = "unseen"

ALL_CHECKS: Final[tuple[str, ...]] = (
    LOST_WRITE,
    REPLICA_DIVERGENCE,
    INCONSISTENT_OFFSETS,
    DUPLICATE,
    ABORTED_READ,
    LOST_READ,
    UNEXPECTED,
    POLL_SKIP,
    NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    INT_NONMONOTONIC_POLL,
    STALE_READ,
    NONMONOTONIC_SEND,
    REALTIME_ORDER,
    UNSEEN,
)
"""Every anomaly the checker knows, in the order ``results.json``, the summary and ``--checks`` list them."""
CORE_CHECKS: Final[tuple[str, ...]] = (LOST_WRITE, REPLICA_DIVERGENCE, DUPLICATE)
"""The three checks ``bench/checker.py`` compares against DuckDB."""

WARNINGS: Final[frozenset[str]] = frozenset({UNSEEN})
"""Anomalies that are reported but never make a run invalid."""

VALUE_CHECKS: Final[tuple[str, ...]] = (LOST_WRITE, UNSEEN, ABORTED_READ, LOST_READ, UNEXPECTED, DUPLICATE)
"""Answered together by one aggregation grouped by (run, partition, value)."""
POLL_CHECKS: Final[tuple[str, ...]] = (
    POLL_SKIP,
    NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    INT_NONMONOTONIC_POLL,
    STALE_READ,
)
"""Order checks on the records consumers read."""
SEND_CHECKS: Final[tuple[str, ...]] = (NONMONOTONIC_SEND, REALTIME_ORDER)
"""Order checks on the offsets sends were acknowledged with."""
ORDER_CHECKS: Final[tuple[str, ...]] = (*POLL_CHECKS, *SEND_CHECKS)
"""Answered together by one engine question (``Engine.order_anomalies``)."""

DEFAULT_EXAMPLE_LIMIT: Final = 5

VALUE_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = (
    "partition",
    "value",
    "value_text",
    "ack_offset",
    "send_index",
    "read_index",
    "poll_offset",
    "read_min_offset",
    "read_max_offset",
)
"""Columns every engine returns for each value-check example, ordered by (partition, value, value_text)."""

OFFSET_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = ("partition", "offset", "observations")
ORDER_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = (
    "process",
    "partition",
    "index",
    "item",
    "prev_index",
    "prev_offset",
    "offset",
    "invoke_index",
)
"""Columns every engine returns for each order-check example, ordered by (process, partition, index, item).

``index``/``item``/``offset``: the late record (or the late send's completion, ``item`` null);
``prev_index``/``prev_offset``: the read or send it is compared with; ``invoke_index``: the
late send's invoke (realtime-order only, else null)."""
DIVERGENCE_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = ("partition", "node_a", "node_b", "offset", "positions")

# Integer codes shared with harness.record.history (kept here as plain ints for engine expressions).
TYPE_INVOKE, TYPE_OK, TYPE_FAIL, TYPE_INFO = 0, 1, 2, 3
