"""Signs of life for long runs, on stderr (stdout stays the report).

On a terminal: a rich progress bar, gone when the run ends. Anywhere else (a pipe, a CI log):
one plain line once the run has taken `first_after` seconds (2: any run longer than that shows
progress), then at most one every `every` seconds — so short runs print nothing, and a long
run in a pipe is never silent for minutes.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Ticker:
    """`update(done)` as work proceeds (cheap to call often); `close()` at the end."""

    def __init__(self, label: str, total: float, unit: str = "", *,
                 stream: TextIO | None = None, tty: bool | None = None,
                 first_after: float = 2.0, every: float = 10.0) -> None:
        self.label, self.total, self.unit = label, max(float(total), 1e-9), unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.first_after, self.every = first_after, every
        self._start = self._last = time.monotonic()
        self._printed = False
        self._bar = None
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn(label), BarColumn(),
                                 TextColumn("{task.percentage:>3.0f}%"),
                                 TextColumn("{task.fields[extra]}"), TimeElapsedColumn(),
                                 console=Console(file=self.stream), transient=True)
            self._task = self._bar.add_task(label, total=self.total, extra="")
            self._bar.start()

    def update(self, done: float, extra: str = "") -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=min(done, self.total), extra=extra)
            return
        now = time.monotonic()
        due = self.every if self._printed else self.first_after
        if now - (self._last if self._printed else self._start) < due:
            return
        self._last, self._printed = now, True
        unit = f" {self.unit}" if self.unit else ""
        self.stream.write(f"{self.label}: {100 * min(done, self.total) / self.total:.0f}% "
                          f"({done:g}/{self.total:g}{unit}){' ' + extra if extra else ''}, "
                          f"{now - self._start:.0f} s\n")
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
