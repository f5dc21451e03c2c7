"""Campaigns: a matrix of tests from one TOML file, run one after another, checked together.

File format (``tidemark campaign FILE``)::

    name = "nightly"
    time_limit = 30          # seconds of main phase per run
    repeats = 2
    nodes = 3
    target = "tansu"         # what every run starts (harness.run.spec.TARGETS); default: a
                             # scenario's own target, else the bundled broker

    [matrix]                 # every combination of these axes is a run (x repeats)
    "truncation.mode" = ["high-watermark", "leader-epoch"]   # any setting of the target
    acks = ["1", "all"]                                       # workload acks
    nemesis = ["kill,partition", "pause", "power-loss"]       # nemesis fault mixes
    scenario = ["kip101-loss"]                                # scenarios (then nemesis is unused)
    target = ["bundled", "tansu"]                             # targets (instead of the top-level one)

    [settings]               # fixed broker/controller settings for every run
    [workload]               # fixed queue-workload settings (partitions, rate, client, ...)
    [nemesis]                # fixed nemesis settings (interval_seconds, targets, ...)

    [[hunt]]                 # a budget of random runs (``tidemark hunt``), after the matrix
    name = "hw-truncation"
    budget = "10m"
    nemesis = "follower-restart-leader-crash,kill"   # faults and fault packages
    settings = { "truncation.mode" = "high-watermark" }   # on top of [settings]
    target = "bundled"       # instead of the top-level target
    nodes = 1                # instead of the top-level nodes (a target that runs one broker)
    expect_anomaly = true    # a known bug: finding nothing is the failure (default false)
    keep_going = false
    unexpected_only = false  # true: only an anomaly no rule permits ends the hunt

Instead of one ``[matrix]`` a file may give several ``[[matrix]]`` tables: each is expanded
as above and the runs are their union (so kill/pause/partition mixes and a scenario, which
ignores the nemesis axis, sit in one campaign without a product of both); two tables that plan
the same run key are an error.  Every run and hunt is checked by its target before anything
runs, as ``tidemark run`` checks it (:func:`harness.targets.registry.check_spec`: its settings --
the bundled broker's keys, or ``postgresql.*`` for tansu --, the faults and fault packages it can
take); :func:`check_campaign_ready` asks whether this machine can start every target the campaign
still has to run (tansu's binary built).

Runs are stored in ``<store>/<campaign name>/runs/<run key>`` where the key spells the
axes' values, so a second invocation finds them: a run whose ``run.json`` says it
finished is skipped (resume after Ctrl-C); a run that was interrupted is moved aside to
``<key>.interrupted-<n>`` and run again.  After the runs, one Spark job checks every
run of the campaign, prints the summary table, writes ``junit.xml``, every run's
``report.html`` and the campaign's ``index.html``.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.run.hunt import parse_duration
from harness.run.scenario_check import load_checked_scenario
from harness.run.spec import DEFAULT_TARGET, TARGETS, SpecError, TestSpec, scenario_target
from harness.targets.base import SpecRefused, docker_unreachable
from harness.targets.registry import check_ready, check_spec
from nemesis.scenario import ScenarioError, read_toml
from nemesis.spec import NEMESIS_CHOICES, NemesisSpec, NemesisSpecError, parse_weighted_list
from testbed.cluster.bundled import SettingsError
from testbed.record.rundir import RunDir
from workloads.queue import QueueSpec

WORKLOAD_AXES = {"acks", "client", "partitions", "replication_factor", "rate", "producers", "consumers"}
SPECIAL_AXES = {"nemesis", "scenario", "target"}
TOP_LEVEL = {
    "name",
    "time_limit",
    "repeats",
    "nodes",
    "seed",
    "matrix",
    "settings",
    "workload",
    "nemesis",
    "engine",
    "hunt",
    "target",
}
HUNT_KEYS = {
    "name",
    "budget",
    "nemesis",
    "settings",
    "workload",
    "expect_anomaly",
    "keep_going",
    "unexpected_only",
    "time_limit",
    "target",
    "nodes",
}


class CampaignError(ValueError):
    """A campaign file that cannot be run; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    key: str
    spec: TestSpec
    axes: dict[str, str]


