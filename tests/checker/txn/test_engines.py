"""The pandas engine's transactional question on run directories: the rows it hands
:mod:`checker.txn` give the planted totals, and the same answer as the package on the ops' rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from checker.definitions import DEFAULT_EXAMPLE_LIMIT, TXN_CHECKS
from checker.pandas.engine import PandasEngine
from checker.txn.run import RunSettings, ordered, run_anomalies
from tests.checker.txn.histories import History
from tests.checker.txn.runs import CASES, answers, totals, write_cases, write_run


def test_every_case_reports_its_planted_totals(tmp_path: Path) -> None:
    runs = write_cases(tmp_path)
    answer = answers(PandasEngine(), runs)
    for run, (name, (_, expected)) in zip(runs, CASES.items(), strict=True):
        assert totals(answer, run) == expected, name


def test_the_engine_answers_as_the_package_does_on_the_ops_rows(tmp_path: Path) -> None:
    build, _ = CASES["single"]
    history = build()
    run = write_run(tmp_path / "single", history)
    from_engine = answers(PandasEngine(), [run])
    rows = history.rows().assign(run_id=run.history_run_id)
    direct = run_anomalies(
        rows, RunSettings(True, frozenset({0, 1})), frozenset(TXN_CHECKS), DEFAULT_EXAMPLE_LIMIT
    )
    pd.testing.assert_frame_equal(from_engine, ordered(direct))


def test_read_uncommitted_runs_have_no_precommitted_read(tmp_path: Path) -> None:
    build, _ = CASES["single"]
    run = write_run(tmp_path / "single", build(), isolation="read_uncommitted")
    assert "precommitted-read" not in totals(answers(PandasEngine(), [run]), run)


def test_a_run_without_transactions_answers_nothing(tmp_path: Path) -> None:
    run = write_run(tmp_path / "empty", History())
    assert answers(PandasEngine(), [run]).empty


def test_plain_runs_in_a_pass_hand_over_no_rows(tmp_path: Path) -> None:
    plain = History()
    plain.drain(0, [(0, 1)])
    without = write_run(tmp_path / "plain", plain)
    assert answers(PandasEngine(), [without]).empty
    runs = write_cases(tmp_path / "cases")
    pd.testing.assert_frame_equal(answers(PandasEngine(), [without, *runs]), answers(PandasEngine(), runs))


def test_rows_as_spark_hands_them_over_give_the_same_answer() -> None:
    """``applyInPandas`` gives plain numpy columns: a nullable integer becomes float64 (NaN), a
    nullable bool an object column of None -- and the rows come in any order."""
    build, _ = CASES["single"]
    rows = build().rows()
    spark_like = rows.sample(frac=1.0, random_state=3).reset_index(drop=True)
    for column in ("item", "partition", "offset", "value", "process", "index", "time", "type", "f", "run_id"):
        spark_like[column] = spark_like[column].astype("float64")
    spark_like["complete"] = spark_like["complete"].astype(object).where(spark_like["complete"].notna(), None)
    settings = RunSettings(True, frozenset({0, 1}))
    checks = frozenset(TXN_CHECKS)
    pd.testing.assert_frame_equal(
        run_anomalies(spark_like, settings, checks, DEFAULT_EXAMPLE_LIMIT),
        run_anomalies(rows, settings, checks, DEFAULT_EXAMPLE_LIMIT),
    )
