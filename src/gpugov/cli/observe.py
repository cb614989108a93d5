"""`gpugov verify`, `top`, `rightsize` and `report`: what the GPUs really do."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import (
    _check_out_folder,
    _fail,
    _finite_nonnegative,
    _kubeconfig_file,
    _positive_seconds,
)


@app.command("verify")
def verify_cmd(
    cuda_lib: Path | None = typer.Option(None, "--cuda-lib",
                                         help="folder with libcuda.so.1 (+ libnvidia-ml.so.1)"),
    library: str | None = typer.Option(None, "--library",
                                       help="libgpugov.so to test, or none (default: installed)"),
    json_out: Path | None = typer.Option(None, "--json", help="also write the report here"),
) -> None:
    """Node acceptance: run probes through the CUDA driver and check each isolation claim.

    Exit 0 when no claim fails, 1 when one fails, 2 on bad input.
    """
    from gpugov.observe import verify
    from gpugov.sim.progress import Steps

    try:
        setup = verify.resolve(cuda_lib, library)
        if json_out is not None:
            verify.check_output(setup, json_out)
        with Steps("verify", "starting") as steps:  # seconds of probes: shown on stderr
            claims = verify.run(setup, say=steps.say)
    except verify.VerifyInputError as e:
        raise _fail(str(e)) from None
    for c in claims:
        typer.echo(f"{c.status.upper():8} {c.name:17} {c.evidence}")
    if json_out is not None:
        try:
            verify.write_json(claims, json_out)
        except OSError as e:
            raise _fail(f"cannot write {json_out}: {e.strerror or e}") from None
    raise typer.Exit(verify.exit_code(claims))


def _prom_duration(option: str, value: str) -> str:
    import re

    if not re.fullmatch(r"\d+(ms|s|m|h|d|w)", value):
        raise _fail(f"{option} {value!r}: expected a duration such as 30s, 5m, 2h or 7d")
    return value


@app.command("top")
def top_cmd(
    prometheus: str | None = typer.Option(None, "--prometheus", help="Prometheus URL"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="read the cluster directly (kubeconfig)"),
    queues: Path | None = typer.Option(None, "--queues", help="control-plane config "
                                       "(quotas) when reading the cluster directly"),
    interval: float = typer.Option(2.0, "--interval", callback=_positive_seconds,
                                   help="seconds between refreshes"),
    window: str = typer.Option("5m", "--window", help="rate window"),
    once: bool = typer.Option(False, "--once", help="print one frame and exit"),
) -> None:
    """Live view of queues, devices (allocated vs used) and top offenders; q quits."""
    import asyncio

    from rich.console import Console

    from gpugov.control.config import ConfigError
    from gpugov.observe import top
    from gpugov.observe.cluster import ClusterError, api_client
    from gpugov.observe.promapi import Prometheus, PrometheusError
    from gpugov.observe.reconciler import load_tree
    from gpugov.observe.snapshot import Snapshot, from_cluster, from_prometheus

    window = _prom_duration("--window", window)
    if prometheus is None and kubeconfig is None:
        raise _fail("give --prometheus URL (the reconciler's series) or --kubeconfig FILE "
                    "(read the cluster directly), or both")
    _kubeconfig_file(kubeconfig)
    if prometheus is not None and not prometheus.startswith(("http://", "https://")):
        raise _fail(f"--prometheus {prometheus!r}: expected an http:// or https:// URL")
    if not interval > 0:
        raise _fail(f"--interval must be > 0, got {interval}")
    try:
        tree = load_tree(queues) if queues else None
    except (ConfigError, OSError) as e:
        raise _fail(str(e)) from None

    async def main() -> int:
        api = await api_client(kubeconfig) if kubeconfig is not None else None
        prom = Prometheus(prometheus) if prometheus else None
        try:
            if prom is not None:
                await prom.__aenter__()

            async def fetch() -> Snapshot:
                if api is not None:
                    return await from_cluster(api, prom, tree, window)
                assert prom is not None
                return await from_prometheus(prom, window)

            if once:  # a large cluster's lists take seconds: shown on stderr
                from gpugov.sim.progress import Steps

                with Steps("top --once", "reading the cluster" + (
                        f" and Prometheus at {prometheus}" if prom else "") if api is not None
                        else f"reading Prometheus at {prometheus}"):
                    snap = await fetch()
                if api is None and not (snap.queues or snap.devices or snap.pods):
                    # Prometheus answered with nothing: no data is not an error (exit 0),
                    # one line as `rightsize` and `report` say it, not an empty frame
                    typer.echo(f"no data: no gpugov reconciler series at {prometheus}; "
                               "is `gpugov reconcile` running and scraped?")
                    return 0
                console = Console(width=max(80, Console().width))  # the terminal's, >= 80
                console.print(top.render(snap, width=console.width))
                return 0

            async def fetch_or_say() -> Snapshot:
                try:
                    return await fetch()
                except (PrometheusError, ClusterError) as e:
                    return Snapshot("(no data)", problems=[str(e)])

            await top.live(fetch_or_say, interval)
            return 0
        finally:
            if prom is not None:
                await prom.__aexit__()
            if api is not None:
                await api.close()

    try:
        code = asyncio.run(main())
    except (PrometheusError, ClusterError) as e:
        raise _fail(str(e)) from None
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


def _with_prometheus(url: str, work):  # type: ignore[no-untyped-def]
    """Run `work(prom)` against Prometheus; unreachable = a clear error, exit 2."""
    import asyncio

    from gpugov.observe.promapi import REPORT_TIMEOUT, Prometheus, PrometheusError

    if not url.startswith(("http://", "https://")):
        raise _fail(f"--prometheus {url!r}: expected an http:// or https:// URL")

    async def main():  # type: ignore[no-untyped-def]
        async with Prometheus(url, REPORT_TIMEOUT) as prom:
            return await work(prom)

    try:
        return asyncio.run(main())
    except PrometheusError as e:
        raise _fail(str(e)) from None


@app.command("rightsize")
def rightsize_cmd(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus URL"),
    period: str = typer.Option("7d", "--period", help="history to learn from"),
    step: str = typer.Option("1m", "--step", help="sampling step within the period"),
    rate_window: str = typer.Option("2m", "--rate-window", help="rate window for compute"),
    headroom: float = typer.Option(0.2, "--headroom", callback=_finite_nonnegative,
                                   help="added to p95 (0.2 = 20 %)"),
) -> None:
    """GPU requests per workload from observed p95 memory and compute (never below peak)."""
    from rich.console import Console
    from rich.table import Table

    from gpugov.observe import rightsize

    for opt, val in (("--period", period), ("--step", step), ("--rate-window", rate_window)):
        _prom_duration(opt, val)
    if not 0 <= headroom <= 10:
        raise _fail(f"--headroom must be within 0..10, got {headroom}")
    from gpugov.sim.progress import Steps

    with Steps("rightsize", "connecting") as steps:  # a long --period: seconds per query
        observed = _with_prometheus(prometheus, lambda prom: rightsize.observe(
            prom, period, step, rate_window, say=steps.say))
    gib = 1024 ** 3
    if not observed:
        typer.echo(f"no data: no pod memory series in the last {period} at {prometheus}; "
                   "is the gpugov exporter scraped by this Prometheus?")
        return

    def fmt(x, scale=1.0, f="{:.2f}"):  # type: ignore[no-untyped-def]
        return "—" if x is None else f.format(x / scale)

    # two tables that each fit 80 columns (one had 10 columns and needed 150)
    memory = Table(title=f"GPU memory (GiB), last {period}, headroom {headroom:.0%}")
    compute = Table(title=f"GPU compute (GPUs), last {period}")
    for table in (memory, compute):
        table.add_column("workload", overflow="fold")
        if table is memory:
            table.add_column("pods", justify="right", no_wrap=True)
        for col in ("p95 / peak", "declared", "advise", "frees"):
            table.add_column(col, justify="right", no_wrap=True)
    total_mem = total_comp = 0.0
    for obs in observed:
        a = rightsize.recommend(obs, headroom)
        total_mem += a.frees_memory
        total_comp += a.frees_compute
        name = f"{obs.namespace}/{obs.workload}"
        memory.add_row(name, str(obs.pods),
                       f"{obs.p95_memory / gib:.2f} / {obs.peak_memory / gib:.2f}",
                       fmt(obs.declared_memory, gib), f"{a.memory / gib:.2f}",
                       f"{a.frees_memory / gib:.2f}")
        compute.add_row(name, f"{obs.p95_compute:.2f} / {obs.peak_compute:.2f}",
                        fmt(obs.declared_compute), f"{a.compute:.2f}", f"{a.frees_compute:.2f}")
    memory.caption = f"would free {total_mem / gib:.2f} GiB of GPU memory"
    compute.caption = f"would free {total_comp:.2f} GPUs of compute"
    console = Console()
    console.print(memory)
    console.print(compute)


#: the highest --gpu-hour-price: more is a typo, and its products overflow to inf in the CSV
MAX_PRICE = 1e9


@app.command("report")
def report_cmd(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus URL"),
    period: str = typer.Option("7d", "--period", help="period to charge, e.g. 7d"),
    step: str = typer.Option("1m", "--step", help="integration step"),
    price: float = typer.Option(1.0, "--gpu-hour-price", callback=_finite_nonnegative,
                                help="cost of one GPU-hour"),
    energy_price: float = typer.Option(0.0, "--kwh-price", callback=_finite_nonnegative,
                                       help="cost of one kWh of GPU energy"),
    out: Path = typer.Option(Path("."), "--out",
                             help="folder for chargeback.csv/.png and energy_jobs.csv"),
) -> None:
    """Per-tenant chargeback: GPU-hours allocated vs used, idle cost, GPU energy (kWh) and
    its cost (CSV + PNG); GPU energy and cost per job (energy_jobs.csv)."""
    from gpugov.observe import chargeback

    for opt, val in (("--period", period), ("--step", step)):
        _prom_duration(opt, val)
    if not 0 <= price <= MAX_PRICE:
        raise _fail(f"--gpu-hour-price must be within 0..{MAX_PRICE:g}, got {price}")
    if not 0 <= energy_price <= MAX_PRICE:
        raise _fail(f"--kwh-price must be within 0..{MAX_PRICE:g}, got {energy_price}")
    _check_out_folder(out, [], ("chargeback.csv", "chargeback.png", "energy_jobs.csv"))

    from gpugov.sim.progress import Steps

    async def both(prom):  # noqa: ANN001, ANN202 - a Prometheus client
        return (await chargeback.chargeback(prom, period, step, price, energy_price,
                                            say=steps.say),
                await chargeback.energy_by_job(prom, period, step, energy_price,
                                               say=steps.say))

    with Steps("report", "connecting") as steps:  # a long --period: seconds per query
        rows, jobs = _with_prometheus(prometheus, both)
    if not rows:  # Prometheus answered with nothing: no data is not an error (exit 0)
        typer.echo(f"no data: no gpugov reconciler series in the last {period} at "
                   f"{prometheus}; is `gpugov reconcile` running and scraped? (nothing written)")
        return
    try:
        files = chargeback.write_outputs(rows, out, period, jobs)
    except OSError as e:
        raise _fail(f"cannot write to {out}: {e.strerror or e}") from None
    typer.echo(chargeback.csv_text(rows), nl=False)
    for f in files:
        typer.echo(f"wrote {f}")
