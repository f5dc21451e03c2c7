"""Tidemark's floor: what every other part stands on -- the run record, the nodes and the clusters.

Three rooms, each a package with its own job; imports point only to rooms of a lower rank
(``tests/test_layout.py`` checks every import, and checks that no top-level package imports
one above it):

* ``testbed.record`` (rank 0) -- the run record: ops, recorder, history, replica tables, store,
  run directory file names, reading stored runs back;
* ``testbed.nodes`` (1) -- remotes: the ``Remote`` protocol, over Docker exec or SSH;
* ``testbed.cluster`` (2) -- clusters under test: the bundled broker on nodes, external clusters,
  Docker clusters, the node image, Kafka admin questions.

Why a top-level package of its own: the workloads, the nemesis and the checker all write or read
the record, and the first two act on clusters; the harness (runs, reports, the command line)
orchestrates all of them.  Kept inside ``harness`` the floor made ``harness`` sit both below and
above its peers.  This package itself holds no code and imports nothing: import the room you need.
"""
