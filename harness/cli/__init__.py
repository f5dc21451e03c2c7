"""The ``tidemark`` command line: the router and one module per subcommand.

The entry point is ``harness.cli.main:main``; ``main`` only routes and imports each subcommand
module lazily, so ``tidemark --help`` starts no JVM and loads no Docker SDK.  This file must stay
import-free for the same reason.

Modules:

* ``main`` -- the router: one subparser per subcommand, errors turned into exit codes;
* ``errors`` -- :class:`UsageError`, the one error a subcommand raises for its user;
* ``demo``, ``run``, ``rerun``, ``campaign`` -- run the demo, one test, a stored run again, a campaign;
* ``check``, ``analyze`` -- check stored runs, re-check one run; ``check_progress`` -- the
  progress bars of a batch check;
* ``report``, ``history`` -- re-render reports, history file tools;
* ``image``, ``cluster``, ``scenario`` -- the node image, hand-run clusters, the scenario library;
* ``spark_submit`` -- the Spark checker as a ``spark-submit`` script.

May import: every room.  Used by: nobody -- library code never imports a CLI module; put what
two commands share in the room that owns the job.
"""
