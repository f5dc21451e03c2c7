"""The disk-fault rules of the lazy filesystem as data: ``fail`` and ``slow-fsync``, parsed and rendered.

What they do to a program's calls is in ``faults`` (`FaultyModel`); this module is the vocabulary the
control protocol parses, kept free of the model so that ``protocol`` can import it.
"""

from __future__ import annotations

import dataclasses
import errno
from typing import Literal

Operation = Literal["write", "fsync", "read"]
#: The calls a ``fail`` rule can make fail.
OPERATIONS: tuple[Operation, ...] = ("write", "fsync", "read")
#: The errors a ``fail`` rule can return, by name.
ERRNOS: dict[str, int] = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC, "EROFS": errno.EROFS}
#: How often a ``fail`` rule fires: the next matching call, or every one until ``clear``.
REPEATS = ("once", "always")
#: The longest ``slow-fsync`` delay: longer is a hung disk, which a kill models better.
MAX_SLOW_FSYNC_MS = 60_000
#: The longest GLOB accepted (well within the control protocol's line length).
MAX_PATTERN_CHARS = 160


@dataclasses.dataclass(frozen=True, slots=True)
class FailRule:
    """``fail OP ERRNO GLOB REPEAT``."""

    operation: Operation
    error_name: str
    pattern: str
    repeat: str = "once"

    def render(self) -> str:
        return f"fail {self.operation} {self.error_name} {self.pattern} {self.repeat}"


@dataclasses.dataclass(frozen=True, slots=True)
class SlowFsync:
    """``slow-fsync MS GLOB``."""

    milliseconds: int
    pattern: str

    def render(self) -> str:
        return f"slow-fsync {self.milliseconds} {self.pattern}"


Rule = FailRule | SlowFsync


def parse_rule(name: str, arguments: list[str]) -> Rule:
    """The rule of a ``fail`` or ``slow-fsync`` command line (split into words); ValueError saying
    which word is wrong and what was expected."""
    if name == "fail":
        if len(arguments) not in (3, 4):
            raise ValueError(f"'fail' takes OP ERRNO GLOB [once|always], got {len(arguments)} arguments")
        operation, error_name, pattern = arguments[:3]
        repeat = arguments[3] if len(arguments) == 4 else "once"
        if operation not in OPERATIONS:
            raise ValueError(f"'fail' OP must be one of {', '.join(OPERATIONS)}, not {operation!r}")
        if error_name not in ERRNOS:
            raise ValueError(f"'fail' ERRNO must be one of {', '.join(ERRNOS)}, not {error_name!r}")
        if repeat not in REPEATS:
            raise ValueError(f"'fail' repeat must be one of {', '.join(REPEATS)}, not {repeat!r}")
        checked: Operation = operation  # checked against OPERATIONS above
        return FailRule(checked, error_name, _checked_pattern("fail", pattern), repeat)
    if name == "slow-fsync":
        if len(arguments) != 2:
            raise ValueError(f"'slow-fsync' takes MS GLOB, got {len(arguments)} arguments")
        try:
            milliseconds = int(arguments[0])
        except ValueError:
            raise ValueError(f"'slow-fsync' MS must be an integer, got {arguments[0]!r}") from None
        if not 0 < milliseconds <= MAX_SLOW_FSYNC_MS:
            raise ValueError(f"'slow-fsync' MS must be in 1..{MAX_SLOW_FSYNC_MS}, got {milliseconds}")
        return SlowFsync(milliseconds, _checked_pattern("slow-fsync", arguments[1]))
    raise ValueError(f"{name!r} is not a rule command (fail, slow-fsync)")


def _checked_pattern(command: str, pattern: str) -> str:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"{command!r} GLOB is longer than {MAX_PATTERN_CHARS} characters")
    if pattern.startswith("/"):
        raise ValueError(f"{command!r} GLOB is relative to the mount, without a leading '/': {pattern!r}")
    return pattern
