"""Tidemark's harness: what sets up a test, runs it, records it and reports on it, in rooms by job.

The harness is not one room but six; each is a package with its own job, and imports point only
to rooms of a lower rank (``tests/test_layout.py`` checks every import):

* ``harness.record`` (rank 0) -- the run record: ops, recorder, history, replica tables, store,
  run directory file names, reading stored runs back;
* ``harness.nodes`` (1) -- remotes: the ``Remote`` protocol, over Docker exec or SSH;
* ``harness.cluster`` (2) -- clusters under test: the bundled broker on nodes, external clusters,
  Docker clusters, the node image, Kafka admin questions;
* ``harness.report`` (5) -- the run page, its plots and timeline, the campaign index, JUnit XML;
* ``harness.run`` (6) -- orchestration: test spec, runner, campaigns, progress line;
* ``harness.cli`` (7) -- the ``tidemark`` command line.

The other rooms sit beside it: ``broker_impl`` and ``nemesis.lazyfs`` (0, shipped in the node
image), ``workloads`` and ``checker`` (3), ``nemesis`` (4).  This package itself holds no code
and imports nothing: import the room you need.
"""
