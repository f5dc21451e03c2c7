"""Client wrappers: closing a producer never raises into the workload or a scenario step."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaTimeoutError

from workloads.clients import KafkaPythonProducer


class _Sender:
    def __init__(self) -> None:
        self.forced = False
        self.joined: float | None = None

    def force_close(self) -> None:
        self.forced = True

    def join(self, timeout: float) -> None:
        self.joined = timeout


class _StuckProducer:
    """kafka-python's producer with a batch for a dead leader: ``close`` flushes first and raises
    when the flush does not end in time (with any timeout, 0 included), before closing anything."""

    def __init__(self) -> None:
        self.closes: list[float] = []
        self._sender = _Sender()
        self._closed = False

    def close(self, timeout: float) -> None:
        self.closes.append(timeout)
        raise KafkaTimeoutError("Timeout waiting for future")


def test_a_close_that_times_out_abandons_the_batch_instead_of_raising() -> None:
    producer = object.__new__(KafkaPythonProducer)
    stuck = _StuckProducer()
    vars(producer)["_producer"] = stuck
    producer.close()
    assert stuck.closes == [2]
    # The sender thread is stopped and the producer marked closed, so its __del__ does nothing.
    assert stuck._sender.forced and stuck._sender.joined == 2
    assert stuck._closed is True


def test_even_the_forced_close_failing_does_not_raise() -> None:
    producer = object.__new__(KafkaPythonProducer)

    class Broken(_StuckProducer):
        def close(self, timeout: float) -> None:
            raise RuntimeError("closed twice")

    vars(producer)["_producer"] = Broken()
    try:
        producer.close()
    except Exception as error:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"close raised {error!r}")
