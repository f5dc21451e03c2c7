"""The anomalies the checker looks for: their long definitions, and the names the code uses.

The registry (:mod:`checker.anomalies`) holds each anomaly as data -- family, severity, what it
implies, the evidence it needs, its one-line doc; the names, family tuples, warnings and example
columns below are derived from it and keep their names for the engines and tests.  The prose
here is each entry's long definition (:attr:`checker.anomalies.Anomaly.definition`), with a tiny
example; ``tests/checker/test_anomalies.py`` keeps one definition per entry and no stray one.

Names follow Jepsen's Kafka workload.  Notation in the tiny examples: ``send p0 v=7 ok @3``
is an acknowledged send of value 7 to partition 0 that the broker placed at offset 3;
``poll p0 [@3 v=7]`` a consumer poll that returned that record; ``drain p0 [...] complete``
the final read of partition 0 after every fault healed, up to its high watermark.

* **lost-write** -- an ``ok`` send whose value is absent from the complete final drain of
  its partition.  ``send p0 v=7 ok @3``; ``drain p0 [@0 v=1, @1 v=2] complete`` -> v=7 lost.
  Counted only in partitions whose drain is complete (elsewhere it is *unseen*).  An ``ok``
  send without a known offset (``acks=0`` answers a negative one, -1; a missing offset is
  the same) is acknowledged all the same; its example's ``offset`` is null.
* **replica-divergence** -- two replicas' final logs hold different records (key or value)
  at the same (partition, offset) *below both replicas' high watermarks*: TLA+ LogMatching
  (Kafka's replication spec), which promises agreement only on offsets < min(HW1, HW2).
  ``n1 p0 @1 v=2 hw=2``, ``n2 p0 @1 v=3 hw=2`` -> diverged at 1.  Each replica's HW is the
  ``high_watermark`` of its own dump's partition line (the HW it checkpointed, so the
  committed prefix it would recover with); a replica whose dump has no line for the
  partition counts as HW 0 there (nothing of it is known committed).  The count is the
  number of divergent positions; each example is the first divergent offset of one
  (partition, replica pair), with both records.
* **inconsistent-offsets** -- one (partition, offset) observed with different values anywhere
  in the history: send acks, polls and drains.  ``send p0 v=7 ok @3``; ``drain p0 [.., @3
  v=9]`` -> offset 3 holds 7 and 9.  Counted per position.  Observations are equal when both
  are the same integer, the same text, or both null: a null-value record read three times
  at @3 is one value, not three.  A send ack observes a position only with a known offset
  (>= 0): an ``acks=0`` ack (a negative offset) or one without an offset observes none.
* **duplicate** -- one value read at more than one offset of its partition.  ``drain p0
  [@3 v=7, @4 v=7]`` -> v=7 duplicated.
* **aborted-read** -- a read (poll or drain) of a value whose send definitely failed.
  ``send p0 v=7 fail``; ``poll p0 [@3 v=7]``.
* **G1a** -- a read (poll or drain) of a value sent inside a transaction that aborted (its
  ``txn`` op ended ``fail``), or whose producer was fenced before it committed: Adya's aborted
  read, the transactional form of aborted-read.  ``txn [send p0 v=7] fail``; ``poll p0 [@3
  v=7]``.  (Kafka hands a ``read_uncommitted`` consumer aborted records too.)
* **lost-read** -- a value that a consumer poll returned but that is absent from the
  complete final drain (uncommitted data was exposed, then lost).  ``poll p0 [@5 v=8]``;
  ``drain p0 [@0..@4] complete`` (v=8 nowhere).
* **unexpected** -- a read value that no one sent to that partition (including values that
  are not integers).  ``drain p0 [@0 v=99]`` with no send of 99 to p0.  Records whose value
  is text count per (partition, text), those whose value is null as one value per partition
  (``poll p0 [@4 v=null]`` -> one unexpected null); the example's ``read`` is the first op
  that read it, holding the record (``"value": null`` there is what was read).
* **poll-skip** -- between two successive polls of a partition by one consumer process (or
  takeover chain, as for every poll check), the
  offsets jump forward by more than one: the first record of the partition in the later poll
  is more than one past the last record of the partition in the earlier poll.  ``poll p0
  [@3]``, then ``poll p0 [@5]`` -> 4 skipped.  Counted per jump, not per skipped offset:
  ``poll p0 [@3]``, ``poll p0 [@9]`` is one poll-skip (as is each ``int-poll-skip``).
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
  error, or after a rebalance (``--consume-via subscribe``).  The one exception is a
  *takeover chain* (see the group checks below): the processes of one group assignment,
  which the order checks read as one consumer.  Counted once per (read op, partition); each example is the op's first stale
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
* **divergent-tail** -- two replicas hold different records at one (partition, offset), but at
  or above the lower of their two high watermarks: an uncommitted tail, which Kafka lets
  differ until the follower truncates to the leader.  ``n1 p0 @5 v=8 hw=5``, ``n2 p0 @5 v=9
  hw=6`` -> a divergent tail at 5 (5 >= min(5, 6)).  Informational (severity ``warning``): it
  never makes a run invalid.  Each differing position is classified once: it is a
  replica-divergence if some two replicas differ there below both their HWs, else a
  divergent-tail; the examples are built as replica-divergence's.

Every definition treats a value as the pair (partition, value): the workload sends each
integer value once, to one partition.

**Consumer-group checks** (``--consume-via subscribe``; the ops are described in
``docs/consumer-groups.md``).  Terms:

* A *member process* is a process with an ``assign`` op; its ``ok`` polls are the group's
  reads (drains are not: their fresh processes belong to no group).  Each assignment is a
  fresh process, except that an ``assign`` with ``"takeover"`` continues the assignment of
  its consumer's previous process (a synchronous commit ended ``info``; no rebalance
  happened, the client's positions carry over).  Such processes form one *takeover chain*,
  named by its first process, and its ``generation`` is the chain's.  The order checks above
  (poll-skip, nonmonotonic-poll, stale-read and the ``int-`` variants) compare the reads of a
  chain as those of one consumer: across a takeover the client's position continues, so a
  jump or a step back there is an anomaly of that consumer.  Across a rebalance it is not:
  the next assignment is another process.
* A commit's value ``{"offsets": {"0": 23}, "generation": 3, "polled_by": 6}`` is read from
  its invoke (the completion repeats it), its outcome from its completion (none recorded:
  ``info``).  An offset is Kafka's next position (the last offset read + 1).  Fields that are
  not JSON integers read as unknown; a partition key that is not a plain decimal number is
  ignored.
* The *known committed positions* of a partition: each ``ok`` commit's offset (with its
  generation), and each *resume position* -- the offset of the first record a chain whose
  first ``assign`` is not a takeover read from the partition.  A fresh assignment starts at
  the committed offset its OffsetFetch returned (or, with none, at the log start), so what
  it reads first is committed evidence even under ``--commit auto``, where no commit is
  recorded.  A commit that did not end ``ok`` counts only through such a resume: an ``info``
  commit may or may not have been applied, and a librdkafka ``fail`` may follow an earlier
  attempt that was (``docs/consumer-groups.md`` section 3).
* Generations order commits against assignments: the coordinator accepts a commit only from
  a member of the current generation, and stores each new generation in its log after every
  commit it accepted before, answering SyncGroup only once that record is committed -- so an
  ``ok`` commit of generation g is applied before any member of a later generation fetches
  its offsets.  History order does not say as much: the workload records a poll's events
  after the client call returns, when the OffsetFetch inside it is already past.  An unknown
  (null) generation takes no part in a comparison of generations.
* A *late commit* may explain a committed position moving back: a commit of the partition
  that did not end ``ok`` may still be applied after a later ``ok`` commit of the same
  generation (its request can reach the coordinator after a later one over another
  connection).  So an anomaly below a known position P is *explained* -- not counted -- when
  a commit of that partition that did not end ``ok``, invoked before the op in question, at
  or below that op's offset, has a generation not older than P's (or an unknown one).

* **group-skip** -- an acknowledged record (an ``ok`` send with an offset >= 0) at a position
  below the highest known committed position of its partition, that no poll of any member
  process ever returned (a record at that position, whatever its value): the group's
  committed offset jumped over unread data.  ``send p0 v=7 ok @3``; ``commit {"0": 5} ok``;
  no member read p0 @3 -> 3 skipped.  Counted per position; the example names the first
  send acknowledged there and the op that set the highest position (the first ``ok`` commit
  of it, or the resume read).  Time plays no part: a record read by some member, before or
  after, was not skipped.
* **group-redelivery** -- a member process read a record below a known committed position of
  an *older generation* than its own: the group delivered again what it had committed as
  read.  ``commit {"0": 5} ok`` (generation 3); a process of generation 4 polls ``p0 [@4]``.
  Re-reads at or above every older generation's known position are the uncommitted window
  that at-least-once delivery re-delivers after a rebalance, and are legitimate; so is a
  re-read inside one generation (the same assignment: that is stale-read's business).  Not
  counted when explained by a late commit (against the highest older position).  Counted
  once per (read op, partition); the example is the op's first such record and the op that
  set that position (of equals, the lowest generation, then the first).
* **commit-regression** -- an ``ok`` commit of a partition invoked after an ``ok`` commit of it
  with a higher offset had completed: the group's committed position went backwards.
  ``commit {"0": 9} ok``, then ``commit {"0": 7} ok``.  History order is real time here
  (a commit's invoke and completion are recorded around the client call); commits that
  overlap are not compared.  Nothing in the workload resets a position (it never seeks;
  ``auto.offset.reset`` acts only on a committed offset beyond the log end, which takes
  vanished committed data, expected where the configuration permits it), so every
  regression not explained by a late commit counts, once per (commit, partition), against
  the highest offset committed before its invoke (the example names its first commit).
* **committed-beyond-read** -- an ``ok`` commit of an offset more than one past the highest
  offset that the reading process (``polled_by``, else the committing process, with the
  earlier processes of its takeover chain) had read from the partition before the commit was
  invoked: the group would resume past a record nobody processed.  ``poll p0 [@4]``;
  ``commit {"0": 7} ok`` -> 5 and 6 not read (``{"0": 5}`` is exact).  A reader that read
  nothing of the partition allows 0.  Counted per (commit, partition); the example names the
  read of the highest offset (null when none).
* **generation-regression** -- an ``ok`` ``assign`` of a consumer (one client object) with
  generation G, invoked after an ``ok`` ``assign`` of the same consumer with a higher
  generation completed: the coordinator lost the group's state (its generation is in the
  group's metadata record, which the next coordinator loads).  ``assign gen=2 consumer=1``,
  ``revoke``, ``assign gen=1 consumer=1`` -> 1 < 2.  Per consumer: one client's assigns are
  recorded in the order its callbacks ran, but after the client call returned, so across members
  history order is not the order generations were handed out.  Equal is no regression (Kafka
  answers a follower rejoining a stable group with the current generation); a takeover counts
  only as the earlier assign; overlapping assigns, null generations and consumers take no
  part.  Counted per ``assign``, against the highest generation before it (its first assign).

**White-box invariant checks** (Kafka's replication invariants from its TLA+ specifications,
tested on the brokers' own event logs, ``docs/events.md``; ``n1 hw leader e0 hw=2`` is an
``hw`` event of broker n1 as leader of epoch 0 whose new HW is 2).  They need a target that
keeps event logs (the bundled broker with ``event.log.enable``); elsewhere they are *not
applicable*.  Terms:

* *Before.*  Events of one log are ordered by ``seq``; events of different logs by their
  wall-clock ``ts``: the checks assume the nodes share one clock (the harness's containers and
  local processes read the host's).  A ``ts`` that steps back inside one log is lifted to the
  highest ``ts`` before it in that log; ties go by node name, then ``seq``.
* An *exposure* of a partition is a high watermark a leader advertised: a ``become-leader``'s
  ``hw`` or a leader's ``hw`` event's new HW.  A follower's HW is the leader's, learned a fetch
  later, and serves no consumer; a restarted broker's HW from its checkpoint is not advertised
  until it leads.
* A replica's *lineage epoch*: the leader epoch of its newest record -- a ``truncate``'s
  ``queried_epoch`` when it carries one (leader-epoch truncation asks with exactly that), else
  the highest of the last epoch of its leader-epoch cache when it opened (a restart starts
  over), the epochs it led, and the epochs whose leader it learned a HW from.  Its records are
  those the leaders of that epoch and earlier ones wrote (LogMatching), so exposures by those
  leaders are what made them committed; a later leader's HW covers that leader's own records.
* A leader's HW is *established* once it reaches the LEO the leader was elected with (its epoch
  start).  Before, it may be stale -- a new leader's HW catches up as followers fetch
  (KIP-101, KAFKA-7128) -- and says nothing about the partition.
* The *current leader* at a point: one leading the newest epoch that any ``become-leader`` before
  that point announced.  A deposed leader that has not heard of it yet keeps serving its own
  HW, which is no longer the partition's.

* **truncated-committed** -- a ``truncate`` that cut records below the highest HW exposed
  before it by a leader of the truncating replica's lineage epoch or an earlier one:
  ``new_leo < min(old_leo, H)``.  ``n1 hw leader e0 hw=2``; ``n2 replica-opened epochs
  [[0, 0]]``, ``n2 truncate reason=high-watermark old_leo=2 new_leo=1`` -> committed offset 1
  cut (KIP-101).  A deposed leader cutting its uncommitted tail after a newer leader wrote and
  committed other records at those offsets is Kafka's failover, not this: those exposures came
  from a later epoch than its records.  Counted per truncation; the example shows it and the
  exposure of H.
* **incomplete-leader** -- a ``become-leader`` of epoch E whose LEO is below the highest HW
  exposed before it by leaders of epochs below E: the new leader lacks committed records
  (LeaderCompleteness).  ``n1 hw leader e0 hw=2``; ``n2 become-leader e1 leo=1`` -> offset 1
  missing.  Records that differ at offsets it does hold are isr-divergence's and
  replica-divergence's.  Counted per election; the example shows it and the exposure.
* **hw-regression** -- a current leader's established HW below the highest HW a current leader
  exposed before it: the partition's HW went back, and records once committed are not
  below it any more.  ``n1 hw leader e0 hw=5``; ``n2 become-leader e1 leo=3 hw=3`` -> 3 < 5.
  Silent on a new leader whose HW starts below the old one and catches up (not yet
  established), on a restarted broker's lower checkpointed HW, and on a deposed leader serving
  its old HW.  So it follows an incomplete-leader: the higher HW was exposed by an older epoch
  before this leader's election (a later one would have made that leader no longer current),
  and this leader's established HW is at least the LEO it was elected with.  Counted per leader
  tenure (node, epoch); the example is its first such exposure and the exposure it fell below.
* **min-isr-violation** -- a leader's HW advanced (an ``hw`` event) while its
  controller-confirmed ISR was smaller than its ``min.insync.replicas``: KIP-966's strict min
  ISR (KAFKA-15583).  ``n1 hw leader isr=[1] min_isr=2 old_hw=4 hw=5``.  Checked whatever
  ``min.insync.replicas.strict`` says: the ``false`` setting breaks the rule by design, and
  permits it.  Counted per ``hw`` event.
* **isr-divergence** -- StrongIsr: a member of a partition's final ISR whose records below the
  final leader's HW differ from the leader's, or are missing.  Final: the controller's last
  published leader and ISR before the first broker's clean ``shutdown`` (the state the run
  ended in, not the fencings that stopping the brokers causes); the records and the leader's
  HW come from the replica dumps.  ``controller isr-change leader=1 isr=[1, 2]``; ``n1 @1 v=m3
  hw=2``, ``n2 @1 v=m2`` -> diverged at 1.  Counted per position (partition, member, offset);
  each example is the first offset of one (partition, member), with both records.
* **hanging-transaction** -- KAFKA-14402: a partition leader recorded that a batch of producer
  id X opened a transaction at offset F (``txn-open``), no marker of X was appended above F by
  the end of the run, the coordinator's last recorded state of X is not a transaction in
  progress holding the partition (so no marker will come), and the partition's last LSO (its
  leader's last ``hw`` event) is at or below F: read_committed consumers never pass F again.
  ``n1 txn-open p0 pid=7 F=12``; ``n2 txn-state pid=7 CompleteAbort``; ``n1 hw lso=12 hw=30``
  -> 18 offsets held.  A late produce appended after its transaction ended does this when
  ``transaction.partition.verification.enable=false``, which permits it.  Counted per open
  transaction; :mod:`checker.txn.white_box`, one implementation for both engines.

**Transactional checks** (the ``txn`` op, ``docs/history.md``; :mod:`checker.txn`, run by both
engines).  ``txn [send p0 v=7 @3, poll p1 [@2 v=5]] ok commit@t`` sent 7 (at offset 3), read 5,
called ``commit_transaction()`` at t.  A transaction is one ``txn`` op, named by its completion's
index; it *committed* when it ended ``ok``, or ``info`` with a value someone read (Jepsen's
must-have-committed); ``fail`` ones (G1a's) and ``info`` ones nobody saw take no part.  The
dependency graph's nodes are the committed transactions, its edges: **ww** T1 -> T2 when T2 wrote
the next *known position* after T1's in a partition's log (an (offset, value) a committed send
was acknowledged with or a read returned; an offset seen with two values left out, a value at two
offsets taken at its lowest); **wr** T1 -> T2 when T2 read a value T1 sent; **process** between a
process's successive transactions; **realtime** T1 -> T2 when T1 completed before T2 was invoked
(through a chain of completion time points: three edges per transaction, not n^2).  A cycle
counts once per strongly connected component of its anomaly's edge kinds; the example is the
shortest found, with its transactions' micro-ops and its edges in order.

* **precommitted-read** -- in a run whose consumers read ``read_committed`` (``workload.isolation``,
  the default), a txn poll returned a value whose transaction had not begun to commit when the
  read completed (before the writer's ``commit`` micro-op time; without an end micro-op, before
  its invoke), or that the reader itself sent (Jepsen: Kafka hides a transaction's records from
  every consumer until it commits).  ``txn [poll p0 [@3 v=7]] ok`` at t=5; ``txn [send p0 v=7]
  ok commit@9``.  An aborted writer is G1a's.  Counted per (reader, partition, value).
* **int-send-skip** -- inside one committed transaction, consecutive sends to one partition, both
  offsets known, more than one apart: ``txn [send p0 v=1 @3, send p0 v=2 @5] ok``.  A *warning*:
  other producers' records and markers interleave (Jepsen keeps it for information).  Per pair.
* **int-nonmonotonic-send** -- such a pair at or below the offset before: ``@5``, then ``@4``.
* **G0** -- a cycle of ww edges alone: ``T1 = txn [send p0 v=1 @0, send p1 v=2 @1]``, ``T2 = txn
  [send p1 v=3 @0, send p0 v=4 @1]``: T1 -ww(p0)-> T2 -ww(p1)-> T1.  A *warning*: Kafka orders no
  transaction's writes across partitions (Jepsen allows G0).
* **G1c** -- a cycle of ww and wr edges with a wr, on the event graph (:mod:`checker.txn.event_graph`:
  ww orders appends, wr a commit before a read): ``T1 = txn [send p0 v=1 @0, send p1 v=2 @1]``,
  ``T2 = txn [poll p0 [@0 v=1], send p1 v=3 @0]``: T1 -wr-> T2 -ww(p1)-> T1 -- T2 sent v=3 after
  reading T1's committed v=1, yet v=3 lies below T1's v=2.  With T2's send *before* its poll the
  same log is no cycle (two open transactions interleaving).
* **G0-process** -- a cycle of ww and process edges with a process edge: ``txn [send p0 v=1 @5]
  ok``, then the same process ``txn [send p0 v=2 @4] ok``.  A *warning*, as G0-realtime: a long
  transaction's writes may straddle a process's two (Jepsen allows both).
* **G1c-process** -- a cycle of ww, wr and process edges with a wr and a process edge.
* **G0-realtime** -- a cycle of ww and realtime edges with a realtime edge (any processes).
* **G1c-realtime** -- a cycle of ww, wr and realtime edges with a wr and a realtime edge.
* **torn-transaction** -- a committed transaction some of whose sends to completely drained
  partitions the drains hold and some not: ``txn [send p0 v=1, send p1 v=2] ok``; the drains hold
  1, not 2 (a lost-write too; this names the transaction).  Counted per transaction.

**Liveness** (``checker.liveness`` computes the figures; ``results.json``'s ``liveness`` section
carries them).  Times are the history's (nanoseconds since the test started).  Terms:

* The *send period*: from the run's first send op to its last one (invoke or completion, any
  partition, any outcome) -- the time the workload was producing.
* A *fault window*: from a nemesis fault's invoke to the completion of the heal that undid it
  (``testbed.record.faults``: a ``kill`` ends at the ``start`` of its node, a ``partition`` at
  the next ``heal``, ...); never healed: to the end of the history.  A fault is *active* inside
  its window.  An *unannounced* fault (its op's value says ``"announced": false``) opens none:
  it stands for a broker that stopped on its own.
* The *last heal*: the end of the last fault window, when every window closed (none when the run
  had no fault, or ended with one active).
* *Progress* of a partition: an acknowledged (``ok``) send to it, at its completion.
* A *gap*: a stretch of the send period in which the partition made no progress and no fault
  was active -- it starts at a progress, at the period's start or at a window's end, and ends at
  the next progress, window start or the period's end.

* **stalled** -- a partition whose longest gap is longer than the stall threshold
  (:data:`DEFAULT_STALL_THRESHOLD_S`, ``--stall-threshold``).  ``send p0 ok t=1 s``; ``send p0 ok
  t=15 s``; sends until ``t=16 s``, no fault -> stalled for 14 s (1 s to 15 s).  With ``kill n1``
  from 4 s to 12 s in between, the gaps are 1-4 s and 12-15 s, 3 s each: not stalled.  A
  partition that never makes progress again stalls until the period ends.  A *warning*
  (:data:`WARNINGS`) by default; an error with ``--liveness strict``.  Counted per partition;
  the example is its longest gap (``from_s``, ``to_s``, ``gap_s``).  Never permitted
  by any configuration (``checker.expectations``): no setting excuses a broker that stops
  answering while nothing is wrong.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from checker import anomalies as registry

LOST_WRITE: Final = registry.LOST_WRITE.name
REPLICA_DIVERGENCE: Final = registry.REPLICA_DIVERGENCE.name
INCONSISTENT_OFFSETS: Final = registry.INCONSISTENT_OFFSETS.name
DUPLICATE: Final = registry.DUPLICATE.name
ABORTED_READ: Final = registry.ABORTED_READ.name
G1A: Final = registry.G1A.name
LOST_READ: Final = registry.LOST_READ.name
UNEXPECTED: Final = registry.UNEXPECTED.name
POLL_SKIP: Final = registry.POLL_SKIP.name
NONMONOTONIC_POLL: Final = registry.NONMONOTONIC_POLL.name
INT_POLL_SKIP: Final = registry.INT_POLL_SKIP.name
INT_NONMONOTONIC_POLL: Final = registry.INT_NONMONOTONIC_POLL.name
STALE_READ: Final = registry.STALE_READ.name
NONMONOTONIC_SEND: Final = registry.NONMONOTONIC_SEND.name
REALTIME_ORDER: Final = registry.REALTIME_ORDER.name
GROUP_SKIP: Final = registry.GROUP_SKIP.name
GROUP_REDELIVERY: Final = registry.GROUP_REDELIVERY.name
COMMIT_REGRESSION: Final = registry.COMMIT_REGRESSION.name
COMMITTED_BEYOND_READ: Final = registry.COMMITTED_BEYOND_READ.name
GENERATION_REGRESSION: Final = registry.GENERATION_REGRESSION.name
UNSEEN: Final = registry.UNSEEN.name
DIVERGENT_TAIL: Final = registry.DIVERGENT_TAIL.name
TRUNCATED_COMMITTED: Final = registry.TRUNCATED_COMMITTED.name
INCOMPLETE_LEADER: Final = registry.INCOMPLETE_LEADER.name
HW_REGRESSION: Final = registry.HW_REGRESSION.name
MIN_ISR_VIOLATION: Final = registry.MIN_ISR_VIOLATION.name
ISR_DIVERGENCE: Final = registry.ISR_DIVERGENCE.name
EPOCH_REUSE: Final = registry.EPOCH_REUSE.name
METADATA_ROLLBACK: Final = registry.METADATA_ROLLBACK.name
HANGING_TRANSACTION: Final = registry.HANGING_TRANSACTION.name
UNMARKED_TRANSACTION: Final = registry.UNMARKED_TRANSACTION.name
LSO_PAST_OPEN_TRANSACTION: Final = registry.BY_NAME["lso-past-open-transaction"].name
STALLED: Final = registry.STALLED.name
PRECOMMITTED_READ: Final = registry.BY_NAME["precommitted-read"].name
INT_SEND_SKIP: Final = registry.BY_NAME["int-send-skip"].name
INT_NONMONOTONIC_SEND: Final = registry.BY_NAME["int-nonmonotonic-send"].name
G0: Final = registry.BY_NAME["G0"].name
G1C: Final = registry.BY_NAME["G1c"].name
G0_PROCESS: Final = registry.BY_NAME["G0-process"].name
G1C_PROCESS: Final = registry.BY_NAME["G1c-process"].name
G0_REALTIME: Final = registry.BY_NAME["G0-realtime"].name
G1C_REALTIME: Final = registry.BY_NAME["G1c-realtime"].name
TORN_TRANSACTION: Final = registry.BY_NAME["torn-transaction"].name
CONSUMED_TWICE: Final = registry.BY_NAME["consumed-twice"].name
CONSUMED_SKIPPED: Final = registry.BY_NAME["consumed-skipped"].name

ALL_CHECKS: Final[tuple[str, ...]] = registry.names()
"""Every anomaly the checker knows, in the order ``results.json``, the summary and ``--checks`` list them."""
CORE_CHECKS: Final[tuple[str, ...]] = (LOST_WRITE, REPLICA_DIVERGENCE, DUPLICATE)
"""The three checks ``bench/checker.py`` compares against DuckDB."""

WARNINGS: Final[frozenset[str]] = frozenset(
    anomaly.name
    for anomaly in registry.ANOMALIES
    if anomaly.severity == registry.WARNING and not anomaly.error_when_strict
)
"""Reported, never making a run invalid (severity ``warning``); stalled too unless ``--liveness strict``."""
LIVENESS_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.LIVENESS)
"""Decided by the driver from the liveness figures (``Engine.liveness``)."""

LIVENESS_WARN: Final = "warn"
LIVENESS_STRICT: Final = "strict"
LIVENESS_MODES: Final[tuple[str, ...]] = (LIVENESS_WARN, LIVENESS_STRICT)
DEFAULT_STALL_THRESHOLD_S: Final = 10.0
"""How long a partition may go without progress, outside fault windows, before it is stalled.

