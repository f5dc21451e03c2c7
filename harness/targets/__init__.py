"""Systems under test as objects: one :class:`~harness.targets.base.Target` per system.

A target owns everything that differs between the systems a run can test -- the bundled broker
in Docker, tansu and nisshi brokers on one PostgreSQL node (nisshi also on its embedded SQLite),
an external cluster given by ``--bootstrap`` --
so that the runner, the spec and the command line never ask *which* system they are dealing
with: the checks of a spec (refused before anything starts, identically for ``run``, ``hunt``,
``rerun`` and campaigns), the effective settings, how its cluster starts and stops, its nodes
and their roles, the abilities its cluster offers and the replica evidence a run therefore has.

Modules:

* ``base`` -- the :class:`~harness.targets.base.Target` protocol, what a target reads of a spec
  (:class:`~harness.targets.base.TargetSpec`), :class:`~harness.targets.base.SpecRefused` and the
  helpers every target shares;
* ``bundled``, ``tansu``, ``nisshi``, ``external`` -- the four targets;
* ``registry`` -- every target, how a spec picks its target, and how to add one.

May import: every room of a lower rank (``harness.report``, ``nemesis``, ``workloads``,
``testbed.*``); never ``harness.run`` (whose spec reads the targets) nor ``harness.cli``.
"""
