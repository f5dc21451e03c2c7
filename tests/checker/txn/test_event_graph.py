"""The event graph against simulated Kafka executions: a history that really happened closes no
G1c cycle, however its open transactions interleave in the logs; the same histories with one
transaction's read moved before its writer's commit (an impossible read) do.

The simulation (:func:`simulate`) runs processes of transactions over a global clock, one event
per tick: a transaction's micro-ops are called in order, each send is appended to its partition's
log at a random later tick before the commit (so appends of open transactions interleave), a
poll returns committed records only, an abort makes its records invisible for good, and a
completion comes some ticks after the commit.  The history records the invokes and completions in
that order -- exactly what the event graph may rely on.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from checker.definitions import G1C, G1C_PROCESS, G1C_REALTIME
from checker.txn.graph import WR, WW, CycleSpec, find_cycles
from checker.txn.tables import build, normalized
from checker.txn.txn_graph import dependency_graph
from tests.checker.txn.histories import History, check, poll, send

G1C_FAMILY = frozenset({G1C, G1C_PROCESS, G1C_REALTIME})
PARTITIONS = 3


@dataclasses.dataclass
class _Txn:
    process: int
    plan: list[tuple[str, int]]  # ("send", partition) / ("poll", partition)
    aborts: bool
    micro: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    unappended: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    step: int = 0
    committed_at: int | None = None


class _Cluster:
    """The logs: per partition, (value, writer) in append order, and the writers now visible."""

    def __init__(self) -> None:
        self.logs: list[list[tuple[int, _Txn]]] = [[] for _ in range(PARTITIONS)]
        self.visible: set[int] = set()

    def append(self, micro: dict[str, Any], txn: _Txn) -> None:
        log = self.logs[micro["partition"]]
        micro["offset"] = len(log)
        log.append((micro["value"], txn))

    def read(self, partition: int, rng: random.Random) -> list[tuple[int, int, int]]:
        committed = [
            (partition, o, v) for o, (v, t) in enumerate(self.logs[partition]) if id(t) in self.visible
        ]
        return rng.sample(committed, min(len(committed), rng.randint(0, 2)))


def _tick(txn: _Txn, cluster: _Cluster, rng: random.Random, values: list[int], history: History) -> bool:
    """Advance ``txn`` by one event; True once it has completed."""
    if txn.unappended and rng.random() < 0.5:  # a pending send reaches its log
        cluster.append(txn.unappended.pop(rng.randrange(len(txn.unappended))), txn)
    elif txn.step < len(txn.plan):
        kind, partition = txn.plan[txn.step]
        txn.step += 1
        if kind == "send":
            txn.unappended.append(txn.micro[txn.step - 1])
        else:
            txn.micro[txn.step - 1]["records"] = poll(*cluster.read(partition, rng))["records"]
    elif txn.committed_at is None:
        while txn.unappended:
            cluster.append(txn.unappended.pop(0), txn)
        txn.committed_at = 0
        if not txn.aborts:
            cluster.visible.add(id(txn))
    elif rng.random() < 0.5:
        history.complete(
            txn.process, kind="fail" if txn.aborts else "ok", end="abort" if txn.aborts else "commit"
        )
        return True
    return False


def _plan(rng: random.Random) -> list[tuple[str, int]]:
    return [
        (rng.choice(("send", "send", "poll")), rng.randrange(PARTITIONS)) for _ in range(rng.randint(1, 4))
    ]


def simulate(seed: int, processes: int = 3, txns_each: int = 6) -> History:
    """A history of a Kafka-like execution (module docstring)."""
    rng = random.Random(seed)
    history, cluster, values = History(), _Cluster(), [0]
    left = dict.fromkeys(range(processes), txns_each)
    running: dict[int, _Txn] = {}
    while any(left.values()) or running:
        process = rng.choice([p for p in range(processes) if left[p] or p in running])
        if process not in running:
            txn = _Txn(process, _plan(rng), aborts=rng.random() < 0.15)
            for kind, partition in txn.plan:
                values[0] += 1
                txn.micro.append(send(partition, values[0]) if kind == "send" else poll())
            running[process] = txn
            left[process] -= 1
            history.invoke(process, txn.micro)  # offsets and records filled in as the txn runs
        elif _tick(running[process], cluster, rng, values, history):
            del running[process]
    for partition, log in enumerate(cluster.logs):
        history.drain(partition, [(o, v) for o, (v, t) in enumerate(log) if id(t) in cluster.visible])
    return history


@pytest.mark.parametrize("seed", range(40))
def test_a_real_execution_closes_no_g1c_cycle(seed: int) -> None:
    history = simulate(seed)
    found = set(check(history, G1C_FAMILY)["kind"])
    assert not found & G1C_FAMILY


def test_the_simulation_interleaves_open_transactions_in_the_logs() -> None:
    """The property above is only worth something if the histories hold the case that fooled the
    transaction graph: some transaction read a write of another whose send it preceded in a log."""
    ww_and_wr = CycleSpec(G1C, frozenset({WW, WR}), frozenset({WR}))
    fooled = 0
    for seed in range(40):
        graph = dependency_graph(build(normalized(simulate(seed).rows())), realtime=False)
        fooled += bool(find_cycles(graph.size, graph.src, graph.dst, graph.kind, [ww_and_wr]))
    assert fooled > 0


def test_a_read_before_its_writer_committed_closes_a_cycle() -> None:
    """A transaction that read a value its writer had not yet appended, and whose writer read the
    reader's earlier write: impossible, and the event graph says so."""
    history = History()
    history.invoke(0, [send(0, 1, 0), poll((1, 0, 2))])
    history.invoke(1, [send(1, 2, 0), poll((0, 0, 1))])
    history.complete(0)
    history.complete(1)
    assert G1C in set(check(history, G1C_FAMILY)["kind"])
