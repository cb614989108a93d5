"""`gpugov top --once`: one frame of queues, devices and offenders from a real Prometheus;
and the frame renderer on a snapshot with a problem."""

from __future__ import annotations

import re

from rich.console import Console
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.observe import top
from gpugov.observe.snapshot import Snapshot


def test_top_once_shows_queues_devices_and_offenders(stack) -> None:
    stack.prom.wait_for('deriv(gpugov_pod_memory_used_bytes{pod="leaky"}[5s]) > 0')
    stack.prom.wait_for('rate(gpugov_idle_allocated_gpu_seconds_total{pod="idle"}[5s]) > 0.9')
    r = CliRunner().invoke(app, ["top", "--once", "--prometheus", stack.prom.url,
                                 "--window", "5s"])
    assert r.exit_code == 0, r.output
    out = r.output
    for words in ("Queues", "team-a", "team-b", "org", "Devices", "timeslice", "soft",
                  "exclusive", "Top offenders", "team-a/idle", "team-a/leaky",
                  "team-b/oversized"):
        assert words in out, (words, out)
    lines: dict[str, str] = {}
    for line in out.splitlines():
        if line.count("│") > 3:
            key = line.split("│")[1].strip()
            lines[key] = lines.get(key, "") + line
    idle = re.search(r"([\d.]+) GPU allocated and idle", lines["team-a/idle"])
    assert idle and float(idle.group(1)) > 0.85  # a rate over the window: about 1 GPU
    assert "leak" in lines["team-a/leaky"] and "MiB/min" in lines["team-a/leaky"]
    assert "uses 2.0 of 40.0 GiB requested" in out


def test_frame_lists_problems_without_data() -> None:
    console = Console(width=100, record=True)
    console.print(top.render(Snapshot("(no data)", problems=["Prometheus at x is unreachable"])))
    text = console.export_text()
    assert "! Prometheus at x is unreachable" in text and "q or Ctrl-C quits" in text


def test_top_needs_a_source() -> None:
    r = CliRunner().invoke(app, ["top", "--once"])
    assert r.exit_code == 2 and "--prometheus" in r.output


def _run_in_pty(args: list[str]):  # type: ignore[no-untyped-def]
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-c", "from gpugov.cli import app; app()", *args],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                         env={**os.environ, "TERM": "xterm", "COLUMNS": "120"})
    os.close(slave)
    return p, master


def _read_until(master: int, words: str, timeout: float = 30) -> str:
    import os
    import select
    import time

    out, deadline = b"", time.monotonic() + timeout
    while words.encode() not in out and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                out += os.read(master, 65536)
            except OSError:
                break
    return out.decode(errors="replace")


def test_live_top_refreshes_and_quits_on_q_and_on_ctrl_c(stack) -> None:
    import os
    import signal

    for how in ("q", "ctrl-c"):
        p, master = _run_in_pty(["top", "--prometheus", stack.prom.url, "--interval", "0.5"])
        try:
            first = _read_until(master, "Queues")
            assert "q or Ctrl-C quits" in first and "Queues" in first, first
            again = _read_until(master, "gpugov top")  # the next frame, drawn in place
            assert "gpugov top" in again and "\x1b[1A" in again  # cursor up: redrawn
            if how == "q":
                os.write(master, b"q")
            else:
                p.send_signal(signal.SIGINT)
            assert p.wait(15) == 0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master)
