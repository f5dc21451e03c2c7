"""Unclean-shutdown detection and what the controller does with it (KIP-966, KAFKA-15586).

Three layers:

* the broker's clean-shutdown marker, on a ``Broker`` built from a parsed configuration
  on a temporary ``log.dirs`` -- no socket, no asyncio task but a stubbed registration;
* the controller's handling of a re-registration after a clean or an unclean shutdown,
  driven directly (see :class:`tests.broker_impl.test_controller.DirectController`),
  the last-known-leader election once every replica came back uncleanly, and KIP-966's
  "last replica standing" sequence with ELR on and off;
* one end-to-end check with real processes: SIGTERM keeps a restarted follower in the
  ISR, SIGKILL takes it out until its leader adds it back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker_impl import broker as broker_module
from broker_impl.broker import CLEAN_SHUTDOWN_FILE, Broker
from broker_impl.config import BROKER_KEYS, parse_properties

from .client_support import produce_all, wait_for_full_isr
from .conftest import ClusterFactory
from .test_controller import DirectController, leader_isr_elr

TOPIC = "events"

# ---- the broker's clean-shutdown marker -------------------------------------------------------


def broker_settings(log_dir: Path) -> dict[str, Any]:
    text = (
        "node.id=1\n"
        "listeners=PLAINTEXT://127.0.0.1:9092\n"
        "controller.quorum.bootstrap.servers=127.0.0.1:9093\n"
        f"log.dirs={log_dir}\n"
    )
    return parse_properties(text, "test", BROKER_KEYS)


def data_directory_with_a_partition(tmp_path: Path) -> Path:
    log_dir = tmp_path / "data"
    (log_dir / f"{TOPIC}-0").mkdir(parents=True)
    return log_dir


class RecordingController:
    """Stands in for the broker's RpcClient: records calls, answers ``register``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        self.calls.append((method, params))
        return {"version": 0, "metadata": {"version": 0, "brokers": {}, "topics": {}}}


def registration_of(broker: Broker) -> dict[str, Any]:
    recorder = RecordingController()
    broker.controller = recorder  # type: ignore[assignment]
    asyncio.run(broker._register())
    [(method, params)] = recorder.calls
    assert method == "register"
    return params


def test_a_first_start_counts_as_clean(tmp_path: Path) -> None:
    broker = Broker(broker_settings(tmp_path / "data"))
    assert broker.partitions == {}
    assert broker.clean_shutdown
    assert registration_of(broker)["clean_shutdown"] is True


def test_a_clean_shutdown_writes_the_marker_and_the_next_start_takes_it(tmp_path: Path) -> None:
    log_dir = data_directory_with_a_partition(tmp_path)
    marker = log_dir / CLEAN_SHUTDOWN_FILE
    first = Broker(broker_settings(log_dir))
    assert not first.clean_shutdown  # partitions and no marker: as after a crash
    first.shutdown_cleanly()
    assert marker.is_file()
    assert (log_dir / "replication-offset-checkpoint").is_file()  # written before the marker

    second = Broker(broker_settings(log_dir))
    assert second.clean_shutdown
    assert not marker.exists()  # removed at start-up, before registering
    assert registration_of(second)["clean_shutdown"] is True

    third = Broker(broker_settings(log_dir))  # the second one crashed: no marker left
    assert not third.clean_shutdown
    assert registration_of(third)["clean_shutdown"] is False


def test_a_crash_leaves_no_marker(tmp_path: Path) -> None:
    log_dir = data_directory_with_a_partition(tmp_path)
    Broker(broker_settings(log_dir))  # "SIGKILL": shutdown_cleanly never runs
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert not Broker(broker_settings(log_dir)).clean_shutdown


