"""A broker Tidemark did not write, from crates.io: the pinned binary built once with cargo, and the
image that carries it on the node image.

Every third-party target built from a Rust crate (tansu, nisshi) is one :class:`CratePin` and one
:class:`CrateImage`; this module is the one place that knows how such a pin is built, cached and
put into an image, so a new system built this way costs its pin and nothing else.

**The pin.**  :class:`CratePin` -- the crate, its crates.io version, the cargo features, whether
cargo's default features stay on, the optimisation level and the toolchain -- says exactly which
binary Tidemark tests.  The build is ``cargo [+TOOLCHAIN] install CRATE --version V --locked
[--no-default-features] [--features F] --root DIR``: ``--locked`` uses the crate's own
``Cargo.lock``, so the dependency versions are the crate author's, not the newest.  A toolchain
other than the default (``nightly``) is for crates that declare a newer Rust than the stable one.

**The build profile.**  A published crate carries no ``[profile]`` of its own, so ``cargo
install`` builds with cargo's release defaults (opt-level 3, no LTO, no debug info).  A pin may
build at a lower level instead (:meth:`CratePin.cargo_environment`, through cargo's
``CARGO_PROFILE_RELEASE_*`` variables, which also shut out a user's own profile settings): LLVM's
optimisation is most of a fresh machine's build, and CI builds every pin on every new machine.
The optimisation level changes speed, never meaning (no debug assertions, no overflow checks:
those stay the release profile's), and the brokers under test wait on their database and the
network, not on their own CPU.  Both pins build at opt-level 0, measured 2026-12-03 on two idle
cores: tansu 3 min 50 s wall and 5.8 min of CPU (opt-level 1: 7 min 43 s), nisshi 4 min 51 s and
7.7 min (opt-level 1: 10 min 30 s, 17 min of CPU); their 18 tests passed as at opt-level 1, in
180 s (195-250 s in CI at opt-level 1).  A fresh machine's CI pays the builds' CPU about one for
one in wall time (the niced build competes with every phase), so halving it shortens CI by as much.

**The cache.**  The binary lives at ``<cache>/<crate>/<pin key>/bin/<crate>`` under the same cache
directory as the wheelhouse (``$TIDEMARK_CACHE_DIR``, else ``~/.cache/tidemark``): outside the
checkout, so a fresh clone on the same machine (CI's) reuses it.  The key names everything of the
pin that changes the binary, so a changed pin builds afresh beside the old one and nothing else
ever rebuilds it.  cargo installs into a staging directory that is renamed into place only when
it succeeded: a build interrupted half-way leaves no binary that looks finished.

**The image.**  ``<repository>:<hash>`` is the node image (broker_impl, lazyfs, sshd, tini --
what every Tidemark node has) built by :func:`testbed.cluster.image.ensure_image` on a base with
the image's extra Debian packages (PostgreSQL, for targets that keep their log there), plus one
layer copying the binary in.  The tag hashes the node image's id, the crate and the binary's bytes.
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

from testbed.cluster.image import ensure_image
from testbed.cluster.image_build import (
    ImageBuildError,
    Progress,
    cache_directory,
    docker_build,
    image_or_none,
    say,
)

_FORMAT_VERSION = "1"  # bump when the way the image is assembled changes without any input changing
_PROFILE_PREFIX = "CARGO_PROFILE_RELEASE_"
"""cargo's environment spelling of ``[profile.release]`` settings (``cargo install`` builds release)."""
_NAME_CHARACTERS = frozenset("0123456789abcdefghijklmnopqrstuvwxyz-_")


@dataclasses.dataclass(frozen=True)
class CratePin:
    """A crate's release from crates.io and how to build it (see the module docstring)."""

    crate: str
    version: str
    features: tuple[str, ...]
    opt_level: int = 3
    """cargo's release ``opt-level``: 3 is cargo's default (and makes no mark in the key)."""
    default_features: bool = True
    """False builds with ``--no-default-features``: only :attr:`features`."""
    toolchain: str | None = None
    """A rustup toolchain (``nightly``) for a crate that needs a newer Rust than the default one."""

    def __post_init__(self) -> None:
        if not self.crate or not set(self.crate) <= _NAME_CHARACTERS:
            raise ValueError(f"crate name {self.crate!r} is not a crates.io name")
        if not self.version or any(c not in "0123456789.-+abcdefghijklmnopqrstuvwxyz" for c in self.version):
            raise ValueError(f"{self.crate} version {self.version!r} is not a crates.io version")
        if list(self.features) != sorted(set(self.features)) or not all(
            f and f.replace("-", "").replace("_", "").isalnum() for f in self.features
        ):
            raise ValueError(f"{self.crate} features {self.features!r} must be distinct names, sorted")
        if self.opt_level not in (0, 1, 2, 3):
            raise ValueError(f"{self.crate} opt_level {self.opt_level!r} must be 0, 1, 2 or 3")
        if self.toolchain is not None and (
            not self.toolchain or not set(self.toolchain) <= _NAME_CHARACTERS | {"."}
        ):
            raise ValueError(f"{self.crate} toolchain {self.toolchain!r} is not a rustup toolchain name")

    @property
    def key(self) -> str:
        """The cache directory's name: ``0.6.0-dynostore+postgres-O0``; ``-only`` marks default
        features off, ``-O3`` (cargo's default) and the default toolchain leave no mark."""
        features = "+".join(self.features) or "default"
        only = "" if self.default_features else "-only"
        level = "" if self.opt_level == 3 else f"-O{self.opt_level}"
        toolchain = "" if self.toolchain is None else f"-{self.toolchain}"
        return f"{self.version}-{features}{only}{level}{toolchain}"

    def cargo_install_argv(self, cargo: str, root: Path) -> list[str]:
        """The one command that builds this pin into ``root/bin/<crate>``."""
        toolchain = [] if self.toolchain is None else [f"+{self.toolchain}"]
        argv = [
            cargo,
            *toolchain,
            "install",
            self.crate,
            "--version",
            self.version,
            "--locked",
            "--root",
            str(root),
        ]
        if not self.default_features:
            argv.append("--no-default-features")
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


