"""Client wrappers: closing a producer never raises into the workload or a scenario step."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaTimeoutError

from workloads.clients import KafkaPythonProducer


class _StuckProducer:
    """kafka-python's producer whose close(timeout=2) times out flushing a batch to a dead leader."""

    def __init__(self) -> None:
        self.closes: list[float] = []

    def close(self, timeout: float) -> None:
        self.closes.append(timeout)
        if timeout > 0:
            raise KafkaTimeoutError("Timeout waiting for future")


def test_a_close_that_times_out_abandons_the_batch_instead_of_raising() -> None:
    producer = object.__new__(KafkaPythonProducer)
    stuck = _StuckProducer()
    vars(producer)["_producer"] = stuck
    producer.close()
    assert stuck.closes == [2, 0]


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
