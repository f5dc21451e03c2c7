"""Process exit codes of every ``tidemark`` command, and the verdict each one stands for.

0 valid (or success), 1 anomalies found, 2 unknown (incomplete evidence), 254 bad
arguments or bad input, 255 internal error (a bug in Tidemark).  Campaigns and hunts
return these from library code, so they live here rather than in the CLI.
"""

from __future__ import annotations

from typing import Final

EXIT_VALID: Final = 0
EXIT_INVALID: Final = 1
EXIT_UNKNOWN: Final = 2
EXIT_BAD_ARGUMENTS: Final = 254
EXIT_INTERNAL_ERROR: Final = 255


def verdict_exit_code(verdict: object) -> int:
    """The exit code of one verdict (``results.json``'s ``valid``: true, false or "unknown")."""
    if verdict is True:
        return EXIT_VALID
    if verdict is False:
        return EXIT_INVALID
    return EXIT_UNKNOWN
