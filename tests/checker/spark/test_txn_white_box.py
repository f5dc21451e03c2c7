"""hanging-transaction and unmarked-transaction on Spark: the engine's ``applyInPandas`` over a run's events answers what
the pandas engine answers (:mod:`checker.txn.white_box`, one implementation), planted and absent."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from checker.txn import white_box
from tests.checker.txn.test_markers import Log, committed
from tests.checker.txn.test_white_box import TOPIC, frame, hw, marker, opened, state

pytestmark = pytest.mark.spark


def test_spark_answers_as_pandas_per_run(spark: Any) -> None:
    hanging = frame([state("CompleteAbort"), opened(), hw(lso=12)]).assign(run_id=1)
    closed = frame([state("CompleteAbort"), opened(), marker(20), hw(lso=30)]).assign(run_id=2)
    log = Log()
    committed(log, marked=(0,))
    unmarked = frame(log.events).assign(run_id=3)
    events = pd.concat([hanging, closed, unmarked], ignore_index=True)
    rows = spark.createDataFrame(events, white_box.INPUT_DDL)
    function = white_box.spark_function({1: TOPIC, 2: TOPIC, 3: TOPIC})
    answer = rows.groupBy("run_id").applyInPandas(function, white_box.OUTPUT_DDL).toPandas()
    answer = answer.sort_values("run_id", ignore_index=True)
    expected = pd.concat(
        [white_box.transaction_invariants(hanging, TOPIC), white_box.transaction_invariants(unmarked, TOPIC)],
        ignore_index=True,
    )
    assert answer["run_id"].tolist() == [1, 3]
    columns = ["kind", "partition", "node", "seq", "value", "bound", "positions", "prev_node"]
    assert answer[columns].to_dict("records") == expected[columns].to_dict("records")
