"""The pandas engine: the checks in process, without a JVM, for small runs and as the oracle.

It is written for clarity first, since the Spark engine is tested against it: each check is one
``groupby`` on integer keys, the same aggregation Spark performs.

Modules:

* ``engine`` -- :class:`PandasEngine`: the checks of ``checker.definitions`` on pandas frames
  (the value, offset and replica checks itself); its ``implements`` is the union of the
  ``IMPLEMENTS`` this module and each one below declare;
* ``order`` -- the order checks (poll, read and send order) on pandas frames;
* ``groups`` -- the consumer-group checks, and the takeover chains the order checks read;
* ``invariants`` -- the white-box checks on the brokers' event logs (the oracle of Spark's);
* ``liveness`` -- the liveness figures that stalled is decided from;
* ``candidates`` -- narrowing a pass's rows to the groups that could hold an anomaly, with numpy.

May import: ``testbed.record`` and the top-level ``checker`` modules -- never ``checker.spark``
(this engine must run where there is no JVM).  Used by: ``checker.api`` (``--engine pandas``)
and ``checker.spark`` (it reuses the value aggregation and the white-box checks' column lists).
"""
