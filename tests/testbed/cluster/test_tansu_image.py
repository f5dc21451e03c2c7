"""The tansu pin and its build cache, without building tansu: a stand-in ``cargo`` records how it was
called and installs a fake binary, so the cache logic is exercised end to end in milliseconds."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from testbed.cluster import crate_image, tansu_image
from testbed.cluster.crate_image import CratePin
from testbed.cluster.image_build import ImageBuildError
from testbed.cluster.tansu_image import TANSU_PIN

FAKE_CARGO = """#!/bin/sh
# Records its arguments, then installs a fake tansu under --root, as cargo install would.
echo "$@" >> "$(dirname "$0")/calls"
env | grep '^CARGO_PROFILE_RELEASE_' | sort > "$(dirname "$0")/profile"
while [ $# -gt 0 ]; do [ "$1" = --root ] && root=$2; shift; done
[ -n "${FAIL:-}" ] && { echo "error: could not compile tansu" >&2; exit 101; }
mkdir -p "$root/bin" "$CARGO_TARGET_DIR" && printf '#!/bin/sh\\necho tansu\\n' > "$root/bin/tansu"
chmod +x "$root/bin/tansu"
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIDEMARK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fake_cargo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cargo = tmp_path / "bin" / "cargo"
    cargo.parent.mkdir()
    cargo.write_text(FAKE_CARGO, encoding="utf-8")
    cargo.chmod(cargo.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(crate_image, "find_cargo", lambda: str(cargo))
    return cargo


def test_the_pin_is_tansu_0_6_0_with_the_postgres_engine_at_opt_level_0() -> None:
    assert TANSU_PIN.version == "0.6.0"
    assert "postgres" in TANSU_PIN.features  # dynostore alone has no PostgreSQL engine
    assert TANSU_PIN.opt_level == 0  # the fresh machine's build is CI's critical path
    assert TANSU_PIN.key == "0.6.0-dynostore+postgres-O0"


def test_the_cache_key_changes_with_the_version_and_the_features() -> None:
    keys = {
        CratePin("tansu", "0.6.0", ("dynostore", "postgres")).key,
        CratePin("tansu", "0.6.1", ("dynostore", "postgres")).key,
        CratePin("tansu", "0.6.0", ("postgres",)).key,
        CratePin("tansu", "0.6.0", ()).key,
        CratePin("tansu", "0.6.0", ("dynostore", "postgres"), opt_level=0).key,
        CratePin("tansu", "0.6.0", ("dynostore", "postgres"), opt_level=1).key,
        CratePin("tansu", "0.6.0", ("dynostore", "postgres"), opt_level=2).key,
    }
    assert len(keys) == 7
    assert (
        CratePin("tansu", "0.6.0", ("postgres",), opt_level=3).key == "0.6.0-postgres"
    )  # cargo's default, as before


@pytest.mark.parametrize(
    ("version", "features", "opt_level"),
    [
        ("", (), 3),
        ("0.6.0; rm -rf /", (), 3),
        ("0.6.0", ("postgres", "dynostore"), 3),
        ("0.6.0", ("postgres",), -1),
        ("0.6.0", ("postgres",), 4),
    ],
)
def test_a_malformed_pin_is_refused(version: str, features: tuple[str, ...], opt_level: int) -> None:
    with pytest.raises(ValueError, match="tansu"):
        CratePin("tansu", version, features, opt_level)


def test_the_build_environment_is_the_pins_profile_and_none_of_the_callers() -> None:
    inherited = {"PATH": "/bin", "CARGO_PROFILE_RELEASE_LTO": "fat", "CARGO_PROFILE_RELEASE_PANIC": "abort"}
    assert TANSU_PIN.cargo_environment(inherited) == {
        "PATH": "/bin",
        "CARGO_PROFILE_RELEASE_OPT_LEVEL": "0",
        "CARGO_PROFILE_RELEASE_LTO": "false",
        "CARGO_PROFILE_RELEASE_DEBUG": "false",
    }


def test_cargo_install_is_exactly_the_pinned_locked_build() -> None:
    assert TANSU_PIN.cargo_install_argv("cargo", Path("/c")) == [
        "cargo",
        "install",
        "tansu",
        "--version",
        "0.6.0",
        "--locked",
        "--root",
        "/c",
        "--features",
        "dynostore,postgres",
    ]


def test_the_binary_lives_under_the_cache_keyed_by_the_pin(cache: Path) -> None:
    assert tansu_image.binary_path() == cache / "tansu" / "0.6.0-dynostore+postgres-O0" / "bin" / "tansu"
    assert tansu_image.cached_binary() is None


def test_a_build_lands_in_the_cache_and_the_next_call_reuses_it(cache: Path, fake_cargo: Path) -> None:
    messages: list[str] = []
    built = tansu_image.ensure_binary(progress=messages.append)
    assert built == tansu_image.binary_path() and os.access(built, os.X_OK)
    assert any("once" in message for message in messages)
    assert tansu_image.ensure_binary() == built  # cached: cargo is not asked again
    calls = (fake_cargo.parent / "calls").read_text().splitlines()
    assert calls == ["install tansu --version 0.6.0 --locked --root " + calls[0].split("--root ")[1]]
    assert "--features dynostore,postgres" in calls[0]
    assert (fake_cargo.parent / "profile").read_text().splitlines() == [
        "CARGO_PROFILE_RELEASE_DEBUG=false",
        "CARGO_PROFILE_RELEASE_LTO=false",
        "CARGO_PROFILE_RELEASE_OPT_LEVEL=0",
    ]
    assert [p.name for p in (cache / "tansu").iterdir()] == ["0.6.0-dynostore+postgres-O0"]  # no staging left


def test_a_failed_build_leaves_nothing_that_looks_built(
    cache: Path, fake_cargo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(ImageBuildError, match="could not compile tansu"):
        tansu_image.ensure_binary()
    assert tansu_image.cached_binary() is None
    assert list((cache / "tansu").iterdir()) == []


def test_without_cargo_the_error_says_so(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crate_image, "find_cargo", lambda: None)
    with pytest.raises(ImageBuildError, match="building tansu needs cargo"):
        tansu_image.ensure_binary()


def test_the_image_tag_follows_the_node_image_and_the_binary() -> None:
    tag = tansu_image.image_tag("sha256:aaa", b"tansu 1")
    assert tag.startswith("tidemark-tansu:")
    assert tag == tansu_image.image_tag("sha256:aaa", b"tansu 1")
    assert tag != tansu_image.image_tag("sha256:bbb", b"tansu 1")
    assert tag != tansu_image.image_tag("sha256:aaa", b"tansu 2")


def test_postgresql_comes_in_a_second_base_and_the_main_base_keeps_its_tag(tmp_path: Path) -> None:
    from testbed.cluster.debian_base import base_tag

    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm\n", encoding="utf-8")
    assert base_tag(sources, ()) == base_tag(sources)
    assert base_tag(sources, tansu_image.TANSU_DEBIAN_PACKAGES) != base_tag(sources)
    assert tansu_image.TANSU_DEBIAN_PACKAGES == ("postgresql-15",)
