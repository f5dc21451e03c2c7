"""Scripted scenarios: a timeline of faults, heals, waits and markers, with expected verdicts.

A scenario is a TOML file (the library lives in ``nemesis/scenarios/``; users pass a
path to their own).  Its top level names it (``name``, ``description``; optionally ``bug``,
the bug it reproduces, e.g. ``"KIP-279 (KAFKA-6361)"``, and ``switch``, the ``KEY=VALUE``
setting that turns that bug on, e.g. ``"leader.epoch.lookup=single"``), sets up the test
(``node_count``, ``[workload]``, ``[settings]`` -- settings of the target the user's ``--set``
may override -- and ``target``, the system the scenario is written for, one of
:data:`testbed.cluster.targets.TARGETS`, e.g. ``"tansu"``; without it the scenario runs on the
run's target, by default the bundled broker) and says what the checker must find, per
configuration::

    [[expected]]
    when = { "truncation.mode" = "high-watermark" }
    valid = false
    anomalies = ["lost-write"]          # must be reported
    [[expected]]
    when = { "truncation.mode" = "leader-epoch" }
    valid = true                        # or false, "unknown", or "nothing-unexpected"

Then ``[[step]]`` tables run in order while the queue workload keeps producing and
consuming in the background.  Each step has exactly one verb:

* ``bind = { A = "leader-of:0", B = "follower-of:0" }`` -- name nodes by role, now.  Roles:
  ``leader-of:P`` (the leader of partition P), ``follower-of:P`` (its first follower) and
  ``follower-of:P#N`` (its N-th follower, 1-based, in replica-assignment order without the
  leader); ``controller`` names the controller node.  P is a partition of the workload's topic,
  or ``offsets``: the partition of ``__consumer_offsets`` that holds the workload's consumer
  group (``--consume-via subscribe``), so ``leader-of:offsets`` is the group's coordinator; or
  ``transactions``: the partition of ``__transaction_state`` that holds the workload's first
  producer's transactional id (``--txn``), so ``leader-of:transactions`` is its transaction
  coordinator;
* ``fault = KIND`` -- one fault or heal kind of :data:`nemesis.fault_kinds.REGISTRY` (kill and
  start, pause and resume, power-loss, partition and heal, metadata-delay and metadata-heal,
  consumer-churn), which declares what its step takes: ``node = "B"`` / ``nodes = [...]`` (a
  bound name, a node name, a role or ``controller``; required, optional or not taken),
  ``grudge = { A = ["B"], B = ["A"] }`` and ``kind`` for a partition, ``announce = false`` for
  pause and resume (recorded as unannounced: no fault window for the checker's liveness checks,
  a stand-in for brokers that stop on their own, which ``stalled`` must catch), ``controlled =
  false`` for shutdown (SIGINT: a clean stop without the controlled handover), ``stop``
  (``leave`` or ``stall``) and ``pick`` (which running consumer) for consumer churn, which
  replaces one of the workload's group consumers and heals itself (:mod:`nemesis.consumer_churn`).
  ``heal`` ends a partition only and leaves a metadata delay in place; ``metadata-heal``
  without nodes heals every broker;
* ``wait = "leader-is" | "leader-is-not" | "deposed" | "caught-up" | "in-isr" | "not-in-isr" | "answers"``
  with ``node``, ``partition`` (default 0; ``offsets`` and ``transactions`` as in roles) and ``timeout`` seconds (default 30) -- a
  condition polled until true (``leader-is-not``: the partition has a leader, another node;
  ``deposed``: the node no longer leads it -- another does, or none: the controller took it offline);
  ``caught-up``: the ISR is every replica and, on a cluster whose replicas can be read while it
  runs, every replica holds the partition (metadata lists a new partition's followers in the
  ISR before they have heard of it); a timeout fails the run loudly, except with ``required =
  false`` on any wait: a wait on the broker's own decision (an election it may rightly refuse),
  whose timeout is recorded (a package's ``unmet``) and the steps go on;
* ``wait = "log-end-past"`` with ``node``, ``than`` (another node), ``partition`` and
  ``timeout`` -- ``node``'s replica holds records beyond the end of ``than``'s, judged on the
  replicas' files (:class:`~testbed.cluster.protocol.LiveReplicas`; a cluster without that
  ability fails the step).  Metadata cannot say what a replica holds, and a scenario that
  needs one replica to hold records another lacks (a zombie's stale suffix, a new leader's
  writes past it) must wait for exactly that, not for time: under load the producers write
  slowly.  Meant for a moment when ``than`` cannot grow (cut off, or not replicating);
* ``wait = "hw-checkpoint"`` with ``node``, ``partition`` and ``timeout`` -- ``node`` has just
  rewritten its HW checkpoint: the high watermark its checkpoint file holds for the partition
  changes (read as ``log-end-past`` reads, so it needs records flowing into the partition).  A
  broker checkpoints on a timer whose phase a scenario cannot know, and KIP-101's loss is what
  lies between the last checkpoint and a crash: this wait, then a ``sleep`` shorter than the
  checkpoint interval, makes that window the sleep's length instead of a draw from zero to the
  interval;
* ``wait = "request-held"`` with ``timeout`` and, optionally, ``node`` -- the node's request
  proxy (without ``node``: any broker's) holds a request, which a ``request-hold`` before it
  caught (:class:`~nemesis.request_faults.RequestProxies`; a cluster without that ability fails
  the step).  The held request comes whenever the client next sends one of its kind, and what
  follows -- the client timing it out, the release -- must be timed from that moment, not from
  the hold's rule;
* ``produce = "marker"`` -- one acknowledged-or-not marker send, recorded like any send, from a
  fresh producer bootstrapped at the partition's leader in the freshest view (a zombie's stale
  metadata cannot send it to a dead leader);
* ``sleep = 5`` with ``why = "..."`` -- only where time itself is the point (letting
  acknowledged writes pile up past a checkpoint, for example).

Every fault is recorded as a nemesis op, so reports shade the windows (unannounced ones too).

This module owns the file format (parsing, checking, the library); :mod:`nemesis.scenario_run`
carries a parsed scenario out against a cluster.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nemesis.fault_kinds import REGISTRY
from nemesis.steps import CONTROLLER as CONTROLLER
from nemesis.steps import FAULTS as FAULTS
from nemesis.steps import NODE_KEYS as NODE_KEYS
from nemesis.steps import OFFSETS_PARTITION as OFFSETS_PARTITION
from nemesis.steps import ROLES as ROLES
from nemesis.steps import VERBS as VERBS
from nemesis.steps import WAITS as WAITS
from nemesis.steps import Role as Role
from nemesis.steps import ScenarioError as ScenarioError
from nemesis.steps import ScenarioFailed as ScenarioFailed
from nemesis.steps import ScenarioStep, parse_step
from nemesis.steps import parse_role as parse_role
from nemesis.steps import role_node as role_node
from testbed.cluster.targets import TARGETS

NOTHING_UNEXPECTED = "nothing-unexpected"
"""An expectation's ``valid`` when the configuration permits an anomaly it does not force: the
run may be valid or invalid, but every anomaly must be one the configuration permits."""


@dataclasses.dataclass(frozen=True)
class Expectation:
    when: dict[str, str]
    valid: bool | str
    anomalies: tuple[str, ...]
    absent: tuple[str, ...]

    def matches(self, settings: Mapping[str, str]) -> bool:
        return all(settings.get(key) == value for key, value in self.when.items())

    def problems(self, results: Mapping[str, Any]) -> list[str]:
        """What in ``results`` contradicts this expectation (empty: as expected)."""
        found = set(results.get("anomalies", {}))
        problems = []
        if self.valid == NOTHING_UNEXPECTED:  # loss the configuration permits may or may not happen
            if results.get("valid") not in (True, False):
                problems.append(f"verdict {results.get('valid')!r}, expected a verdict")
            problems += [  # a warning never makes a run invalid: nothing needs to permit it
                f"{name} reported, which the configuration does not permit"
                for name, anomaly in results.get("anomalies", {}).items()
                if not anomaly.get("expected") and anomaly.get("severity") != "warning"
            ]
        elif results.get("valid") != self.valid:
            problems.append(f"verdict {results.get('valid')!r}, expected {self.valid!r}")
        problems += [f"{name} not reported" for name in self.anomalies if name not in found]
        problems += [f"{name} reported" for name in self.absent if name in found]
        return problems


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    source: str
    node_count: int
    workload: dict[str, Any]
    settings: dict[str, str]
    expected: tuple[Expectation, ...]
    steps: tuple[dict[str, Any], ...]
    """The ``[[step]]`` tables as written (what ``test.json`` embeds and reports show)."""
    parsed_steps: tuple[ScenarioStep, ...]
    """The same steps parsed once (:mod:`nemesis.steps`): what :mod:`nemesis.scenario_run` runs."""
    definition: dict[str, Any]
    """The parsed TOML this scenario came from, with ``name`` filled in: what ``test.json``
    embeds, so a run can be repeated after the file is gone."""
    bug: str = ""
    """The bug the scenario reproduces, e.g. ``"KIP-279 (KAFKA-6361)"`` (empty: not said)."""
    switch: str = ""
    """``KEY=VALUE``: the setting that turns the bug on, e.g. ``"leader.epoch.lookup=single"`` (empty: not said)."""
    target: str | None = None
    """The target the scenario is written for (:data:`testbed.cluster.targets.TARGETS`); None: not
    said, so the run's target (``--target``, else the default)."""

    @property
    def switch_setting(self) -> tuple[str, str] | None:
        """:attr:`switch` as ``(key, value)``, or None when the scenario names no switch."""
        if not self.switch:
            return None
        key, _, value = self.switch.partition("=")
        return key, value

    def expectation_for(self, settings: Mapping[str, str]) -> Expectation | None:
        for expectation in self.expected:
            if expectation.matches(settings):
                return expectation
        return None


