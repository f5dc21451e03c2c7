"""The control protocol: one command line written to the control file, one JSON reply read back.

``sync``/``syncfs`` never reach a FUSE filesystem, so commands travel through a virtual file at the
root of the mount, ``MOUNTPOINT/.lazyfs-control``: open it read-write, write one line, read the reply
from offset 0 of the same descriptor. Each open descriptor holds its own reply, so concurrent clients
cannot see each other's answers. Because the file lives inside the mount, the commands work wherever
the mount is visible (inside a container, or through a bind mount) with no socket to share.

Commands: ``drop``, ``torn SEED``, ``sync``, ``status``, and the disk-fault rules ``fail OP ERRNO GLOB
[once|always]``, ``slow-fsync MS GLOB``, ``clear`` (``rules``; their effect: ``faults``). The reply is a JSON object; on a bad
command it is ``{"error": "..."}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nemesis.lazyfs.rules import ERRNOS, OPERATIONS, Rule, parse_rule

#: Name of the virtual control file at the root of every lazyfs mount (hidden from directory listings).
CONTROL_FILE_NAME = ".lazyfs-control"

#: Accepted commands and what they do, for help texts.
COMMANDS: dict[str, str] = {
    "drop": "power loss: discard every unsynced data and metadata change",
    "torn SEED": "power loss during writeback: keep a seeded random prefix of each file's unsynced "
    "writes (possibly cutting one write) and of the metadata journal, discard the rest",
    "sync": "persist every unsynced change, as the kernel's writeback would",
    "status": "count dirty files, dirty bytes and pending metadata operations; list the fault rules",
    "fail OP ERRNO GLOB [once|always]": f"make the next (once) or every (always) OP ({'/'.join(OPERATIONS)}) "
    f"on files matching GLOB fail with ERRNO ({'/'.join(ERRNOS)}); a failed fsync loses the file's "
    "unsynced changes for good",
    "slow-fsync MS GLOB": "delay every fsync of files matching GLOB by MS milliseconds",
    "clear": "forget every fail and slow-fsync rule",
}

_NAMES = tuple(dict.fromkeys(usage.split()[0] for usage in COMMANDS))

#: A command line longer than this is refused (it cannot be a valid command).
MAX_COMMAND_BYTES = 256


class CommandError(ValueError):
    """A control command that cannot be parsed; the message says why."""


@dataclass(frozen=True, slots=True)
class Command:
    """One parsed control command; ``seed`` is set for ``torn`` only, ``rule`` for ``fail`` and
    ``slow-fsync`` only."""

    name: str
    seed: int | None = None
    rule: Rule | None = None

    def render(self) -> str:
        """The command line that `parse_command` turns back into this command."""
        if self.rule is not None:
            return self.rule.render()
        return self.name if self.seed is None else f"{self.name} {self.seed}"


def parse_command(text: str) -> Command:
    """Parse one command line (see `COMMANDS`); `CommandError` says what is wrong."""
    words = text.split()
    if not words:
        raise CommandError("empty command; expected one of: " + ", ".join(_NAMES))
    name, arguments = words[0], words[1:]
    if name == "torn":
        if len(arguments) != 1:
            raise CommandError(f"'torn' takes exactly one integer SEED, got {len(arguments)} arguments")
        try:
            seed = int(arguments[0])
        except ValueError:
            raise CommandError(f"'torn' SEED must be an integer, got {arguments[0]!r}") from None
        return Command("torn", seed)
    if name in ("fail", "slow-fsync"):
        try:
            return Command(name, rule=parse_rule(name, arguments))
        except ValueError as error:
            raise CommandError(str(error)) from None
    if name in ("drop", "sync", "status", "clear"):
        if arguments:
            raise CommandError(f"{name!r} takes no arguments, got {' '.join(arguments)!r}")
        return Command(name)
    raise CommandError(f"unknown command {name!r}; expected one of: " + ", ".join(_NAMES))


def encode_reply(reply: dict[str, object]) -> bytes:
    """The bytes a reply is read back as: one line of JSON."""
    return json.dumps(reply, sort_keys=True).encode() + b"\n"


def decode_reply(data: bytes) -> dict[str, object]:
    """Inverse of `encode_reply`; raises ValueError on anything that is not one JSON object."""
    reply = json.loads(data.decode())
    if not isinstance(reply, dict):
        raise ValueError(f"control reply is not a JSON object: {data[:200]!r}")
    return reply
