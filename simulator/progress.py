"""Progress and wall time for the commands that can take a while (sweep, validate, calibrate, replay).

On a terminal, progress goes to stderr as rich bars, one per phase; when stderr is a pipe or a file (CI
logs, `2> log`) there is none. Every such command ends with one line on stderr, whatever the output
mode, saying how long it ran (`wall_time_line`): stdout stays what the command prints (one JSON document
with --json), and a reader of a log still learns the time. Neighbours: `sweep_cmd`, `validate_cmd`,
`calibrate/cli.py`, `calibrate/replay/cli.py`.
"""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


def stderr_is_terminal(stream: Optional[TextIO] = None) -> bool:
    """Whether progress should be drawn: the stream (stderr by default) is a terminal."""
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced by an object without isatty
        return False


def format_wall_time(seconds: float) -> str:
    """"0.84 s", "12.3 s", "3 min 45 s", "1 h 02 min"."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        m, s = divmod(int(round(seconds)), 60)
        return f"{m} min {s} s"
    h, m = divmod(int(round(seconds / 60)), 60)
    return f"{h} h {m:02d} min"


def wall_time_line(command: str, seconds: float) -> str:
    return f"{command}: wall time {format_wall_time(seconds)}"


class Stopwatch:
    """Started when made; `report()` prints the wall-time line on stderr."""

    def __init__(self, command: str, stream: Optional[TextIO] = None):
        self.command = command
        self.stream = stream
        self.start = time.perf_counter()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    def report(self) -> None:
        print(wall_time_line(self.command, self.elapsed_s), file=self.stream if self.stream is not None else sys.stderr,
              flush=True)


class PhaseProgress:
    """`progress(phase, done, total)`: a rich bar per phase on stderr, drawn only when `enabled` (default:
    stderr is a terminal); otherwise every call does nothing. Use as a context manager."""

    def __init__(self, enabled: Optional[bool] = None):
        self.enabled = stderr_is_terminal() if enabled is None else enabled
        self.bar = None
        self.tasks: dict = {}
        if self.enabled:
            from rich.console import Console  # noqa: PLC0415
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=False)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.bar:
            return
        if phase not in self.tasks:
            self.tasks[phase] = self.bar.add_task(phase, total=total)
        self.bar.update(self.tasks[phase], completed=done, total=total)


class PhaseLines:
    """For a command whose steps run out of this process (the replay's ranks): one line per phase on
    stderr, with the time since the start, only when `enabled` (default: stderr is a terminal)."""

    def __init__(self, command: str, enabled: Optional[bool] = None):
        self.command = command
        self.enabled = stderr_is_terminal() if enabled is None else enabled
        self.start = time.perf_counter()

    def __call__(self, phase: str) -> None:
        if self.enabled:
            print(f"{self.command}: [{format_wall_time(time.perf_counter() - self.start)}] {phase}", file=sys.stderr, flush=True)
