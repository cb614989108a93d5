"""Signs of life for long runs, on stderr (stdout stays the report).

On a terminal: a rich progress bar, gone when the run ends. Anywhere else (a pipe, a CI log):
one plain line once the run has taken `first_after` seconds (2: any run longer than that shows
progress), then at most one every `every` seconds — so short runs print nothing, and a long
run in a pipe is never silent for minutes.

`Ticker` is for work that counts (pods, rows, probes); `Steps` for work that proceeds in named
steps that each block for long (`gpugov dev up` starting processes, `dev build` compiling):
in a pipe it repeats the current step from a timer, so even a 15-minute build is never silent.
"""

from __future__ import annotations

import sys
import threading
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

    def update(self, done: float, extra: str = "", total: float | None = None) -> None:
        """`total`: a new total, for work whose size is known only once it has begun (the
        rows of a file once it is parsed)."""
        if total is not None:
            self.total = max(float(total), 1e-9)
            if self._bar is not None:
                self._bar.update(self._task, total=self.total)
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


class Steps:
    """A status line for named blocking steps: `say(step)` as each begins, `close()` at the
    end (or use it as a context manager).

    On a terminal: rich's spinner with the step (gone at the end). In a pipe: nothing for
    `first_after` seconds, then `LABEL: STEP, N s` as each step begins and again every
    `every` seconds while one lasts (a timer thread: the steps themselves block).
    """

    def __init__(self, label: str, first: str = "", *, stream: TextIO | None = None,
                 tty: bool | None = None, first_after: float = 2.0,
                 every: float = 10.0) -> None:
        self.label, self.step = label, first or label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.first_after, self.every = first_after, max(every, 0.05)  # never a busy loop
        self._start = self._last = time.monotonic()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._status = None
        self._thread: threading.Thread | None = None
        self._live = False  # in a pipe: past first_after, so each step prints
        if self.tty:
            from rich.console import Console

            self._status = Console(file=self.stream).status(self.step)
            self._status.start()
        elif first_after <= 0:
            self._live = True
            self._write()
        if not self.tty:
            self._thread = threading.Thread(target=self._beat, name=f"steps-{label}",
                                            daemon=True)
            self._thread.start()

    def say(self, step: str) -> None:
        if self._status is not None:
            self._status.update(step)
            return
        with self._lock:
            self.step = step
            if self._live:
                self._write()

    def _write(self) -> None:
        self._last = now = time.monotonic()
        self.stream.write(f"{self.label}: {self.step}, {now - self._start:.0f} s\n")
        self.stream.flush()

    def _beat(self) -> None:
        if not self._live and self._done.wait(self.first_after):
            return
        with self._lock:
            if not self._live:
                self._live = True
                self._write()
        while True:
            with self._lock:
                wait = self._last + self.every - time.monotonic()
            if wait <= 0:
                with self._lock:
                    self._write()
                continue
            if self._done.wait(wait):
                return

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
        self._done.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
