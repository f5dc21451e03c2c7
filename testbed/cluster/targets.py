"""The systems a run can start in Docker -- the one list of target names and the default.

``bundled`` is the bundled broker (:mod:`testbed.cluster.bundled`), ``tansu`` tansu brokers sharing
one PostgreSQL node (:mod:`testbed.cluster.tansu`).  Everything that names a target -- ``--target``,
a scenario's or a campaign's ``target`` key, ``test.json`` -- checks it against :data:`TARGETS`.

These are names only, so the floor (scenario files, the record) can check them.  What each target
*is* -- its spec checks, settings, cluster, nodes and abilities -- is an object in
:mod:`harness.targets` (its registry says how to add one; a test keeps both lists in step).
"""

from __future__ import annotations

from typing import Final

TARGETS: Final[tuple[str, ...]] = ("bundled", "tansu", "nisshi")
"""What a run starts in Docker: the bundled broker, or tansu brokers on PostgreSQL."""
DEFAULT_TARGET: Final = TARGETS[0]
"""The target when neither the user, a campaign nor a scenario names one: the bundled broker."""
