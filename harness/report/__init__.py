"""Reports: what a person (or CI) reads after a run or a campaign.

Everything here starts from stored runs (``testbed.record.stored_run``, the history) and writes
self-contained files beside them; nothing here runs a test or a check.

Modules:

* ``run_page`` -- ``report.html``: one page per run, verdict and why, timeline, anomalies, node logs;
* ``evidence_section`` -- its Evidence section: incomplete evidence, counts, checks run and not applicable;
* ``html_page`` -- the page shell, CSS and small HTML helpers every page shares;
* ``plots`` -- the run page's figure: nemesis lanes, throughput and latency on one time axis;
* ``timeline`` -- a run's history as time series: throughput, latency, fault windows;
* ``index`` -- ``index.html``: every run of a campaign or store in one sortable table;
* ``junit`` -- JUnit XML, one test case per run, for CI.

May import: any room of a lower rank (``testbed.record`` is all it needs today).
Used by: ``harness.run`` (a campaign writes its reports) and ``harness.cli`` (``tidemark report``).
"""
