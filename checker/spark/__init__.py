"""The Spark engine: the checks as grouped aggregations over one run or thousands.

Each check is one DataFrame aggregation on integer keys (no Python UDFs), run in an embedded
``local[*]`` session or on a cluster through ``spark-submit``.

Modules:

* ``engine`` -- :class:`SparkEngine`: the checks of ``checker.definitions`` with the DataFrame API;
  its ``implements`` is the union of the ``IMPLEMENTS`` each module below declares;
* ``values`` -- the value checks (lost-write, duplicate, ...) in one aggregation by value;
* ``order`` -- the order checks (poll, read and send order) with Spark windows;
* ``groups`` -- the consumer-group checks, and the takeover chains the order checks read;
* ``replicas`` -- the replica checks (replica-divergence, divergent-tail) in one aggregation;
* ``invariants`` -- the white-box checks on the brokers' event logs, with windows and joins;
* ``session`` -- one SparkSession per batch, configured for local or cluster runs;
* ``inputs`` -- reading a pass's Parquet files as plain files or as a bucketed table;
* ``classes`` -- the class-data-sharing archive that shortens the driver JVM's start;
* ``class_training`` -- the training check (a child process) that fills that archive;
* ``standalone`` -- a standalone master and workers from the PySpark package, on 127.0.0.1
  (cluster mode, tested and tried without a cluster).
* ``remote`` -- the checker as a Spark Connect client (``--remote sc://HOST:PORT``);
* ``connect_server`` -- a Spark Connect server from the PySpark package, for as long as a block
  runs (``tidemark spark serve``, and the one server of a Spark campaign or hunt).

May import: ``testbed.record``, the top-level ``checker`` modules and ``checker.pandas``.
Used by: ``checker.api`` (``--engine spark``, ``--remote``), ``harness.cli.spark_submit``,
``harness.cli.spark`` and ``harness.run.check_server`` (the Connect server).
"""
