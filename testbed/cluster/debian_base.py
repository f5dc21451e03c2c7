"""The registry-free base of the node image: a Debian root filesystem built with mmdebstrap.

Unless the caller names a base (e.g. ``python:3.11-slim-bookworm`` from a registry), the node image
is built on a Debian bookworm root filesystem made with ``mmdebstrap`` from the host's own apt
sources and ``docker import``-ed as ``tidemark-base:<hash of its inputs>`` (:func:`base_tag`).
mmdebstrap must be given the sources file explicitly: with no mirror argument it ignores the host's
sources and uses its built-in default mirror, which may not be reachable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import docker
import docker.errors

from testbed.cluster.image_build import (
    NODE_IMAGE_FORMAT_VERSION,
    ImageBuildError,
    Progress,
    image_or_none,
    say,
)

BASE_REPOSITORY = "tidemark-base"
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "iproute2",
    "iptables",
    "procps",
    "fuse3",
    "openssh-server",
    "openssh-sftp-server",
    "tini",
    "libfaketime",  # the clock-skew fault: preloaded into the broker when a run may skew its clock
)
# Leave documentation and translations out of the root filesystem (copyright files stay).
_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
)


def find_apt_sources_file(directory: Path = Path("/etc/apt/sources.list.d")) -> Path:
    """The host's deb822 sources file that lists the Debian suite the image is built from.

    Raises ImageBuildError when there is none (e.g. a non-Debian host): pass ``--apt-sources`` then.
    """
    candidates = sorted(directory.glob("*.sources")) if directory.is_dir() else []
    for path in sorted(candidates, key=lambda candidate: candidate.name != "debian.sources"):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for stanza in text.split("\n\n"):
            fields = _deb822_fields(stanza)
            enabled = fields.get("enabled", "yes").lower() != "no"
            if (
                enabled
                and "deb" in fields.get("types", "").split()
                and DEBIAN_SUITE in fields.get("suites", "").split()
            ):
                return path
    raise ImageBuildError(
        f"no apt sources file under {directory} lists Debian {DEBIAN_SUITE} (deb822 '*.sources'); "
        "pass one with --apt-sources FILE, or use a registry base with --base-image"
    )


def _deb822_fields(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        if line.startswith("#") or ":" not in line or line[:1].isspace():
            continue
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return fields


def base_tag(apt_sources: Path, extra_packages: tuple[str, ...] = ()) -> str:
    """``tidemark-base:<hash>`` of the mmdebstrap inputs (suite, packages, options, sources, arch).

    ``extra_packages`` (e.g. the tansu target's PostgreSQL) make a second base beside the main one:
    the main base's inputs, and so its tag, stay exactly as without them.
    """
    inputs = {
        "format": NODE_IMAGE_FORMAT_VERSION,
        "suite": DEBIAN_SUITE,
        "variant": "minbase",
        "packages": BASE_PACKAGES + extra_packages if extra_packages else BASE_PACKAGES,
        "dpkg": _DPKG_OPTIONS,
        "sources": apt_sources.read_text(encoding="utf-8"),
        "machine": os.uname().machine,
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return f"{BASE_REPOSITORY}:{DEBIAN_SUITE}-{digest}"


def _ensure_mmdebstrap(progress: Progress | None) -> str:
    found = shutil.which("mmdebstrap")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageBuildError(
            "mmdebstrap is not installed: apt-get install mmdebstrap (or pass --base-image)"
        )
    say(progress, "installing mmdebstrap with apt-get")
    for command in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "mmdebstrap"],
    ):
        result = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        )
        if result.returncode != 0:
            raise ImageBuildError(f"{' '.join(command)} failed: {result.stderr.strip()[-2000:]}")
    return shutil.which("mmdebstrap") or "mmdebstrap"


def ensure_debian_base(
    client: docker.DockerClient,
    apt_sources: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    extra_packages: tuple[str, ...] = (),
) -> str:
    """The tag of the registry-free base image (``BASE_PACKAGES`` plus ``extra_packages``), built
    with mmdebstrap and imported unless cached."""
    tag = base_tag(apt_sources, extra_packages)
    if not force and image_or_none(client, tag) is not None:
        return tag
    mmdebstrap = _ensure_mmdebstrap(progress)
    with tempfile.TemporaryDirectory(prefix="tidemark-rootfs-") as scratch:
        tarball = Path(scratch) / "rootfs.tar"
        command = [
            mmdebstrap,
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES + extra_packages)}",
            *(f"--dpkgopt={option}" for option in _DPKG_OPTIONS),
            DEBIAN_SUITE,
            str(tarball),
            str(apt_sources),
        ]
        say(progress, f"building the Debian {DEBIAN_SUITE} root filesystem: {' '.join(command)}")
        # mmdebstrap reports its phases on stderr: pass them on, keep the tail for an error message.
        tail: list[str] = []
        with subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        ) as process:
            assert process.stderr is not None
            for line in process.stderr:
                tail = [*tail[-40:], line]
                say(progress, f"mmdebstrap: {line.rstrip()}")
        if process.returncode != 0:
            raise ImageBuildError(f"mmdebstrap failed (exit {process.returncode}):\n{''.join(tail).strip()}")
        repository, _, version = tag.partition(":")
        say(progress, f"importing the root filesystem ({tarball.stat().st_size / 2**20:.0f} MiB) as {tag}")
        try:
            client.api.import_image_from_file(
                str(tarball),
                repository=repository,
                tag=version,
                changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            )
        except docker.errors.APIError as error:
            raise ImageBuildError(f"docker import of the root filesystem failed: {error}") from error
    if image_or_none(client, tag) is None:
        raise ImageBuildError(f"docker import finished but {tag} does not exist")
    return tag
