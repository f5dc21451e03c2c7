"""A broker's controlled shutdown: its leaderships moved away while it still runs.

Kafka's brokers, told to stop, first ask the controller to move the leaderships they hold to other
in-sync replicas and to take them out of the ISRs, and only then close their listener and logs
(``controlled.shutdown.enable``; in KRaft the broker's heartbeat asks, and the controller answers
when it is done).  Without it a clean stop costs what a crash costs: the partitions it led have
no leader until its session times out at the controller, and every producer waits that long.

Here the broker stops heartbeating (a heartbeat would unfence it again), asks the controller once
(``controlled_shutdown``: :meth:`broker_impl.controller.Controller.controlled_shutdown` fences it
at once) and applies the metadata the answer carries, so that it stops leading before its
listener closes: a request still arriving is answered as a follower would answer it.  A
controller that does not answer within the bound leaves the shutdown to go on regardless -- a
broker that cannot stop because its controller is gone would be worse (Kafka gives up likewise
after its retries).

SIGTERM asks for it (``kafka-server-stop.sh``'s signal); SIGINT stops the broker cleanly without
it.  The harness stops a whole cluster at a run's end with SIGINT: a controlled shutdown of every
broker at once would move the leaderships among brokers that are all stopping -- and a demoted
replica in ``truncation.mode=high-watermark`` cuts its log at its high watermark -- so the replica
dumps would show the stop, not the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any, Protocol

from .rpc import RpcClient, RpcError

logger = logging.getLogger("broker_impl.controlled_shutdown")

ANSWER_TIMEOUT_S = 5.0
"""How long the broker waits for the controller's answer before it shuts down regardless."""


class StopSignals:
    """SIGTERM and SIGINT both stop the broker; :attr:`controlled` says whether a SIGTERM did."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stopped = asyncio.Event()
        self.controlled = False
        loop.add_signal_handler(signal.SIGTERM, self._stop, True)
        loop.add_signal_handler(signal.SIGINT, self._stop, False)

    def _stop(self, controlled: bool) -> None:
        if not self._stopped.is_set():  # the first signal decides
            self.controlled = controlled
        self._stopped.set()

    async def wait(self) -> None:
        await self._stopped.wait()


class StoppingBroker(Protocol):
    """What the controlled shutdown needs of the broker (:class:`broker_impl.broker.Broker`)."""

    @property
    def node_id(self) -> int: ...

    @property
    def incarnation(self) -> str: ...

    @property
    def controller(self) -> RpcClient: ...

    @property
    def settings(self) -> dict[str, Any]: ...

    def apply_metadata(self, metadata: dict[str, Any]) -> None: ...


async def controlled_shutdown(
    broker: StoppingBroker, heartbeats: asyncio.Task[None], *, controlled: bool
) -> None:
    """Stop ``heartbeats``, then -- when ``controlled`` (a SIGTERM) and with
    ``controlled.shutdown.enable`` -- have the controller fence the broker and apply the metadata
    it answers.  Never raises: a failure is logged and the clean shutdown goes on."""
    heartbeats.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await heartbeats
    if not (controlled and broker.settings["controlled.shutdown.enable"]):
        return
    try:
        reply = await broker.controller.call(
            "controlled_shutdown",
            {"node_id": broker.node_id, "incarnation": broker.incarnation},
            timeout=ANSWER_TIMEOUT_S,
        )
    except (ConnectionError, RpcError) as error:
        logger.warning("controlled shutdown not acknowledged, stopping regardless: %s", error)
        return
    broker.apply_metadata(reply["metadata"])
    logger.info("controlled shutdown: the controller moved this broker's leaderships away")
