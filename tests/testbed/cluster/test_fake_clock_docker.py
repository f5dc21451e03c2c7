"""``clock-skew`` on real brokers (the ``clock-jumps`` scenario, in Docker): the skew reaches the
broker process, its timers stay on the monotonic clock, its evidence on the kernel's clock.

Read off the run directory, not the verdict (an ISR shrink is safe, so a wall-clock timer would
not change it):

* the skew took effect -- the broker's own log lines, stamped by ``logging`` with ``time.time()``,
  run an hour ahead while its clock is skewed;
* no timer ran on the wall clock -- the event logs hold no ISR shrink and no fenced broker,
  although on the skewed wall clock every ISR-lag window passed hundreds of times (a planted
  ``time.time()`` in the leader's lag check made this fail: the note of issue 35 says how);
* the evidence kept real time -- every event's ``ts`` lies inside the run, skewed broker or not
  (:mod:`broker_impl.real_clock`), so the white-box checks order them as they happened.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.scenario import load_scenario

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d{3} ")


def log_times(path: Path) -> list[datetime.datetime]:
    """The ``asctime`` of every line of a broker log (local time of the container: UTC)."""
    times = []
    for line in path.read_text(errors="replace").splitlines():
        found = LOG_TIME.match(line)
        if found:
            times.append(datetime.datetime.fromisoformat(found.group(1)).replace(tzinfo=datetime.UTC))
    return times


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

    ahead = [t for t in log_times(run / "nodes" / "n1" / "broker.log") if t > ended]
    assert ahead and min(ahead) - started > datetime.timedelta(minutes=55), "n1 logged an hour ahead"
    behind = [t for t in log_times(run / "nodes" / "n2" / "broker.log") if t < started]
    assert behind, "n2 logged an hour behind while its clock was set back"

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
