"""Synthetic transactional runs with planted anomalies: for the checker bench (``bench/txn_checker.py``).

:func:`generate_txn_run` writes one run directory -- ``test.json`` (``read_committed``) and
``history.parquet``, flattened by the recorder's own :func:`testbed.record.history.ops_to_table`
from ``txn`` ops as ``docs/history.md`` describes them -- and returns (and stores as
``planted.json``) what was planted.  The run is a sequence of rounds:

* every consumer (processes from :data:`CONSUMER_PROCESS`) reads on from its position: one
  read-only ``txn`` op (one poll micro-op, ``ok``, no end micro-op) returning 1-4 records
  committed in earlier rounds, in log order, from one partition (recorded only when it read
  something);
* every producer (processes ``0..``) runs one transaction of 1-4 micro-ops -- a send of a fresh
  value to one of :data:`PARTITIONS` partitions, or a poll reading on from the producer's own
  position -- all producers invoked before any completes.  It commits (``ok``), aborts (``fail``,
  an ``abort`` end micro-op) or ends ``info`` (a commit that timed out: half of them committed);
* the sends of the round are appended in producer order, each transaction's contiguously and
  followed by one marker offset per partition it wrote (Kafka's commit or abort marker); the
  committed ones become readable in the next round.

So every dependency points forward -- log order, reads, process order and real time all follow
(round, producer) -- and the dependency graphs have no cycle but the planted ones.  At a known rate
(``plant_rate`` of the estimated transactions, at least one each) rounds are chosen to plant:

* **G1a**: producer 0's transaction aborts, and in the next round a consumer reads its first send;
* **G1c**: producers 2 and 3 each send a value and poll the other's (a wr cycle of two
  transactions that committed, each commit before the other's completion, so no precommitted-read);
* **lost commit**: producer 1's transaction sends to two partitions and commits, and the second
  record never becomes readable (no poll, no drain): a lost-write and a torn-transaction.

A final drain reads every partition's committed records, ``complete``.  Expected per run:
``planted`` of each of G1a, G1c, lost-write and torn-transaction, nothing else of the
transactional family (:data:`checker.definitions.TXN_CHECKS`) -- and, of the checks the bench
does not ask, a lost-read per G1a (the aborted value read is not in the drain).  The module
trades the real workload's timing for speed and exact counts, as :mod:`checker.synthetic_runs`
does for plain runs.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any, Final

from checker.definitions import G1A, G1C, LOST_WRITE, TORN_TRANSACTION
from testbed.record.history import ops_to_table
from testbed.record.ops import Op, OpType
from testbed.record.parquet_files import write_parquet
from testbed.record.rundir import RunDir

PARTITIONS: Final = 4
PRODUCERS: Final = 4
"""At least four: the plants use producers 0-3."""
CONSUMERS: Final = 2
CONSUMER_PROCESS: Final = 1_000_000_000
"""Above every producer's process ids (a producer takes a fresh one after each ``info``)."""
DRAIN_PROCESS: Final = 1_500_000_000
PLANT_RATE: Final = 1e-3
"""Of the estimated transactions, per planted kind."""
ROUND_NS: Final = 1_000_000
PLANTED_KINDS: Final[tuple[str, ...]] = (G1A, G1C, LOST_WRITE, TORN_TRANSACTION)
MAX_MICRO_OPS_PER_ROUND: Final = PRODUCERS * 4 + CONSUMERS + 1
"""A bound the plants' rounds are drawn under (a round may also hold a G1a read)."""

Record = tuple[int, int, int]
"""(partition, offset, value)."""


def _record(record: Record) -> dict[str, Any]:
    partition, offset, value = record
    return {"partition": partition, "offset": offset, "key": f"k{partition}", "value": value}


@dataclasses.dataclass
class _Txn:
    """A producer's transaction of one round: its micro-ops (completed form) and its outcome."""

    slot: int
    """The producer (0 .. PRODUCERS-1); its process id changes after an ``info``."""
    micro: list[dict[str, Any]]
    outcome: OpType
    committed: bool
    lost: int | None = None
    """The position in ``micro`` of a send that never becomes readable (a planted lost commit)."""


@dataclasses.dataclass(frozen=True)
class _Plants:
    """The rounds each kind is planted in."""

    g1a: frozenset[int]
    g1c: frozenset[int]
    lost: frozenset[int]