@dataclasses.dataclass(frozen=True)
class PlannedHunt:
    key: str
    spec: TestSpec
    budget_seconds: float
    expect_anomaly: bool
    keep_going: bool
    unexpected_only: bool = False
    """Only a run with an anomaly no rule permits ends the hunt (:func:`harness.run.hunt.hunt`)."""


@dataclasses.dataclass(frozen=True)
class Campaign:
    name: str
    source: Path
    runs: tuple[PlannedRun, ...]
    engine: str
    hunts: tuple[PlannedHunt, ...] = ()


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _key(axes: dict[str, str], repeat: int) -> str:
    parts = [f"{name}={value}" for name, value in axes.items()]
    raw = "__".join([*parts, f"r{repeat}"])
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "-", raw)


def load_campaign(path: Path) -> Campaign:
    _, data = read_toml(path, CampaignError)
    return plan_campaign(data, path)


def plan_campaign(data: dict[str, Any], source: Path) -> Campaign:
    """Expand the matrix into runs (pure: nothing starts)."""
    unknown = sorted(set(data) - TOP_LEVEL)
    if unknown:
        raise CampaignError(f"{source}: unknown keys {', '.join(unknown)}")
    name = str(data.get("name") or source.stem)
    repeats = data.get("repeats", 1)
    if not isinstance(repeats, int) or repeats < 1:
        raise CampaignError(f"{source}: repeats must be a positive integer")
    if "target" in data:
        _target(data["target"], f"{source}: target")
    base_settings = {str(k): _text(v) for k, v in data.get("settings", {}).items()}
    base_workload = dict(data.get("workload", {}))
    base_nemesis = dict(data.get("nemesis", {}))
    runs: list[PlannedRun] = []
    for chosen in _combinations(data, source):
        for repeat in range(repeats):
            key = _key(chosen, repeat)
            if any(run.key == key for run in runs):
                raise CampaignError(f"{source}: run {key} is planned twice (by two [[matrix]] tables)")
            try:
                spec = _spec_for(name, data, chosen, base_settings, base_workload, base_nemesis, repeat)
            except (SpecError, NemesisSpecError, SettingsError, ScenarioError, ValueError) as error:
                raise CampaignError(f"{source}: run {key}: {error}") from None
            runs.append(PlannedRun(key, spec, chosen))
    engine = str(data.get("engine", "spark"))
    if engine not in ("spark", "pandas"):
        raise CampaignError(f"{source}: engine must be spark or pandas")
    hunts = tuple(
        _plan_hunt(name, data, entry, number, source, base_settings, base_workload, base_nemesis)
        for number, entry in enumerate(_hunt_tables(data, source), start=1)
    )
    return Campaign(name, source, tuple(runs), engine, hunts)


def _combinations(data: dict[str, Any], source: Path) -> Iterator[dict[str, str]]:
    """Every run's axis values (axis -> value), table by table of ``[matrix]``/``[[matrix]]``.

    A campaign names what it runs: a file with neither a matrix nor a ``[[hunt]]`` (an empty
    file, a typo'd table name) is refused rather than taken for one default 30 s run.
    """
    if "matrix" not in data and "hunt" not in data:
        raise CampaignError(f"{source}: a campaign names what it runs: give a [matrix] or a [[hunt]]")
    matrix = data.get("matrix", {})
    tables = matrix if isinstance(matrix, list) else [matrix]
    if not tables or not all(isinstance(table, dict) for table in tables):
        raise CampaignError(f"{source}: [matrix] must be a table of lists (or [[matrix]] tables of them)")
    if tables == [{}] and "hunt" in data:
        return
    for number, table in enumerate(tables, start=1):
        where = "matrix" if len(tables) == 1 else f"matrix[{number}]"
        axes: list[tuple[str, list[str]]] = []
        for axis, values in table.items():
            if not isinstance(values, list) or not values:
                raise CampaignError(f"{source}: {where}.{axis} must be a non-empty list")
            if axis == "target":
                for value in values:
                    _target(value, f"{source}: {where}.target")
            axes.append((axis, [_text(v) for v in values]))
        if not axes:
            raise CampaignError(f"{source}: {where}: no axes")
        names = [axis for axis, _ in axes]
        for combination in itertools.product(*[values for _, values in axes]):
            yield dict(zip(names, combination, strict=True))


