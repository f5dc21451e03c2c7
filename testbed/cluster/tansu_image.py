"""The tansu target's image: a pinned tansu binary, built once with cargo, on a PostgreSQL base.

**The pin.**  :data:`TANSU_PIN` -- tansu's crates.io version, the cargo features the build
enables and the optimisation level -- is the one place that says which tansu Tidemark tests.  The
PostgreSQL storage engine is the ``postgres`` feature (``dynostore`` alone builds a broker without
it).  The build is ``cargo install tansu --version V --locked --features F --root DIR``:
``--locked`` uses the crate's own ``Cargo.lock``, so the dependency versions are the crate
author's, not the newest.

**The build profile.**  The published crate carries no ``[profile]`` of its own, so ``cargo
install`` builds with cargo's release defaults (opt-level 3, no LTO, no debug info).  The pin
builds at opt-level 1 instead (:meth:`TansuPin.cargo_environment`, through cargo's
``CARGO_PROFILE_RELEASE_*`` variables, which also shut out a user's own profile settings): LLVM's
optimisation is most of a fresh machine's build, and CI builds tansu on every new machine.  The
optimisation level changes speed, never meaning (no debug assertions, no overflow checks: those
stay the release profile's), and the brokers of the tests wait on PostgreSQL and the network, not
on their own CPU.

**The cache.**  The binary lives at ``<cache>/tansu/<pin key>/bin/tansu`` under the same cache
directory as the wheelhouse (``$TIDEMARK_CACHE_DIR``, else ``~/.cache/tidemark``): outside the
checkout, so a fresh clone on the same machine (CI's) reuses it.  The key names the version, the
features and the optimisation level -- everything of the pin that changes the binary -- so a
changed pin builds afresh beside the old one and nothing else ever rebuilds it.  cargo installs
into a staging directory that is renamed into place only when it succeeded: a build interrupted
half-way leaves no binary that looks finished.  The first build takes 10-25 minutes on two cores
(``scripts/setup.sh test`` runs it in the background while the tests that need no tansu run),
later ones no time at all.

**The image.**  ``tidemark-tansu:<hash>`` is the node image (broker_impl, lazyfs, sshd, tini --
what every Tidemark node has) built by :func:`testbed.cluster.image.ensure_image` on a *second*
registry-free base: the same mmdebstrap run from the host's apt sources, with Debian's
PostgreSQL (:data:`TANSU_DEBIAN_PACKAGES`) added.  mmdebstrap is already how the base gets its
packages without a registry, and the extra packages make their own base tag, so the default
image (and the demo, which needs no Rust build) is untouched.  On top, one layer copies the
tansu binary in, as the wheelhouse is copied in.  The tag hashes the node image's id and the
binary's bytes.  The PostgreSQL schema is not in the image: :mod:`testbed.cluster.tansu` applies
it from the checkout when a cluster starts, like a config file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import docker

from testbed.cluster import postgres
from testbed.cluster.image import ensure_image
from testbed.cluster.image_build import (
    ImageBuildError,
    Progress,
    cache_directory,
    docker_build,
    image_or_none,
    say,
)

IMAGE_REPOSITORY = "tidemark-tansu"
TANSU_IMAGE_PATH = "/usr/local/bin/tansu"
"""Where the image holds the tansu binary."""
TANSU_DEBIAN_PACKAGES = (postgres.DEBIAN_PACKAGE,)
"""What the tansu target's base adds to the node image's packages: the PostgreSQL node's server."""
_FORMAT_VERSION = "1"  # bump when the way the image is assembled changes without any input changing
_DOCKERFILE = f"""\
ARG NODE_IMAGE
FROM ${{NODE_IMAGE}}
COPY tansu {TANSU_IMAGE_PATH}
"""
_PROFILE_PREFIX = "CARGO_PROFILE_RELEASE_"
"""cargo's environment spelling of ``[profile.release]`` settings (``cargo install`` builds release)."""


@dataclasses.dataclass(frozen=True)
class TansuPin:
    """A tansu release from crates.io, the cargo features and the optimisation level to build it with."""

    version: str
    features: tuple[str, ...]
    opt_level: int = 3
    """cargo's release ``opt-level``: 3 is cargo's default (and makes no mark in the key)."""

    def __post_init__(self) -> None:
        if not self.version or any(c not in "0123456789.-+abcdefghijklmnopqrstuvwxyz" for c in self.version):
            raise ValueError(f"tansu version {self.version!r} is not a crates.io version")
        if list(self.features) != sorted(set(self.features)) or not all(
            f and f.replace("-", "").replace("_", "").isalnum() for f in self.features
        ):
            raise ValueError(f"tansu features {self.features!r} must be distinct names, sorted")
        if self.opt_level not in (1, 2, 3):
            raise ValueError(
                f"tansu opt_level {self.opt_level!r} must be 1, 2 or 3 (0: an unoptimised, far slower broker)"
            )

    @property
    def key(self) -> str:
        """The cache directory's name: ``0.6.0-dynostore+postgres-O1`` (no ``-O3``: cargo's default)."""
        level = "" if self.opt_level == 3 else f"-O{self.opt_level}"
        return f"{self.version}-{'+'.join(self.features) or 'default'}{level}"

    def cargo_install_argv(self, cargo: str, root: Path) -> list[str]:
        """The one command that builds this pin into ``root/bin/tansu``."""
        argv = [cargo, "install", "tansu", "--version", self.version, "--locked", "--root", str(root)]
        if self.features:
            argv += ["--features", ",".join(self.features)]
        return argv

    def cargo_environment(self, inherited: Mapping[str, str]) -> dict[str, str]:
        """``inherited`` with the release profile this pin builds with, and no other profile setting.

        Every ``CARGO_PROFILE_RELEASE_*`` of ``inherited`` is dropped, so what the binary is made
        of is the pin (its key) and not whatever the caller's shell held.
        """
        environment = {k: v for k, v in inherited.items() if not k.startswith(_PROFILE_PREFIX)}
        environment.update(
            {
                f"{_PROFILE_PREFIX}OPT_LEVEL": str(self.opt_level),
                f"{_PROFILE_PREFIX}LTO": "false",
                f"{_PROFILE_PREFIX}DEBUG": "false",
            }
        )
        return environment


