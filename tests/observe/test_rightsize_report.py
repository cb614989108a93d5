"""Right-sizing advice and chargeback: the pure rules (property-tested) and the commands
against a real Prometheus holding the demo scenario."""

from __future__ import annotations

import asyncio
import csv
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.observe import chargeback, rightsize
from gpugov.observe.promapi import Prometheus

GIB = 1024 ** 3
amounts = st.floats(min_value=0, max_value=200 * GIB, allow_nan=False)
shares = st.floats(min_value=0, max_value=8, allow_nan=False)


@given(p95=amounts, extra=amounts, cp95=shares, cextra=shares, declared=amounts,
       headroom=st.floats(min_value=0, max_value=2))
# a quarter byte above a 256 MiB step was once rounded down to the step (below the peak)
@example(p95=0.0, extra=268435456.25, cp95=0.0, cextra=0.0, declared=0.0, headroom=0.0)
def test_advice_is_never_below_peak_nor_p95_with_headroom(p95, extra, cp95, cextra, declared,
                                                          headroom) -> None:
    obs = rightsize.Observed("ns", "w", 1, declared, 1.0, p95, p95 + extra, cp95, cp95 + cextra)
    a = rightsize.recommend(obs, headroom)
    assert a.memory >= obs.peak_memory and a.memory >= p95 * (1 + headroom) * (1 - 1e-12)
    assert a.compute >= obs.peak_compute - 1e-9
    assert a.memory % rightsize.MEMORY_STEP == 0
    assert a.frees_memory == max(0.0, declared - a.memory)


def test_negative_headroom_is_refused() -> None:
    with pytest.raises(ValueError, match="headroom"):
        rightsize.recommend(rightsize.Observed("n", "w", 1, None, None, 1, 1, 0, 0), -0.1)


@pytest.mark.parametrize("pod, workload", [
    ("web-7c9f8d6b5-x2x7q", "web"), ("train-abcde", "train"), ("db-0", "db"), ("solo", "solo"),
])
def test_workload_names(pod, workload) -> None:
    assert rightsize.workload_of(pod) == workload


def _run(prom_url: str, work):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        async with Prometheus(prom_url) as prom:
            return await work(prom)
    return asyncio.run(main())