class _Simulation:
    """The state of one run's generation: ops so far, the partitions' logs, the readers' positions."""

    def __init__(self, seed: int, plants: _Plants) -> None:
        self.rng = random.Random(seed)
        self.plants = plants
        self.ops: list[Op] = []
        self.next_value = seed * 10_000_000_000
        self.ends = [0] * PARTITIONS
        self.visible: list[list[Record]] = [[] for _ in range(PARTITIONS)]
        self.positions: dict[int, list[int]] = {
            p: [0] * PARTITIONS
            for p in [*range(PRODUCERS), *range(CONSUMER_PROCESS, CONSUMER_PROCESS + CONSUMERS)]
        }
        self.ids = list(range(PRODUCERS))
        """Each producer's current process id."""
        self.aborted_reads: list[Record] = []
        self.txns = 0
        self.micro_ops = 0

    def _op(self, time: int, process: int, kind: OpType, value: Any, error: str | None = None) -> int:
        self.ops.append(Op(len(self.ops), time, process, kind, "txn", value, error))
        return len(self.ops) - 1

    def _read_on(self, process: int) -> list[Record]:
        """1-4 committed records from one partition, from ``process``'s position on (or none)."""
        position = self.positions[process]
        readable = [p for p in range(PARTITIONS) if position[p] < len(self.visible[p])]
        if not readable:
            return []
        partition = self.rng.choice(readable)
        start = position[partition]
        records = self.visible[partition][start : start + self.rng.randint(1, 4)]
        position[partition] = start + len(records)
        return records

    def _read_only(self, time: int, process: int, records: list[Record]) -> None:
        """A consumer's read outside any transaction: invoke and ``ok`` at once (docs/history.md)."""
        self._op(time, process, "invoke", [{"f": "poll"}])
        self._op(time + 1, process, "ok", [{"f": "poll", "records": [_record(r) for r in records]}])
        self.txns += 1
        self.micro_ops += 1

    def consumers(self, base: int) -> None:
        for number in range(CONSUMERS):
            process = CONSUMER_PROCESS + number
            records = self._read_on(process)
            if records:
                self._read_only(base + 2 * number, process, records)
        if self.aborted_reads:  # a planted G1a: a consumer reads an aborted transaction's send
            self._read_only(base + 2 * CONSUMERS, CONSUMER_PROCESS, self.aborted_reads)
            self.aborted_reads = []

    def _send(self, partition: int) -> dict[str, Any]:
        self.next_value += 1
        return {"f": "send", "partition": partition, "key": f"k{partition}", "value": self.next_value}

    def _drawn(self, slot: int) -> _Txn:
        micro = [
            self._send(self.rng.randrange(PARTITIONS)) if self.rng.random() < 0.7 else {"f": "poll"}
            for _ in range(self.rng.randint(1, 4))
        ]
        draw = self.rng.random()
        if draw < 0.85:
            return _Txn(slot, micro, "ok", True)
        if draw < 0.95:
            return _Txn(slot, micro, "fail", False)
        return _Txn(slot, micro, "info", self.rng.random() < 0.5)

    def plans(self, number: int) -> list[_Txn]:
        """This round's transactions, one per producer, the planted ones in place."""
        txns = [self._drawn(slot) for slot in range(PRODUCERS)]
        if number in self.plants.g1a:
            txns[0] = _Txn(0, [self._send(self.rng.randrange(PARTITIONS))], "fail", False)
        if number in self.plants.lost:
            first, second = self.rng.sample(range(PARTITIONS), 2)
            txns[1] = _Txn(1, [self._send(first), self._send(second)], "ok", True, lost=1)
        if number in self.plants.g1c:
            a, b = self.rng.sample(range(PARTITIONS), 2)
            txns[2] = _Txn(2, [self._send(a), {"f": "poll"}], "ok", True)
            txns[3] = _Txn(3, [self._send(b), {"f": "poll"}], "ok", True)
        return txns

    def _place(self, txns: list[_Txn]) -> None:
        """Offsets for every send, in producer order, a marker after each transaction's sends."""
        for txn in txns:
            written = set()
            for micro in txn.micro:
                if micro["f"] == "send":
                    micro["offset"] = self.ends[micro["partition"]]
                    self.ends[micro["partition"]] += 1
                    written.add(micro["partition"])
            for partition in written:
                self.ends[partition] += 1

    def _fill_polls(self, txns: list[_Txn], planted_g1c: bool) -> None:
        """What each poll micro-op read: on from its producer's position, but in a planted G1c
        each of producers 2 and 3 reads the other's send of this round."""
        if planted_g1c:
            a, b = txns[2].micro[0], txns[3].micro[0]
            txns[2].micro[1]["records"] = [_record((b["partition"], b["offset"], b["value"]))]
            txns[3].micro[1]["records"] = [_record((a["partition"], a["offset"], a["value"]))]
        for txn in txns:
            for micro in txn.micro:
                if micro["f"] == "poll" and "records" not in micro:
                    micro["records"] = [_record(r) for r in self._read_on(txn.slot)]

    def producers(self, base: int, number: int) -> None:
        """One transaction per producer, all invoked, then all completed; their effects on the logs."""
        txns = self.plans(number)
        for txn in txns:
            self._op(base + 10 + txn.slot, self.ids[txn.slot], "invoke", [_planned(m) for m in txn.micro])
        self._place(txns)
        self._fill_polls(txns, number in self.plants.g1c)
        for txn in txns:
            end = "commit" if txn.outcome != "fail" else "abort"
            value = [*txn.micro, {"f": end, "time": base + 100 + txn.slot}]
            error = {"ok": None, "fail": "abort", "info": "commit timed out"}[txn.outcome]
            self._op(base + 200 + txn.slot, self.ids[txn.slot], txn.outcome, value, error)
            if txn.outcome == "info":  # the thread goes on as a fresh process (docs/history.md)
                self.ids[txn.slot] += PRODUCERS
            self.txns += 1
            self.micro_ops += len(txn.micro)
        for txn in txns:
            sends = [(at, m) for at, m in enumerate(txn.micro) if m["f"] == "send"]
            if txn.committed:
                for at, m in sends:
                    if at != txn.lost:
                        self.visible[m["partition"]].append((m["partition"], m["offset"], m["value"]))
            elif number in self.plants.g1a and txn.slot == 0:
                m = sends[0][1]
                self.aborted_reads = [(m["partition"], m["offset"], m["value"])]

    def drain(self, base: int) -> None:
        """The final drain: every partition's committed records, complete."""
        for partition in range(PARTITIONS):
            process = DRAIN_PROCESS + partition
            self.ops.append(Op(len(self.ops), base, process, "invoke", "drain", {"partition": partition}))
            value = {
                "partition": partition,
                "records": [
                    {"offset": o, "key": f"k{partition}", "value": v} for _, o, v in self.visible[partition]
                ],
                "end_offset": self.ends[partition],
                "complete": True,
            }
            self.ops.append(Op(len(self.ops), base + 1, process, "ok", "drain", value))


