"""Fixtures shared by every test package: the Docker engine, the node images, the tansu toolchain.

Tests that need Docker take the ``docker_client`` fixture (directly or through ``image``). Without an
engine they are skipped on a laptop but FAIL when ``CI=true``: in CI a missing engine is a broken
environment, and skipping would turn the whole integration suite silently green.

Tests of the third-party targets (tansu, nisshi) carry the ``third_party`` marker and take
``tansu_binary`` / ``nisshi_binary`` (the pinned binaries, built once by ``scripts/setup.sh test``
-- which CI runs -- or ``tidemark image build --target tansu|nisshi --binary-only``) and/or
``postgres_bin_dir`` (the host's PostgreSQL 15, installed by the same set-up). The same rule holds
for them: skipped on a laptop that has not built them, FAILED under ``CI=true``, where the set-up
was asked to build them (a missing binary there is a broken set-up, not a reason to pass). Docker
tests of the targets take ``tansu_image`` / ``nisshi_image`` as well.
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import docker
import pytest

from testbed.cluster import postgres
from testbed.cluster.image import ensure_image
from testbed.cluster.nisshi_image import NISSHI_IMAGE
from testbed.cluster.tansu_image import TANSU_IMAGE, TANSU_PIN, cached_binary
from testbed.nodes.docker_remote import DockerUnavailable, connect_docker


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C semantics for the session and its children, however it was started (module docstring)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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


def unavailable(reason: str) -> NoReturn:
    """Skip (a laptop) or fail (``CI=true``: the set-up should have provided it)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def tansu_binary() -> Path:
    """The cached tansu binary of ``TANSU_PIN`` (never built here: that takes 4-10 minutes)."""
    binary = cached_binary()
    if binary is None:
        unavailable(
            f"no tansu binary for {TANSU_PIN.key}: build it once with "
            "`.venv/bin/tidemark image build --target tansu --binary-only` (cargo, 4-10 min)"
        )
    return binary


@pytest.fixture(scope="session")
def postgres_bin_dir() -> Path:
    """Debian's PostgreSQL binaries on the host, runnable (as the ``postgres`` user when we are root)."""
    directory = Path(postgres.BIN_DIR)
    if not (directory / "postgres").is_file():
        unavailable(
            f"no PostgreSQL {postgres.PG_MAJOR} at {directory}: apt-get install {postgres.DEBIAN_PACKAGE}"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(postgres.SUPERUSER)
        except KeyError:
            unavailable(f"running as root and there is no {postgres.SUPERUSER} user to run PostgreSQL as")
    return directory


@pytest.fixture(scope="session")
def tansu_image(docker_client: docker.DockerClient, tansu_binary: Path) -> str:
    """The tansu image's tag (the node image on the PostgreSQL base, plus the cached binary)."""
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[tansu image {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr)

    return TANSU_IMAGE.ensure(docker_client, progress=progress, build_binary=False)


@pytest.fixture(scope="session")
def nisshi_binary() -> Path:
    """The cached nisshi binary of ``NISSHI_PIN`` (never built here: that takes 5-15 minutes)."""
    binary = NISSHI_IMAGE.cached_binary()
    if binary is None:
        unavailable(
            f"no nisshi binary for {NISSHI_IMAGE.pin.key}: build it once with "
            f"`.venv/bin/tidemark image build --target nisshi --binary-only` (cargo, {NISSHI_IMAGE.build_minutes} min)"
        )
    return binary


@pytest.fixture(scope="session")
def nisshi_image(docker_client: docker.DockerClient, nisshi_binary: Path) -> str:
    """The nisshi image's tag (the node image on the PostgreSQL base, plus the cached binary)."""
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[nisshi image {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr)

    return NISSHI_IMAGE.ensure(docker_client, progress=progress, build_binary=False)
