"""The Docker plumbing every Tidemark image build shares: errors, progress, lookups, the build.

The node image (:mod:`testbed.cluster.image`), its registry-free base
(:mod:`testbed.cluster.debian_base`), its wheels (:mod:`testbed.cluster.wheelhouse`) and the tansu
target's image (:mod:`testbed.cluster.tansu_image`) all fail with :class:`ImageBuildError`, report
progress through a :data:`Progress` callback, look images up with :func:`image_or_none`, keep what
they download or compile under :func:`cache_directory`, and build with :func:`docker_build`.  These
live here, below all of them, so each of those modules imports them and none imports another
sideways for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors

NODE_IMAGE_FORMAT_VERSION = "2"
"""Part of the node image's tag and of its base's: bump when the way they are assembled changes
without any input changing."""

Progress = Callable[[str], None]


class ImageBuildError(Exception):
    """The image could not be built; the message says which step failed and why."""


def say(progress: Progress | None, message: str) -> None:
    """Report ``message`` to ``progress`` (a build's caller may ask to hear nothing)."""
    if progress is not None:
        progress(message)


def cache_directory() -> Path:
    """Where wheels are cached: ``$TIDEMARK_CACHE_DIR``, else ``$XDG_CACHE_HOME/tidemark``."""
    configured = os.environ.get("TIDEMARK_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidemark"


def image_or_none(client: docker.DockerClient, reference: str) -> Any:
    """The local image ``reference`` names, or None when the engine has none by that name."""
    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        return None


def docker_build(
    client: docker.DockerClient,
    context: Path,
    *,
    tag: str,
    buildargs: Mapping[str, str],
    no_cache: bool,
    progress: Progress | None,
) -> None:
    """``docker build`` of ``context``'s Dockerfile as ``tag``, never pulling (no registry), Docker's
    output to ``progress``; ImageBuildError with the last lines.  Every Tidemark image's build."""
    tail: list[str] = []
    try:
        for chunk in client.api.build(
            path=str(context),
            tag=tag,
            buildargs=dict(buildargs),
            rm=True,
            forcerm=True,
            pull=False,
            nocache=no_cache,
            decode=True,
        ):
            if "error" in chunk:
                raise ImageBuildError(f"docker build failed: {chunk['error'].strip()}\n{''.join(tail[-30:])}")
            line = str(chunk.get("stream", ""))
            if line.strip():
                tail.append(line)
                say(progress, line.rstrip())
    except docker.errors.APIError as error:
        raise ImageBuildError(f"docker build failed: {error}") from error
