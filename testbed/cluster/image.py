"""Build (or reuse) the Tidemark node image, with no registry needed.

``ensure_image`` returns the tag of an image that runs the controller and the brokers. The tag is
``tidemark:<content hash>``, the hash covering everything the image is made of: the base image's id,
the Dockerfile, the pinned Python packages and every file of the node-side programs listed in
``CODE_DIRECTORIES`` (the broker, ``broker_impl/``, and the lazy FUSE filesystem, ``nemesis/lazyfs/``).
The rest of the checkout (fault planner, checker, harness, reports) runs on the host only, so editing it
leaves the tag alone. A second call with nothing changed is one hash over a few hundred KiB of source
and one image lookup; any change to the image's inputs gives a new tag, and Docker's layer cache keeps
that rebuild short.

The base (unless the caller names one, e.g. ``python:3.11-slim-bookworm`` from a registry) is a Debian
bookworm root filesystem built with ``mmdebstrap`` from the host's own apt sources and ``docker
import``-ed as ``tidemark-base:<hash of its inputs>``. mmdebstrap must be given the sources file
explicitly: with no mirror argument it ignores the host's sources and uses its built-in default mirror,
which may not be reachable.

Python packages reach the image as wheels: the host downloads them with pip for the image's Python and
platform (cached by their pins) and the build installs them with ``pip --no-index``, so neither the build
nor a container needs the network, and the image is reproducible from the pins. The pins are the
versions installed in the harness's own environment, so the broker runs inside the container with the
same library versions the tests ran with outside.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

IMAGE_REPOSITORY = "tidemark"
BASE_REPOSITORY = "tidemark-base"
IMAGE_PYTHON = "/opt/tidemark/venv/bin/python"
"""The interpreter inside the image that sees the wheels and ``/opt/tidemark/app`` (``CODE_DIRECTORIES``)."""
IMAGE_APP_DIR = "/opt/tidemark/app"

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
)
# Leave documentation and translations out of the root filesystem (copyright files stay).
_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
)
IMAGE_DISTRIBUTIONS = ("kafka-python", "google-crc32c", "mfusepy")
"""What runs inside the containers: the broker's two dependencies and the FUSE library of lazyfs."""
CODE_DIRECTORIES = ("broker_impl", "nemesis/lazyfs")
"""The only source the image holds (under ``IMAGE_APP_DIR``, same relative paths): the programs that run
on the nodes. ``nemesis/__init__.py`` is left out on purpose: inside the image ``nemesis`` is an implicit
namespace package (PEP 420), so ``python -m nemesis.lazyfs`` works, and nothing in ``nemesis.lazyfs``
imports from outside it. Everything else (planner, checker, harness) never reaches the image or its tag."""
_FORMAT_VERSION = "2"  # bump when the way images are assembled changes without any input changing

Progress = Callable[[str], None]


class ImageBuildError(Exception):
    """The image could not be built; the message says which step failed and why."""


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


def say(progress: Progress | None, message: str) -> None:
    """Report ``message`` to ``progress`` (a build's caller may ask to hear nothing)."""
    if progress is not None:
        progress(message)


def source_root() -> Path:
    """The checkout holding the Dockerfile and the code that goes into the image (this file is
    ``<checkout>/testbed/cluster/image.py``)."""
    return Path(__file__).resolve().parents[2]


def cache_directory() -> Path:
    """Where wheels are cached: ``$TIDEMARK_CACHE_DIR``, else ``$XDG_CACHE_HOME/tidemark``."""
    configured = os.environ.get("TIDEMARK_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidemark"


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
    digest = hashlib.sha256(f"tidemark-image {_FORMAT_VERSION}\n{base_image_id}\n".encode())
    digest.update("\n".join(pins).encode() + b"\n")
    for relative, content, executable in sources.files:
        digest.update(f"{relative}\0{executable}\0".encode())
        digest.update(hashlib.sha256(content).digest())
    return digest.hexdigest()[:16]


def base_tag(apt_sources: Path, extra_packages: tuple[str, ...] = ()) -> str:
    """``tidemark-base:<hash>`` of the mmdebstrap inputs (suite, packages, options, sources, arch).

    ``extra_packages`` (e.g. the tansu target's PostgreSQL) make a second base beside the main one:
    the main base's inputs, and so its tag, stay exactly as without them.
    """
    inputs = {
        "format": _FORMAT_VERSION,
        "suite": DEBIAN_SUITE,
        "variant": "minbase",
        "packages": BASE_PACKAGES + extra_packages if extra_packages else BASE_PACKAGES,
        "dpkg": _DPKG_OPTIONS,
        "sources": apt_sources.read_text(encoding="utf-8"),
        "machine": os.uname().machine,
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return f"{BASE_REPOSITORY}:{DEBIAN_SUITE}-{digest}"


def image_or_none(client: docker.DockerClient, reference: str) -> Any:
    """The local image ``reference`` names, or None when the engine has none by that name."""
    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        return None


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


def _assemble_context(context: Path, sources: SourceSnapshot, wheelhouse: Path) -> None:
    shutil.copytree(wheelhouse, context / "wheels")
    for relative, content, executable in sources.files:
        # The Dockerfile sits at the top of the context; the code directories go under app/.
        target = context / (relative if relative == "Dockerfile" else f"app/{relative}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(0o755 if executable else 0o644)


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
