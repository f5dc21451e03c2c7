"""lso-past-open-transaction on Spark: the engine's ``applyInPandas`` over each run's events answers
what the pandas engine answers (:mod:`checker.txn.lso` through :mod:`checker.txn.white_box`, one
implementation), for runs with findings of every form and runs with legitimate episodes only."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from checker.definitions import LSO_PAST_OPEN_TRANSACTION
from checker.txn import white_box
from tests.checker.txn.test_lso import LEGITIMATE, Log
from tests.checker.txn.test_white_box import TOPIC, frame

pytestmark = pytest.mark.spark

COLUMNS = ["kind", "partition", "node", "seq", "value", "bound", "positions", "prev_node", "prev_seq", "peer"]


def test_spark_answers_as_pandas_per_run(spark: Any) -> None:
    passed = Log().leader().opened(10, producer=1).opened(12, producer=2).hw(14, 10)
    passed.closed(12, offset=14, lso=14, producer=2).closed(
        10, offset=15, lso=15, producer=1, committed=False
    )
    inherited = Log().leader(lso=8, open_transactions=[[7, 3], [9, 5]]).hw(9, 9)
    runs = [passed, inherited, *LEGITIMATE.values()]
    frames = [frame(log.events).assign(run_id=number) for number, log in enumerate(runs, start=1)]
    rows = spark.createDataFrame(pd.concat(frames, ignore_index=True), white_box.INPUT_DDL)
    checks = frozenset({LSO_PAST_OPEN_TRANSACTION})
    function = white_box.spark_function(dict.fromkeys(range(1, len(runs) + 1), TOPIC), checks)
    answer = rows.groupBy("run_id").applyInPandas(function, white_box.OUTPUT_DDL).toPandas()
    answer = answer.sort_values(["run_id", "node", "seq", "bound"], ignore_index=True)
    expected = pd.concat(
        [
            white_box.transaction_invariants(one, TOPIC, checks).assign(run_id=n)
            for n, one in enumerate(frames, 1)
        ],
        ignore_index=True,
    ).sort_values(["run_id", "node", "seq", "bound"], ignore_index=True)
    assert answer["run_id"].tolist() == [1, 2, 2] == expected["run_id"].tolist()
    assert answer[COLUMNS].astype(object).to_dict("records") == expected[COLUMNS].astype(object).to_dict(
        "records"
    )
