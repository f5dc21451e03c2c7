"""The controller's persisted metadata as it loads: what ``metadata.json`` held, brought up to date.

Kept apart from :mod:`broker_impl.controller` (which owns every change to the metadata) because
loading is the one place that meets files written by older versions of the controller.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_metadata(path: Path, settings: dict[str, Any], elr_enabled: bool) -> dict[str, Any]:
    """The metadata persisted at ``path``, or an empty cluster named by ``settings``.

    Partition states written before the ELR existed get ``elr`` empty and their leader as
    ``last_known_leader``; with the ELR disabled any persisted ELR is dropped (nothing would
    maintain it)."""
    if path.exists():
        loaded: dict[str, Any] = json.loads(path.read_text())
        for topic in loaded["topics"].values():
            for state in topic["partitions"]:
                state.setdefault("elr", [])
                state.setdefault("last_known_leader", state["leader"])
                if not elr_enabled:
                    state["elr"] = []
        return loaded
    return {
        "version": 0,
        "cluster_id": settings["cluster.id"],
        "controller_id": settings["node.id"],
        "brokers": {},
        "topics": {},
        "next_producer_id": 1000,
    }
