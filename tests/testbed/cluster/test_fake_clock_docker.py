"""``clock-skew`` on real brokers (the ``clock-jumps`` scenario, in Docker): the skew reaches the
broker process, its timers stay on the monotonic clock, its evidence on the kernel's clock.

Read off the run directory, not the verdict (an ISR shrink is safe, so a wall-clock timer would
not change it):

* the skew took effect -- the transaction coordinators persist each transaction state with their
  wall clock (``last_update_ms``, as Kafka's do), and states written during the jump ahead are
  stamped an hour after the run ended;
* no timer ran on the wall clock -- the event logs hold no ISR shrink and no fenced broker,
  although on the skewed wall clock every ISR-lag window passed hundreds of times (a planted
  ``time.time()`` in the leader's lag check made this fail: the note of issue 35 says how);
* the evidence kept real time -- every event's ``ts`` lies inside the run, skewed broker or not
  (:mod:`broker_impl.real_clock`), so the white-box checks order them as they happened.
"""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

import pandas as pd
import pytest

from broker_impl import txn_records
from broker_impl.txn_records import TRANSACTION_STATE_TOPIC
from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import load_scenario

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def transaction_log_stamps(run: Path) -> list[datetime.datetime]:
    """The ``last_update_ms`` of every ``__transaction_state`` record any replica holds: the
    coordinator's wall clock when it wrote the state (Kafka persists it so)."""
    stamps = []
    for dump in sorted((run / "nodes").glob("*/dump.jsonl")):
        for line in dump.read_text().splitlines():
            row = json.loads(line)
            if row.get("type") != "record" or row.get("topic") != TRANSACTION_STATE_TOPIC:
                continue
            value = row.get("value")
            if not value or not value.startswith("base64:"):
                continue  # a tombstone
            metadata = txn_records.decode_value("", base64.b64decode(value.removeprefix("base64:")))
            stamps.append(datetime.datetime.fromtimestamp(metadata.last_update_ms / 1000, datetime.UTC))
    return stamps


def test_clock_jumps_reach_the_brokers_while_timers_and_evidence_keep_real_time(
    image: str, tmp_path: Path
) -> None:
    spec = TestSpec(name="clock-jumps").with_scenario(load_scenario("clock-jumps"))
    started = datetime.datetime.now(datetime.UTC)
    outcome = run_test(spec, tmp_path / "store")
    ended = datetime.datetime.now(datetime.UTC)
    assert outcome.results is not None, outcome.problems
    assert spec.scenario_problems(outcome.results) == [], json.dumps(outcome.results["anomalies"])[:2000]
    run = outcome.run_dir

    stamps = transaction_log_stamps(run)
    ahead = [stamp for stamp in stamps if stamp > ended]
    assert ahead and min(ahead) - started > datetime.timedelta(minutes=55), (
        "the coordinators wrote transaction states stamped an hour ahead while their clocks were"
    )
    assert any(started <= stamp <= ended for stamp in stamps), "and real times before and after"

    events = pd.read_parquet(run / "events.parquet")
    assert events["kind"].isin(["isr-change", "broker-fenced"]).any() == False, (  # noqa: E712
        events[events["kind"].isin(["isr-change", "broker-fenced"])][["node_name", "kind", "isr", "reason"]]
    )
    assert events["ts"].between(started.timestamp() * 1e9, ended.timestamp() * 1e9).all(), (
        "an event's ts left the run's real time span"
    )
    skews = [
        json.loads(line)
        for line in (run / "history.jsonl").read_text().splitlines()
        if '"clock-skew"' in line and '"type":"ok"' in line.replace(" ", "")
    ]
    assert [op["value"]["offset_s"] for op in skews] == [3600, -3600]