def binary_path(pin: CratePin) -> Path:
    """Where the binary of ``pin`` is (or will be) cached."""
    return cache_directory() / pin.crate / pin.key / "bin" / pin.crate


def cached_binary(pin: CratePin) -> Path | None:
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


def ensure_binary(pin: CratePin, progress: Progress | None = None, *, minutes: str = "10-40") -> Path:
    """The binary of ``pin``: the cached one, else built with cargo (``minutes`` on two cores).

    Raises ImageBuildError naming what is missing (cargo) or the tail of cargo's output.
    """
    cached = cached_binary(pin)
    if cached is not None:
        return cached
    cargo = find_cargo()
    if cargo is None:
        raise ImageBuildError(
            f"building {pin.crate} needs cargo (the Rust toolchain: https://rustup.rs or Debian's cargo), "
            "which is not installed"
        )
    final_root = binary_path(pin).parent.parent
    final_root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{pin.key}.", dir=final_root.parent))
    command = pin.cargo_install_argv(cargo, staging)
    say(progress, f"building {pin.crate} {pin.version} ({pin.key}) once, {minutes} min: {' '.join(command)}")
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
                if line.lstrip().startswith((f"Compiling {pin.crate}", "Finished", "Installing", "error")):
                    say(progress, f"cargo: {line.strip()}")
        if process.returncode != 0:
            raise ImageBuildError(
                f"cargo install of {pin.crate} failed (exit {process.returncode}):\n{''.join(tail)}"
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


@dataclasses.dataclass(frozen=True)
class CrateImage:
    """The image of a crate-built target: ``repository:<hash>``, the pinned binary at ``binary_path``
    on the node image with ``extra_packages`` from Debian; the one object a target built this way
    asks for its binary and its image."""

    pin: CratePin
    repository: str
    binary_path: str
    extra_packages: tuple[str, ...] = ()
    build_minutes: str = "10-40"
    """What the first build takes on two cores (said when it starts and when a run refuses)."""

    @property
    def dockerfile(self) -> str:
        return f"ARG NODE_IMAGE\nFROM ${{NODE_IMAGE}}\nCOPY {self.pin.crate} {self.binary_path}\n"

    def cached_binary(self) -> Path | None:
        """The cached binary, or None when it has not been built on this machine."""
        return cached_binary(self.pin)

    def ensure_binary(self, progress: Progress | None = None) -> Path:
        """The binary: the cached one, else built with cargo."""
        return ensure_binary(self.pin, progress, minutes=self.build_minutes)

    def tag(self, node_image_id: str, binary: bytes) -> str:
        """``<repository>:<hash>`` of the node image it is built on and the binary's bytes."""
        digest = hashlib.sha256(
            f"{self.repository} {_FORMAT_VERSION}\n{node_image_id}\n{self.dockerfile}".encode()
        )
        digest.update(hashlib.sha256(binary).digest())
        return f"{self.repository}:{digest.hexdigest()[:16]}"

    def ensure(
        self,
        client: docker.DockerClient,
        *,
        apt_sources: Path | None = None,
        force: bool = False,
        progress: Progress | None = None,
        build_binary: bool = True,
    ) -> str:
        """The tag of an up-to-date image, building the binary, the base and layers as needed.

        ``build_binary`` False (a run, which must not start a long compile unasked) raises
        ImageBuildError naming the command that builds it when the binary is not cached.
        """
        binary = self.ensure_binary(progress) if build_binary else self.cached_binary()
        if binary is None:
            raise ImageBuildError(
                f"the {self.pin.crate} binary ({self.pin.key}) is not built: "
                f"run `tidemark image build --target {self.pin.crate}`"
            )
        node_image = ensure_image(
            client,
            apt_sources=apt_sources,
            force=force,
            progress=progress,
            extra_packages=self.extra_packages,
        )
        tag = self.tag(str(client.images.get(node_image).id), binary.read_bytes())
        if not force and image_or_none(client, tag) is not None:
            return tag
        with tempfile.TemporaryDirectory(prefix=f"tidemark-{self.pin.crate}-context-") as scratch:
            context = Path(scratch)
            (context / "Dockerfile").write_text(self.dockerfile, encoding="utf-8")
            shutil.copy2(binary, context / self.pin.crate)
            say(progress, f"building {tag} on {node_image}")
            docker_build(
                client,
                context,
                tag=tag,
                buildargs={"NODE_IMAGE": node_image},
                no_cache=force,
                progress=progress,
            )
        if image_or_none(client, tag) is None:
            raise ImageBuildError(f"docker build finished but {tag} does not exist")
        return tag
