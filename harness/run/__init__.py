"""Orchestration: what a test is, and running one test or a whole campaign end to end.

This room calls everything below it -- clusters, workloads, the nemesis, the checker, reports --
in the order a run needs, and keeps the guarantees of a run (the run directory exists first,
every path out tears the cluster down).

Modules:

* ``spec`` -- :class:`TestSpec`: a test as typed, serialisable data (it is ``test.json``);
* ``runner`` -- one test, end to end: set up, main phase, heal, recover, drain, dump, check;
* ``campaign`` -- a campaign file: the matrix of tests it plans, resumable run keys;
* ``campaign_run`` -- running a campaign's runs, then one check and the reports over all of them;
* ``progress`` -- the live progress line of a run;
* ``exit_codes`` -- the process exit codes and the verdict each stands for (library code returns them);
* ``campaigns/*.toml`` -- the bundled campaigns (``demo``, ``nightly``).

May import: every room of a lower rank (``harness.report``, ``nemesis``, ``checker``,
``workloads``, ``testbed.cluster``, ``testbed.nodes``, ``testbed.record``), never ``harness.cli``.
Used by: ``harness.cli`` (``run``, ``campaign``, ``demo``), ``bench/`` and the integration tests.
"""
