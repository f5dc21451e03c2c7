"""Build (or reuse) the Tidemark node image, with no registry needed.

``ensure_image`` returns the tag of an image that runs the controller and the brokers. The tag is
``tidemark:<content hash>``, the hash covering everything the image is made of: the base image's id,
the Dockerfile, the pinned Python packages and every file of the node-side programs listed in
``CODE_DIRECTORIES`` (the broker, ``broker_impl/``, and the lazy FUSE filesystem, ``nemesis/lazyfs/``).
The rest of the checkout (fault planner, checker, harness, reports) runs on the host only, so editing it
leaves the tag alone. A second call with nothing changed is one hash over a few hundred KiB of source
and one image lookup; any change to the image's inputs gives a new tag, and Docker's layer cache keeps
that rebuild short.

The parts it is made of have modules of their own: the registry-free Debian base
(:mod:`testbed.cluster.debian_base`), the Python packages as wheels (:mod:`testbed.cluster.wheelhouse`)
and the Docker plumbing every image build shares (:mod:`testbed.cluster.image_build`).  This module
holds what names the image (the source snapshot and the content hash) and puts the parts together.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from testbed.cluster.debian_base import ensure_debian_base, find_apt_sources_file
from testbed.cluster.image_build import (
    NODE_IMAGE_FORMAT_VERSION,
    ImageBuildError,
    Progress,
    docker_build,
    image_or_none,
    say,
)
from testbed.cluster.wheelhouse import host_pins, prepare_wheelhouse, probe_python_target

IMAGE_REPOSITORY = "tidemark"
IMAGE_PYTHON = "/opt/tidemark/venv/bin/python"
"""The interpreter inside the image that sees the wheels and ``/opt/tidemark/app`` (``CODE_DIRECTORIES``)."""
IMAGE_APP_DIR = "/opt/tidemark/app"
CODE_DIRECTORIES = ("broker_impl", "nemesis/lazyfs", "testbed/cluster/request_proxy")
"""The only source the image holds (under ``IMAGE_APP_DIR``, same relative paths): the programs that run
on the nodes. ``nemesis/__init__.py`` is left out on purpose: inside the image ``nemesis`` is an implicit
namespace package (PEP 420), so ``python -m nemesis.lazyfs`` works, and nothing in ``nemesis.lazyfs``
imports from outside it; the same holds for ``testbed.cluster.request_proxy`` (the request proxy a
broker's node runs in front of it when a run holds requests), which uses the standard library only. Everything else (planner, checker, harness) never reaches the image or its tag."""


def source_root() -> Path:
    """The checkout holding the Dockerfile and the code that goes into the image (this file is
    ``<checkout>/testbed/cluster/image.py``)."""
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SourceSnapshot:
    """The Dockerfile and code files read once, so the hash and the build context see the same bytes
    even while someone edits the checkout."""

    files: tuple[tuple[str, bytes, bool], ...]  # (relative path, content, executable)


def snapshot_sources(root: Path) -> SourceSnapshot:
    """Read the Dockerfile and every file under ``CODE_DIRECTORIES`` (bytecode caches left out)."""
    paths = [root / "Dockerfile"]
    for directory in CODE_DIRECTORIES:
        top = root / directory
        if not top.is_dir():
            raise ImageBuildError(f"{top} is missing: the image needs {directory}/")
        paths += [
            path
            for path in sorted(top.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
        ]
    try:
        files = tuple(
            (path.relative_to(root).as_posix(), path.read_bytes(), os.access(path, os.X_OK)) for path in paths
        )
    except OSError as error:
        raise ImageBuildError(f"cannot read {error.filename}: {error.strerror}") from error
    return SourceSnapshot(files)


def image_content_hash(base_image_id: str, pins: tuple[str, ...], sources: SourceSnapshot) -> str:
    """The hash naming the image: changes whenever anything that goes into the image changes."""
    digest = hashlib.sha256(f"tidemark-image {NODE_IMAGE_FORMAT_VERSION}\n{base_image_id}\n".encode())
    digest.update("\n".join(pins).encode() + b"\n")
    for relative, content, executable in sources.files:
        digest.update(f"{relative}\0{executable}\0".encode())
        digest.update(hashlib.sha256(content).digest())
    return digest.hexdigest()[:16]


def _assemble_context(context: Path, sources: SourceSnapshot, wheelhouse: Path) -> None:
    shutil.copytree(wheelhouse, context / "wheels")
    for relative, content, executable in sources.files:
        # The Dockerfile sits at the top of the context; the code directories go under app/.
        target = context / (relative if relative == "Dockerfile" else f"app/{relative}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(0o755 if executable else 0o644)


def ensure_image(
    client: docker.DockerClient,
    *,
    base_image: str | None = None,
    apt_sources: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    extra_packages: tuple[str, ...] = (),
) -> str:
    """Return the tag of an up-to-date node image, building whatever is missing.

    ``base_image`` None builds the registry-free Debian base (from ``apt_sources``, default: the host's
    sources file found by ``find_apt_sources_file``); a name uses that image, pulling it if absent.
    ``extra_packages`` (registry-free base only) adds Debian packages in a base of their own, so the
    image built on it has another tag and the default image is untouched (the tansu target's
    PostgreSQL). ``force`` rebuilds the base and the image without Docker's layer cache. Raises
    ImageBuildError.
    """
    root = source_root()
    if not (root / "Dockerfile").is_file():
        raise ImageBuildError(f"no Dockerfile at {root}: building the image needs a Tidemark source checkout")
    sources = snapshot_sources(root)
    pins = host_pins()
    if base_image is None:
        base = ensure_debian_base(
            client,
            apt_sources or find_apt_sources_file(),
            force=force,
            progress=progress,
            extra_packages=extra_packages,
        )
    else:
        if extra_packages:
            raise ImageBuildError(
                f"{' '.join(extra_packages)} must come from the registry-free base: no --base-image here"
            )
        base = base_image
        if image_or_none(client, base) is None:
            say(progress, f"pulling {base}")
            try:
                client.images.pull(base)
            except docker.errors.APIError as error:
                raise ImageBuildError(
                    f"base image {base} is not here and cannot be pulled: {error}"
                ) from error
    base_id = str(client.images.get(base).id)
    tag = f"{IMAGE_REPOSITORY}:{image_content_hash(base_id, pins, sources)}"
    if force or image_or_none(client, tag) is None:
        wheelhouse = prepare_wheelhouse(pins, probe_python_target(client, base), progress)
        with tempfile.TemporaryDirectory(prefix="tidemark-context-") as scratch:
            context, build_args = Path(scratch), {"BASE_IMAGE": base}
            _assemble_context(context, sources, wheelhouse)
            say(progress, f"building {tag} on {base}")
            docker_build(client, context, tag=tag, buildargs=build_args, no_cache=force, progress=progress)
    if image_or_none(client, tag) is None:
        raise ImageBuildError(f"docker build finished but {tag} does not exist")
    return tag


def prune_images(client: docker.DockerClient, keep: str, repository: str = IMAGE_REPOSITORY) -> list[str]:
    """Remove every ``<repository>:<hash>`` tag except ``keep`` and those of images a container uses.

    Each code change leaves a tag behind (sharing all but its last layer with the others). The engine
    would untag an image even while a container runs it, so images in use are looked up first. A
    process that computed a tag and has not created its containers yet is not protected: prune when no
    harness is about to start a cluster.
    """
    in_use = {str(container["ImageID"]) for container in client.api.containers(all=True)}
    removed = []
    for image in client.images.list(name=repository):
        if image.id in in_use:
            continue
        for tag in image.tags:
            if tag == keep or not tag.startswith(f"{repository}:"):
                continue
            try:
                client.images.remove(tag)
            except docker.errors.ImageNotFound:
                continue
            except docker.errors.APIError as error:
                raise ImageBuildError(f"cannot remove {tag}: {error}") from error
            removed.append(tag)
    return removed
