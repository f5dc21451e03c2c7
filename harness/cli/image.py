"""``tidemark image build``: build or reuse the node image; prints its tag on stdout.
``tidemark image build --target tansu``: the tansu target's image (building the pinned tansu binary
with cargo once, 4-10 min, cached; see ``testbed.cluster.tansu_image``); ``--binary-only`` builds
just the binary (no Docker needed).
``tidemark image prune``: remove the images of earlier code versions that no container uses.

Progress (with elapsed seconds) goes to stderr, so ``TAG=$(tidemark image build)`` works in scripts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_INTERNAL_ERROR
from harness.run.spec import DEFAULT_TARGET, TARGETS
from harness.targets.base import SpecRefused
from harness.targets.registry import binary_targets, named

if TYPE_CHECKING:
    import docker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="image_action", metavar="ACTION")
    actions.required = True
    build = actions.add_parser(
        "build",
        help="build the image (no registry needed) or reuse the cached one; print its tag",
        description="Build the Tidemark node image, or reuse it when nothing changed, and print its tag.",
    )
    build.add_argument(
        "--base-image",
        metavar="IMAGE",
        help="build on this image (e.g. python:3.11-slim-bookworm from a registry) instead of a "
        "Debian root filesystem made with mmdebstrap",
    )
    build.add_argument(
        "--apt-sources",
        metavar="FILE",
        type=Path,
        help="apt sources file for mmdebstrap (default: the host's deb822 file listing Debian bookworm)",
    )
    build.add_argument(
        "--force", action="store_true", help="rebuild the base and the image, ignoring every cache"
    )
    build.add_argument("--quiet", action="store_true", help="print only the tag")
    build.add_argument(
        "--target",
        choices=TARGETS,
        default=DEFAULT_TARGET,
        help="the image of which target: the bundled broker's (default), or tansu's (its binary built "
        "once with cargo, 4-10 min, then cached; plus Debian's PostgreSQL)",
    )
    build.add_argument(
        "--binary-only",
        action="store_true",
        help="with --target tansu: build (or find) the cached tansu binary only and print its path",
    )
    actions.add_parser(
        "prune",
        help="remove older tidemark:<hash> images no container uses (keeps the current one)",
        description="Remove the tidemark:<hash> images of earlier code versions that no container uses.",
    )


def run(args: argparse.Namespace) -> int:
    if args.image_action == "prune":
        return _prune()
    return _build(args)


def _client() -> docker.DockerClient:
    from testbed.nodes.docker_remote import DockerUnavailable, connect_docker

    try:
        return connect_docker()
    except DockerUnavailable as error:
        raise UsageError(str(error)) from error


def _prune() -> int:
    from testbed.cluster.image import ensure_image, prune_images
    from testbed.cluster.image_build import ImageBuildError

    client = _client()
    try:
        current = ensure_image(client)
        removed = prune_images(client, keep=current)
    except ImageBuildError as error:
        print(f"tidemark image prune: error: {error}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    print(f"removed {len(removed)} images; kept {current}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from testbed.cluster.image_build import ImageBuildError

    target = named(args.target)
    if args.binary_only and not target.builds_binary:
        raise UsageError(f"--binary-only needs --target {' or '.join(binary_targets())}")
    try:
        target.check_image_options(base_image=args.base_image)
    except SpecRefused as error:
        raise UsageError(str(error)) from None
    if args.apt_sources is not None and args.base_image is not None:
        raise UsageError(
            "--apt-sources and --base-image exclude each other (--apt-sources is for the mmdebstrap base)"
        )
    if args.apt_sources is not None and not args.apt_sources.is_file():
        raise UsageError(f"--apt-sources {args.apt_sources}: no such file")
    started = time.monotonic()

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    if args.binary_only:
        try:
            print(target.build_binary(progress))
        except ImageBuildError as error:
            print(f"tidemark image build: error: {error}", file=sys.stderr)
            return EXIT_INTERNAL_ERROR
        return 0
    client = _client()
    try:
        tag = target.build_image(
            client,
            base_image=args.base_image,
            apt_sources=args.apt_sources,
            force=args.force,
            progress=progress,
        )
    except ImageBuildError as error:
        print(f"tidemark image build: error: {error}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    size = client.images.get(tag).attrs.get("Size", 0)
    progress(f"ready: {tag} ({size / 2**20:.0f} MiB) in {time.monotonic() - started:.1f} s")
    print(tag)
    return 0