Why 10 s: a healthy partition here acknowledges several sends a second, and a client's recovery
after a heal -- a metadata refresh, a leader election, the producer's retry backoff -- takes a
few seconds (the KIP-101 scenarios measure 1-4 s); a broker that stops answering for longer than
the whole recovery budget of ``request.timeout.ms`` is stuck, not recovering."""
UNPOLLED_AGE_EDGES_S: Final[tuple[int, ...]] = (1, 10, 60)
"""Buckets (s) of the liveness figures' count of acknowledged records no poll returned, by age at the end."""


@dataclasses.dataclass(frozen=True, slots=True)
class Liveness:
    """The liveness settings of a check (``--stall-threshold``, ``--liveness``)."""

    stall_threshold_s: float = DEFAULT_STALL_THRESHOLD_S
    mode: str = LIVENESS_WARN

    def __post_init__(self) -> None:
        if self.mode not in LIVENESS_MODES:
            raise ValueError(f"liveness mode {self.mode!r} is not one of {', '.join(LIVENESS_MODES)}")
        if not self.stall_threshold_s > 0:
            raise ValueError(f"the stall threshold must be > 0 seconds, not {self.stall_threshold_s!r}")


DEFAULT_LIVENESS: Final = Liveness()


def severity(kind: str, liveness: Liveness = DEFAULT_LIVENESS) -> str:
    """``warning`` or ``error``: the registry's severity, an error for stalled when the liveness mode is strict."""
    anomaly = registry.BY_NAME.get(kind)
    if anomaly is None or (anomaly.error_when_strict and liveness.mode == LIVENESS_STRICT):
        return registry.ERROR
    return anomaly.severity