def _planned(micro: dict[str, Any]) -> dict[str, Any]:
    """The invoke's form of a micro-op (no offset, no records)."""
    return (
        {"f": "poll"} if micro["f"] == "poll" else {k: micro[k] for k in ("f", "partition", "key", "value")}
    )


def _plants(rounds: int, plant_rate: float, rng: random.Random) -> _Plants:
    """Rounds for each planted kind, among the first ``rounds`` (a lower bound on the run's)."""
    eligible = range(1, max(2, rounds - 1))  # a G1a's read comes a round later
    count = max(1, round(rounds * (PRODUCERS + CONSUMERS) * plant_rate))
    count = min(count, len(eligible))
    return _Plants(*(frozenset(rng.sample(eligible, count)) for _ in range(3)))


def simulate(
    seed: int, micro_ops: int | None = None, txns: int | None = None, plant_rate: float = PLANT_RATE
) -> tuple[list[Op], dict[str, Any]]:
    """The ops of one run of about ``micro_ops`` micro-ops or ``txns`` transactions (whichever
    comes first; read-only consumer ops count as transactions) and what was planted."""
    if micro_ops is None and txns is None:
        raise ValueError("give micro_ops, txns or both")
    bounds = [
        limit // per_round
        for limit, per_round in ((micro_ops, MAX_MICRO_OPS_PER_ROUND), (txns, PRODUCERS + CONSUMERS + 1))
        if limit is not None
    ]
    rng = random.Random(seed ^ 0x5EED)
    plants = _plants(min(bounds), plant_rate, rng)
    run = _Simulation(seed, plants)
    number = 0
    while (micro_ops is None or run.micro_ops < micro_ops) and (txns is None or run.txns < txns):
        base = (number + 1) * ROUND_NS
        run.consumers(base)
        run.producers(base, number)
        number += 1
    run.drain((number + 1) * ROUND_NS)
    planted = {G1A: len(plants.g1a), G1C: len(plants.g1c), LOST_WRITE: len(plants.lost)}
    planted[TORN_TRANSACTION] = len(plants.lost)
    return run.ops, {**planted, "txns": run.txns, "micro_ops": run.micro_ops, "rounds": number}


SPEC: Final[dict[str, Any]] = {
    "schema_version": 1,
    "name": "bench-txn",
    "topic": "queue",
    "workload": {"name": "queue", "partitions": PARTITIONS, "acks": "all", "isolation": "read_committed"},
    "broker_config": {"acks": "all"},
    "nemesis": {"faults": ["kill"]},
    "scenario": None,
    "scenario_faults": [],
    "nodes": [],
}


def generate_txn_run(
    run_dir: Path,
    seed: int,
    micro_ops: int | None = None,
    txns: int | None = None,
    plant_rate: float = PLANT_RATE,
) -> dict[str, Any]:
    """One run directory (see the module docstring); returns the planted counts (``planted.json``)."""
    ops, planted = simulate(seed, micro_ops, txns, plant_rate)
    table = ops_to_table(ops, run_id=seed + 1)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_parquet(table, RunDir(run_dir).history_parquet)
    RunDir(run_dir).spec_file.write_text(json.dumps(SPEC))
    planted["history_rows"] = table.num_rows
    (run_dir / "planted.json").write_text(json.dumps(planted))
    return planted
