"""``tidemark run --consume-via`` and ``--commit``: what they put in the spec, and the combinations refused.

A refused combination is one line on stderr naming the flags and exit 254, before anything
starts (no run directory); an accepted one is in ``test.json``'s workload: the consume mode,
the commit mode and the group id drawn for the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS
from harness.run.spec import TestSpec
from tests.harness.cli.commands import one_line_error, spec_of, tidemark


def test_assign_is_the_default_and_records_no_group() -> None:
    workload = spec_of().to_dict()["workload"]
    assert (workload["consume_via"], workload["commit"], workload["group"]) == ("assign", None, None)


def test_subscribe_commits_synchronously_by_default_in_a_group_drawn_per_spec() -> None:
    first = spec_of("--consume-via", "subscribe")
    workload = first.to_dict()["workload"]
    assert workload["consume_via"] == "subscribe" and workload["commit"] == "sync"
    assert workload["group"].startswith("tidemark-")
    assert spec_of("--consume-via", "subscribe").workload.group != first.workload.group
    # test.json keeps it: a re-run of the stored spec joins a group of the same name.
    assert TestSpec.from_dict(first.to_dict()) == first


@pytest.mark.parametrize("mode", ["sync", "async", "auto"])
def test_every_commit_mode_is_accepted_under_subscribe(mode: str) -> None:
    assert spec_of("--consume-via", "subscribe", "--commit", mode).workload.commit == mode


def test_churn_is_accepted_alone_and_in_a_mix_under_subscribe() -> None:
    spec = spec_of("--consume-via", "subscribe", "--nemesis", "kill,consumer-churn")
    assert spec.nemesis.faults == ("kill", "consumer-churn")


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (["--commit", "async"], ["--commit async", "--consume-via subscribe"]),
        (["--nemesis", "consumer-churn"], ["--nemesis consumer-churn", "--consume-via subscribe"]),
        (["--nemesis", "partition,consumer-churn"], ["--nemesis consumer-churn", "--consume-via subscribe"]),
    ],
)
def test_a_combination_without_a_group_is_refused_naming_the_flags(
    arguments: list[str], fragments: list[str]
) -> None:
    with pytest.raises(UsageError) as refused:
        spec_of(*arguments)
    for fragment in fragments:
        assert fragment in str(refused.value)


def test_the_refusal_is_one_line_and_exit_254_from_the_command(tmp_path: Path) -> None:
    result = tidemark("run", "--nemesis", "consumer-churn", "--store", str(tmp_path), timeout=60)
    one_line_error(result, EXIT_BAD_ARGUMENTS, "--nemesis consumer-churn needs --consume-via subscribe")
    assert list(tmp_path.iterdir()) == []  # nothing started, no run directory
