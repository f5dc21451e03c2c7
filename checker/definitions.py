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
* **poll-skip** -- one consumer process's successive reads of a partition jump forward by
  more than one offset.  ``poll p0 [@3]``, then ``poll p0 [@5]`` -> 4 skipped.
* **nonmonotonic-poll** -- they do not move forward.  ``poll p0 [@5]``, then ``poll p0 [@3]``.
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
    UNSEEN,
)
CORE_CHECKS: Final[tuple[str, ...]] = (LOST_WRITE, REPLICA_DIVERGENCE, DUPLICATE)
"""The three checks ``bench/checker.py`` compares against DuckDB."""

WARNINGS: Final[frozenset[str]] = frozenset({UNSEEN})
"""Anomalies that are reported but never make a run invalid."""

VALUE_CHECKS: Final[tuple[str, ...]] = (LOST_WRITE, UNSEEN, ABORTED_READ, LOST_READ, UNEXPECTED, DUPLICATE)
"""Answered together by one aggregation grouped by (run, partition, value)."""
POLL_CHECKS: Final[tuple[str, ...]] = (POLL_SKIP, NONMONOTONIC_POLL)

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
POLL_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = (
    "process",
    "partition",
    "index",
    "item",
    "prev_index",
    "prev_offset",
    "offset",
)
DIVERGENCE_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = ("partition", "node_a", "node_b", "offset", "positions")

# Integer codes shared with harness.record.history (kept here as plain ints for engine expressions).
TYPE_INVOKE, TYPE_OK, TYPE_FAIL, TYPE_INFO = 0, 1, 2, 3