VALUE_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.VALUE)
"""Answered together by one aggregation grouped by (run, partition, value)."""
POLL_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.POLL_ORDER)
"""Order checks on the records consumers read."""
SEND_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.SEND_ORDER)
"""Order checks on the offsets sends were acknowledged with."""
ORDER_CHECKS: Final[tuple[str, ...]] = (*POLL_CHECKS, *SEND_CHECKS)
"""Answered together by one engine question (``Engine.order_anomalies``)."""
REPLICA_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.REPLICA)
"""Answered together by one engine question (``Engine.divergence``): each differing position is one or the other."""
GROUP_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.GROUP)
"""Answered together by one engine question (``Engine.group_anomalies``): the consumer-group checks."""
INVARIANT_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.INVARIANT)
"""Answered together by one engine question (``Engine.invariant_anomalies``): the white-box checks on the brokers' event logs."""

TXN_CHECKS: Final[tuple[str, ...]] = registry.of_families(registry.TXN)
"""Answered together by one engine question (``Engine.txn_anomalies``), by :mod:`checker.txn` in both engines."""

DEFAULT_EXAMPLE_LIMIT: Final = 5

VALUE_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = registry.VALUE.example_columns
"""Columns every engine returns for each value-check example, ordered by (partition, value, value_text)."""

