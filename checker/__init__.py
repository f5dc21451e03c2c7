"""The checker: the anomalies a stored run shows, and the verdict they add up to.

It reads only stored runs (history and replica tables, ``testbed.record``), never a live cluster,
so it checks runs from any harness and thousands of runs at once.  Two engines answer the same
set-oriented questions -- pandas in process, Spark for big batches -- and one driver turns their
answers into ``results.json``.

Modules:

* ``api`` -- what the rest of Tidemark calls: find runs, open an engine, check runs;
* ``anomalies`` -- the registry: one entry per anomaly, as data (family, severity, what it
  implies, evidence, one-line doc), which the engines, expectations, docs and reports read;
* ``anomaly_order`` -- a run's reported anomalies causes first, their consequences under them;
* ``definitions`` -- the anomalies' long definitions (lost-write, duplicate, replica divergence,
  the order checks such as realtime-order and stale-read, ...) and the names derived from the registry;
* ``expectations`` -- which anomalies a run's own configuration permits;
* ``evidence`` -- locating and validating a run's files before any engine touches them;
* ``pack`` and ``packed_runs`` -- packing loaded runs into a packed store (``testbed.record.packed``),
  verified against the run directories, and the store's index read back as runs to check;
* ``invariant_evidence`` -- the event logs the white-box checks read: not applicable or incomplete;
* ``engine`` -- the contract between the driver and its engines;
* ``driver`` -- runs the checks through an engine, decides verdicts, writes ``results.json``;
* ``examples`` -- the examples of ``results.json``, built from the rows an engine names;
* ``invariant_examples`` -- the white-box checks' examples: the events (and records) a row names;
* ``liveness`` -- the liveness figures of ``results.json`` and the stalled anomaly: fault windows
  per run here, the per-partition figures by the engines (``Engine.liveness``);
* ``fetch`` -- the few stored rows that examples show, read straight from Parquet;
* ``summary`` -- the campaign summary table (Parquet and printed);
* ``synthetic_runs`` -- synthetic stored runs with planted anomalies, for benchmarks and warm-up;
* ``pandas`` and ``spark`` -- the two engines (subpackages).

May import: ``testbed.record`` only (and its own engines).  Used by: ``harness.run`` (a run or a
campaign is checked as it finishes) and ``harness.cli`` (``check``, ``analyze``, ``spark_submit``).
"""
