"""The ``whole-cluster-crash`` fault package: every broker down at once, then all restarted.

A durability bug -- a write acknowledged before it is on disk -- shows only when *every* replica
of a record loses it: a single power loss costs one replica its unsynced tail, which the others
still hold.  With ``flush.messages=1`` (the nightly hunt) Kafka's rules make such a crash safe,
so whatever it loses is a bug.  Three forms, drawn per package:

* **killed** (``1 -`` :data:`POWER_OFF_SHARE` of the draws): every broker SIGKILLed; the page
  caches survive, so this tests recovery from an unclean shutdown, not the disk;
* **powered off** (the other power-off draws): every broker killed and its unsynced writes dropped
  (the lazy filesystem), then -- the power *flapping*, as it does when a datacenter's supply comes
  back unsteadily -- up to :data:`MAX_OUTAGES` outages in a row, each once every broker answers
  again and writes have resumed.  Each outage puts the records appended since the last fsync at
  risk, and a recovery that truncates or rewrites without syncing is caught by the next outage;
* **failing disks, then powered off** (:data:`DISK_FAILURE_SHARE` of the power-off draws): every
  broker's fsyncs fail for a while first (a broker that obeys the error halts, one that ignores
  it -- fsyncgate -- acknowledges writes no disk holds), then the power goes and the disks are
  replaced.

Why these shares (bench/mutants/README.md): in the nightly hunt of 2026-12-01 the project's
``08-flush-off-by-one`` (every other message left unsynced) went unfound in 10 minutes with the
package drawn twice, both times in the failing-disk form -- the plain power-off was then one draw
in six, and one outage exposes that mutant only about one time in two (only the last record
appended before the outage is at risk).  The failing-disk form is the only one that reaches an
ignored fsync error (``11-fsync-error-ignored``, found in about a minute at any share measured).

Where the controller node runs a controller process the nemesis may kill (the bundled broker's),
:data:`CONTROLLER_SHARE` of the draws kill the controller *with* the brokers at every outage: the
cluster comes back from metadata read off the controller's disk, with no broker alive to tell it
otherwise, and its start is drawn before or after the brokers' (brokers that come back to no
controller serve on with what they last learnt; a controller that comes back to no brokers must
not elect from stale liveness).  Inside a power-off it is powered off too (``controller-power-loss``:
its metadata directory is on the lazy filesystem, so a version it published before fsyncing file
and directory is gone -- mutant ``20-controller-skips-the-directory-fsync``); inside a kill it is
killed (:mod:`nemesis.controller_kinds`).

Without the lazy filesystem every draw is a kill.  Planned like the other packages
(:mod:`nemesis.packages`, which registers it).
"""

from __future__ import annotations

import random

from nemesis.package_context import PackageContext, Step, sleep_step

POWER_OFF_SHARE = 0.75
"""The share of draws that power the brokers off (the rest kill them), where power loss exists."""
DISK_FAILURE_SHARE = 0.5
"""The share of the power-off draws whose disks fail their fsyncs first (0.75 until 2026-12-01,
lowered so that the plain power-off is drawn as often).  Mutant 11 was found in about a minute at
either share: what it lacked on 2026-11-30 was the package's weight in the nightly mix."""
MAX_OUTAGES = 3
"""The most outages of one plain power-off draw (drawn evenly from 1 up to it)."""
CONTROLLER_SHARE = 0.5
"""The share of draws, where the controller's process can be killed, that kill it with the brokers
(at each of the draw's outages): half, so that the brokers' own recovery is still drawn as often
against a controller that watched them go -- the form that found every durability mutant so far."""


def whole_cluster_crash(rng: random.Random, context: PackageContext) -> list[Step]:
    brokers = list(context.brokers)
    power_off = context.power_loss and rng.random() < POWER_OFF_SHARE
    disks_fail = power_off and rng.random() < DISK_FAILURE_SHARE
    controller = context.controller_crash and rng.random() < CONTROLLER_SHARE
    if disks_fail:
        return [
            {"fault": "disk-error", "nodes": brokers},
            sleep_step(rng, 1.0, 4.0, "writes meet failing fsyncs: a broker must halt, not acknowledge them"),
            *_outage(rng, brokers, "power-loss", heal_disks=True, controller=controller),
        ]
    if not power_off:
        return _outage(rng, brokers, "kill", heal_disks=False, controller=controller)
    steps: list[Step] = []
    for number in range(rng.randint(1, MAX_OUTAGES)):
        if number:
            steps.append(
                sleep_step(rng, 1.0, 4.0, "writes resume on the recovered cluster, then the power goes again")
            )
        steps += _outage(rng, brokers, "power-loss", heal_disks=False, controller=controller)
    return steps


def _outage(
    rng: random.Random, brokers: list[str], down: str, heal_disks: bool, controller: bool
) -> list[Step]:
    """Every broker down by ``down`` (kill or power-loss) -- and, with ``controller``, the controller
    after them, the same way --, a pause, (new disks,) every broker started, the controller before
    or after them (drawn), then a wait for every broker."""
    starts: list[Step] = [{"fault": "start", "nodes": brokers}]
    if controller:
        starts.insert(rng.randrange(2), {"fault": "controller-start"})
    controller_down = "controller-power-loss" if down == "power-loss" else "controller-kill"
    return [
        {"fault": down, "nodes": brokers},
        *([{"fault": controller_down}] if controller else []),
        sleep_step(rng, 0.5, 3.0, "the whole cluster is down"),
        *([{"fault": "disk-heal", "nodes": brokers}] if heal_disks else []),  # new disks: the rules cleared
        *starts,
        # Each broker, not the first alone: the next outage of a flapping supply must find the
        # cluster back (else it only repeats the last one), and the next package a whole cluster.
        *({"wait": "answers", "node": node, "timeout": 30} for node in brokers),
    ]
