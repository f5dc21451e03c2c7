"""Narrowing to candidate groups (checker.pandas.candidates) never changes an answer of the pandas engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.driver import check_pass
from checker.evidence import load_run
from checker.pandas import candidates
from checker.pandas.engine import PandasEngine
from tests.checker.strategies import plans
from tests.checker.synthetic import Plan, write_run

# Narrow ranges (used as offsets) and wide ones (factorized) both occur.
_keys = st.one_of(st.integers(0, 5), st.integers(-(2**62), 2**62))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(_keys, _keys, _keys), max_size=60))
def test_group_codes_are_equal_exactly_when_the_keys_are(rows: list[tuple[int, int, int]]) -> None:
    columns = [np.array([row[i] for row in rows], dtype=np.int64) for i in range(3)]
    codes, span = candidates.group_codes(columns)
    assert len(codes) == len(rows)
    assert all(0 <= code < span for code in codes.tolist())
    by_key: dict[tuple[int, int, int], int] = {}
    for row, code in zip(rows, codes.tolist(), strict=True):
        assert by_key.setdefault(row, code) == code
    assert len(set(by_key.values())) == len(by_key)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), _keys), max_size=60))
def test_value_group_codes_are_equal_exactly_when_run_partition_and_value_are(
    rows: list[tuple[int, int, int]],
) -> None:
    """Both ways: (run, value) alone when each value is in one partition, all three when one is not."""
    run_id, partition, value = (np.array([row[i] for row in rows], dtype=np.int64) for i in range(3))
    codes, span = candidates.value_group_codes(run_id, partition.astype(np.int32), value)
    assert all(0 <= code < span for code in codes.tolist())
    by_key: dict[tuple[int, int, int], int] = {}
    for row, code in zip(rows, codes.tolist(), strict=True):
        assert by_key.setdefault(row, code) == code
    assert len(set(by_key.values())) == len(by_key)


def test_value_group_codes_keep_the_span_of_the_values_when_partitions_follow_them() -> None:
    value = np.arange(1_000, dtype=np.int64)
    codes, span = candidates.value_group_codes(np.zeros(1_000, np.int64), (value % 8).astype(np.int32), value)
    assert span == 1_000
    # Value 0 sent to partition 1 as well: the partition must then tell the two groups apart.
    codes, span = candidates.value_group_codes(
        np.zeros(1_001, np.int64), np.append(value % 8, 1).astype(np.int32), np.append(value, 0)
    )
    assert span > 1_000 and codes[0] != codes[-1]


def test_group_codes_stay_dense_for_wide_and_many_keys() -> None:
    rng = np.random.default_rng(7)
    wide = rng.integers(-(2**62), 2**62, size=10_000)
    codes, span = candidates.group_codes([wide, wide[::-1].copy(), np.arange(10_000)])
    assert span <= 4 * 10_000  # bincount-able
    assert len(np.unique(codes)) == 10_000


def test_first_rows_and_flags() -> None:
    codes = np.array([2, 0, 2, 1, 0], dtype=np.int64)
    assert candidates.first_rows(codes, 4).tolist() == [1, 3, 0, 5]
    columns = candidates.Columns(pa.table({"done": [True, None, False], "n": [1, None, 3], "k": [4, 5, 6]}))
    assert columns.flags("done").tolist() == [True, False, False]
    assert columns.valid("n").tolist() == [True, False, True]
    assert columns.ints("n", fill=-9).tolist() == [1, -9, 3]
    assert columns.has_nulls("k", "n") and not columns.has_nulls("k")


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 4), st.integers(0, 2)), max_size=60
    ),
    shuffled=st.booleans(),
)
def test_divergent_rows_in_log_order_equal_those_by_codes(
    rows: list[tuple[int, int, int, int]], shuffled: bool
) -> None:
    """The neighbour comparison for sorted replica rows must flag exactly what grouping by codes does."""
    rows = sorted(rows) if not shuffled else rows
    table = pa.table(
        {
            name: pa.array([row[i] for row in rows], pa.int64())
            for i, name in enumerate(("run_id", "partition", "offset", "record_id"))
        }
    )
    found = candidates.divergent_rows(candidates.Columns(table))
    identities: dict[tuple[int, int, int], set[int]] = {}
    for row in rows:
        identities.setdefault(row[:3], set()).add(row[3])
    expected = [i for i, row in enumerate(rows) if len(identities[row[:3]]) > 1]
    assert found.tolist() == expected


def test_unsorted_rows_are_left_to_the_codes() -> None:
    keys = [np.array([0, 0, 0]), np.array([1, 0, 1])]
    assert candidates._rows_of_sorted_groups(keys, np.array([5, 6, 7])) is None
    assert candidates._rows_of_sorted_groups([np.array([0, 1, 1])], np.array([5, 6, 7])).tolist() == [1, 2]


def _everything(columns: candidates.Columns, checks: frozenset[str]) -> Any:
    return np.arange(columns.num_rows)


def _everything_replicated(replicas: candidates.Columns) -> Any:
    return np.arange(replicas.num_rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.one_of(plans(), plans(clean=True)), checks=st.sets(st.sampled_from(ALL_CHECKS), min_size=1))
def test_narrowed_results_equal_the_unnarrowed_ones(
    tmp_path: Path, plan: Plan, checks: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The superset contract, end to end: with every row a candidate the results are the same.

    Checks are asked in subsets too: asked together, one check's candidates can hide
    another's missing ones.
    """
    run_dir = tmp_path / f"run-{plan.seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    write_run(run_dir, plan)

    def check() -> str:
        results = check_pass(PandasEngine(), [load_run(run_dir)], sorted(checks), DEFAULT_EXAMPLE_LIMIT)
        return json.dumps(results, sort_keys=True)

    narrowed = check()
    with monkeypatch.context() as patched:
        patched.setattr(candidates, "value_candidate_rows", _everything)
        patched.setattr(candidates, "divergent_rows", _everything_replicated)
        assert check() == narrowed
