"""`gpugov top --once`: one frame of queues, devices and offenders from a real Prometheus;
and the frame renderer on a snapshot with a problem."""

from __future__ import annotations

import re

from rich.console import Console
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.observe import top
from gpugov.observe.snapshot import Snapshot


def test_top_once_shows_queues_devices_and_offenders(stack, monkeypatch) -> None:
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
    # issue 23: a large cluster takes seconds to read; in a pipe that shows on stderr
    from gpugov.sim import progress

    real = progress.Steps
    monkeypatch.setattr(progress, "Steps", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 3600}))
    piped = CliRunner().invoke(app, ["top", "--once", "--prometheus", stack.prom.url,
                                     "--window", "5s"])
    assert piped.exit_code == 0, piped.output
    assert [line.split(", ")[0] for line in piped.stderr.splitlines()] == [
        f"top --once: reading Prometheus at {stack.prom.url}"], piped.stderr
    assert "Top offenders" in piped.stdout and "top --once:" not in piped.stdout


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


def _frame(snap: Snapshot, width: int) -> str:
    console = Console(width=width, record=True)
    console.print(top.render(snap, width=width))
    return console.export_text()


def _cluster_snapshot(used_note: str = ""):  # type: ignore[no-untyped-def]
    from gpugov.observe.snapshot import DeviceView
    from gpugov.observe.views import QueueRow

    return Snapshot("cluster", [QueueRow("research", 2.0, 7.4, 8.3, 0),
                                QueueRow("vision", 6.0, 5.6, 4.6, 1)],
                    [DeviceView("h100-0", "3", "GPU-h100-0-3", "timeslice", 1.0, None, None,
                                None),
                     DeviceView("a100-0", "0", "GPU-a100-0-0", "exclusive", 1.0, None, None,
                                None)], used_note=used_note)


def test_frame_fits_80_columns_and_says_once_why_used_is_empty() -> None:
    from gpugov.observe.snapshot import NO_PROMETHEUS

    for width in (80, 100, 120):
        text = _frame(_cluster_snapshot(NO_PROMETHEUS), width)
        assert max(len(line) for line in text.splitlines()) <= width, text
        assert "research" in text and "timeslice" in text and "a100-0" in text
        # no silent dashes: the used columns are left out and the reason is given once
        assert "—" not in text.split("\n", 1)[1] and "┃ busy" not in text
        assert text.count("not measured") == 1 and "exporter" in text
        assert "none: idle, leaking and oversized pods are found from the used view" in text
    assert "fair share" in _frame(_cluster_snapshot(), 120)
    assert "fair share" not in _frame(_cluster_snapshot(NO_PROMETHEUS), 80)


def test_measured_devices_keep_the_used_columns() -> None:
    from gpugov.observe.snapshot import DeviceView

    snap = _cluster_snapshot()
    snap.devices = [DeviceView("a100-0", "0", "u", "exclusive", 1.0, 0.42, 3 * 2**30,
                               80 * 2**30)]
    text = _frame(snap, 80)
    assert "42 %" in text and "3.0 / 80.0" in text and "not measured" not in text


def test_empty_views_say_why() -> None:
    text = _frame(Snapshot("cluster", used_note="used (busy, memory) not measured: x"), 80)
    assert "no queues: no Queue objects" in text
    assert "no devices: no running pod holds a GPU" in text


def test_top_once_on_a_cluster_without_prometheus_says_why_used_is_empty(
        monkeypatch, tmp_path) -> None:
    """`top --once --kubeconfig` on a cluster with no exporter: the terminal's width (80),
    and the used view's absence explained, not shown as dashes."""
    from gpugov.observe import snapshot

    async def fake_from_cluster(api, prom, tree, window):  # noqa: ANN001, ARG001
        return _cluster_snapshot(snapshot.NO_PROMETHEUS)

    async def fake_api_client(path):  # noqa: ANN001, ARG001
        class Api:
            async def close(self) -> None:
                return None
        return Api()

    monkeypatch.setattr(snapshot, "from_cluster", fake_from_cluster)
    monkeypatch.setattr("gpugov.observe.cluster.api_client", fake_api_client)
    monkeypatch.setenv("COLUMNS", "80")
    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
    r = CliRunner().invoke(app, ["top", "--once", "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80, r.output
    assert "not measured: no --prometheus given" in r.output
