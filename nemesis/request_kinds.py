"""The request-level faults' declarations (:mod:`nemesis.request_faults`), kept apart so that
:mod:`nemesis.fault_kinds` ends its tuple of kinds with them rather than growing past its size.

Every one of them acts in the broker's request proxy (a userspace hop on the client path the
kernel cannot give here: no netem), so every one needs a target with request proxies; all are
healed by ``request-release``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from nemesis.fault_declaration import (
    IS_A_HEAL,
    NODE_FAULT_VALUE,
    NODES_VALUE,
    OTHER_COLOUR,
    REQUEST_PROXY,
    FaultKind,
    Param,
)
from testbed.cluster.request_proxy.rules import ENDINGS

REQUEST_HOLD: Final = "request-hold"
REQUEST_RELEASE: Final = "request-release"
REQUEST_DELAY: Final = "request-delay"
REQUEST_DUPLICATE: Final = "request-duplicate"
REQUEST_RESET: Final = "request-reset"
REQUEST_REORDER: Final = "request-reorder"
HELD_REQUESTS: Final[tuple[str, ...]] = ("Produce", "EndTxn")
"""The requests ``request-hold`` holds, one of each per node (:mod:`nemesis.request_faults` says why
these); ``request-duplicate`` and ``request-reset`` take the same two."""
NAMED_REQUESTS: Final[Mapping[str, tuple[str, str | None]]] = MappingProxyType(
    {
        **{name: (name, None) for name in HELD_REQUESTS},
        **{f"EndTxn({ending})": ("EndTxn", ending) for ending in ENDINGS},
    }
)
"""What a step's ``requests`` may name, each as the proxy's request name and ending: one of
:data:`HELD_REQUESTS`, or an EndTxn by how it ends its transaction (the proxy reads the body's
Committed flag).  KAFKA-17754's scenario holds commits only: a late abort that lands in the next
transaction shows nothing, the client then ending it as it meant to."""
REQUEST_DELAY_MS: Final = 200
"""How long each client request waits in the proxy under ``request-delay`` unless a step says
otherwise: a slow path, not a dead one (a producer's request timeout is seconds)."""
REQUEST_DELAY_MS_DRAWN: Final[tuple[int, ...]] = (20, 200, 1000)
"""The delays a schedule's ``request-delay`` draws from: a far data centre, a congested path, and
one where pipelined requests queue past a client's request timeout (head-of-line: Kafka answers
a connection's requests in order, so each waits behind the one before it)."""
REQUEST_REORDER_MS: Final = 400
"""The longest wait of a request under ``request-reorder`` unless a step says otherwise: each waits
its own draw from 0 to this, on average :data:`REQUEST_DELAY_MS` (the same path, made uneven)."""
REQUEST_REORDER_MS_DRAWN: Final[tuple[int, ...]] = (40, 400, 2000)
"""The longest waits a schedule's ``request-reorder`` draws from: twice each of
:data:`REQUEST_DELAY_MS_DRAWN`, so the mean wait is the delay's and only the order differs."""

REQUESTS_PARAM = Param(
    "requests",
    False,
    'which requests it acts on: a list of "Produce", "EndTxn", "EndTxn(commit)" and "EndTxn(abort)"'
    ' (default "Produce" and "EndTxn")',
)
REQUEST_KINDS: Final[tuple[FaultKind, ...]] = (
    FaultKind(
        REQUEST_HOLD,
        "the broker's request proxy holds the next Produce and the next EndTxn a client sends it"
        " (the connection stays open and silent) until the heal (nemesis.request_faults)",
        heal=REQUEST_RELEASE,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + ' (+ "requests": ["Produce", "EndTxn"])',
        params=(REQUESTS_PARAM,),
        colour="#2a9d8f",
        needs=frozenset({REQUEST_PROXY}),
    ),
    FaultKind(
        REQUEST_DELAY,
        f"every request the broker receives waits delay_ms (default {REQUEST_DELAY_MS}) in its proxy,"
        " the connection's later requests behind it (Kafka answers in order), until the heal: latency"
        " on the broker's one listener -- its clients', its followers' Fetches, the coordinators'"
        " markers -- which the kernel here cannot add (no netem)",
        heal=REQUEST_RELEASE,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + f' (+ "delay_ms": {REQUEST_DELAY_MS})',
        params=(
            Param("delay_ms", False, f"milliseconds per request, 1..60000 (default {REQUEST_DELAY_MS})"),
        ),
        colour="#76c893",
        needs=frozenset({REQUEST_PROXY}),
        drawn=(("delay_ms", REQUEST_DELAY_MS_DRAWN),),
    ),
    FaultKind(
        REQUEST_REORDER,
        f"every request the broker receives waits its own random 0..delay_ms (default {REQUEST_REORDER_MS})"
        " in its proxy until the heal: a connection keeps its order (TCP does), but requests on"
        " different connections -- a producer's and a follower's Fetch, a retry on a new connection"
        " and the copy still on the old one -- overtake one another (nemesis.request_faults)",
        heal=REQUEST_RELEASE,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + f' (+ "delay_ms": {REQUEST_REORDER_MS})',
        params=(
            Param(
                "delay_ms",
                False,
                f"the longest wait in milliseconds, 1..60000 (default {REQUEST_REORDER_MS})",
            ),
        ),
        colour="#99d98c",
        needs=frozenset({REQUEST_PROXY}),
        drawn=(("delay_ms", REQUEST_REORDER_MS_DRAWN),),
    ),
    FaultKind(
        REQUEST_DUPLICATE,
        "every Produce and EndTxn a client sends the broker reaches it twice, back to back on the same"
        " connection (the second answer swallowed), until the heal: a retransmission the client never"
        " made, which idempotence must absorb (nemesis.request_faults)",
        heal=REQUEST_RELEASE,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + ' (+ "requests": ["Produce", "EndTxn"])',
        params=(REQUESTS_PARAM,),
        colour="#168aad",
        needs=frozenset({REQUEST_PROXY}),
    ),
    FaultKind(
        REQUEST_RESET,
        "the broker's proxy forwards the next Produce and the next EndTxn, then resets the client's"
        " connection before the answer: the broker acts, the client retries on a new connection not"
        " knowing whether the first attempt took (nemesis.request_faults)",
        heal=REQUEST_RELEASE,
        drawn_as="node-target",
        nodes="required",
        op_value=NODE_FAULT_VALUE + ' (+ "requests": ["Produce", "EndTxn"])',
        params=(REQUESTS_PARAM,),
        colour="#2b9348",
        needs=frozenset({REQUEST_PROXY}),
    ),
    FaultKind(
        REQUEST_RELEASE,
        "the proxy sends what it holds to the broker on a new connection, late, answers dropped,"
        " and forgets its rules (heal of request-hold, -delay, -reorder, -duplicate and -reset; no node: every"
        " broker)",
        heal=IS_A_HEAL,
        drawn_as="never",
        nodes="optional",
        op_value=NODES_VALUE + ' (+ "mode": "new-connection")',
        colour=OTHER_COLOUR,
        needs=frozenset({REQUEST_PROXY}),
    ),
)
"""The request-level faults (:mod:`nemesis.request_faults`), declared before :data:`KINDS` ends with them."""
