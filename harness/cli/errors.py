"""The one error a subcommand raises for its user: :class:`UsageError`.

Kept apart from the router (:mod:`harness.cli.main`), which imports every subcommand
module, so that those modules can import this without an import cycle.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad arguments or bad input: printed as one line naming what and where, exit code 254."""
