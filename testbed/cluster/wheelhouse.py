"""The node image's Python packages, as wheels: pinned on the host, downloaded for the image.

Python packages reach the image as wheels: the host downloads them with pip for the image's Python
and platform (cached by their pins) and the build installs them with ``pip --no-index``, so neither
the build nor a container needs the network, and the image is reproducible from the pins.  The pins
(:func:`host_pins`) are the versions installed in the harness's own environment, so the broker runs
inside the container with the same library versions the tests ran with outside.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from testbed.cluster.image_build import ImageBuildError, Progress, cache_directory, say

IMAGE_DISTRIBUTIONS = ("kafka-python", "google-crc32c", "mfusepy")
"""What runs inside the containers: the broker's two dependencies and the FUSE library of lazyfs."""


@dataclass(frozen=True)
class PythonTarget:
    """The interpreter and platform of the image's Python, which decide which wheels fit."""

    version: str  # "311"
    machine: str  # "x86_64"
    glibc_minor: int  # 36 for glibc 2.36

    def pip_platform_arguments(self) -> list[str]:
        arguments = [
            "--python-version",
            f"{self.version[0]}.{self.version[1:]}",
            "--implementation",
            "cp",
            "--abi",
            f"cp{self.version}",
            "--abi",
            "abi3",
            "--abi",
            "none",
        ]
        # pip does not treat manylinux_2_36 as covering 2_17, so every compatible tag is named.
        for minor in range(self.glibc_minor, 4, -1):
            arguments += ["--platform", f"manylinux_2_{minor}_{self.machine}"]
        for legacy in ("manylinux2014", "manylinux2010", "manylinux1"):
            arguments += ["--platform", f"{legacy}_{self.machine}"]
        return arguments


def host_pins() -> tuple[str, ...]:
    """``name==version`` of each image distribution, as installed in the harness's environment."""
    pins = []
    for distribution in IMAGE_DISTRIBUTIONS:
        try:
            pins.append(f"{distribution}=={importlib.metadata.version(distribution)}")
        except importlib.metadata.PackageNotFoundError:
            raise ImageBuildError(
                f"{distribution} is not installed in {sys.prefix}; install the project (pip install -e .) first"
            ) from None
    return tuple(pins)


def probe_python_target(client: docker.DockerClient, base: str) -> PythonTarget:
    """Ask the base image's python3 which wheels it takes (version, machine, glibc)."""
    script = (
        "import platform, sys; libc = platform.libc_ver()[1] or '2.17'; "
        "print(f'{sys.version_info[0]}{sys.version_info[1]} {platform.machine()} {libc}')"
    )
    try:
        output = client.containers.run(
            base,
            ["python3", "-c", script],
            entrypoint=[],
            remove=True,
            network_disabled=True,
            labels={"tidemark": "1", "tidemark.role": "image-probe"},
        )
    except docker.errors.DockerException as error:
        raise ImageBuildError(f"cannot run python3 in the base image {base}: {error}") from error
    version, machine, libc = output.decode().split()
    return PythonTarget(version=version, machine=machine, glibc_minor=int(libc.split(".")[1]))


def prepare_wheelhouse(pins: tuple[str, ...], target: PythonTarget, progress: Progress | None = None) -> Path:
    """A directory of wheels for ``pins`` on ``target`` plus a ``requirements.txt``; cached by both.

    pip downloads binary wheels for the target platform. When a package has no fitting wheel and the
    host's interpreter is the target's, ``pip wheel`` builds one; otherwise that is an error.
    """
    key = hashlib.sha256(json.dumps([pins, target.pip_platform_arguments()]).encode()).hexdigest()[:16]
    wheelhouse = cache_directory() / "wheelhouse" / key
    if (wheelhouse / "requirements.txt").is_file():
        return wheelhouse
    wheelhouse.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=wheelhouse.parent))
    try:
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
        say(progress, f"downloading wheels for cp{target.version} {target.machine}: {' '.join(pins)}")
        download = subprocess.run(
            [
                *pip,
                "download",
                "--only-binary=:all:",
                *target.pip_platform_arguments(),
                "--dest",
                str(staging),
                *pins,
            ],
            capture_output=True,
            text=True,
        )
        if download.returncode != 0:
            host = PythonTarget(
                f"{sys.version_info[0]}{sys.version_info[1]}", os.uname().machine, target.glibc_minor
            )
            if (host.version, host.machine) != (target.version, target.machine):
                raise ImageBuildError(
                    f"pip download of {' '.join(pins)} failed:\n{download.stderr.strip()[-3000:]}"
                )
            say(progress, "no binary wheel for every pin; building wheels with pip wheel")
            built = subprocess.run(
                [*pip, "wheel", "--wheel-dir", str(staging), *pins], capture_output=True, text=True
            )
            if built.returncode != 0:
                raise ImageBuildError(
                    f"pip wheel of {' '.join(pins)} failed:\n{built.stderr.strip()[-3000:]}"
                )
        (staging / "requirements.txt").write_text("\n".join(pins) + "\n", encoding="utf-8")
        try:
            staging.rename(wheelhouse)
        except OSError:
            if not (wheelhouse / "requirements.txt").is_file():  # not a concurrent build that won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return wheelhouse
