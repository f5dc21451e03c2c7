"""The group fields of :class:`workloads.queue.QueueSpec`: defaults, completion, refusals, round trip."""

from __future__ import annotations

import pytest

from workloads.queue import QueueSpec


def test_assign_has_no_commit_mode_and_no_group() -> None:
    spec = QueueSpec()
    assert (spec.consume_via, spec.commit, spec.group) == ("assign", None, None)


def test_subscribe_is_completed_with_sync_commits_and_a_fresh_group() -> None:
    first, second = QueueSpec(consume_via="subscribe"), QueueSpec(consume_via="subscribe")
    assert first.commit == "sync"
    assert first.group is not None and first.group.startswith("tidemark-") and first.group != second.group
    assert QueueSpec.from_dict(first.to_dict()) == first  # the stored group is kept
    assert QueueSpec(consume_via="subscribe", commit="auto", group="mine").group == "mine"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"commit": "async"}, "--commit async needs --consume-via subscribe"),
        ({"group": "g"}, "group 'g' needs --consume-via subscribe"),
        ({"consume_via": "sideways"}, "consume_via (--consume-via) must be assign or subscribe"),
        (
            {"consume_via": "subscribe", "commit": "later"},
            "commit (--commit) must be one of sync, async, auto",
        ),
        ({"consume_via": "subscribe", "group": " "}, "group must be a non-empty string"),
    ],
)
def test_bad_group_fields_are_refused_naming_them(fields: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        QueueSpec(**fields)
    assert message in str(refused.value)


def test_a_stored_spec_from_before_groups_reads_as_assign() -> None:
    old = {
        key: value
        for key, value in QueueSpec().to_dict().items()
        if key not in ("consume_via", "commit", "group")
    }
    assert QueueSpec.from_dict(old) == QueueSpec()
