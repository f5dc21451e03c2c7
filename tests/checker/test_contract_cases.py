"""The cases outsiders found by writing runs from ``docs/history.md`` alone, on the pandas engine.

Spark checks the same cases in ``tests/checker/spark/test_contract_cases.py`` and must write the
same ``results.json``; the cases themselves are in :mod:`tests.checker.contract_cases`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT, DIVERGENT_TAIL, REPLICA_DIVERGENCE
from checker.driver import check_pass
from checker.evidence import InputError, load_run
from checker.pandas.engine import PandasEngine
from tests.checker.contract_cases import CASES, REINVOKED_AFTER_INFO, Case, agreeing, assert_case, write_case


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_case_on_pandas(tmp_path: Path, case: Case) -> None:
    write_case(tmp_path, case)
    run = load_run(tmp_path, skip_bad_lines=case.skip_bad_lines)
    assert_case(case, check_pass(PandasEngine(), [run], ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)[0])


@pytest.mark.parametrize("kind", [REPLICA_DIVERGENCE, DIVERGENT_TAIL])
def test_each_replica_check_alone_reports_only_itself(tmp_path: Path, kind: str) -> None:
    """One engine question answers both replica checks; ``--checks`` keeps the one asked for."""
    (case,) = [c for c in CASES if c.name.startswith("each differing position is classified once")]
    write_case(tmp_path, case)
    result = check_pass(PandasEngine(), [load_run(tmp_path)], (kind,), DEFAULT_EXAMPLE_LIMIT)[0]
    assert {name: a["count"] for name, a in result["anomalies"].items()} == {kind: 1}
    assert result["checks"] == [kind]


def test_an_invoke_after_the_process_info_is_rejected_naming_line_and_process(tmp_path: Path) -> None:
    """Without ``--skip-bad-lines`` the broken contract stops the check before any engine runs."""
    write_case(tmp_path, Case("reinvoked", REINVOKED_AFTER_INFO, agreeing((0, 1000), (1, 1001)), {}, False))
    with pytest.raises(InputError) as raised:
        load_run(tmp_path)
    message = str(raised.value)
    assert message.startswith(
        f"{tmp_path / 'history.jsonl'}:10: process 10 invokes 'poll' after its op 7 (poll)"
    )
    assert "\n" not in message and "never invokes again" in message