OFFSET_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = registry.OFFSET.example_columns
ORDER_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = registry.POLL_ORDER.example_columns
"""Columns every engine returns for each order-check example, ordered by (process, partition, index, item).

``index``/``item``/``offset``: the late record (or the late send's completion, ``item`` null);
``prev_index``/``prev_offset``: the read or send it is compared with; ``invoke_index``: the
late send's invoke (realtime-order only, else null)."""
DIVERGENCE_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = registry.REPLICA.example_columns
GROUP_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = registry.GROUP.example_columns
"""Columns every engine returns for each group-check example, ordered by (partition, offset, index, item).

``index``/``item``/``offset``: the acknowledged send and its position (group-skip), the
re-read record (group-redelivery), the ``ok`` commit's completion and its offset (the commit
checks), or the assign's completion and its generation (generation-regression, no partition);
``prev_index``/``prev_offset``: the op that set the known committed position and that
position, the earlier commit and its offset (commit-regression), the read of the highest
offset and that offset (committed-beyond-read; null when nothing was read), or the earlier
assign and its generation.  ``process``: the reader, committer or assignee (group-skip: null)."""
GROUP_ORDER: Final[tuple[str, ...]] = registry.GROUP.example_order
INVARIANT_EXAMPLE_COLUMNS: Final[tuple[str, ...]] = registry.INVARIANT.example_columns
"""Columns every engine returns for each white-box example, ordered by (partition, ts, node, seq).

``node``/``seq``: the event in question (``ts`` its place in time, see the definitions; null,
as ``seq``, for isr-divergence, whose ``node`` is the ISR member); ``value``/``bound``: what was
compared -- the truncation's new LEO against the exposed HW, the new leader's LEO against it,
the regressed HW against the earlier one, the ISR size against min ISR, the first divergent
offset against the leader's HW; ``positions``: how many offsets (committed offsets cut, missing,
regressed, advanced under min ISR, divergent positions); ``prev_node``/``prev_seq``: the event it
was compared with (the exposure; for isr-divergence the controller event that set the final
ISR); ``peer``: the leader (isr-divergence)."""
INVARIANT_ORDER: Final[tuple[str, ...]] = registry.INVARIANT.example_order

ASSIGN, REVOKE, COMMIT = "assign", "revoke", "commit"  # the group ops' f (docs/consumer-groups.md)
PARTITION_KEY_PATTERN: Final = "^(0|[1-9][0-9]{0,8})$"
"""A commit's ``offsets`` key that names a partition: a plain decimal number (others are ignored)."""

TYPE_INVOKE, TYPE_OK, TYPE_FAIL, TYPE_INFO = 0, 1, 2, 3  # testbed.record.history's, as plain ints
