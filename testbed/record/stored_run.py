"""What one stored run is, read without failing: its spec, its results, its verdict, its key settings.

The run report, the campaign index and the JUnit writer all start from the same few files
of a run directory (``test.json``, ``results.json``, the tail of ``history.jsonl``) and must
agree on what the verdict is called and which settings identify the run.  This module is
that single reading.  It never raises on bad *content*: a run that died in set-up, a
half-written ``results.json`` or a garbage ``test.json`` is still a row in the index and a
test case in the JUnit file, with the problem named (file and reason) in
:attr:`StoredRun.problems`.  Only a path that is not a directory raises
:class:`RunDirectoryError`.

Verdict classes (:func:`verdict_class`):

* ``valid`` -- every check ran on complete evidence and found nothing;
* ``invalid`` -- an anomaly that the run's configuration does not permit;
* ``expected`` -- invalid, but every anomaly is permitted by the configuration
  (``results.json``'s ``expected_only``: e.g. loss under ``truncation.mode=high-watermark``);
* ``unknown`` -- nothing proven, evidence incomplete;
* ``not-checked`` -- no (readable) ``results.json``.

Check statuses (:func:`check_status`): per check, ``found``, ``clean``, ``not-applicable`` (the
checker's ``not_applicable``, with its reason: the target cannot hold that evidence -- one replica
in PostgreSQL, an external cluster, no event logs -- which leaves the verdict as it is), ``not-run``
(a partial check: the verdict is then unknown) or ``not-checked``.

Key settings (:func:`key_settings`) come from ``test.json``'s ``broker_config``: the
effective settings the spec resolved when the run started (defaults applied, ``acks``
included).  Nothing here knows a default: a key the run did not record (an external
cluster's unstated configuration) reads ``?``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

from testbed.record.rundir import RESULTS_FILE, RunDir, RunDirectoryError, SpecFileError

VerdictClass = Literal["valid", "invalid", "expected", "unknown", "not-checked"]

VERDICT_LABELS: Final[dict[str, str]] = {
    "valid": "valid",
    "invalid": "INVALID",
    "expected": "invalid (all expected)",
    "unknown": "unknown",
    "not-checked": "not checked",
}
VERDICT_ORDER: Final[dict[str, int]] = {
    "invalid": 0,
    "expected": 1,
    "unknown": 2,
    "not-checked": 3,
    "valid": 4,
}
"""Sort rank: what needs a reader's attention first."""

_RUN_STAMP = re.compile(r"^\d{8}T\d{6}(\.\d+)?Z$")
_TAIL_BLOCK = 64 * 1024
_LINES_TRIED = 5
_LINE_HEAD_BYTES = 4096
_TIME_FIELD = re.compile(rb'"time"\s*:\s*(-?\d+)')


@dataclasses.dataclass(frozen=True, slots=True)
class StoredRun:
    """The small files of one run directory, each ``None`` when missing or unreadable."""

    run_dir: Path
    spec: dict[str, Any] | None
    results: dict[str, Any] | None
    problems: tuple[str, ...]
    """Why ``spec`` or ``results`` is missing or unusable, one line each (file: reason)."""

    @property
    def verdict(self) -> VerdictClass:
        return verdict_class(self.results)

    @property
    def name(self) -> str:
        name = (self.spec or {}).get("name")
        return name if isinstance(name, str) and name else self.run_dir.name

    @property
    def scenario(self) -> str | None:
        scenario = (self.spec or {}).get("scenario")
        return scenario if isinstance(scenario, str) and scenario else None