TANSU_PIN = TansuPin(version="0.6.0", features=("dynostore", "postgres"), opt_level=1)
"""The tansu Tidemark tests (see the module docstring); change it here and nowhere else."""


def binary_path(pin: TansuPin = TANSU_PIN) -> Path:
    """Where the binary of ``pin`` is (or will be) cached."""
    return cache_directory() / "tansu" / pin.key / "bin" / "tansu"


def cached_binary(pin: TansuPin = TANSU_PIN) -> Path | None:
    """The cached binary of ``pin``, or None when it has not been built on this machine."""
    path = binary_path(pin)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def find_cargo() -> str | None:
    """cargo on PATH, else rustup's default place (``~/.cargo/bin``, often not on a script's PATH)."""
    found = shutil.which("cargo")
    if found:
        return found
    default = Path.home() / ".cargo" / "bin" / "cargo"
    return str(default) if os.access(default, os.X_OK) else None


def ensure_binary(pin: TansuPin = TANSU_PIN, progress: Progress | None = None) -> Path:
    """The binary of ``pin``: the cached one, else built with cargo (10-25 min on two cores).

    Raises ImageBuildError naming what is missing (cargo) or the tail of cargo's output.
    """
    cached = cached_binary(pin)
    if cached is not None:
        return cached
    cargo = find_cargo()
    if cargo is None:
        raise ImageBuildError(
            "building tansu needs cargo (the Rust toolchain: https://rustup.rs or Debian's cargo), "
            "which is not installed"
        )
    final_root = binary_path(pin).parent.parent
    final_root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{pin.key}.", dir=final_root.parent))
    command = pin.cargo_install_argv(cargo, staging)
    say(progress, f"building tansu {pin.version} ({pin.key}) once, 10-25 min: {' '.join(command)}")
    tail: list[str] = []
    try:
        with subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**pin.cargo_environment(os.environ), "CARGO_TARGET_DIR": str(staging / "target")},
        ) as process:
            assert process.stderr is not None
            for line in process.stderr:
                tail = [*tail[-40:], line]
                if line.lstrip().startswith(("Compiling tansu", "Finished", "Installing", "error")):
                    say(progress, f"cargo: {line.strip()}")
        if process.returncode != 0:
            raise ImageBuildError(
                f"cargo install of tansu failed (exit {process.returncode}):\n{''.join(tail)}"
            )
        shutil.rmtree(staging / "target", ignore_errors=True)
        try:
            staging.rename(final_root)
        except OSError:
            if cached_binary(pin) is None:  # not a concurrent build that won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    built = cached_binary(pin)
    if built is None:
        raise ImageBuildError(f"cargo install finished but {binary_path(pin)} is not an executable")
    return built


def image_tag(node_image_id: str, binary: bytes) -> str:
    """``tidemark-tansu:<hash>`` of the node image it is built on and the tansu binary's bytes."""
    digest = hashlib.sha256(f"tidemark-tansu {_FORMAT_VERSION}\n{node_image_id}\n{_DOCKERFILE}".encode())
    digest.update(hashlib.sha256(binary).digest())
    return f"{IMAGE_REPOSITORY}:{digest.hexdigest()[:16]}"


def ensure_tansu_image(
    client: docker.DockerClient,
    *,
    apt_sources: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    build_binary: bool = True,
) -> str:
    """The tag of an up-to-date tansu image, building the binary, the base and layers as needed.

    ``build_binary`` False (a run, which must not start a 20-minute compile unasked) raises
    ImageBuildError naming the command that builds it when the binary is not cached.
    """
    binary = ensure_binary(TANSU_PIN, progress) if build_binary else cached_binary(TANSU_PIN)
    if binary is None:
        raise ImageBuildError(
            f"the tansu binary ({TANSU_PIN.key}) is not built: run `tidemark image build --target tansu`"
        )
    node_image = ensure_image(
        client,
        apt_sources=apt_sources,
        force=force,
        progress=progress,
        extra_packages=TANSU_DEBIAN_PACKAGES,
    )
    content = binary.read_bytes()
    tag = image_tag(str(client.images.get(node_image).id), content)
    if not force and image_or_none(client, tag) is not None:
        return tag
    with tempfile.TemporaryDirectory(prefix="tidemark-tansu-context-") as scratch:
        context = Path(scratch)
        (context / "Dockerfile").write_text(_DOCKERFILE, encoding="utf-8")
        shutil.copy2(binary, context / "tansu")
        say(progress, f"building {tag} on {node_image}")
        docker_build(
            client, context, tag=tag, buildargs={"NODE_IMAGE": node_image}, no_cache=force, progress=progress
        )
    if image_or_none(client, tag) is None:
        raise ImageBuildError(f"docker build finished but {tag} does not exist")
    return tag
