"""Fixtures shared by every test package: the Docker engine and the node image.

Tests that need Docker take the ``docker_client`` fixture (directly or through ``image``). Without an
engine they are skipped on a laptop but FAIL when ``CI=true``: in CI a missing engine is a broken
environment, and skipping would turn the whole integration suite silently green.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import docker
import pytest

from harness.cluster.image import ensure_image
from harness.nodes.docker_remote import DockerUnavailable, connect_docker


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = connect_docker()
    except DockerUnavailable as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {error}", pytrace=False)
        pytest.skip(str(error))
    yield client
    client.close()


@pytest.fixture(scope="session")
def image(docker_client: docker.DockerClient) -> str:
    """The node image's tag, built once per session (seconds when cached, about 90 s from nothing)."""
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[image {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr)

    return ensure_image(docker_client, progress=progress)