def _target(value: Any, where: str) -> str:
    """``value`` as a target name; CampaignError naming ``where`` (file and key) otherwise."""
    if value not in TARGETS:
        raise CampaignError(f"{where}: expected one of {', '.join(TARGETS)}, not {value!r}")
    return str(value)


def _hunt_tables(data: dict[str, Any], source: Path) -> list[dict[str, Any]]:
    tables = data.get("hunt", [])
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise CampaignError(f"{source}: hunts are [[hunt]] tables")
    return tables


def _plan_hunt(
    campaign_name: str,
    data: dict[str, Any],
    entry: dict[str, Any],
    number: int,
    source: Path,
    base_settings: dict[str, str],
    base_workload: dict[str, Any],
    base_nemesis: dict[str, Any],
) -> PlannedHunt:
    key = re.sub(r"[^A-Za-z0-9_.=,-]+", "-", str(entry.get("name") or f"hunt{number}"))
    where = f"{source}: hunt {key}"
    unknown = sorted(set(entry) - HUNT_KEYS)
    if unknown:
        raise CampaignError(f"{where}: unknown keys {', '.join(unknown)}")
    target = _target(entry["target"], f"{where}: target") if "target" in entry else None
    try:
        budget = parse_duration(entry.get("budget", ""))
        settings = {**base_settings, **{str(k): _text(v) for k, v in entry.get("settings", {}).items()}}
        nemesis = dict(base_nemesis)
        faults, weights = parse_weighted_list(str(entry.get("nemesis", "")), NEMESIS_CHOICES, "nemesis")
        nemesis["faults"], nemesis["weights"] = list(faults), dict(weights)
        if not nemesis["faults"]:
            raise ValueError("nemesis: a hunt needs faults to draw")
        spec = TestSpec(
            name=f"{campaign_name}-{key}",
            node_count=int(entry.get("nodes", data.get("nodes", 3))),
            time_limit=float(entry.get("time_limit", data.get("time_limit", 30))),
            settings=settings,
            workload=QueueSpec.from_dict({**base_workload, **dict(entry.get("workload", {}))}),
            nemesis=NemesisSpec.from_dict(nemesis, where="hunt nemesis"),
            target=target or data.get("target", DEFAULT_TARGET),
        )
        spec.effective_settings()  # a key the target does not have fails here, before anything runs
        check_spec(spec)  # what its target refuses, as `tidemark hunt` refuses it
    except (SpecError, NemesisSpecError, SettingsError, ValueError) as error:
        raise CampaignError(f"{where}: {error}") from None
    return PlannedHunt(
        key,
        spec,
        budget,
        bool(entry.get("expect_anomaly", False)),
        bool(entry.get("keep_going", False)),
        bool(entry.get("unexpected_only", False)),
    )


def _spec_for(
    name: str,
    data: dict[str, Any],
    chosen: dict[str, str],
    base_settings: dict[str, str],
    base_workload: dict[str, Any],
    base_nemesis: dict[str, Any],
    repeat: int,
) -> TestSpec:
    settings = dict(base_settings)
    workload = dict(base_workload)
    nemesis = dict(base_nemesis)
    scenario = None
    target: str | None = data.get("target")  # checked by plan_campaign
    for axis, value in chosen.items():
        if axis == "scenario":
            scenario = value
        elif axis == "target":
            target = value
        elif axis == "nemesis":
            faults, weights = parse_weighted_list(value, NEMESIS_CHOICES, "matrix.nemesis")
            nemesis["faults"], nemesis["weights"] = list(faults), dict(weights)
        elif axis in WORKLOAD_AXES:
            workload[axis] = (
                value if axis in ("acks", "client") else float(value) if axis == "rate" else int(value)
            )
        else:
            settings[axis] = value
    seed = int(data.get("seed", 0)) + repeat
    nemesis.setdefault("seed", seed)
    loaded = load_checked_scenario(scenario) if scenario is not None else None
    if loaded is not None:
        target = scenario_target(target, loaded, "target")
    spec = TestSpec(
        name=name,
        node_count=int(data.get("nodes", 3)),
        time_limit=float(data.get("time_limit", 30)),
        seed=seed,
        settings=settings,
        workload=QueueSpec.from_dict(workload),
        nemesis=NemesisSpec.from_dict(nemesis, where="campaign nemesis"),
        scenario=scenario,
        target=target or DEFAULT_TARGET,
    )
    if loaded is not None:
        spec = spec.with_scenario(loaded)
    spec.effective_settings()  # a key the target does not have fails here, before anything runs
    check_spec(spec)  # what its target refuses, as `tidemark run` refuses it
    return spec


