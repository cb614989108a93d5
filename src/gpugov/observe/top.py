"""`gpugov top`: a live terminal view of queues, devices and offenders (rich).

Rendering is a pure function of a `Snapshot`, so `--once` and the tests print exactly the
frame the live view shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import sys
import termios
import tty
from collections.abc import Awaitable, Callable, Iterator

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpugov.observe.snapshot import Snapshot
from gpugov.observe.views import MIB

GIB = 1024 * MIB


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    """A cell: `—` for no value, never `nan` or `inf` (a ratio over nothing)."""
    return "—" if x is None or x != x or x in (float("inf"), float("-inf")) else fmt.format(x)


def _gib(x: float | None) -> str:
    return "—" if x is None else f"{x / GIB:.1f}"


#: below this many columns, tables drop and abbreviate columns to fit
WIDE = 110


def render(snap: Snapshot, max_rows: int = 10, width: int | None = None) -> RenderableType:
    """One frame: queues, devices, top offenders, problems. `width`: the terminal's columns
    (80 and up fit: narrower frames abbreviate headers and drop the columns that are empty);
    None = as wide as the console."""
    narrow = width is not None and width < WIDE
    q = Table(title="Queues (GPUs)", title_justify="left", expand=True)
    for col in ("queue", "quota", "fair" if narrow else "fair share", "usage", "pending"):
        q.add_column(col, justify="left" if col == "queue" else "right")
    for r in snap.queues:
        style = "red" if (r.pending_pods and r.fair_share_gpus is not None
                          and r.usage_gpus < r.fair_share_gpus) else None
        q.add_row(r.queue, _num(r.quota_gpus), _num(r.fair_share_gpus), _num(r.usage_gpus),
                  str(r.pending_pods), style=style)
    measured = any(d.busy is not None or d.memory_used is not None for d in snap.devices)
    d = Table(title="Devices" + (" (used: SIMULATED)" if snap.simulated else ""),
              title_justify="left", expand=True)
    cols = ["node", "gpu", "mode", "alloc" if narrow else "allocated"]
    if measured or not snap.used_note:
        cols += ["busy", "mem GiB" if narrow else "memory used / total GiB"]
    for col in cols:
        d.add_column(col, justify="left" if col in ("node", "mode") else "right")
    for dev in snap.devices:
        row = [dev.node, dev.gpu, dev.mode, f"{dev.allocated:.2f}"]
        if len(cols) > 4:
            row += [_num(None if dev.busy is None else 100 * dev.busy, "{:.0f} %"),
                    f"{_gib(dev.memory_used)} / {_gib(dev.memory_total)}"]
        d.add_row(*row)
    o = Table(title="Top offenders", title_justify="left", expand=True)
    for col in ("pod", "what", "detail"):
        o.add_column(col, overflow="fold")
    for off in snap.offenders[:max_rows]:
        o.add_row(f"{off.namespace}/{off.pod}", off.what, off.detail,
                  style="red" if off.what == "leak" else "yellow")
    header = Text(f"gpugov top — {snap.source}", style="bold")
    header.append("   q or Ctrl-C quits", style="dim")
    parts: list[RenderableType] = [header, q]
    if not snap.queues:
        parts.append(Text("  no queues: no Queue objects (or --queues file) and no pods "
                          "charged to one", style="dim"))
    parts.append(d)
    if not snap.devices:
        parts.append(Text("  no devices: no running pod holds a GPU (only allocated devices "
                          "are listed)", style="dim"))
    if snap.used_note and not measured:
        parts.append(Text(f"  {snap.used_note}", style="dim"))
    if snap.simulated and measured:
        nodes = ", ".join(snap.simulated[:4]) + ("…" if len(snap.simulated) > 4 else "")
        parts.append(Text(f"  busy and memory are SIMULATED from allocations on {nodes} "
                          "(a dev cluster's kwok nodes have no GPU: `gpugov node exporter "
                          "--simulate`), not measured", style="yellow"))
    parts.append(o)
    if not snap.offenders:
        why = ("idle, leaking and oversized pods are found from the used view"
               if snap.used_note and not measured else "every pod uses what it holds")
        parts.append(Text(f"  none: {why}", style="dim"))
    if snap.problems:
        parts.append(Text("\n".join(f"! {p}" for p in snap.problems[:max_rows]),
                          style="dim"))
    return Group(*parts)


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[], str | None]]:
    """Non-blocking single key reads from a terminal stdin (None when not a terminal)."""
    if not sys.stdin.isatty():
        yield lambda: None
        return
    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        def read() -> str | None:
            ready, _, _ = select.select([fd], [], [], 0)
            return os.read(fd, 1).decode(errors="ignore") if ready else None
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


async def live(fetch: Callable[[], Awaitable[Snapshot]], interval: float) -> None:
    """Refresh in place until q or Ctrl-C; restores the terminal either way."""
    console = Console()
    with _keys() as key, Live(render(await fetch(), width=console.width), console=console,
                              auto_refresh=False, screen=False) as view:
        waited = 0.0
        while True:
            k = key()
            if k in ("q", "Q"):
                return
            await asyncio.sleep(0.1)
            waited += 0.1
            if waited >= interval:
                waited = 0.0
                view.update(render(await fetch(), width=console.width), refresh=True)
