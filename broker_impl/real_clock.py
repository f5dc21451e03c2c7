"""The real wall clock, for evidence: what an event's ``ts`` says even when the broker's clock lies.

The harness' ``clock-skew`` fault starts a broker with libfaketime preloaded (the environment
variable ``FAKETIME_TIMESTAMP_FILE`` says so) and moves what ``time.time()`` answers: the broker's
*behaviour* must see the skewed clock, that is the fault.  Its event log is not behaviour but the
observer's record (:mod:`broker_impl.events`), which the checker orders across nodes and lines up
with the client history by ``ts``; a skewed ``ts`` would reorder a skewed node's decisions against
the others' and invent anomalies.  So events read the kernel's clock directly, through the raw
``clock_gettime`` system call, which libfaketime does not intercept (it replaces the C library's
function).  Without libfaketime this is ``time.time_ns()`` itself.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time
from collections.abc import Callable
from typing import Final

CLOCK_REALTIME: Final = 0
SYSCALL_CLOCK_GETTIME: Final = {"x86_64": 228, "aarch64": 113}
"""``clock_gettime``'s system call number per machine (``asm/unistd.h``)."""
FAKE_CLOCK_VARIABLE: Final = "FAKETIME_TIMESTAMP_FILE"
"""Set in a broker's environment when its wall clock is libfaketime's (``testbed.cluster.fake_clock``)."""


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _raw_realtime_ns() -> Callable[[], int]:
    machine = platform.machine()
    if machine not in SYSCALL_CLOCK_GETTIME:
        raise RuntimeError(
            f"a faked clock needs the raw clock_gettime system call, unknown on {machine}"
            f" (known: {', '.join(SYSCALL_CLOCK_GETTIME)})"
        )
    number = SYSCALL_CLOCK_GETTIME[machine]
    libc = ctypes.CDLL(None, use_errno=True)
    reading = _Timespec()
    pointer = ctypes.byref(reading)

    def read() -> int:
        if libc.syscall(number, CLOCK_REALTIME, pointer) != 0:
            raise OSError(ctypes.get_errno(), "clock_gettime(CLOCK_REALTIME) failed")
        return int(reading.tv_sec) * 1_000_000_000 + int(reading.tv_nsec)

    return read


def real_time_function() -> Callable[[], int]:
    """Nanoseconds since the Unix epoch by the kernel's clock, whatever libfaketime makes of
    ``time.time()`` (decided once, at the call: the environment does not change in a process)."""
    return _raw_realtime_ns() if FAKE_CLOCK_VARIABLE in os.environ else time.time_ns


real_time_ns: Final[Callable[[], int]] = real_time_function()
"""The kernel's wall clock in nanoseconds (see the module docstring)."""