# ---- loading --------------------------------------------------------------------------------


def library() -> dict[str, Path]:
    """The bundled scenarios: name -> file."""
    folder = importlib.resources.files("nemesis") / "scenarios"
    return {
        Path(str(entry)).stem: Path(str(entry)) for entry in folder.iterdir() if str(entry).endswith(".toml")
    }


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if not path.suffix:
        bundled = library()
        if name_or_path not in bundled:
            raise ScenarioError(
                f"no scenario {name_or_path!r}; bundled: {', '.join(sorted(bundled))} "
                "(or give a path to a .toml file)"
            )
        path = bundled[name_or_path]
    text, data = read_toml(path, ScenarioError)
    return parse_scenario(data, str(path), text)


def read_toml(path: Path, error_type: type[Exception]) -> tuple[str, dict[str, Any]]:
    """``path``'s text and the TOML it holds; ``error_type`` with one line naming the file and
    what is wrong -- unreadable, not UTF-8 (the byte offset), or not TOML (line and column).

    Scenarios and campaigns (:mod:`harness.run.campaign`) are read through this one function
    so that a bad file is refused the same way by ``scenario show``, ``run --scenario`` and
    ``campaign``.
    """
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise error_type(f"{path}: cannot read: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise error_type(
            f"{path}: not UTF-8 text: byte 0x{raw[error.start]:02x} at byte offset {error.start} (line {line})"
        ) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise error_type(f"{path}: {error}") from None


