"""The request-level faults: a broker's request proxy holds, delays, duplicates or resets client requests.

Each broker of a cluster with :class:`RequestProxies` is reached by its clients only through a
Kafka-aware proxy (:mod:`testbed.cluster.request_proxy`).  ``request-hold`` on a node tells that
node's proxy to hold the next request of each kind in :data:`HELD_REQUESTS` -- one ``Produce``
and one ``EndTxn`` -- that a client sends it; the client's connection stays open and silent, so
the client times the request out and retries on another connection, and moves on.  The heal,
``request-release``, releases what is held on a *new* upstream connection (the answers go
nowhere) and removes the rules, so the held requests reach the broker late: after the client
gave up on them.  That is how a late request of transaction N lands in transaction N+1
(KAFKA-17754: reproduced against the bundled broker with librdkafka's EndTxn, see
``tests/testbed/cluster/test_request_proxy_cluster.py``), how a late Produce opens a
transaction nothing ends when partition verification is off (KAFKA-14402), and how a late
idempotent Produce tests the broker's duplicate detection.

**Why these two requests, one each.**  They are the two whose late arrival the historical bugs
need, and the only client requests that change a log or a transaction by themselves (a late
Fetch or Metadata is harmless).  One of each, not all: holding every Produce is a partition of
that broker for producers, which ``partition`` already is; one request is a late message.  A
scenario step may name fewer, or an EndTxn by its ending (:data:`NAMED_REQUESTS`: ``requests =
["EndTxn(commit)"]`` holds the next commit and lets aborts pass, read from the request's body).

**The other four** act on the same path, each a client-path fault the kernel here cannot make
(no netem) and a real network does: ``request-delay`` makes every request the broker receives
wait its milliseconds (latency; Kafka answers a connection's requests in order, so they queue
behind each other) -- its followers' Fetches too, since the proxy owns the broker's one listener;
``request-reorder`` makes each wait its own random time up to its milliseconds, so that requests
on different connections overtake one another (within one connection the order stays: TCP's, and
Kafka's answer order, which a proxy reordering a connection would only break, not test);
``request-duplicate`` forwards every ``Produce`` and ``EndTxn`` twice on the same
connection, the second answer swallowed (a retransmission the client never made: the broker must
append the batch once and answer the copy as the original); ``request-reset`` forwards the next
one of each and resets the client's connection before the answer (the broker acts; the client
retries on a new connection not knowing whether the first attempt took -- the unknown outcome
idempotence exists for).  All four are undone by ``request-release``.

**Outcomes.**  An act that cannot reach the proxy's control channel, or whose line the proxy
refuses, certainly changed nothing: :class:`~nemesis.outcomes.Refused`.  One that got no reply
may have acted: its error passes through (the op completes ``info``).  A release on a broker
whose proxy holds nothing is a no-op, so the heal is idempotent (heal-all may repeat it).

:class:`nemesis.broker_acts.BrokerActs` calls :meth:`RequestFaults.hold` and
:meth:`RequestFaults.release` as the kind's per-node acts, as it does
:class:`nemesis.packet_loss.PacketLoss`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from nemesis.fault_kinds import HELD_REQUESTS as HELD_REQUESTS
from nemesis.fault_kinds import NAMED_REQUESTS
from nemesis.outcomes import Refused
from testbed.cluster.request_proxy.control import ProxyControl, ProxyRefused
from testbed.cluster.request_proxy.rules import EVERY_REQUEST

RELEASE_MODE: Final = "new-connection"
"""How ``request-release`` sends them: on a fresh connection, its answers dropped."""


@runtime_checkable
class RequestProxies(Protocol):
    """Ability: every broker's clients reach it through a request proxy, whose control this gives."""

    def request_proxy(self, node: str) -> ProxyControl:
        """The control channel of the proxy in front of broker ``node``."""
        ...


def _named(requests: Sequence[str]) -> list[tuple[str, str | None]]:
    """Each of ``requests`` as the proxy's request name and ending; Refused (nothing done yet)
    naming the first unknown one (an op written by hand, or by another version)."""
    unknown = [name for name in requests if name not in NAMED_REQUESTS]
    if unknown:
        raise Refused(f"request {unknown[0]!r}: expected one of {', '.join(NAMED_REQUESTS)}")
    return [NAMED_REQUESTS[name] for name in requests]


