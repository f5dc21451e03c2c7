"""``tidemark check`` on the evidence questions outsiders raised: skipped lines, damaged dumps, the info rule.

* ``--skip-bad-lines`` makes a run at best unknown only when a line was skipped (help, docs and
  verdict say the same);
* a damaged replica dump is that node's evidence missing -- exit 2 (unknown), its file:line in
  the reasons -- not bad arguments (254), and never a traceback;
* a process that invokes after its ``info`` is a broken contract: one line naming file:line and
  the process, exit 254.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness.cli.check import add_check_options
from harness.cli.main import main
from tests.checker.contract_cases import REINVOKED_AFTER_INFO, Case, agreeing, write_case
from tests.checker.synthetic import Plan, write_run


def test_the_help_says_only_skipped_lines_cost_the_verdict() -> None:
    parser = argparse.ArgumentParser()
    add_check_options(parser)
    (option,) = [a for a in parser._actions if "--skip-bad-lines" in a.option_strings]
    assert option.help is not None
    assert "any line skipped is at best unknown" in option.help and "normal verdict" in option.help


def test_skip_bad_lines_on_a_clean_history_keeps_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path, Plan(seed=11))
    assert main(["check", str(tmp_path), "--skip-bad-lines", "--engine", "pandas"]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["valid"] is True and result["stats"]["skipped_lines"] == 0 and result["incomplete"] == []
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize("skip", [False, True], ids=["plain", "skip-bad-lines"])
def test_a_damaged_dump_is_a_missing_node_not_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], skip: bool
) -> None:
    write_run(tmp_path, Plan(seed=12))
    dump = tmp_path / "nodes" / "n1" / "dump.jsonl"
    dump.write_text("garbage\n" + dump.read_text())
    assert main(["check", str(tmp_path), "--engine", "pandas", *(["--skip-bad-lines"] if skip else [])]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    result = json.loads((tmp_path / "results.json").read_text())
    (reason,) = result["incomplete"]
    assert reason.startswith("replica dump of node n1 missing: damaged dump: ")
    assert f"{dump}:1: Expecting value" in reason and reason in captured.out


def test_an_invoke_after_info_is_one_line_naming_file_line_and_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_case(tmp_path, Case("reinvoked", REINVOKED_AFTER_INFO, agreeing((0, 1000), (1, 1001)), {}, False))
    assert main(["check", str(tmp_path), "--engine", "pandas"]) == 254
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'history.jsonl'}:10: process 10 invokes 'poll'" in err[0], err
    assert main(["check", str(tmp_path), "--engine", "pandas", "--skip-bad-lines"]) == 2
    assert json.loads((tmp_path / "results.json").read_text())["anomalies"] == {}