def parse_scenario(data: dict[str, Any], source: str, text: str = "") -> Scenario:
    """The scenario ``data`` (parsed TOML) describes; ScenarioError naming ``source`` and the key or
    step, and the line when ``text`` (the file ``data`` was parsed from) is given.

    Everything a run could trip over later is refused here, before any container starts: a step
    key no verb takes (a typo such as ``fualt``), an expectation key it does not know, a negative
    sleep or timeout.  (Whether an expected anomaly is one the checker reports is the harness's
    question -- :mod:`harness.run.scenario_check` --: this room does not know the checker.)
    """
    known = {
        "name",
        "description",
        "bug",
        "switch",
        "target",
        "node_count",
        "workload",
        "settings",
        "expected",
        "step",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise ScenarioError(f"{source}: unknown keys {', '.join(unknown)}")
    steps = tuple(data.get("step", []))
    if not steps:
        raise ScenarioError(f"{source}: no [[step]] tables")
    parsed_steps = tuple(
        _parsed_step(step, number, source, text) for number, step in enumerate(steps, start=1)
    )
    expected = []
    for number, entry in enumerate(data.get("expected", []), start=1):
        _check_expectation(entry, source, number, text)
        if "valid" not in entry:
            raise ScenarioError(f"{source}: expected {number}: 'valid' is required")
        if entry["valid"] not in (True, False, "unknown", NOTHING_UNEXPECTED):
            raise ScenarioError(
                f'{source}: expected {number}: valid must be true, false, "unknown" or '
                f'"{NOTHING_UNEXPECTED}", not {entry["valid"]!r}'
            )
        expected.append(
            Expectation(
                when={str(k): _setting_text(v) for k, v in entry.get("when", {}).items()},
                valid=entry["valid"],
                anomalies=tuple(entry.get("anomalies", ())),
                absent=tuple(entry.get("absent", ())),
            )
        )
    name = str(data.get("name") or Path(source).stem)
    bug = data.get("bug", "")
    if "bug" in data and (not isinstance(bug, str) or not bug.strip()):
        raise ScenarioError(f'{source}: bug: expected a name such as "KIP-279 (KAFKA-6361)", not {bug!r}')
    return Scenario(
        name=name,
        description=str(data.get("description", "")).strip(),
        source=source,
        node_count=_node_count(data, source, text),
        workload=dict(_table(data, "workload", source, text)),
        settings={str(k): _setting_text(v) for k, v in _table(data, "settings", source, text).items()},
        expected=tuple(expected),
        steps=steps,
        parsed_steps=parsed_steps,
        definition={**data, "name": name},
        bug=bug.strip(),
        switch=_switch(data, source),
        target=_target(data, source),
    )


def _node_count(data: Mapping[str, Any], source: str, text: str) -> int:
    """The ``node_count`` key (default 3): a whole number >= 1, else ScenarioError with its line."""
    count = data.get("node_count", 3)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        line = line_of(text, "", 0, "node_count")
        raise ScenarioError(f"{source}{line}: node_count must be a whole number >= 1, not {count!r}")
    return count


def _table(data: Mapping[str, Any], key: str, source: str, text: str) -> Mapping[str, Any]:
    """The ``[key]`` table (empty when absent); ScenarioError with its line when it is not a table."""
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ScenarioError(f"{source}{line_of(text, '', 0, key)}: {key} must be a table, not {table!r}")
    return table


def _target(data: Mapping[str, Any], source: str) -> str | None:
    """The ``target`` key (None when absent); ScenarioError naming the file and key otherwise."""
    if "target" not in data:
        return None
    if data["target"] not in TARGETS:
        raise ScenarioError(f"{source}: target: expected one of {', '.join(TARGETS)}, not {data['target']!r}")
    return str(data["target"])


def _switch(data: Mapping[str, Any], source: str) -> str:
    """The ``switch`` key as ``KEY=VALUE`` (stripped), ``""`` when absent; ScenarioError otherwise."""
    if "switch" not in data:
        return ""
    switch = data["switch"]
    key, separator, value = switch.partition("=") if isinstance(switch, str) else ("", "", "")
    if not separator or not key.strip() or not value.strip() or len(key.split()) != 1:
        raise ScenarioError(
            f"{source}: switch: expected KEY=VALUE, the setting that turns the bug on "
            f'(e.g. "leader.epoch.lookup=single"), not {switch!r}'
        )
    return f"{key.strip()}={value.strip()}"


def _setting_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


# ---- what tomllib does not check -------------------------------------------------------------

STEP_KEYS = frozenset(
    {*VERBS, "node", "nodes", "than", "partition", "timeout", "required", "why"}
    | {param.name for kind in REGISTRY.values() for param in kind.params}
)
"""Every key a ``[[step]]`` table may hold: the verbs, their options and every fault kind's parameters."""

EXPECTATION_KEYS = frozenset({"when", "valid", "anomalies", "absent"})


def _parsed_step(step: Any, number: int, source: str, text: str) -> ScenarioStep:
    """Step ``number`` parsed (:func:`nemesis.steps.parse_step`) after the checks it leaves out:
    unknown keys (named with their line) and negative durations."""
    where = f"{source}: step {number}"
    if isinstance(step, dict):
        _refuse_unknown_keys(step, STEP_KEYS, "step", number, source, text)
    parsed = parse_step(step, where)
    for key, seconds in (
        ("sleep", getattr(parsed, "seconds", 0.0)),
        ("timeout", getattr(parsed, "timeout", 1.0)),
    ):
        if seconds < 0 or (key == "timeout" and seconds == 0):
            line = line_of(text, "step", number, key)
            bound = ">= 0" if key == "sleep" else "> 0"
            raise ScenarioError(
                f"{source}{line}: step {number}: {key} must be {bound} seconds, not {step[key]!r}"
            )
    return parsed


def _check_expectation(entry: Any, source: str, number: int, text: str) -> None:
    """The ``number``-th ``[[expected]]`` table's keys, and its ``anomalies`` and ``absent`` lists of names."""
    if not isinstance(entry, dict):
        raise ScenarioError(f"{source}: expected {number}: an expectation must be a table")
    _refuse_unknown_keys(entry, EXPECTATION_KEYS, "expected", number, source, text)
    for key in ("anomalies", "absent"):
        names = entry.get(key, [])
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            line = line_of(text, "expected", number, key)
            raise ScenarioError(f"{source}{line}: expected {number}: {key} must be a list of anomaly names")


def _refuse_unknown_keys(
    table: dict[str, Any], known: frozenset[str], name: str, number: int, source: str, text: str
) -> None:
    """ScenarioError naming the first key of the ``number``-th ``[[name]]`` table that is not in
    ``known``, with its line, and the keys such a table takes."""
    unknown = sorted(set(table) - known)
    if unknown:
        line = line_of(text, name, number, unknown[0])
        raise ScenarioError(
            f"{source}{line}: {name} {number}: unknown key {unknown[0]!r} (a {name} table takes"
            f" {', '.join(sorted(known))})"
        )


def line_of(text: str, table: str, number: int, key: str) -> str:
    """``":LINE"``: where ``key`` is set in the ``number``-th ``[[table]]`` of ``text`` -- number 0:
    at the top level, before the first table -- (``""`` when ``text`` is not given or the table is
    written some other way, e.g. inline)."""
    header = re.compile(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]")
    assignment = re.compile(rf"^\s*(\"{re.escape(key)}\"|'{re.escape(key)}'|{re.escape(key)})\s*=")
    seen = 0
    for index, line in enumerate(text.splitlines(), start=1):
        if header.match(line):
            seen += 1
        elif seen == number and line.lstrip().startswith("["):
            return ""
        elif seen == number and assignment.match(line):
            return f":{index}"
    return ""
