"""Command line: ``python -m nemesis.lazyfs mount|control|unmount ...``.

Runs inside a broker container whose Python has only the standard library and mfusepy (plus the
broker's own packages), so nothing here imports other Tidemark packages.

Exit codes follow the Tidemark CLI: 0 success, 1 the operation failed, 254 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import NoReturn

from nemesis.lazyfs.control import LazyfsError, is_lazyfs_mounted, send_command, unmount
from nemesis.lazyfs.protocol import COMMANDS, CONTROL_FILE_NAME, CommandError, parse_command

EXIT_FAILED = 1
EXIT_BAD_ARGUMENTS = 254


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_ARGUMENTS, f"{self.prog}: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m nemesis.lazyfs",
        description="A FUSE filesystem that keeps unsynced writes in memory, so that power loss can be "
        "simulated by discarding them.",
    )
    commands = parser.add_subparsers(dest="action", required=True, parser_class=_Parser)
    mount = commands.add_parser("mount", help="serve BACKING_DIR at MOUNTPOINT")
    mount.add_argument("backing", metavar="BACKING_DIR", help="directory holding the durable state")
    mount.add_argument("mountpoint", metavar="MOUNTPOINT", help="empty directory to mount on")
    mount.add_argument("--allow-other", action="store_true",
                       help="let other users (and other containers' users) use the mount")  # fmt: skip
    mount.add_argument("--foreground", action="store_true", help="do not daemonize; serve until unmounted")
    control = commands.add_parser(
        "control",
        help="send a command to a mounted lazyfs",
        description="Commands: " + "; ".join(f"{name}: {text}" for name, text in COMMANDS.items()),
    )
    control.add_argument("mountpoint", metavar="MOUNTPOINT")
    control.add_argument(
        "command",
        metavar="COMMAND",
        nargs="+",
        help="drop | torn SEED | sync | status | fail OP ERRNO GLOB [once|always] | slow-fsync MS GLOB | clear",
    )
    unmount_parser = commands.add_parser(
        "unmount", help="unmount (clean: persists unsynced data; after a kill: just removes the dead mount)"
    )
    unmount_parser.add_argument("mountpoint", metavar="MOUNTPOINT")
    return parser


def _bad_arguments(message: str) -> int:
    print(f"python -m nemesis.lazyfs: error: {message}", file=sys.stderr)
    return EXIT_BAD_ARGUMENTS


def _mount(arguments: argparse.Namespace) -> int:
    backing = os.path.realpath(arguments.backing)
    mountpoint = os.path.realpath(arguments.mountpoint)
    if not os.path.isdir(backing):
        return _bad_arguments(f"BACKING_DIR {arguments.backing} is not a directory")
    if not os.path.isdir(mountpoint):
        return _bad_arguments(f"MOUNTPOINT {arguments.mountpoint} is not a directory")
    if os.path.commonpath([backing, mountpoint]) in (backing, mountpoint):
        return _bad_arguments(
            f"BACKING_DIR {arguments.backing} and MOUNTPOINT {arguments.mountpoint} must not contain each "
            "other (the filesystem would read through itself)"
        )
    if os.path.lexists(os.path.join(backing, CONTROL_FILE_NAME)):
        return _bad_arguments(
            f"BACKING_DIR {arguments.backing} holds {CONTROL_FILE_NAME}, lazyfs's control name"
        )
    if is_lazyfs_mounted(mountpoint):
        print(f"lazyfs: {mountpoint} already has a lazyfs mount; unmount it first", file=sys.stderr)
        return EXIT_FAILED
    try:
        from nemesis.lazyfs.fuse_adapter import serve
    except OSError as error:
        print(f"lazyfs: cannot load libfuse3 ({error}); install the Debian package fuse3", file=sys.stderr)
        return EXIT_FAILED
    logging.basicConfig(level=logging.WARNING, format="lazyfs: %(levelname)s %(name)s: %(message)s")
    try:
        serve(backing, mountpoint, arguments.allow_other, arguments.foreground)
    except RuntimeError as error:
        print(f"lazyfs: mounting {backing} at {mountpoint} failed: libfuse returned {error} (its reason is "
              "printed above; in a container, pass --device /dev/fuse --cap-add SYS_ADMIN)", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    except OSError as error:
        print(f"lazyfs: serving {backing} at {mountpoint} failed: {error}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _control(arguments: argparse.Namespace) -> int:
    text = " ".join(arguments.command)
    try:
        parse_command(text)
    except CommandError as error:
        return _bad_arguments(f"COMMAND: {error}")
    try:
        reply = send_command(arguments.mountpoint, text)
    except LazyfsError as error:
        print(f"lazyfs: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(reply, sort_keys=True))
    return 0


def _unmount(arguments: argparse.Namespace) -> int:
    try:
        was_mounted = unmount(arguments.mountpoint)
    except LazyfsError as error:
        print(f"lazyfs: {error}", file=sys.stderr)
        return EXIT_FAILED
    if not was_mounted:
        print(f"lazyfs: nothing was mounted at {arguments.mountpoint}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    arguments = _build_parser().parse_args(argv)
    handlers = {"mount": _mount, "control": _control, "unmount": _unmount}
    return handlers[arguments.action](arguments)


if __name__ == "__main__":
    sys.exit(main())
