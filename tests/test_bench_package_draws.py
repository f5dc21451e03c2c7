"""The package-draws bench's tally (no Docker): draws, completions, stops by reason, cuts by the
run's end and packages never completed, from real history files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.package_draws import RUN_END, main, tally_stores
from testbed.record.ops import NEMESIS_PROCESS


def write_history(path: Path, ops: list[tuple[str, str, str | None]]) -> None:
    """``ops``: (type, package, error) of ``package`` ops, with a client send between each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for index, (kind, package, error) in enumerate(ops):
        op = {"index": 2 * index, "time": index, "process": NEMESIS_PROCESS, "type": kind, "f": "package"}
        op["value"] = {"package": package, "steps": []}
        if error is not None:
            op["error"] = error
        lines.append(json.dumps(op))
        lines.append(
            json.dumps(
                {
                    "index": 2 * index + 1,
                    "time": index,
                    "process": 0,
                    "type": "invoke",
                    "f": "send",
                    "value": {"partition": 0, "key": "k0", "value": index},
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_draws_completions_stops_and_cuts_per_package(tmp_path: Path) -> None:
    stuck = "fault package stale-leader-lagging-joiner: step 4: timed out after 20 s waiting for leader-is n2 of partition 0"
    write_history(
        tmp_path / "a" / "history.jsonl",
        [
            ("invoke", "rolling-restart", None),
            ("ok", "rolling-restart", None),
            ("invoke", "stale-leader-lagging-joiner", None),
            ("info", "stale-leader-lagging-joiner", stuck),
            ("invoke", "stale-leader-lagging-joiner", None),
            ("info", "stale-leader-lagging-joiner", RUN_END),
        ],
    )
    write_history(
        tmp_path / "b" / "history.jsonl",
        [
            ("invoke", "stale-leader-lagging-joiner", None),
            ("info", "stale-leader-lagging-joiner", stuck.replace("n2", "n3")),
            ("invoke", "whole-cluster-crash", None),  # the run was killed mid-package
        ],
    )
    unmet = tmp_path / "c" / "history.jsonl"
    write_history(
        unmet, [("invoke", "stale-leader-lagging-joiner", None), ("ok", "stale-leader-lagging-joiner", None)]
    )
    lines = unmet.read_text(encoding="utf-8").splitlines()
    refused = json.loads(lines[2])  # the broker refused the joiner's election: the package still completed
    refused["value"]["unmet"] = ["fault package stale-leader-lagging-joiner: step 17: timed out after 20 s"]
    unmet.write_text("\n".join([*lines[:2], json.dumps(refused), *lines[3:]]) + "\n", encoding="utf-8")
    tallies, read, problems = tally_stores([tmp_path / "c"])
    assert (
        tallies["stale-leader-lagging-joiner"].completed,
        tallies["stale-leader-lagging-joiner"].unmet,
    ) == (1, 1)
    unmet.unlink()
    tallies, read, problems = tally_stores([tmp_path])
    assert read == 2 and problems == []
    joiner = tallies["stale-leader-lagging-joiner"]
    assert (joiner.draws, joiner.completed, joiner.stopped, joiner.cut_by_run_end) == (3, 0, 2, 1)
    assert joiner.reasons == {"step 4: timed out after 20 s waiting for leader-is": 2}
    assert joiner.completion_share == 0.0
    assert tallies["rolling-restart"].completion_share == 1.0
    assert (tallies["whole-cluster-crash"].draws, tallies["whole-cluster-crash"].open) == (1, 1)
    assert tallies["whole-cluster-crash"].completion_share is None


def test_a_bad_history_is_left_out_on_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_history(tmp_path / "good" / "history.jsonl", [("invoke", "quiet", None), ("ok", "quiet", None)])
    bad = tmp_path / "bad" / "history.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"index": 0, "time": 0, "process": "nemesis"}\nnot json\n', encoding="utf-8")
    assert main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "1 histories read, 1 package draws" in out
    assert len(err.strip().splitlines()) == 1 and str(bad) in err and "left out" in err
