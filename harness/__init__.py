"""Tidemark's harness: what runs a test and reports on it, in rooms by job.

The harness is the roof: it sits above every other top-level package (``testbed``, the floor;
``workloads``, ``checker``, ``nemesis``) and nothing below imports it.  Its rooms, each a package
with its own job, import only rooms of a lower rank (``tests/test_layout.py`` checks every import):

* ``harness.report`` (5) -- the run page, its plots and timeline, the campaign index, JUnit XML;
* ``harness.run`` (6) -- orchestration: test spec, runner, campaigns, progress line;
* ``harness.cli`` (7) -- the ``tidemark`` command line.

The floor is ``testbed`` (record 0, nodes 1, cluster 2); ``broker_impl`` and ``nemesis.lazyfs``
(0) ship in the node image; ``workloads`` and ``checker`` (3) and ``nemesis`` (4) stand between.
This package itself holds no code and imports nothing: import the room you need.
"""