def test_the_marker_is_written_and_removed_durably(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written with the house helper (temp file, fsync, rename, fsync the directory) as the
    last step of a clean shutdown; its removal at start-up is followed by a directory
    fsync, so that a power loss cannot bring it back."""
    log_dir = data_directory_with_a_partition(tmp_path)
    written: list[tuple[Path, str]] = []
    synced: list[Path] = []
    real_write_atomically = broker_module.write_atomically

    def recording_write_atomically(path: Path, text: str) -> None:
        written.append((path, text))
        real_write_atomically(path, text)

    monkeypatch.setattr(broker_module, "write_atomically", recording_write_atomically)
    monkeypatch.setattr(broker_module, "fsync_directory", lambda directory: synced.append(Path(directory)))

    broker = Broker(broker_settings(log_dir))
    assert synced == []  # nothing to remove
    broker.shutdown_cleanly()
    assert written == [(log_dir / CLEAN_SHUTDOWN_FILE, "")]
    assert (log_dir / CLEAN_SHUTDOWN_FILE).is_file()

    Broker(broker_settings(log_dir))
    assert synced == [log_dir]


def test_no_marker_when_the_shutdown_could_not_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = data_directory_with_a_partition(tmp_path)
    broker = Broker(broker_settings(log_dir))

    def failing_checkpoint() -> None:
        raise OSError("disk full")

    monkeypatch.setattr(broker, "checkpoint_high_watermarks", failing_checkpoint)
    with pytest.raises(OSError):
        broker.shutdown_cleanly()
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()


# ---- the controller: re-registration after a clean or an unclean shutdown -------------------------


def test_an_unclean_restart_of_a_follower_takes_it_out_of_the_isr(tmp_path: Path) -> None:
    direct = DirectController(tmp_path)
    before = dict(direct.state())
    direct.register(1, clean_shutdown=False)
    assert leader_isr_elr(direct) == (0, [0, 2], [])
    assert direct.state()["leader_epoch"] == before["leader_epoch"]  # the leader is untouched
    assert direct.state()["partition_epoch"] > before["partition_epoch"]
    assert direct.persisted() == direct.state()
    # Its leader adds it back by the normal ISR expansion once it has caught up.
    direct.alter_isr([0, 1, 2])
    assert leader_isr_elr(direct) == (0, [0, 1, 2], [])


def test_a_clean_restart_keeps_isr_membership(tmp_path: Path) -> None:
    direct = DirectController(tmp_path)
    direct.register(1, clean_shutdown=True)
    assert leader_isr_elr(direct) == (0, [0, 1, 2], [])
    epoch = direct.state()["leader_epoch"]
    direct.register(0, clean_shutdown=True)  # the leader: loses leadership, keeps ISR membership
    assert leader_isr_elr(direct) == (1, [0, 1, 2], [])
    assert direct.state()["leader_epoch"] == epoch + 1


def test_an_unclean_restart_of_the_leader_moves_leadership_within_the_isr(tmp_path: Path) -> None:
    direct = DirectController(tmp_path)
    epoch = direct.state()["leader_epoch"]
    direct.register(0, clean_shutdown=False)
    assert leader_isr_elr(direct) == (1, [1, 2], [])
    assert direct.state()["leader_epoch"] > epoch


def test_an_unclean_restart_takes_a_replica_out_of_the_elr(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, {"min.insync.replicas": 3})
    direct.alter_isr([0])
    assert leader_isr_elr(direct) == (0, [0], [1, 2])
    direct.register(2, clean_shutdown=False)
    assert leader_isr_elr(direct) == (0, [0], [1])


def test_an_unclean_restart_of_the_last_isr_member_empties_the_isr_and_elects_from_the_elr(
    tmp_path: Path,
) -> None:
    direct = DirectController(tmp_path, {"min.insync.replicas": 2})
    direct.alter_isr([0, 1])
    direct.alter_isr([0])
    direct.expire(1)
    direct.expire(0)  # the last ISR member stays in the ISR, fenced; the ELR member is away
    assert leader_isr_elr(direct) == (-1, [0], [1])
    direct.register(0, clean_shutdown=False)
    # Not re-elected, though alive and the last leader: it may have lost committed records
    # that the (fenced) ELR member 1 holds.
    assert leader_isr_elr(direct) == (-1, [], [1])
    direct.heartbeat(1)
    assert leader_isr_elr(direct) == (1, [1], [])


def test_without_elr_an_unclean_restart_keeps_isr_membership(tmp_path: Path) -> None:
    direct = DirectController(tmp_path, {"eligible.leader.replicas.enable": False})
    direct.register(1, clean_shutdown=False)
    assert leader_isr_elr(direct) == (0, [0, 1, 2], [])


def test_a_registration_without_the_field_counts_as_clean(tmp_path: Path) -> None:
    direct = DirectController(tmp_path)
    direct.call("register", {"node_id": 1, "incarnation": "old-broker", "host": "127.0.0.1", "port": 9092})
    assert leader_isr_elr(direct) == (0, [0, 1, 2], [])


def test_the_last_known_leader_is_elected_only_when_isr_and_elr_are_empty(tmp_path: Path) -> None:
    """Every replica lost power: fenced one by one, then back after an unclean shutdown
    each.  Each restart takes its replica out of ISR and ELR; once both are empty the last
    known leader is elected, as Kafka does -- not before, while the ELR member (which
    holds every committed record) may still return."""
    direct = DirectController(tmp_path, {"min.insync.replicas": 2})
    direct.expire(1)
    direct.expire(2)
    direct.expire(0)
    assert leader_isr_elr(direct) == (-1, [0], [2])
    direct.register(2, clean_shutdown=False)
    assert leader_isr_elr(direct) == (-1, [0], [])
    direct.register(1, clean_shutdown=False)
    assert leader_isr_elr(direct) == (-1, [0], [])
    epoch = direct.state()["leader_epoch"]
    direct.register(0, clean_shutdown=False)
    assert leader_isr_elr(direct) == (0, [0], [])
    assert direct.state()["leader_epoch"] > epoch


@pytest.mark.parametrize("elr", [True, False])
def test_last_replica_standing(tmp_path: Path, elr: bool) -> None:
    """KIP-966's sequence: ISR {0,1,2}, min ISR 2, led by 2.  0 leaves the ISR, then 1;
    2, the last ISR member, restarts after an unclean shutdown (it may have lost records
    the HW covered).  With ELR, 1 -- which holds everything committed, since the HW stood
    still once the ISR was below min ISR -- is elected.  Without it, 2 is re-elected and
    the others will truncate to it: the historical loss."""
    direct = DirectController(
        tmp_path, {"min.insync.replicas": 2, "eligible.leader.replicas.enable": elr}, partitions=3
    )
    assert (direct.state(2)["replicas"], direct.state(2)["leader"]) == ([2, 0, 1], 2)
    direct.alter_isr([2, 1], partition=2)
    direct.alter_isr([2], partition=2)
    assert leader_isr_elr(direct, 2) == (2, [2], [1] if elr else [])
    epoch = direct.state(2)["leader_epoch"]

    direct.register(2, clean_shutdown=False)

    if elr:
        assert leader_isr_elr(direct, 2) == (1, [1], [])
    else:
        assert leader_isr_elr(direct, 2) == (2, [2], [])
    assert direct.state(2)["leader_epoch"] > epoch
    assert direct.persisted(2) == direct.state(2)


# ---- end to end ---------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_sigterm_restart_keeps_the_isr_and_sigkill_restart_leaves_it_until_caught_up(
    start_cluster: ClusterFactory,
) -> None:
    # A long session: neither restart is fenced first, so only the shutdown kind matters.
    cluster = start_cluster(
        2,
        {
            "broker.session.timeout.ms": 30000,
            "replica.lag.time.max.ms": 30000,
            # the rule pinned here is the registration's; a controlled shutdown would take the
            # follower out of the ISR before it goes (test_controlled_shutdown.py)
            "controlled.shutdown.enable": "false",
        },
    )
    cluster.create_topic(TOPIC, 1, 2)
    state = cluster.partition_state(TOPIC, 0)
    leader, follower = str(state["leader"]), str(next(r for r in state["replicas"] if r != state["leader"]))
    marker = Path(cluster.state["brokers"][follower]["data"]) / CLEAN_SHUTDOWN_FILE
    assert produce_all(cluster.bootstrap(), TOPIC, [b"before"]) == [0]

    def restart(node: str) -> None:
        before = cluster.describe()["brokers"][node]["incarnation"]
        cluster.start(node)
        cluster.wait_for(
            lambda: cluster.describe()["brokers"][node]["incarnation"] != before, 20, f"{node} to re-register"
        )

    cluster.stop(follower)
    assert marker.is_file()
    restart(follower)
    assert not marker.exists()
    assert sorted(cluster.partition_state(TOPIC, 0)["isr"]) == [1, 2]

    cluster.kill(follower)
    assert not marker.exists()
    cluster.pause(leader)  # so that it cannot add the follower back before we look
    try:
        restart(follower)
        assert cluster.partition_state(TOPIC, 0)["isr"] == [int(leader)]
    finally:
        cluster.resume(leader)
    wait_for_full_isr(cluster, TOPIC)
    assert produce_all(cluster.bootstrap(), TOPIC, [b"after"]) == [1]