def _read_json_object(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """An optional JSON object file (``results.json``): None when missing; problems recorded."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as error:
        problems.append(f"{path.name}: not valid JSON ({error})")
        return None
    except OSError as error:
        problems.append(f"{path.name}: unreadable ({error.strerror or error})")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.name}: not a JSON object")
        return None
    return data


def _results_problem(results: Mapping[str, Any]) -> str | None:
    """The first field of ``results.json`` that the reports rely on and that is malformed."""
    if results.get("valid") not in (True, False, "unknown"):
        return f"'valid' must be true, false or \"unknown\", got {results.get('valid')!r}"
    anomalies = results.get("anomalies", {})
    if not isinstance(anomalies, dict):
        return "'anomalies' must be an object"
    for name, anomaly in anomalies.items():
        if not isinstance(anomaly, dict) or not isinstance(anomaly.get("count"), int):
            return f"anomaly {name!r} must be an object with an integer 'count'"
        if not isinstance(anomaly.get("examples", []), list):
            return f"anomaly {name!r}: 'examples' must be a list"
    if not isinstance(results.get("incomplete", []), list):
        return "'incomplete' must be a list"
    not_applicable = results.get("not_applicable", {})
    if not isinstance(not_applicable, dict) or not all(isinstance(v, str) for v in not_applicable.values()):
        return "'not_applicable' must be an object of check name -> reason"
    if not isinstance(results.get("checks", []), list):
        return "'checks' must be a list"
    return None


def load_stored_run(run_dir: Path | str) -> StoredRun:
    """Read ``test.json`` and ``results.json`` of ``run_dir``; problems are recorded, not raised."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirectoryError(f"{run_dir}: not a directory")
    problems: list[str] = []
    directory = RunDir(run_dir)
    spec: dict[str, Any] | None
    try:
        spec = directory.read_spec()
    except SpecFileError as error:
        problems.append(str(error))
        spec = None
    results = _read_json_object(directory.results, problems)
    if results is not None:
        problem = _results_problem(results)
        if problem is not None:
            problems.append(f"{RESULTS_FILE}: {problem}; the run is shown as not checked")
            results = None
    return StoredRun(run_dir, spec, results, tuple(problems))


def verdict_class(results: Mapping[str, Any] | None) -> VerdictClass:
    if results is None:
        return "not-checked"
    valid = results.get("valid")
    if valid is True:
        return "valid"
    if valid is False:
        return "expected" if results.get("expected_only") is True else "invalid"
    return "unknown"


CheckStatus = Literal["found", "clean", "not-applicable", "not-run", "not-checked"]
CHECK_STATUS_LABELS: Final[dict[str, str]] = {
    "found": "found",
    "clean": "nothing found",
    "not-applicable": "not applicable",
    "not-run": "not run",
    "not-checked": "not checked",
}
"""How every report names a check's status (:func:`check_status`)."""


def not_applicable_checks(results: Mapping[str, Any] | None) -> dict[str, str]:
    """``results.json``'s ``not_applicable``: check -> why it has no bearing on this run's target
    (one replica, no event logs); empty when not checked or nothing was inapplicable."""
    found = (results or {}).get("not_applicable", {})
    return {str(name): str(why) for name, why in found.items()} if isinstance(found, dict) else {}


def check_status(results: Mapping[str, Any] | None, name: str) -> tuple[CheckStatus, str]:
    """``(status, reason)`` of check ``name`` in a run, the same on every page:

    * ``not-checked`` -- no results at all;
    * ``found`` -- the anomaly is reported (whatever else the file says);
    * ``not-applicable`` -- the checker named it in ``not_applicable`` (the reason is its why):
      the target cannot have this anomaly's evidence, so it is *no* gap in the evidence --
      unlike ``not-run``, which makes the verdict unknown;
    * ``clean`` -- the check ran and found nothing;
    * ``not-run`` -- results exist but the check is not among ``checks`` (a partial check).
    """
    if results is None:
        return "not-checked", ""
    if name in results.get("anomalies", {}):  # never hidden, whatever else results.json says
        return "found", ""
    why = not_applicable_checks(results).get(name)
    if why is not None:
        return "not-applicable", why
    if name in results.get("checks", []):
        return "clean", ""
    return "not-run", ""


UNKNOWN_SETTING: Final = "?"
"""How :func:`key_settings` shows a setting the run did not record."""


def _text(value: Any, default: str = UNKNOWN_SETTING) -> str:
    if value is None:
        return default
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


NEVER_FLUSH: Final = str(2**63 - 1)
"""Kafka's ``Long.MAX_VALUE``: ``flush.messages``/``flush.ms`` at this value mean never."""


def flush_policy(settings: Mapping[str, Any]) -> str:
    """``never`` (Kafka's default: fsync left to the OS), or the ``flush.*`` settings in force;
    ``?`` when the run recorded no ``flush.*`` setting at all (a target without them, such as
    tansu, or an external cluster: unknown, not Kafka's default)."""
    if not any(settings.get(key) is not None for key in ("flush.messages", "flush.ms")):
        return "?"
    parts = [
        f"{key.removeprefix('flush.')}={_text(settings[key])}"
        for key in ("flush.messages", "flush.ms")
        if settings.get(key) is not None and _text(settings[key]) != NEVER_FLUSH
    ]
    return " ".join(parts) or "never"


def broker_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``test.json``'s ``broker_config``: the effective settings, ``acks`` included."""
    config = spec.get("broker_config")
    return dict(config) if isinstance(config, dict) else {}


def key_settings(spec: Mapping[str, Any] | None) -> dict[str, str]:
    """The settings that tell runs of a campaign apart, as display text (see the module docstring)."""
    spec = spec or {}
    nemesis = spec.get("nemesis") if isinstance(spec.get("nemesis"), dict) else {}
    assert isinstance(nemesis, dict)
    settings = broker_settings(spec)
    faults = nemesis.get("faults")
    if not isinstance(faults, list):
        faults = []
    return {
        "truncation.mode": _text(settings.get("truncation.mode")),
        "acks": _text(settings.get("acks")),
        "min.insync.replicas": _text(settings.get("min.insync.replicas")),
        "unclean.leader.election.enable": _text(settings.get("unclean.leader.election.enable")).lower(),
        "flush": flush_policy(settings),
        "faults": ",".join(str(f) for f in faults) or "-",
        "scenario": _text(spec.get("scenario"), "-"),
    }


SHORT_SETTING_NAMES: Final[dict[str, str]] = {
    "truncation.mode": "truncation",
    "acks": "acks",
    "min.insync.replicas": "min-isr",
    "unclean.leader.election.enable": "unclean",
    "flush": "flush",
    "faults": "faults",
}


def settings_phrase(spec: Mapping[str, Any] | None) -> str:
    """``truncation=high-watermark acks=all min-isr=1 unclean=false flush=never faults=kill``."""
    chosen = key_settings(spec)
    return " ".join(f"{short}={chosen[key]}" for key, short in SHORT_SETTING_NAMES.items())


def anomaly_phrases(results: Mapping[str, Any] | None) -> list[str]:
    """``lost-write x3 (expected: acks=1)`` per anomaly, errors before warnings."""
    if results is None:
        return []
    anomalies = results.get("anomalies", {})
    ordered = sorted(anomalies.items(), key=lambda item: (item[1].get("severity") == "warning", item[0]))
    phrases = []
    for name, anomaly in ordered:
        note = f" (expected: {anomaly.get('rule')})" if anomaly.get("expected") else ""
        warning = " [warning]" if anomaly.get("severity") == "warning" else ""
        phrases.append(f"{name} x{anomaly['count']}{note}{warning}")
    return phrases


def started_at(run_dir: Path) -> datetime.datetime | None:
    """When the run started: the store's UTC timestamp directory name, else ``test.json``'s mtime."""
    if _RUN_STAMP.match(run_dir.name):
        pattern = "%Y%m%dT%H%M%S.%fZ" if "." in run_dir.name else "%Y%m%dT%H%M%SZ"
        return datetime.datetime.strptime(run_dir.name, pattern).replace(tzinfo=datetime.UTC)
    try:
        return datetime.datetime.fromtimestamp((RunDir(run_dir).spec_file).stat().st_mtime, tz=datetime.UTC)
    except OSError:
        return None


def _line_starts_from_end(handle: BinaryIO, size: int, wanted: int) -> list[int]:
    """Offsets where the last ``wanted`` lines start, found by scanning backwards in blocks."""
    starts: list[int] = []
    position = size
    while position > 0 and len(starts) < wanted:
        block_start = max(0, position - _TAIL_BLOCK)
        handle.seek(block_start)
        block = handle.read(position - block_start)
        for newline in range(len(block) - 1, -1, -1):
            if block[newline] == 0x0A and block_start + newline + 1 < size:
                starts.append(block_start + newline + 1)
                if len(starts) == wanted:
                    break
        position = block_start
    if position == 0 and len(starts) < wanted:
        starts.append(0)
    return starts


def history_span_seconds(run_dir: Path) -> float | None:
    """Time of the last op in ``history.jsonl`` (seconds since test start), read from the file's end.

    Only the beginnings of the last few lines are read -- the ``"time"`` field comes early in
    every line the history writer produces, while the last op (the final drain) may be
    megabytes long -- so a campaign of thousands of runs lists quickly.  A torn or garbage
    last line falls back to the line before.  ``None`` without any readable time.
    """
    path = RunDir(run_dir).history_jsonl
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            for start in _line_starts_from_end(handle, size, _LINES_TRIED):
                handle.seek(start)
                found = _TIME_FIELD.search(handle.read(_LINE_HEAD_BYTES))
                if found:
                    return int(found.group(1)) / 1e9
    except OSError:
        return None
    return None
