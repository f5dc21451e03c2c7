"""A node's wall clock under the nemesis' control: libfaketime preloaded into its daemons.

The ``clock-skew`` fault (:mod:`nemesis.fault_kinds`) moves a broker's wall clock by an offset,
``clock-drift`` makes it run slow or fast, and their heal (``clock-heal``) puts it back on real
time.  A container shares the host's kernel clock, so the clock is faked
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

**Drift.**  libfaketime's rate (``xR`` in its spec) counts from the *process'* start ``t0``: under
``+O xR`` the process reads ``real + O + (R - 1)(real - t0)``, and rewriting the spec keeps ``t0``
(and a spec without ``x`` keeps the old rate: a heal writes ``x1``).  A node's clock is kept as a
:class:`NodeClock` -- an offset at an anchor time and a rate since -- and :func:`set_clock_script`
turns it into the spec for the broker process running *now*, from that process' start time in
``/proc`` (``O = offset + (R - 1)(t0 - anchor)``), so setting a drift does not jump the clock, and
the cluster writes it again before every broker start, so a restarted broker's clock goes on where
the node's was (a node's clock drifts, not a process').

**When.**  Only runs that may skew a clock start their brokers under libfaketime (the harness
asks :func:`daemon_env` for them, ``harness/targets/bundled.py``): every other run's brokers see
the real clock, with nothing preloaded.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from testbed.nodes.remote import DEFAULT_STATE_DIR

PRELOAD: Final = "/usr/local/lib/tidemark-faketime.so"
"""libfaketime's thread-safe build, linked there by the node image (``Dockerfile``)."""
OFFSET_FILE: Final = "/run/tidemark-clock"
"""The libfaketime spec the preloaded daemons read: ``+O xR``, seconds off and rate (``+0.000 x1``: real time)."""
BROKER_PID_FILE: Final = f"{DEFAULT_STATE_DIR}/broker.pid"
"""Where the node's broker daemon's ``<pid> <start ticks>`` is (:mod:`testbed.nodes.remote`): the process
whose start anchors the spec."""
RELOAD_SECONDS: Final = 1
"""How stale a daemon's reading of :data:`OFFSET_FILE` may be: a skew acts within this long."""
MAX_OFFSET_SECONDS: Final = 10 * 365 * 86400
"""The farthest a clock may be moved either way (ten years): further is a typo, not a fault."""
MAX_RATE_PCT: Final = 10_000
"""The fastest drift: a hundred times real speed (0 stops the clock; 100 is real speed, no drift)."""

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


def checked_rate(rate_pct: object) -> int:
    """A clock rate: a whole percentage of real speed from 0 (stopped) to :data:`MAX_RATE_PCT`, not
    100 (no drift); ValueError saying so otherwise."""
    if (
        not isinstance(rate_pct, int)
        or isinstance(rate_pct, bool)
        or rate_pct == 100
        or not 0 <= rate_pct <= MAX_RATE_PCT
    ):
        raise ValueError(
            f"a clock rate_pct must be a whole percentage of real speed from 0 to {MAX_RATE_PCT}, not 100"
            f" (real speed), not {rate_pct!r}"
        )
    return rate_pct


@dataclasses.dataclass(frozen=True, slots=True)
class NodeClock:
    """A node's wall clock as the nemesis set it: ``offset_s`` seconds off real time at the real
    time ``anchor_s`` (seconds since the epoch), running at ``rate_pct`` % of real speed since.

    Immutable: a fault makes the next clock from the current one (:meth:`jumped`, :meth:`drifting`)
    at the real time it acts, so a jump keeps the drift and a drift starts from the reading the
    clock has (no jump)."""

    offset_s: float = 0.0
    rate_pct: int = 100
    anchor_s: float = 0.0

    @property
    def is_real(self) -> bool:
        return self.offset_s == 0 and self.rate_pct == 100

    def offset_at(self, real_s: float) -> float:
        """How far the clock reads off real time at the real time ``real_s``."""
        return self.offset_s + (self.rate_pct / 100 - 1) * (real_s - self.anchor_s)

    def jumped(self, offset_s: float, now_s: float) -> NodeClock:
        """This clock jumped, at ``now_s``, to ``offset_s`` off real time; its rate kept."""
        return NodeClock(offset_s, self.rate_pct, now_s)

    def drifting(self, rate_pct: int, now_s: float) -> NodeClock:
        """This clock running at ``rate_pct`` % from ``now_s`` on, from the reading it has then."""
        return NodeClock(self.offset_at(now_s), rate_pct, now_s)


REAL_CLOCK: Final = NodeClock()
"""Real time at real speed: the clock of a node no clock fault touched, and every heal's."""


def set_clock_script(
    clock: NodeClock, *, pid_file: str = BROKER_PID_FILE, offset_file: str = OFFSET_FILE
) -> str:
    """One node's program: its preloaded broker's wall clock follows ``clock`` from at most
    :data:`RELOAD_SECONDS` on.  The spec is anchored at the start of the process ``pid_file``
    names when it still runs (its age from ``/proc``: clock ticks, not the one-second ``btime``),
    else at now -- the next broker starts within a second of it (the cluster runs this right
    before every start), an error of ``(R - 1)`` times that delay.  Written whole by a rename, so
    a daemon never reads half a spec."""
    rate = f"{clock.rate_pct / 100:g}"
    pids, spec = shlex.quote(pid_file), shlex.quote(offset_file)
    return f"""set -eu
now=$(date +%s.%N)
age=0
if [ -s {pids} ] && read -r pid start < {pids} && [ -r "/proc/$pid/stat" ]; then
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || stat=
    set -- ${{stat##*) }}
    if [ "${{20:-}}" = "$start" ]; then
        age=$(awk -v start="$start" -v hz="$(getconf CLK_TCK)" '{{ printf "%.3f", $1 - start / hz }}' /proc/uptime)
    fi
fi
awk -v o={clock.offset_s!r} -v r={rate} -v a={clock.anchor_s!r} -v now="$now" -v age="$age" \\
    'BEGIN {{ printf "%+.3f x%s\\n", o + (r - 1) * (now - age - a), r }}' > {spec}.new
mv {spec}.new {spec}"""
