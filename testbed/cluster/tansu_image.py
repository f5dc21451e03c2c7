"""The tansu target's image: a pinned tansu binary, built once with cargo, on a PostgreSQL base.

:data:`TANSU_PIN` -- tansu's crates.io version, the cargo features the build enables and the
optimisation level -- is the one place that says which tansu Tidemark tests.  The PostgreSQL
storage engine is the ``postgres`` feature (``dynostore`` alone builds a broker without it).  The
pin builds at opt-level 0: CI builds tansu on every new machine, and LLVM's optimisation is most
of that build (measured: :mod:`testbed.cluster.crate_image`).  How a pin is built, cached and put into an image is
:mod:`testbed.cluster.crate_image`'s (shared with nisshi); the binary is cached at
``<cache>/tansu/<pin key>/bin/tansu``.  The first build takes 4-10 minutes on two cores
(``scripts/setup.sh test`` runs it in the background while the tests that need no tansu run),
later ones no time at all.

``tidemark-tansu:<hash>`` is the node image on a second registry-free base with Debian's
PostgreSQL (:data:`TANSU_DEBIAN_PACKAGES`) and the binary.  The PostgreSQL schema is not in the
image: :mod:`testbed.cluster.tansu` applies it from the checkout when a cluster starts, like a
config file (tansu does not create its own tables).
"""

from __future__ import annotations

from pathlib import Path

from testbed.cluster import crate_image, postgres
from testbed.cluster.crate_image import CrateImage, CratePin
from testbed.cluster.image_build import Progress

TANSU_IMAGE_PATH = "/usr/local/bin/tansu"
"""Where the image holds the tansu binary."""
TANSU_DEBIAN_PACKAGES = (postgres.DEBIAN_PACKAGE,)
"""What the tansu target's base adds to the node image's packages: the PostgreSQL node's server."""
TANSU_PIN = CratePin("tansu", version="0.6.0", features=("dynostore", "postgres"), opt_level=0)
"""The tansu Tidemark tests (see the module docstring); change it here and nowhere else."""
TANSU_IMAGE = CrateImage(
    TANSU_PIN, "tidemark-tansu", TANSU_IMAGE_PATH, TANSU_DEBIAN_PACKAGES, build_minutes="4-10"
)
"""The tansu target's binary and image (:class:`~testbed.cluster.crate_image.CrateImage`)."""


def binary_path(pin: CratePin = TANSU_PIN) -> Path:
    """Where the binary of ``pin`` is (or will be) cached."""
    return crate_image.binary_path(pin)


def cached_binary(pin: CratePin = TANSU_PIN) -> Path | None:
    """The cached tansu binary of ``pin``, or None when it has not been built on this machine."""
    return crate_image.cached_binary(pin)


def ensure_binary(pin: CratePin = TANSU_PIN, progress: Progress | None = None) -> Path:
    """The tansu binary of ``pin``: the cached one, else built with cargo."""
    return crate_image.ensure_binary(pin, progress, minutes=TANSU_IMAGE.build_minutes)


def image_tag(node_image_id: str, binary: bytes) -> str:
    """``tidemark-tansu:<hash>`` of the node image it is built on and the tansu binary's bytes."""
    return TANSU_IMAGE.tag(node_image_id, binary)
