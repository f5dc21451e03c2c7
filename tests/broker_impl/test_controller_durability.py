"""The controller's metadata through a power loss of its disk: a real lazyfs mount on this host
(``nemesis.lazyfs``, whose drop is the nemesis' ``controller-power-loss``) under the controller's
``metadata.log.dir``.

A SIGKILL leaves the page cache, so ``test_controller``'s reload-after-each-change test cannot see
a controller that writes its new version but leaves the rename that installs it in the
filesystem's journal (no fsync of the directory: mutant 20).  A power loss can: it drops the
journal, and the controller comes back with the version before -- an election forgotten, its
leader epoch handed out again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path

from broker_impl.controller import Controller
from tests.nemesis import test_lazyfs
from tests.nemesis.test_lazyfs import LazyMount

from .test_controller import DirectController

mounter = test_lazyfs.mounter  # the real-mount fixture, shared


def test_every_version_the_controller_published_survives_a_power_loss_of_its_disk(
    mounter: Callable[[Path], LazyMount], tmp_path: Path
) -> None:
    backing = tmp_path / "backing"
    backing.mkdir()
    disk = mounter(backing)
    # The event log stays off the mount: its open file would not outlive the power loss.
    direct = DirectController(
        disk.mountpoint, {"min.insync.replicas": 2, "event.log.dir": str(tmp_path / "events")}
    )

    def changes() -> Iterator[str]:
        for isr in ([0, 1], [0], [0, 1, 2]):
            direct.alter_isr(isr)
            yield f"ISR {isr}"
        direct.expire(0)
        yield "broker 0 fenced: an election"
        direct.heartbeat(0)
        yield "broker 0 back"

    powered_off = 0
    for change in changes():
        published = copy.deepcopy(direct.controller.metadata)
        disk.control("drop")  # the power goes: what the controller had not fsynced is gone
        powered_off += 1
        reloaded = Controller(direct.settings)  # the next process, on what the disk kept
        assert reloaded.metadata["version"] == published["version"], (
            f"after {change}: v{published['version']} published, v{reloaded.metadata['version']} on disk"
        )
        assert reloaded.metadata == published, f"after {change}"
        direct.controller = reloaded
    assert powered_off == 5 and direct.controller.metadata["version"] >= 8
