"""The progress of a batch check (``tidemark check`` over many runs): runs read, questions answered.

A check of thousands of stored runs takes minutes -- reading and validating every run, then
one Spark job per question of :data:`checker.driver.QUESTIONS` per pass, then a
``results.json`` per run -- and a silent terminal for that long looks hung.  The bars are
drawn on standard error, and only on a terminal: standard output may be a file or a pipe that
a script parses (the table, the verdicts, ``--json``), and a log gains nothing from bars
redrawn; a single run draws nothing.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from checker.driver import QUESTIONS

SHOWN_FROM_RUNS = 2
"""Batches of at least this many runs show progress."""


class BatchProgress:
    """:class:`checker.api.CheckProgress` drawn as rich progress bars (nothing for a single run)."""

    def __init__(self, runs: int, console: Console | None = None) -> None:
        """``console``: where to draw (default standard error); nothing unless it is a terminal."""
        console = console if console is not None else Console(stderr=True)
        self._shown = runs >= SHOWN_FROM_RUNS and console.is_terminal
        self._runs = runs
        self._progress = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._reading: TaskID | None = None
        self._checking: TaskID | None = None
        self._writing: TaskID | None = None

    def __enter__(self) -> BatchProgress:
        if self._shown:
            self._progress.start()
            self._reading = self._progress.add_task("runs read", total=self._runs)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._shown:
            self._progress.stop()

    def run_loaded(self, run_dir: Path) -> None:
        if self._reading is not None:
            self._progress.advance(self._reading)

    def pass_started(self, number: int, passes: int, runs: int) -> None:
        if not self._shown:
            return
        label = f"pass {number}/{passes}: questions" if passes > 1 else "questions answered"
        if self._checking is not None:
            self._progress.update(self._checking, visible=False)
        self._checking = self._progress.add_task(label, total=len(QUESTIONS))
        if self._writing is None:
            self._writing = self._progress.add_task("results written", total=self._runs)

    def answered(self, question: str) -> None:
        if self._checking is not None:
            self._progress.advance(self._checking)

    def results_written(self, runs: int) -> None:
        if self._writing is not None:
            self._progress.advance(self._writing, runs)