def test_rightsize_advises_the_oversized_pod_down_and_keeps_the_leak_above_its_peak(stack):
    stack.prom.wait_for("rate(gpugov_pod_device_time_seconds_total[2s]) > 0")
    # the 20 s window must hold the workload running, not the stack's start-up (this test
    # may run first, on a stack started a moment ago)
    stack.prom.wait_for("time() - min_over_time(timestamp(gpugov_pod_device_time_seconds_total)"
                        "[40s:1s]) > 22", timeout=60)
    observed = _run(stack.prom.url, lambda p: rightsize.observe(p, "20s", "250ms", "2s"))
    advice = {o.workload: rightsize.recommend(o, 0.2) for o in observed}
    big = advice["oversized"]
    assert big.observed.declared_memory == 40 * GIB
    assert big.memory == 2.5 * GIB  # 2 GiB used: p95 x 1.2 = 2.4, up to 256 MiB steps
    assert big.frees_memory == 37.5 * GIB
    assert 0.1 <= big.compute <= 0.2 and big.frees_compute >= 0.8
    leak = advice["leaky"]
    assert leak.memory >= leak.observed.peak_memory > leak.observed.p95_memory * 0.5
    result = CliRunner().invoke(app, ["rightsize", "--prometheus", stack.prom.url, "--period",
                                      "20s", "--step", "250ms", "--rate-window", "2s"],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "team-b/oversized" in result.output and "would free" in result.output
    # issue 22, finding 13: it printed 150 columns whatever the terminal
    assert max(len(line) for line in result.output.splitlines()) <= 80, result.output
    assert "…" not in result.output


def test_report_writes_per_tenant_chargeback(stack, tmp_path: Path) -> None:
    stack.prom.wait_for("gpugov_idle_allocated_gpu_seconds_total > 1")
    result = CliRunner().invoke(app, ["report", "--prometheus", stack.prom.url, "--period",
                                      "1m", "--step", "250ms", "--gpu-hour-price", "3",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {r["tenant"]: r for r in csv.DictReader((tmp_path / "chargeback.csv").open())}
    assert set(rows) == {"team-a", "team-b"}
    a = {k: float(v) for k, v in rows["team-a"].items() if k != "tenant"}
    # team-a: idle (1 GPU, idle) + leaky (0.5, 45 % busy): most of its allocation is idle
    assert a["allocated_gpu_hours"] > a["used_gpu_hours"] > 0
    assert 0.4 < a["idle_gpu_hours"] / a["allocated_gpu_hours"] < 0.8
    assert a["idle_cost"] == pytest.approx(3 * a["idle_gpu_hours"], abs=0.01)
    assert (tmp_path / "chargeback.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rightsize_and_report_in_a_pipe_print_each_query_as_a_plain_line(
        stack, tmp_path: Path, monkeypatch) -> None:
    """Issue 23: over a long --period each query takes Prometheus seconds; each shows on
    stderr as it starts, also in a pipe; stdout keeps the tables / the CSV alone."""
    from gpugov.sim import progress

    stack.prom.wait_for("gpugov_idle_allocated_gpu_seconds_total > 1")
    real = progress.Steps
    monkeypatch.setattr(progress, "Steps", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 3600}))
    res = CliRunner().invoke(app, ["rightsize", "--prometheus", stack.prom.url, "--period",
                                   "20s", "--step", "250ms", "--rate-window", "2s"])
    assert res.exit_code == 0, res.output
    assert [line.split(", ")[0] for line in res.stderr.splitlines()] == [
        "rightsize: connecting", *(f"rightsize: query {i}/6: {name} over 20s at 250ms"
                                   for i, name in enumerate(rightsize.queries(
                                       "20s", "250ms", "2s"), 1))], res.stderr
    assert "rightsize:" not in res.stdout and "would free" in res.stdout
    res = CliRunner().invoke(app, ["report", "--prometheus", stack.prom.url, "--period",
                                   "1m", "--step", "250ms", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert [line.split(", ")[0] for line in res.stderr.splitlines()] == [
        "report: connecting", "report: query 1/5: allocated over 1m at 250ms",
        "report: query 2/5: used over 1m at 250ms", "report: query 3/5: idle over 1m at 250ms",
        "report: query 4/5: energy over 1m at 250ms",
        "report: query 5/5: energy per job over 1m at 250ms"], res.stderr
    assert res.stdout.startswith("tenant,") and "report:" not in res.stdout


def test_report_outputs_are_all_or_nothing(tmp_path: Path, monkeypatch) -> None:
    rows = [chargeback.TenantRow("t", 2.0, 1.0, 0.5, 1.0)]
    monkeypatch.setattr(chargeback, "png_bytes", lambda *a: (_ for _ in ()).throw(
        OSError("disk full")))
    with pytest.raises(OSError):
        chargeback.write_outputs(rows, tmp_path, "7d")
    assert list(tmp_path.iterdir()) == []


def test_report_refuses_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("")
    for args, words in ((["--period", "7x"], "--period"), (["--out", str(f)], "not a folder"),
                        (["--prometheus", "ftp://x"], "http://")):
        full = ["report", "--prometheus", "http://127.0.0.1:9", *args]
        r = CliRunner().invoke(app, full)
        assert r.exit_code == 2 and words in r.output, r.output


def test_unreachable_prometheus_is_a_clear_error() -> None:
    import obs_prometheus as promserver

    url = f"http://127.0.0.1:{promserver.free_port()}"
    for cmd in (["report"], ["rightsize"], ["top", "--once"]):
        r = CliRunner().invoke(app, [*cmd, "--prometheus", url])
        assert r.exit_code == 2, (cmd, r.output)
        assert f"Prometheus at {url} is unreachable" in r.output


@pytest.mark.parametrize(("promql", "kept"), [
    ("vector(1/0)", 0), ("vector(-1/0)", 0), ("vector(0/0)", 0), ("1/0", 0),
    ("vector(1)", 1), ("2", 1)])
def test_infinite_and_nan_samples_never_reach_a_view(stack, promql, kept) -> None:
    """Issue 22, finding 14: a real Prometheus answers `+Inf`; `rightsize` crashed on it and
    `report` wrote `inf`/`nan` into its CSV. Every query drops non-finite samples."""
    samples = _run(stack.prom.url, lambda prom: prom.query(promql))
    assert len(samples) == kept
    assert all(s.value == s.value and abs(s.value) != float("inf") for s in samples)


def test_a_prometheus_that_does_not_answer_in_time_is_a_clear_error() -> None:
    """A server that accepts the query and never answers: the error says which query and
    how long gpugov waited, not a bare `TimeoutError`; one-shot reports wait as long as
    Prometheus' own query timeout, loops 10 s."""
    import asyncio
    import socket

    from gpugov.observe.promapi import (
        LOOP_TIMEOUT,
        REPORT_TIMEOUT,
        Prometheus,
        PrometheusError,
    )

    assert (LOOP_TIMEOUT, REPORT_TIMEOUT) == (10.0, 120.0)

    async def main() -> str:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()  # accepts (the kernel's backlog), never answers
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        try:
            async with Prometheus(url, timeout=0.3) as prom:
                await prom.query("sum(gpugov_pod_used_memory_bytes)")
        except PrometheusError as e:
            return str(e)
        finally:
            server.close()
        return "no error"

    msg = asyncio.run(main())
    assert "did not answer query 'sum(gpugov_pod_used_memory_bytes)' within 0.3 s" in msg
