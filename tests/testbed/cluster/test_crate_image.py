"""What :class:`CratePin` says beyond tansu's pin: default features off and a toolchain of its own,
both in the command and in the cache key (a changed pin must never reuse another pin's binary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.cluster.crate_image import CrateImage, CratePin


def test_a_pin_without_default_features_on_another_toolchain_says_so_in_argv_and_key() -> None:
    pin = CratePin(
        "nisshi", "0.8.1", ("libsql", "postgres"), opt_level=1, default_features=False, toolchain="nightly"
    )
    assert pin.cargo_install_argv("cargo", Path("/c")) == [
        "cargo",
        "+nightly",
        "install",
        "nisshi",
        "--version",
        "0.8.1",
        "--locked",
        "--root",
        "/c",
        "--no-default-features",
        "--features",
        "libsql,postgres",
    ]
    assert pin.key == "0.8.1-libsql+postgres-only-O1-nightly"
    keys = {
        pin.key,
        CratePin("nisshi", "0.8.1", ("libsql", "postgres"), opt_level=1, toolchain="nightly").key,
        CratePin("nisshi", "0.8.1", ("libsql", "postgres"), opt_level=1, default_features=False).key,
    }
    assert len(keys) == 3


@pytest.mark.parametrize(
    ("crate", "toolchain", "message"),
    [
        ("", None, "crate name"),
        ("Nisshi", None, "crate name"),
        ("nisshi", "", "toolchain"),
        ("nisshi", "a b", "toolchain"),
    ],
)
def test_a_malformed_crate_or_toolchain_is_refused(crate: str, toolchain: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CratePin(crate, "0.8.1", (), toolchain=toolchain)


def test_two_crates_with_the_same_bytes_get_different_tags() -> None:
    tansu = CrateImage(CratePin("tansu", "1.0.0", ()), "tidemark-tansu", "/usr/local/bin/tansu")
    nisshi = CrateImage(CratePin("nisshi", "1.0.0", ()), "tidemark-nisshi", "/usr/local/bin/nisshi")
    assert tansu.tag("sha256:a", b"x").startswith("tidemark-tansu:")
    assert tansu.tag("sha256:a", b"x").split(":")[1] != nisshi.tag("sha256:a", b"x").split(":")[1]
    assert "COPY nisshi /usr/local/bin/nisshi" in nisshi.dockerfile
