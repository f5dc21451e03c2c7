"""The run record: every op of a test, how it is stored, and how a stored run is read back.

This room owns the formats that everything else writes or reads, so that the workloads, the
nemesis, the runner, the checker and the reports can never disagree about them.  It sits at the
bottom of the harness.

Modules:

* ``ops`` -- :class:`Op`, the one operation model (invoke, then ``ok``/``fail``/``info``);
* ``recorder`` -- :class:`Recorder`: numbers and timestamps ops, appends them to the history;
* ``history`` -- the history format: ``history.jsonl`` during a run, ``history.parquet`` after
  (every public name of the format is importable from it);
* ``history_lines`` -- ``history.jsonl``: its writer, its reader, the format's version and error;
* ``parquet_files`` -- how every table of the record is written and its footer read;
* ``replicas`` -- each node's log dump turned into ``replicas.parquet`` and ``replica_partitions.parquet``;
* ``events`` -- the reader of the brokers' and the controller's event logs (the broker writes them);
* ``event_table`` -- a run's collected event logs turned into ``events.parquet``;
* ``finish`` -- finishing a run's record: its files turned into its tables (the runner calls it as
  a run ends; the checker only for a run directory not finished yet);
* ``store`` -- the store: one directory per run, ``latest`` links;
* ``packed`` -- the packed store for batch analysis: many runs' tables in a few Parquet files in
  Spark's bucketed layout, with an index (``runs.parquet``); its names and how a run's rows are read;
* ``rundir`` -- the run directory: every file name in it, the one reader of ``test.json`` and the
  owner of its schema version;
* ``stored_run`` -- one stored run read without failing: spec, results, verdict, key settings.

May import: nothing outside this room (rank 0).  Used by: ``workloads`` and ``nemesis`` (they
record ops), ``checker`` (the only harness room it reads), ``harness.report``, ``harness.run``
and ``harness.cli``.
"""
