"""The nemesis: the faults of a test -- planned from a seed, carried out on nodes, recorded as ops.

Faults are kill, pause, network partition and power loss, drawn at random from a spec or
scripted in a scenario.  Planning is pure (no node, clock or global randomness); acting goes
through the cluster's remotes; every fault and heal is written to the history.

Modules:

* ``fault_kinds`` -- the one registry of fault kinds: name, heal, parameters, abilities needed,
  op value, report colour (every other module reads it);
* ``spec`` -- :class:`NemesisSpec`: which faults, how often, on which nodes, from which seed;
* ``plan`` -- pure planning: target nodes, grudges (who drops whose traffic), the schedule;
* ``mechanism`` -- carries planned faults out on a cluster and records them as nemesis ops, set
  up by ``nemesis_config``; each kind's mechanism is in ``kind_mechanisms``, the per-node acts in
  ``broker_acts`` (and ``metadata_delay``);
* ``schedule_run`` -- follows the random schedule in time (each step at its moment, then its heal);
* ``consumer_churn`` -- ``consumer-churn``: the workload ability it needs (a structural protocol,
  so no import of ``workloads``) and its op;
* ``client_crash`` -- ``client-crash`` and ``consumer-crash``: the same for a SIGKILL of one of the
  workload's producer or consumer processes; ``client_crash_plan`` -- their declarations and the
  packages built on them;
* ``iptables`` -- a grudge or a heal as the iptables commands each node runs (our own chain);
* ``scenario`` -- scripted scenarios (faults, waits, markers, expected verdicts);
  the library is ``scenarios/*.toml``; ``steps`` parses their steps once into typed steps, and
  ``scenario_run`` runs them;
* ``packages`` (with ``package_context``, ``bug_packages``) -- fault packages planned as steps,
  run by ``package_run``; ``shrink`` -- a failing run's faults as steps, minimized;
* ``lazyfs`` -- the power-loss FUSE filesystem; a room of its own (rank 0) that runs on the nodes.

May import: ``testbed.record``, ``testbed.nodes``, ``testbed.cluster`` and ``nemesis.lazyfs`` --
not ``workloads`` nor ``checker`` (a fault knows nothing of the load it disturbs; what it needs
of a workload is an optional ability, declared here as a ``typing.Protocol``).  Used by:
``harness.run`` and ``harness.cli`` (``run``, ``scenario``).  This file imports nothing: in the
node image ``nemesis`` is a namespace package holding only ``lazyfs``.
"""
