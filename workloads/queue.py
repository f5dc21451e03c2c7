"""The ``queue`` workload: producers send unique integers, consumers poll, a final drain.

Ops it records (``docs/history.md`` has the full format):

* ``send`` -- invoke ``{"partition", "key", "value"}``; ``ok`` adds ``"offset"``;
  ``fail`` when the message certainly never left the client, ``info`` otherwise.
* ``poll`` -- ``ok`` with the records one consumer process received, in order:
  ``[{"partition", "offset", "key", "value"}, ...]``.  Only non-empty polls are
  recorded (an empty poll says nothing the checker could use).
* ``drain`` -- after every fault is healed, fresh processes read every partition from
  its start to its end offset (the HW): ``ok`` ``{"partition", "records",
  "end_offset", "complete"}``, in chunks; ``complete`` marks the last chunk that
  reached the end.

Process ids: producer ``i`` starts as process ``i``; a process whose op ended ``info``
never invokes again -- the thread continues as a fresh id with a client of its own (Jepsen's
rule, and its interpreter's reopening of a crashed worker's client), so an unknown outcome stays
attached to exactly one op.  Values are unique integers over the
whole run (``value -> writer`` is recoverable); key ``k<p>`` always goes to partition
``p`` so the checker knows where each value belongs.

With ``txn`` (``--txn``) producers run Kafka transactions and every client op but the drain is a
``txn`` op (:mod:`workloads.txn`: what it records and when ``ok``/``fail``/``info``).

How consumers read (``consume_via``, Jepsen's ``--sub-via``): ``assign`` -- each consumer
``assign()`` s a fixed share of the partitions, outside any group; ``subscribe`` -- every
consumer joins the run's consumer group (``group``) and ``subscribe()`` s to the topic, with
rebalances, commits (``commit``: ``sync``, ``async`` or ``auto``) and consumer churn recorded
as ops (:mod:`workloads.group_fleet`, ``docs/consumer-groups.md``).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
import secrets
import threading
from collections.abc import Callable
from typing import Any, cast

from testbed.record.recorder import Recorder

from .client_host import ClientHost
from .clients import (
    CLIENTS,
    ISOLATION_LEVELS,
    DefiniteFailure,
    IndefiniteFailure,
    ProducerClient,
    make_producer,
)
from .group_events import COMMIT_MODES, CONSUME_VIA, CommitMode, GroupConsumerClient
from .group_fleet import STOP_WAYS, ConsumerFleet, make_group_consumer
from .hosted_consumers import hosted_group_consumer
from .queue_assign import AssignedConsumers
from .queue_drain import QueueDrain
from .txn import (
    DEFAULT_ABORT_P,
    DEFAULT_MAX_OPS,
    Pacer,
    TxnProducerLoop,
    TxnSettings,
    txn_problems,
)
from .txn_input import ctp_problems

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class QueueSpec:
    """The workload half of a test spec (serialisable; see :meth:`to_dict`)."""

    partitions: int = 3
    replication_factor: int = 3
    producers: int = 4
    consumers: int = 2
    rate: float = 200.0
    """Total sends per second over all producers (0: as fast as acknowledgements allow); with
    ``txn``, total ops (transactions, read-only draws) per second."""
    acks: str = "all"
    client: str = "kafka-python"
    idempotent: bool = True
    request_timeout: float = 5.0
    consume_via: str = "assign"
    """``assign`` (a fixed share of partitions per consumer) or ``subscribe`` (one consumer group)."""
    commit: str | None = None
    """``subscribe`` only: ``sync`` (the default there), ``async`` or ``auto``; None under ``assign``."""
    isolation: str = "read_committed"
    """What consumers and the drain read: :data:`workloads.clients.ISOLATION_LEVELS`."""
    group: str | None = None
    """``subscribe`` only: the group id, drawn once when the spec is made (``tidemark-<hex>``)
    unless given, and kept in ``test.json``, so a re-run joins a group of the same name."""
    txn: bool = False
    """Producers run Kafka transactions (:mod:`workloads.txn`).  Needs ``idempotent`` and
    ``acks=all`` (a transactional producer is idempotent and writes with acks=all).  Consumers
    then record their reads as read-only ``txn`` ops, by assign or as group members (``poll`` ops'
    order checks would call the offset gaps that transaction markers leave skips)."""
    abort_p: float = DEFAULT_ABORT_P
    """``txn`` only: the probability that a transaction is deliberately aborted."""
    txn_max_ops: int = DEFAULT_MAX_OPS
    """``txn`` only: micro-ops per transaction are drawn from 1..this (at most the history
    format's ``testbed.record.txn_rows.MAX_MICRO_OPS``)."""
    txn_ctp: bool = False
    """``txn`` only: consume-transform-produce -- producer thread ``i`` reads its partitions
    (``p % producers == i``) as one consumer group and commits the group's offsets in each
    transaction (:mod:`workloads.txn_input`).  Needs ``isolation=read_committed``."""
    txn_ctp_via: str = "assign"
    """``txn_ctp`` only: ``assign`` (each thread its fixed partitions, zombies fenced by
    ``transactional.id``) or ``subscribe`` (the threads are members of the group; partitions move
    at rebalances, zombies fenced by generation, KIP-447: :mod:`workloads.txn_subscribed`)."""
    client_processes: bool = False
    """The producers (plain and transactional) and the consumers (``assign`` ones and the
    group's members) each run in a child process the nemesis's ``client-crash`` (producers) and
    ``consumer-crash`` (consumers) can SIGKILL (:mod:`workloads.client_host`,
    :mod:`workloads.hosted_consumers`); the final drain's readers stay threads.  Set by the run's
    spec when its nemesis may crash clients.  Not with ``txn_ctp`` (a consumer's group metadata
    cannot cross the pipe)."""

    def __post_init__(self) -> None:
        problems = self._group_problems()
        if self.partitions < 1:
            problems.append("partitions must be >= 1")
        if self.replication_factor < 1:
            problems.append("replication_factor must be >= 1")
        if self.producers < 0 or self.consumers < 0:
            problems.append("producers and consumers must be >= 0")
        if self.rate < 0:
            problems.append("rate must be >= 0")
        if self.acks not in ("0", "1", "all"):
            problems.append(f"acks must be 0, 1 or all, not {self.acks!r}")
        if self.isolation not in ISOLATION_LEVELS:
            problems.append(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {self.isolation!r}")
        if self.client not in CLIENTS:
            problems.append(f"client must be one of {', '.join(CLIENTS)}, not {self.client!r}")
        if self.request_timeout <= 0:
            problems.append("request_timeout must be > 0")
        problems += txn_problems(self.txn, self.abort_p, self.txn_max_ops, self.idempotent, self.acks)
        problems += ctp_problems(self.txn, self.txn_ctp, self.isolation, self.txn_ctp_via)
        if not isinstance(self.client_processes, bool):
            problems.append(f"client_processes must be true or false, not {self.client_processes!r}")
        elif self.client_processes and self.txn_ctp:
            problems.append(
                "--client-processes (implied by --nemesis client-crash or consumer-crash) cannot host"
                " --txn-ctp producers:"
                " a consumer's group metadata cannot cross the pipe"
            )
        if problems:
            raise ValueError("; ".join(problems))

    def _group_problems(self) -> list[str]:
        """Check (and complete: commit mode and group id under ``subscribe``) the group fields."""
        if self.consume_via not in CONSUME_VIA:
            return [f"consume_via (--consume-via) must be assign or subscribe, not {self.consume_via!r}"]
        if self.consume_via == "assign":
            wrong = []
            if self.commit is not None:
                wrong.append(f"--commit {self.commit} needs --consume-via subscribe (commits are a group's)")
            if self.group is not None:
                wrong.append(f"group {self.group!r} needs --consume-via subscribe")
            return wrong
        if self.commit is None:
            object.__setattr__(self, "commit", "sync")
        if self.commit not in COMMIT_MODES:
            return [f"commit (--commit) must be one of {', '.join(COMMIT_MODES)}, not {self.commit!r}"]
        if self.group is None:
            object.__setattr__(self, "group", f"tidemark-{secrets.token_hex(6)}")
        if not isinstance(self.group, str) or not self.group.strip():
            return [f"group must be a non-empty string, not {self.group!r}"]
        return []

    @property
    def send_rate(self) -> float | None:
        """Records per second the producers send, where the spec fixes it: None as fast as
        acknowledgements allow (``rate`` 0), and with ``txn`` (``rate`` counts transactions, each of
        a drawn number of sends).  What a fault package sizes a slowed link from."""
        return self.rate if self.rate > 0 and not self.txn else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": "queue", **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueSpec:
        fields = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields - {"name"})
        if unknown:
            raise ValueError(f"unknown workload settings: {', '.join(unknown)}")
        return cls(**{key: value for key, value in data.items() if key in fields})


class _ProcessIds:
    """Hands out fresh process ids (thread-safe)."""

    def __init__(self, start: int) -> None:
        self._counter = itertools.count(start)
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return next(self._counter)


class QueueWorkload:
    def __init__(self, spec: QueueSpec, recorder: Recorder, bootstrap: str, topic: str) -> None:
        self.spec = spec
        self.recorder = recorder
        self.bootstrap = bootstrap
        self.topic = topic
        self._values = itertools.count(1)
        self._values_lock = threading.Lock()
        # Initial ids are 0..producers+consumers-1; replacements come after them.
        self._fresh_ids = _ProcessIds(spec.producers + spec.consumers)
        self.errors: list[str] = []
        self._fleet: ConsumerFleet | None = None
        self._host = ClientHost() if spec.client_processes else None
        """The producers' processes under ``client_processes`` (None: they are threads' clients)."""

    def _next_value(self) -> int:
        with self._values_lock:
            return next(self._values)

    # ---- main phase -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Run producers and consumers until ``stop`` is set; returns when all threads ended."""
        produce = self._produce_transactions if self.spec.txn else self._produce
        threads = [
            threading.Thread(target=self._guard(produce, i, stop), name=f"producer-{i}", daemon=True)
            for i in range(self.spec.producers)
        ]
        if self.spec.consume_via == "subscribe":
            threads.append(threading.Thread(target=self._run_group, args=(stop,), name="group", daemon=True))
        else:
            threads += [
                threading.Thread(
                    target=self._guard(self._consume, i, stop), name=f"consumer-{i}", daemon=True
                )
                for i in range(self.spec.consumers)
            ]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            if self._host is not None:
                self._host.shutdown()

    def _run_group(self, stop: threading.Event) -> None:
        """The ``subscribe`` consumers: one group, its members recorded (``workloads.group_fleet``)."""
        spec = self.spec
        assert spec.group is not None  # set under subscribe by QueueSpec
        commit = cast(CommitMode, spec.commit)
        settings = (
            spec.client,
            self.bootstrap,
            self.topic,
            spec.group,
            commit,
            spec.request_timeout,
            spec.isolation,
        )
        host = self._host

        def new_member() -> GroupConsumerClient:
            """A member: a thread's client, or in a process of its own under ``client_processes``."""
            return (
                make_group_consumer(*settings)
                if host is None
                else hosted_group_consumer(host, None, settings)
            )

        fleet = ConsumerFleet(
            self.recorder, self._fresh_ids.next, new_member, commit, spec.request_timeout, spec.txn
        )
        self._fleet = fleet
        try:
            fleet.run([spec.producers + i for i in range(spec.consumers)], stop)
        finally:
            self.errors.extend(fleet.errors)

    # ---- consumer churn (the nemesis's ``consumer-churn``: nemesis.consumer_churn.ConsumerChurn) ----

    def churn_unavailable(self) -> str | None:
        """Why this workload cannot churn consumers (None: it can)."""
        if self.spec.consume_via != "subscribe":
            return "consumer churn needs a consumer group: run with --consume-via subscribe"
        return None

    def churn_consumer(self, stop: str, pick: int) -> dict[str, Any]:
        """Stop running consumer ``pick`` (modulo their count) by ``stop`` (``leave`` or
        ``stall``) and start a new one in the group; what happened (``ConsumerFleet.churn``).

        Raises LookupError when nothing was done.
        """
        problem = self.churn_unavailable()
        if problem is not None:
            raise LookupError(problem)
        if stop not in STOP_WAYS:
            raise LookupError(f"unknown way to stop a consumer {stop!r} (known: {', '.join(STOP_WAYS)})")
        fleet = self._fleet
        if fleet is None:
            raise LookupError("the workload's consumers are not running")
        return fleet.churn(stop, pick)

    # ---- client crashes (the nemesis's ``client-crash`` and ``consumer-crash``: nemesis.client_crash) ----

    def crash_unavailable(self, role: str = "producer") -> str | None:
        """Why this workload cannot crash a client of ``role`` (``producer`` or ``consumer``;
        None: it can)."""
        if self._host is None:
            return "client crashes need clients in processes: run with --client-processes"
        if role == "consumer":
            if self.spec.consumers < 1:
                return "consumer crashes need a consumer, and this run has none (--consumers 0)"
            return None
        if self.spec.producers < 1:
            return "client crashes need a producer, and this run has none (--producers 0)"
        return None

    def crash_client(self, pick: int, role: str = "producer") -> dict[str, Any]:
        """SIGKILL running client process ``pick`` of ``role`` (modulo their count) mid-operation;
        what happened (:meth:`workloads.client_host.ClientHost.crash`).  LookupError: nothing killed."""
        problem = self.crash_unavailable(role)
        if problem is not None or self._host is None:
            raise LookupError(problem)
        return self._host.crash(pick, role)

    def _guard(
        self, body: Callable[[int, threading.Event], None], index: int, stop: threading.Event
    ) -> Callable[[], None]:
        def run() -> None:
            try:
                body(index, stop)
            except Exception as error:  # a client library bug must not kill the run silently
                logger.exception("workload thread %d failed", index)
                self.errors.append(f"{type(error).__name__}: {error}")

        return run

    def _produce(self, index: int, stop: threading.Event) -> None:
        """Producer ``index``'s loop.  A send whose outcome is unknown retires its process, and the
        fresh process opens a client of its own, as Jepsen's interpreter reopens a crashed worker's
        client: a client whose request vanished may never recover (a kafka-python producer whose
        brokers were cut from it for 15 s timed out every later send, healed or not, 2026-11-29)."""
        spec = self.spec
        process = index
        pacer = Pacer(spec.rate, spec.producers)
        producer: ProducerClient | None = self._new_producer(process)
        try:
            while pacer.wait(stop):
                if producer is None:
                    producer = self._reopened_producer(process)
                    if producer is None:
                        continue  # no broker answers yet: again at the next tick
                value = self._next_value()
                if not self._send(producer, process, value % spec.partitions, value):
                    process = self._fresh_ids.next()
                    producer.close()
                    producer = None
        finally:
            if producer is not None:
                producer.close()

    def _new_producer(self, process: int) -> ProducerClient:
        """Process ``process``'s producer: in a process of its own under ``client_processes``."""
        spec = self.spec
        args = (spec.client, self.bootstrap, spec.acks, spec.idempotent, spec.request_timeout)
        return make_producer(*args) if self._host is None else self._host.producer(process, *args)

    def _reopened_producer(self, process: int) -> ProducerClient | None:
        """A fresh process's client, or None when it cannot be made now (every broker down)."""
        try:
            return self._new_producer(process)
        except Exception as error:
            logger.info("producer not reopened yet: %s: %s", type(error).__name__, error)
            return None

    def _produce_transactions(self, index: int, stop: threading.Event) -> None:
        """Producer ``index`` under ``txn``: :class:`workloads.txn.TxnProducerLoop`."""
        spec = self.spec
        settings = TxnSettings(
            spec.client,
            self.bootstrap,
            self.topic,
            spec.partitions,
            spec.isolation,
            spec.request_timeout,
            spec.abort_p,
            spec.txn_max_ops,
            spec.txn_ctp,
            max(1, spec.producers),
            spec.txn_ctp_via,
        )
        loop = TxnProducerLoop(
            settings,
            self.recorder,
            index,
            self._fresh_ids.next,
            self._next_value,
            random.Random(),
            self._host,
        )
        loop.run(stop, Pacer(spec.rate, spec.producers))

    def _consume(self, index: int, stop: threading.Event) -> None:
        """Consumer ``index``'s loop (``assign``): :class:`workloads.queue_assign.AssignedConsumers`."""
        spec = self.spec
        mine = [p for p in range(spec.partitions) if p % max(1, spec.consumers) == index]
        if not mine:
            return
        consumers = AssignedConsumers(self._reads(), spec.txn, self._host)
        consumers.consume(mine, spec.producers + index, stop)

    def send_marker(self, partition: int, bootstrap: str | None = None) -> None:
        """One send from a fresh process and a fresh producer (a scenario's ``produce`` step),
        bootstrapped at ``bootstrap`` (default: the workload's)."""
        spec = self.spec
        value = self._next_value()
        process = self._fresh_ids.next()
        try:
            producer = make_producer(
                spec.client, bootstrap or self.bootstrap, spec.acks, spec.idempotent, spec.request_timeout
            )
        except Exception as error:
            payload = {"partition": partition, "key": f"k{partition}", "value": value}
            invocation = self.recorder.invoke(process, "send", payload)
            self.recorder.complete(invocation, "fail", payload, error=f"no producer: {error}")
            return
        try:
            self._send(producer, process, partition, value)
        finally:
            producer.close()

    def _send(self, producer: ProducerClient, process: int, partition: int, value: int) -> bool:
        """One recorded send; False when its outcome is unknown (the process must retire)."""
        key = f"k{partition}"
        payload = {"partition": partition, "key": key, "value": value}
        invocation = self.recorder.invoke(process, "send", payload)
        try:
            offset = producer.send(self.topic, partition, key, str(value), self.spec.request_timeout)
        except DefiniteFailure as error:
            self.recorder.complete(invocation, "fail", payload, error=str(error))
        except IndefiniteFailure as error:
            self.recorder.complete(invocation, "info", payload, error=str(error))
            return False
        else:
            self.recorder.complete(invocation, "ok", {**payload, "offset": offset})
        return True

    # ---- final drain ------------------------------------------------------------------------

    def drain(self, deadline: float) -> dict[int, bool]:
        """Read every partition from its start to its end with fresh processes
        (:func:`workloads.queue_drain.drain`: what it records, and when it stops)."""
        return self._reads().drain(self.spec.partitions, self.spec.txn, deadline)

    def _reads(self) -> QueueDrain:
        """What the workload's readers read, with which client, and where their ops go."""
        spec = self.spec
        args = (spec.client, spec.isolation, self.bootstrap, self.topic, spec.request_timeout)
        return QueueDrain(self.recorder, *args, self._fresh_ids.next)
