"""The white-box checks on the controller's own log: epoch-reuse and metadata-rollback, defined here,
found by the pandas oracle through :func:`reused_epochs` and :func:`rollbacks` (the Spark engine
computes the same rows in :mod:`checker.spark.invariants`).

Apart from :mod:`checker.definitions` because they read the controller's log alone, where the other
white-box checks read the brokers': they check the controller's own durability, which
``controller-kill`` exercises (``bench/mutants/17-controller-publishes-before-persisting``).

* **epoch-reuse** -- the controller published a leader epoch of a partition that was not above
  every leader epoch it had published for that partition before: an ``election`` whose new
  epoch is at or below the highest epoch of the partition's earlier ``topic-created``,
  ``election`` and ``isr-change`` events, or an ``isr-change`` whose epoch is below it.  Every
  election must open a new epoch: the epoch is what fences a deposed leader's fetches and its
  clients' requests (KIP-101, KIP-320), so one epoch handed to two leaderships lets a stale
  leader be believed.  A controller that publishes metadata before it is durable hands an epoch
  out again after a crash.  ``controller election p0 new_epoch=1`` (v5); ``controller start
  metadata_version=4``; ``controller election p0 new_epoch=1`` -> epoch 1 published twice.
  Counted per event; the example shows it (``value`` its epoch) and the first event that
  published the epoch it fell to or below (``bound``).
* **metadata-rollback** -- a controller ``start`` whose ``metadata_version`` (the version it
  loaded from its disk) is below the highest ``metadata_version`` its log recorded before it:
  the controller published versions it had not made durable, and its restart took them back --
  elections, ISR changes, fencings the brokers had acted on.  The brokers take only versions above
  the last they saw, so they ignore what the restarted controller numbers again, and follow a
  history it no longer has.  Its events are written after the version's fsync, so a correct
  controller loads at least every version its log names.  ``controller isr-change v17``;
  ``controller start metadata_version=16`` -> v17 rolled back.  Counted per start; the example
  shows it (``value`` the loaded version), ``bound`` the highest version before and the first
  event that recorded it, ``positions`` the versions lost.
"""

from __future__ import annotations

import json
from typing import Final

import pandas as pd

PARTITION_STATE_KINDS: Final[tuple[str, ...]] = ("topic-created", "election", "isr-change")
"""The controller events that publish a partition's leader and ISR (and so its leader epoch)."""
NONE_BEFORE: Final = -1
"""The running maximum before any epoch or version was published (both are >= 0)."""


def _highest_before(values: pd.Series, groups: list[pd.Series]) -> pd.Series:
    """Per row, the highest of ``values`` in the rows of its group before it (rows in order)."""
    highest = values.groupby(groups, sort=False).cummax()
    return highest.groupby(groups, sort=False).shift(1).fillna(NONE_BEFORE).astype("int64")


def reused_epochs(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``rows`` (prepared events of the run's topic: ``order``, ``t``) that reuse an
    epoch, with ``bound`` (the highest epoch published before) and ``prev_node``/``prev_seq`` (the
    first event that published it)."""
    states = rows[
        (rows["process"] == "controller") & rows["kind"].isin(PARTITION_STATE_KINDS) & rows["epoch"].notna()
    ]
    states = states.sort_values(["run_id", "partition", "order"], kind="stable").reset_index(drop=True)
    states = states.assign(epoch=states["epoch"].astype("int64"))
    before = _highest_before(states["epoch"], [states["run_id"], states["partition"]])
    election = states["kind"] == "election"
    reused = (election & (states["epoch"] <= before)) | (~election & (states["epoch"] < before))
    found = states[reused].assign(bound=before[reused])
    first = states.drop_duplicates(["run_id", "partition", "epoch"])[
        ["run_id", "partition", "epoch", "node_name", "seq"]
    ].rename(columns={"epoch": "bound", "node_name": "prev_node", "seq": "prev_seq"})
    return found.merge(first, on=["run_id", "partition", "bound"], how="left")


VERSION_COLUMNS: Final[tuple[str, ...]] = ("run_id", "node_name", "process", "seq", "ts", "kind", "line")
"""The columns of ``events.parquet`` :func:`rollbacks` reads (a version is only in an event's ``line``)."""


def rollbacks(events: pd.DataFrame) -> pd.DataFrame:
    """The controller ``start`` rows of ``events`` (:data:`VERSION_COLUMNS`) that loaded a version
    below the highest their log recorded before, with ``t`` (``ts`` lifted in ``seq`` order),
    ``version``, ``bound``, ``prev_node``/``prev_seq`` (the first event of that version)."""
    log = ["run_id", "node_name"]
    controller = events[events["process"] == "controller"].sort_values([*log, "seq"], kind="stable")
    controller = controller.assign(
        t=controller.groupby(log, sort=False)["ts"].cummax().astype("int64"),
        version=pd.array([json.loads(line).get("metadata_version") for line in controller["line"]], "Int64"),
    )
    controller = controller[controller["version"].notna()].reset_index(drop=True)
    controller = controller.assign(version=controller["version"].astype("int64"))
    before = _highest_before(controller["version"], [controller[column] for column in log])
    lost = (controller["kind"] == "start") & (controller["version"] < before)
    found = controller[lost].assign(bound=before[lost], partition=pd.NA)
    first = controller.drop_duplicates([*log, "version"])[[*log, "version", "seq"]].rename(
        columns={"version": "bound", "seq": "prev_seq"}
    )
    found = found.merge(first, on=[*log, "bound"], how="left")
    return found.assign(prev_node=found["node_name"])