class RequestFaults:
    """The per-node acts of ``request-hold`` and ``request-release`` on a cluster with proxies."""

    def __init__(self, cluster: object) -> None:
        self.cluster = cluster

    def _proxy(self, node: str) -> ProxyControl:
        """``node``'s proxy; Refused (certainly nothing done) where there is none -- no proxies at
        all, or a node that is not a broker of the Kafka protocol (tansu's PostgreSQL node, which
        the nemesis may draw as a partition's "leader")."""
        if not isinstance(self.cluster, RequestProxies):
            raise Refused("this cluster has no request proxies in front of its brokers")
        try:
            return self.cluster.request_proxy(node)
        except ValueError as error:
            raise Refused(str(error)) from None

    def hold(self, node: str, requests: Sequence[str] = HELD_REQUESTS) -> list[dict[str, Any]]:
        """Make ``node``'s proxy hold the next request of each of ``requests`` (names of
        :data:`NAMED_REQUESTS`); the rules.  Refused when its control channel refuses or cannot be
        reached, or a name is unknown (no rule was added)."""
        proxy = self._proxy(node)
        holds = [functools.partial(proxy.hold, name, count=1, ends=ends) for name, ends in _named(requests)]
        return self._rules(node, "holds", holds)

    def delay(self, node: str, delay_ms: int) -> list[dict[str, Any]]:
        """Make ``node``'s proxy delay every request by ``delay_ms`` until the release; the rule."""
        proxy = self._proxy(node)
        return self._rules(node, "delays", [functools.partial(proxy.delay, EVERY_REQUEST, delay_ms)])

    def reorder(self, node: str, longest_ms: int) -> list[dict[str, Any]]:
        """Make ``node``'s proxy delay every request by its own draw from 0..``longest_ms`` (1..``longest_ms``
        when it is odd) until the release; the rule."""
        proxy = self._proxy(node)
        middle = (longest_ms + 1) // 2
        jittered = functools.partial(proxy.delay, EVERY_REQUEST, middle, jitter=longest_ms - middle)
        return self._rules(node, "reorderings", [jittered])

    def duplicate(self, node: str, requests: Sequence[str] = HELD_REQUESTS) -> list[dict[str, Any]]:
        """Make ``node``'s proxy send every one of ``requests`` twice until the release; the rules."""
        proxy = self._proxy(node)
        duplications = [
            functools.partial(proxy.duplicate, name, ends=ends) for name, ends in _named(requests)
        ]
        return self._rules(node, "duplications", duplications)

    def reset(self, node: str, requests: Sequence[str] = HELD_REQUESTS) -> list[dict[str, Any]]:
        """Make ``node``'s proxy reset the client's connection after the next one of each of
        ``requests``; the rules."""
        proxy = self._proxy(node)
        resets = [functools.partial(proxy.reset, name, count=1, ends=ends) for name, ends in _named(requests)]
        return self._rules(node, "resets", resets)

    @staticmethod
    def _rules(node: str, what: str, adds: Sequence[Callable[[], dict[str, Any]]]) -> list[dict[str, Any]]:
        """Add the rules in order; Refused when the first is refused (nothing was added), an
        error saying how many were set when a later one is (the op's outcome is then unknown)."""
        rules: list[dict[str, Any]] = []
        for add in adds:
            try:
                rules.append(add())
            except ProxyRefused as error:
                if rules:  # a rule was added: not "certainly nothing happened"
                    raise RuntimeError(f"{node}: {len(rules)} of {len(adds)} {what} set: {error}") from None
                raise Refused(str(error)) from None
        return rules

    def release(self, node: str) -> dict[str, Any]:
        """Release what ``node``'s proxy holds on a new connection and remove its rules; the
        proxy's reply (``released``, ``answered``, ``rules_removed``).  Refused when unreachable."""
        try:
            return self._proxy(node).clear(RELEASE_MODE)
        except ProxyRefused as error:
            raise Refused(str(error)) from None
