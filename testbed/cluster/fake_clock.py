"""A node's wall clock under the nemesis' control: libfaketime preloaded into its daemons.

The ``clock-skew`` fault (:mod:`nemesis.fault_kinds`) moves a broker's wall clock by an offset
and its heal moves it back.  A container shares the host's kernel clock, so the clock is faked
in the process: the broker daemon starts with Debian's libfaketime (thread-safe build) preloaded,
which reads its offset from :data:`OFFSET_FILE` at most once per :data:`RELOAD_SECONDS`, so the
nemesis changes a running broker's clock by rewriting one file.

**Which clocks.**  Only the wall clock (``CLOCK_REALTIME``: ``time.time()``) is moved;
``DONT_FAKE_MONOTONIC`` keeps ``CLOCK_MONOTONIC`` real, as an NTP step leaves it.  That is the
contract the broker's timers are tested against: every timeout (controller sessions, ISR lag,
group sessions, request deadlines) runs on the monotonic clock and does not move; what Kafka
keeps on the wall clock (record timestamps, a transaction's start time in the transaction log,
which another coordinator must read) moves with it -- a jump forward past
``transaction.timeout.ms`` aborts the open transactions, as in Kafka.

**When.**  Only runs that may skew a clock start their brokers under libfaketime (the harness
asks :func:`daemon_env` for them, ``harness/targets/bundled.py``): every other run's brokers see
the real clock, with nothing preloaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

PRELOAD: Final = "/usr/local/lib/tidemark-faketime.so"
"""libfaketime's thread-safe build, linked there by the node image (``Dockerfile``)."""
OFFSET_FILE: Final = "/run/tidemark-clock"
"""The libfaketime spec the preloaded daemons read: ``+0`` (real time) or ``+N``/``-N`` seconds."""
RELOAD_SECONDS: Final = 1
"""How stale a daemon's reading of :data:`OFFSET_FILE` may be: a skew acts within this long."""
MAX_OFFSET_SECONDS: Final = 10 * 365 * 86400
"""The farthest a clock may be moved either way (ten years): further is a typo, not a fault."""

DAEMON_ENV: Final[Mapping[str, str]] = MappingProxyType(
    {
        "LD_PRELOAD": PRELOAD,
        "FAKETIME_TIMESTAMP_FILE": OFFSET_FILE,
        "FAKETIME_CACHE_DURATION": str(RELOAD_SECONDS),
        "DONT_FAKE_MONOTONIC": "1",
    }
)
"""The environment a daemon whose wall clock the nemesis may move is started with."""


def checked_offset(offset_s: object) -> int:
    """A clock offset: a whole, non-zero number of seconds within :data:`MAX_OFFSET_SECONDS`;
    ValueError saying so otherwise."""
    if (
        not isinstance(offset_s, int)
        or isinstance(offset_s, bool)
        or offset_s == 0
        or abs(offset_s) > MAX_OFFSET_SECONDS
    ):
        raise ValueError(
            f"a clock offset_s must be a whole number of seconds, not 0, at most {MAX_OFFSET_SECONDS}"
            f" either way, not {offset_s!r}"
        )
    return offset_s


def offset_spec(offset_s: int) -> str:
    """libfaketime's relative spec for ``offset_s`` seconds (``+120``, ``-30``; ``+0`` is real time)."""
    return f"{offset_s:+d}"


def set_offset_script(offset_s: int) -> str:
    """One node's program: its preloaded daemons' wall clock runs ``offset_s`` seconds off real time
    (0: real time again), from at most :data:`RELOAD_SECONDS` on.  Written whole by a rename, so a
    daemon never reads half a spec."""
    spec = offset_spec(offset_s)
    return f"set -eu\nprintf '%s\\n' '{spec}' > {OFFSET_FILE}.new\nmv {OFFSET_FILE}.new {OFFSET_FILE}"
