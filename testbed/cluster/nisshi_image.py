"""The nisshi target's image: a pinned nisshi binary, built once with cargo, on the PostgreSQL base.

:data:`NISSHI_PIN` is the one place that says which nisshi Tidemark tests: crates.io 0.8.1, the
maintained successor of tansu, with exactly the two storage engines the target runs --
``postgres`` (brokers sharing one PostgreSQL node, as tansu) and ``libsql`` (an embedded SQLite
file on the broker node's own disk, so power loss through the lazy filesystem tests nisshi's own
fsync discipline).  Default features off: nisshi's defaults add ``dynostore`` (memory and S3),
which the target does not run and which lengthens the build.  The nightly toolchain: nisshi
0.8.1 depends on ``rama`` 0.4, which declares Rust 1.96, and ``cargo install --locked`` with the
machine's stable 1.95 refuses it.  Measured here (2026-12-03, two idle cores): 4 min 51 s wall,
6 min 49 s of user CPU, at opt-level 0 (at opt-level 1, 2026-11-29, niced beside light work:
15 min 38 s wall, 18 min 13 s of user CPU).

The image is ``tidemark-nisshi:<hash>``: the node image with Debian's PostgreSQL (the same base as
tansu's) and the binary at :data:`NISSHI_IMAGE_PATH`.  nisshi creates its own tables (embedded
``pg/schema.sql`` and ``ddl/*.sql``), so no schema ships with the target.
"""

from __future__ import annotations

from testbed.cluster import postgres
from testbed.cluster.crate_image import CrateImage, CratePin

NISSHI_IMAGE_PATH = "/usr/local/bin/nisshi"
"""Where the image holds the nisshi binary."""
NISSHI_PIN = CratePin(
    "nisshi",
    version="0.8.1",
    features=("libsql", "postgres"),
    opt_level=0,
    default_features=False,
    toolchain="nightly",
)
"""The nisshi Tidemark tests (see the module docstring); change it here and nowhere else."""
NISSHI_IMAGE = CrateImage(
    NISSHI_PIN, "tidemark-nisshi", NISSHI_IMAGE_PATH, (postgres.DEBIAN_PACKAGE,), build_minutes="5-15"
)
"""The nisshi target's binary and image (:class:`~testbed.cluster.crate_image.CrateImage`)."""
