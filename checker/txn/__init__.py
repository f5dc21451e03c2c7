"""The transactional family (issue 33): checks of the ``txn`` op's history, one implementation for both engines.

Written once, in Python over one run's pandas rows (:mod:`checker.txn.run`): the pandas engine
calls it per run, the Spark engine per ``run_id`` group with ``applyInPandas`` (DataFrame API
only, so Spark Connect serves it too).  What each module does:

* :mod:`checker.txn.tables` -- one run's transactions, sends, reads and drained values;
* :mod:`checker.txn.checks` -- precommitted-read, int-send-skip, int-nonmonotonic-send,
  torn-transaction;
* :mod:`checker.txn.offsets` -- consumed-twice and consumed-skipped: exactly-once processing of
  consume-transform-produce transactions, from the offsets they sent;
* :mod:`checker.txn.cycles` -- the dependency graph (ww, wr, process, realtime edges) and the
  G0 / G1c families on it, by :mod:`checker.txn.graph` (strongly connected components, then a
  short cycle in each);
* :mod:`checker.txn.examples` -- the examples, as JSON, that ``results.json`` shows;
* :mod:`checker.txn.run` -- the per-run entry point and its answer's columns;
* :mod:`checker.txn.registry` -- the family's registry entries, as data;
* :mod:`checker.txn.white_box` -- hanging-transaction, on the brokers' event logs (a white-box
  check of the invariant family, run per run the same way), with unmarked-transaction
  (:mod:`checker.txn.markers`) and lso-past-open-transaction (:mod:`checker.txn.lso`).

The definitions are prose in :mod:`checker.definitions` (the exactly-once pair's in
:mod:`checker.txn.offsets`); the registry entries in
:mod:`checker.anomalies` (family ``transaction``).
"""
