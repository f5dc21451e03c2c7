"""The client-op contract's info rule (``docs/history.md`` section 1), enforced by the history's one validator.

A process whose op ended ``info`` never invokes again; a history in which one does is rejected
like every other broken contract (``file:line``, the process, the op that ended it), or with
``skip_bad_lines`` the invoke and its completion are skipped and counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.record.history import HistoryFormatError, HistoryWriter, convert_history, read_history_parquet
from testbed.record.ops import Op

SEND = {"partition": 0, "key": "k0", "value": 7}


def _write(path: Path, steps: list[tuple[int | str, str, str, Any]]) -> None:
    with HistoryWriter(path) as writer:
        for index, (process, type_, f, value) in enumerate(steps):
            writer.append(Op(index, index * 10, process, type_, f, value))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ended", "again"),
    [("send", "send"), ("poll", "poll"), ("send", "poll"), ("drain", "drain")],
)
def test_an_invoke_after_the_process_info_names_file_line_and_process(
    tmp_path: Path, ended: str, again: str
) -> None:
    value = {"send": SEND, "poll": None, "drain": {"partition": 0}}
    source = tmp_path / "history.jsonl"
    _write(
        source,
        [
            (3, "invoke", ended, value[ended]),
            (3, "info", ended, None),
            (4, "invoke", "poll", None),  # another process is unaffected
            (4, "ok", "poll", []),
            (3, "invoke", again, {**SEND, "value": 8} if again == "send" else value[again]),
        ],
    )
    with pytest.raises(HistoryFormatError) as raised:
        convert_history(source, tmp_path / "history.parquet")
    assert str(raised.value) == (
        f"{source}:6: process 3 invokes {again!r} after its op 1 ({ended}) ended info: a process whose op"
        " ended info never invokes again (continue under a fresh process id)"
    )


def test_skipping_drops_the_successor_invoke_and_its_completion(tmp_path: Path) -> None:
    source = tmp_path / "history.jsonl"
    _write(
        source,
        [
            (3, "invoke", "poll", None),
            (3, "info", "poll", None),
            (3, "invoke", "poll", None),
            (3, "ok", "poll", [{"partition": 0, "offset": 1, "key": "k0", "value": 7}]),
            (5, "invoke", "poll", None),
        ],
    )
    summary = convert_history(source, tmp_path / "history.parquet", skip_bad_lines=True)
    assert [line.line for line in summary.skipped] == [4, 5]
    assert "ended info" in summary.skipped[0].reason and "no pending invoke" in summary.skipped[1].reason
    assert [op.index for op in read_history_parquet(tmp_path / "history.parquet")] == [0, 1, 4]


def test_a_fresh_process_after_info_and_the_same_process_after_fail_are_accepted(tmp_path: Path) -> None:
    source = tmp_path / "history.jsonl"
    _write(
        source,
        [
            (0, "invoke", "send", SEND),
            (0, "fail", "send", None),
            (0, "invoke", "send", {**SEND, "value": 8}),  # fail: the send certainly did not happen
            (0, "info", "send", None),
            (9, "invoke", "send", {**SEND, "value": 9}),  # the workload's fresh id
            (9, "ok", "send", {**SEND, "value": 9, "offset": 0}),
            ("nemesis", "invoke", "kill", {"nodes": ["n1"]}),  # nemesis ops are free-form
            ("nemesis", "info", "kill", None),
            ("nemesis", "invoke", "start", {"nodes": ["n1"]}),
        ],
    )
    assert convert_history(source, tmp_path / "history.parquet").ops == 9