def campaign_directory(store: Path, campaign: Campaign) -> Path:
    return store / campaign.name


def pending_runs(directory: Path, campaign: Campaign) -> Iterator[tuple[PlannedRun, Path]]:
    """(run, its directory) for every run not finished yet; interrupted ones moved aside."""
    for run in campaign.runs:
        run_dir = directory / "runs" / run.key
        if RunDir(run_dir).finished():
            continue
        if run_dir.exists():
            attempt = 1
            while run_dir.with_name(f"{run.key}.interrupted-{attempt}").exists():
                attempt += 1
            run_dir.rename(run_dir.with_name(f"{run.key}.interrupted-{attempt}"))
        yield run, run_dir


def finished_run_directories(directory: Path, campaign: Campaign) -> list[Path]:
    return [
        directory / "runs" / run.key
        for run in campaign.runs
        if RunDir(directory / "runs" / run.key).finished()
    ]


def check_campaign_ready(campaign: Campaign, directory: Path) -> None:
    """Raise :class:`CampaignError` when this machine cannot start the target of a run or hunt
    still to be run (as ``tidemark run`` refuses it), or no Docker engine answers for a target
    that runs in containers, before the first one starts: every hunt, and every run not stored
    yet."""
    specs = [run.spec for run in campaign.runs if not RunDir(directory / "runs" / run.key).finished()]
    specs += [planned.spec for planned in campaign.hunts]
    for spec in specs:
        try:
            check_ready(spec)
        except SpecRefused as error:
            raise CampaignError(f"{campaign.source}: {error}") from None
    if any(spec.target_object().name in DOCKER_TARGETS for spec in specs):
        reason = docker_unreachable()
        if reason is not None:
            raise CampaignError(f"{campaign.source}: {reason}")


DOCKER_TARGETS = frozenset(TARGETS)
"""The targets whose clusters are Docker containers (every named target; an external cluster,
``--bootstrap``, is not one of them)."""


def plan_lines(campaign: Campaign, directory: Path) -> list[str]:
    """What ``tidemark campaign --dry-run`` prints: the campaign, every run (its key, target, what
    it runs, its time limit; ``stored`` when ``directory`` already holds it finished), every hunt
    (target, budget, faults, whether an anomaly is expected) and the time the main phases and hunts
    take at least.  Pure: reads ``directory`` only to tell stored runs apart."""
    lines = [
        f"campaign {campaign.name} ({campaign.source}): {len(campaign.runs)} run(s), "
        f"{len(campaign.hunts)} hunt(s); checked with {campaign.engine}; stored in {directory}"
    ]
    for run in campaign.runs:
        spec = run.spec
        what = (
            f"scenario {spec.scenario}"
            if spec.scenario
            else f"nemesis {','.join(spec.nemesis.faults) or '-'}"
        )
        stored = "  (stored)" if RunDir(directory / "runs" / run.key).finished() else ""
        lines.append(f"  run  {run.key}  target {spec.target}  {what}  {spec.time_limit:g} s{stored}")
    for planned in campaign.hunts:
        lines.append(
            f"  hunt {planned.key}  target {planned.spec.target}  budget {planned.budget_seconds / 60:g} min"
            f"  faults {','.join(planned.spec.nemesis.faults)}"
            f"  anomaly {'expected' if planned.expect_anomaly else 'not expected'}"
        )
    main_phases = sum(run.spec.time_limit for run in campaign.runs) / 60
    hunting = sum(planned.budget_seconds for planned in campaign.hunts) / 60
    lines.append(
        f"at least {main_phases:.1f} min of main phases (each run adds its cluster start, drain and dumps)"
        f" and {hunting:g} min of hunts"
    )
    return lines
