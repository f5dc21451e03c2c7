"""Running a campaign: its runs one after another (resumable), then one check over all of them.

:func:`run_campaign` runs what :mod:`harness.run.campaign` planned and is not stored yet,
each run's output going to ``logs/<key>.log``; :func:`check_campaign` checks every finished
run in one engine session, prints the summary table, and writes each run's report, the
campaign's index and JUnit file.  A run *passes* when it is valid -- or, for a scenario run,
when its verdict is the one the scenario expects under that run's settings (a
high-watermark run of ``kip101-loss`` must lose writes).  The campaign's hunts
(``[[hunt]]``) run after the matrix, each into ``hunts/<key>/`` (a finished hunt is not run
again); a hunt passes when it finds an anomaly exactly when it ``expect_anomaly``.  The return
value is the exit code: 0 every run and hunt passed, 1 any failed, 2 any unknown (not
checked, or incomplete evidence).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from checker.api import check_runs, open_engine
from checker.definitions import ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT
from checker.evidence import InputError, load_run
from checker.summary import SUMMARY_FILE, print_summary, summary_rows, write_summary
from harness.report.index import render_index
from harness.report.junit import JUNIT_FILE, write_junit
from harness.report.run_page import render_run_report
from harness.run.campaign import (
    Campaign,
    PlannedHunt,
    campaign_directory,
    check_campaign_ready,
    finished_run_directories,
    pending_runs,
)
from harness.run.check_server import checking_remote
from harness.run.exit_codes import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from harness.run.hunt import HUNT_FILE, hunt
from harness.run.runner import run_test
from testbed.record.rundir import RunDirectoryError


def run_campaign(
    campaign: Campaign,
    store: Path,
    *,
    engine: str,
    master: str | None = None,
    console: Console | None = None,
    remote: str | None = None,
    spark_server: bool = True,
) -> int:
    """Run what is not stored yet, then check everything; the exit code.  Raises
    :class:`~harness.run.campaign.CampaignError` first when this machine cannot start a target the
    campaign still has to run.

    With the Spark engine and hunts, the check and every hunt run are checked through one Spark
    Connect server: ``remote``'s, or one started after the matrix runs for the rest of the campaign
    (over ``master``) unless ``spark_server`` is False (:mod:`harness.run.check_server`); a
    campaign without hunts checks once, in a session of its own (or through ``remote``)."""
    # Logs and CI consoles are no terminals: give the summary table room anyway.
    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    directory = campaign_directory(store, campaign)
    check_campaign_ready(campaign, directory)  # CampaignError before anything is written or run
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    (directory / "campaign.toml").write_text(campaign.source.read_text(encoding="utf-8"), encoding="utf-8")
    todo = list(pending_runs(directory, campaign))
    done = len(campaign.runs) - len(todo)
    console.print(
        f"campaign [bold]{campaign.name}[/]: {len(campaign.runs)} runs, {done} already stored, "
        f"{len(todo)} to run -> {directory}"
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("runs", total=len(campaign.runs), completed=done)
        for planned, run_dir in todo:
            progress.update(task, description=f"{planned.key[:60]}")
            started = time.monotonic()
            with open(directory / "logs" / f"{planned.key}.log", "w", encoding="utf-8") as log:
                outcome = run_test(planned.spec, store, engine=None, out=log, run_dir=run_dir)
            note = f" ({'; '.join(outcome.problems)})" if outcome.problems else ""
            progress.console.print(f"  ran {planned.key} in {time.monotonic() - started:.0f} s{note}")
            progress.advance(task)
    start = spark_server and bool(campaign.hunts)  # one pass alone: a server buys nothing
    with checking_remote(engine, remote, start=start, say=console.print, master=master) as through:
        code = (
            check_campaign(
                campaign,
                directory,
                engine=engine,
                master=None if through else master,
                console=console,
                remote=through,
            )
            if campaign.runs
            else EXIT_VALID
        )
        hunt_statuses = [
            run_campaign_hunt(planned, directory, console, remote=through) for planned in campaign.hunts
        ]
    if "fail" in hunt_statuses:
        return EXIT_INVALID
    return code


def run_campaign_hunt(
    planned: PlannedHunt, directory: Path, console: Console, *, remote: str | None = None
) -> str:
    """Run one ``[[hunt]]`` (unless a finished record exists); its status, pass or fail.  Its runs
    are checked by Spark through the Spark Connect server at ``remote`` when given, else by pandas
    (no JVM per run)."""
    hunt_store = directory / "hunts" / planned.key
    finished = [
        record
        for path in sorted(hunt_store.glob(f"*/hunt-*/{HUNT_FILE}"))
        if (record := json.loads(path.read_text(encoding="utf-8"))).get("finished")
    ]
    if finished:
        record = finished[-1]
        console.print(f"hunt {planned.key}: already done", markup=False)
    else:
        console.print(
            f"hunt {planned.key}: {planned.budget_seconds / 60:g} min of {', '.join(planned.spec.nemesis.faults)}"
        )
        with open(directory / "logs" / f"hunt-{planned.key}.log", "w", encoding="utf-8") as log:
            result = hunt(
                planned.spec,
                hunt_store,
                planned.budget_seconds,
                keep_going=planned.keep_going,
                unexpected_only=planned.unexpected_only,
                out=log,
                engine="spark" if remote else "pandas",
                remote=remote,
            )
        record = result.to_dict()
    found = record["first_invalid"] is not None
    gave_up = record.get("gave_up")
    status = "pass" if not gave_up and found == planned.expect_anomaly else "fail"
    when = (
        f"first anomaly after {record['seconds_to_first_anomaly'] / 60:.1f} min: {record['first_invalid']}"
        if found
        else f"gave up after {record['elapsed_seconds'] / 60:.1f} min: {gave_up}"
        if gave_up
        else f"no anomaly in {record['elapsed_seconds'] / 60:.1f} min"
    )
    console.print(
        f"  {status:7} hunt {planned.key}: {when} ({len(record['runs'])} runs, "
        f"{record['faults_injected']} faults; anomaly {'expected' if planned.expect_anomaly else 'not expected'})",
        markup=False,
    )
    return status


def check_campaign(
    campaign: Campaign,
    directory: Path,
    *,
    engine: str,
    master: str | None,
    console: Console,
    remote: str | None = None,
) -> int:
    """One checker pass over every finished run (through the Spark Connect server at ``remote``
    when given), then summary, reports, index and JUnit."""
    run_dirs = finished_run_directories(directory, campaign)
    loaded, unchecked = [], []
    for run_dir in run_dirs:
        try:
            loaded.append(load_run(run_dir))
        except InputError as error:
            unchecked.append((run_dir, str(error)))
    where = f" on {master}" if master else f" through {remote}" if remote else ""
    console.print(f"checking {len(loaded)} runs with {engine}{where}")
    results: list[dict[str, Any]] = []
    if loaded:
        with open_engine(engine, master, remote=remote) as checker_engine:
            results = check_runs(loaded, checker_engine, ALL_CHECKS, DEFAULT_EXAMPLE_LIMIT)
        rows = summary_rows(results, [str(run.spec.get("name", "")) for run in loaded])
        write_summary(rows, directory / SUMMARY_FILE)
        print_summary(rows, results, console)
    statuses = _statuses(campaign, directory, results)
    for run_dir, problem in unchecked:
        statuses[run_dir] = ("unknown", [f"not checked: {problem}"])
    _render(directory, run_dirs, _scenario_problems(campaign, statuses), console)
    for run_dir, (status, problems) in sorted(statuses.items()):
        console.print(
            f"  {status:7} {run_dir.name}" + (f"  [{'; '.join(problems)}]" if problems else ""), markup=False
        )
        console.print(f"          report: {run_dir / 'report.html'}", markup=False)
    console.print(f"index: {directory / 'index.html'}")
    values = [status for status, _ in statuses.values()]
    if "fail" in values:
        return EXIT_INVALID
    return EXIT_UNKNOWN if "unknown" in values or not values else EXIT_VALID


def _scenario_problems(
    campaign: Campaign, statuses: dict[Path, tuple[str, list[str]]]
) -> dict[Path, list[str]]:
    scenario_keys = {run.key for run in campaign.runs if run.spec.scenario}
    return {
        run_dir: problems
        for run_dir, (status, problems) in statuses.items()
        if run_dir.name in scenario_keys and status != "unknown"
    }


def _statuses(
    campaign: Campaign, directory: Path, results: list[dict[str, Any]]
) -> dict[Path, tuple[str, list[str]]]:
    by_key = {run.key: run for run in campaign.runs}
    statuses: dict[Path, tuple[str, list[str]]] = {}
    for result in results:
        run_dir = Path(result["run"])
        planned = by_key.get(run_dir.name)
        problems = planned.spec.scenario_problems(result) if planned is not None else None
        if problems is not None:
            statuses[run_dir] = ("pass" if not problems else "fail", problems)
        elif result["valid"] is True:
            statuses[run_dir] = ("pass", [])
        elif result["valid"] is False:
            statuses[run_dir] = ("fail", sorted(result["anomalies"]))
        else:
            statuses[run_dir] = ("unknown", list(result.get("incomplete", [])))
    return statuses


def _render(
    directory: Path, run_dirs: list[Path], scenario_problems: dict[Path, list[str]], console: Console
) -> None:
    """Reports, index and JUnit; scenario runs pass in JUnit when they came out as expected."""
    for run_dir in run_dirs:
        try:
            render_run_report(run_dir)
        except (RunDirectoryError, OSError) as error:
            console.print(f"  report of {run_dir.name} not written: {error}", markup=False)
    render_index(directory)
    write_junit(run_dirs, directory / JUNIT_FILE, expectation_problems=scenario_problems)
    console.print(f"junit: {directory / JUNIT_FILE}")
