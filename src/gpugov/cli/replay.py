"""`gpugov modes`, `gpugov replay` and `gpugov openb-jobs`: the simulated cluster over time."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import (
    MODEL_HELP,
    _check_out_file,
    _check_out_folder,
    _console,
    _fail,
    _mig_geometry,
    _policy_name,
    _renamed,
)


@app.command("modes")
def modes(
    pod_count: int | None = typer.Option(None, "--pod-count", metavar="N",
                                         help="pods in the generated "
                                         "workload, 1..1,000,000 (default 100)"),
    seed: int = typer.Option(0, "--seed", metavar="N", help="workload seed, 0..4294967295"),
    node_count: int | None = typer.Option(None, "--node-count", metavar="N",
                                          help="nodes of 8 GPUs, "
                                          "1..100,000 (default 16)"),
    model: str = typer.Option("H100-SXM5-80GB", "--model", metavar="MODEL",
                              help="MIG-capable GPU model; " + MODEL_HELP),
    replicas: int = typer.Option(4, "--replicas", metavar="N",
                                 help="time-slice replicas / MPS clients "
                                 "per GPU, 2..64"),
    mixed: bool = typer.Option(False, "--mixed", metavar=" ",
                               help="mixed-mode nodes, tenants of 3 trust "
                               "tiers (--pod-count per tier; --node-count unused): isolation "
                               "per tier"),
    policy: str = typer.Option("bestfit", "--policy", metavar="NAME",
                               help="placement policy that picks nodes (as `gpugov replay`; "
                               "gpugov too)"),
    pods_old: int | None = typer.Option(None, "--pods", metavar="N", hidden=True,
                                        help="deprecated spelling of --pod-count"),
    nodes_old: int | None = typer.Option(None, "--nodes", metavar="N", hidden=True,
                                         help="deprecated spelling of --node-count"),
) -> None:
    """Same workload as whole GPUs, MIG, soft slices, time-slices and MPS: what each delivers."""
    from rich import box
    from rich.table import Table

    from gpugov.sim.modes import LIMITS, compare

    pods = _renamed(pod_count, pods_old, "--pods", "--pod-count")
    pods = 100 if pods is None else pods
    nodes = _renamed(node_count, nodes_old, "--nodes", "--node-count")
    nodes = 16 if nodes is None else nodes
    for flag, value in (("--pod-count", pods), ("--node-count", nodes), ("--seed", seed),
                        ("--replicas", replicas)):
        lo, hi = LIMITS[flag.lstrip("-")]
        if not lo <= value <= hi:
            raise _fail(f"{flag} must be within {lo:,}..{hi:,}, got {value}")
    model, _ = _mig_geometry(model)
    policy = _policy_name(policy)
    from gpugov.sim.progress import Ticker

    if mixed:
        from gpugov.sim.modes import MIXED_POOL, mixed_scenario, print_mixed

        ticker = Ticker("modes --mixed", 3 * pods, "pods")  # 3 trust tiers
        try:
            results = mixed_scenario(pods, seed, model, replicas, policy, tick=ticker.update)
        finally:
            ticker.close()
        print_mixed(results, f"{pods} pods per trust tier (seed {seed}), policy {policy}, on "
                    f"{len(MIXED_POOL)} mixed-mode nodes × 8 {model}")
        return

    ticker = Ticker("modes", 6 * pods, "placements")
    try:
        rows = compare(pods, seed, nodes, 8, model, replicas, policy, tick=ticker.update)
    finally:
        ticker.close()
    table = Table(title=f"{pods} pods (seed {seed}) on {nodes}×8 {model}, policy {policy}",
                  box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="compute placed: share of the cluster's GPU compute; stranded: "
                  "memory of occupied GPUs no pod claims; TS risk: memory time-sliced pods "
                  "may touch / card memory, worst GPU / share of GPUs above 1 (timeslice: "
                  "memory oversubscribed, as the NVIDIA plugin; timeslice-capped: gpugov's "
                  "memory cap)")
    for col in ("mode", "isolation", "pods placed", "compute placed", "stranded",
                "MIG idle slices", "TS risk"):
        table.add_column(col, justify="left" if col in ("mode", "isolation") else "right",
                         no_wrap=col in ("mode", "isolation", "pods placed", "TS risk"),
                         min_width=max(map(len, col.split())))
    for r in rows:
        risk = ("-" if r.ts_max_risk is None
                else f"{r.ts_max_risk:.2f} / {100 * (r.ts_overcommitted or 0):.0f}%")
        table.add_row(r.mode.replace("-", "\n"), str(r.isolation),
                      f"{r.pods_placed}/{r.pods_total}",
                      f"{100 * r.compute_placed:.1f}%", f"{100 * r.stranded_memory:.1f}%",
                      "-" if r.mig_idle_slices is None else str(r.mig_idle_slices), risk)
    console = _console()
    console.print(table)
    refused = [f"  {r.mode}: " + ", ".join(f"{k} {v}" for k, v in r.refused.items())
               for r in rows if r.refused]  # one line per mode: a count never wraps apart
    if refused:
        console.print("refused pods by the engine's reason (gpu-mode: multi-GPU pods, which "
                      "only soft and exclusive GPUs serve whole):", highlight=False)
        for line in refused:
            console.print(line, highlight=False)


REPLAY_PLOTS = ("usage_vs_fair_share.png", "allocation_and_waits.png")
REPLAY_FILES = ("jobs.csv", "allocations.csv", "queues.csv", "summary.json", "snapshot.json",
                *REPLAY_PLOTS)


def _write_replay(res, out: Path, plots: bool) -> dict:  # type: ignore[no-untyped-def]
    """Render the replay's files in a scratch folder beside `out`, then move them in together
    (plots a previous run left there are removed under --no-plots)."""
    import shutil
    import tempfile

    from gpugov.sim.output_files import OutputError, write_folder
    from gpugov.sim.replay_report import write_outputs

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.render-", dir=out.parent))
    except OSError as e:
        raise _fail(f"cannot write {out}: {e.strerror or e}") from None
    try:
        summ = write_outputs(res, scratch / "r", plots)
        files = {p.name: p.read_bytes() for p in sorted((scratch / "r").iterdir())}
        write_folder(out, files, stale=REPLAY_PLOTS)
    except OSError as e:
        raise _fail(f"cannot write {out}: {e.strerror or e}") from None
    except OutputError as e:
        raise _fail(str(e)) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summ


@app.command("replay")
def replay_cmd(
    nodes_file: Path | None = typer.Option(None, "--nodes", metavar="FILE",
                                           help="cluster.yaml (nodePools) or node CSV (openb: "
                                           "sn,cpu_milli,memory_mib,gpu,model); by extension "
                                           "or content"),
    cluster_old: Path | None = typer.Option(None, "--cluster", metavar="FILE", hidden=True,
                                            help="deprecated spelling of --nodes"),
    jobs: Path | None = typer.Option(None, "--jobs", metavar="FILE",
                                     help="job file, or an openb pod CSV"),
    queues: Path | None = typer.Option(None, "--queues", metavar="FILE",
                                       help="queues/tenants YAML"),
    policy: str = typer.Option("gpugov", "--policy", metavar="NAME",
                               help="placement policy: gpugov (the scheduler's default), or "
                               "one of the study's random, dotprod, gpuclustering, "
                               "gpupacking, bestfit, fgd"),
    out: Path | None = typer.Option(None, "--out", metavar="DIR",
                                    help="output folder (default: none)"),
    seed: int = typer.Option(0, "--seed", metavar="N", help="seed of the policy's random "
                             "choices"),
    period: float = typer.Option(0.0, "--period", metavar="SECONDS",
                                 help="extra cycle every N s while pending"),
    until: float | None = typer.Option(None, "--until", metavar="SECONDS",
                                       help="stop the clock at N s"),
    plots: bool = typer.Option(True, "--plots/--no-plots", metavar=" ",
                               help="also write the PNG plots "
                               "(--no-plots removes plots an earlier run left in --out)"),
    scenario: str | None = typer.Option(None, "--scenario", metavar="NAME",
                                        help="built-in scenario: tenants (the default with no "
                                        "files), mixed (MIG, memory slices, time-slice, "
                                        "gangs, taints, power, untrusted) or power (racks "
                                        "whose panels cannot feed every GPU)"),
) -> None:
    """Replay jobs through queues over time; no arguments runs the built-in scenario."""
    nodes_file = _renamed(nodes_file, cluster_old, "--cluster", "--nodes")
    from gpugov.sim.replay import ReplayOptions
    from gpugov.sim.replay_report import InputError, print_summary, run_from_files

    cluster = nodes_file
    if out is not None:
        _check_out_folder(out, [cluster, jobs, queues], REPLAY_FILES)
    try:
        res = run_from_files(cluster, jobs, queues,
                             ReplayOptions(policy=policy, seed=seed, period=period, until=until),
                             scenario)
    except InputError as e:
        raise _fail(str(e)) from None
    if not res.jobs:
        raise _fail(f"{jobs}: no jobs (only a header?)")
    summ = _write_replay(res, out, plots) if out is not None else None
    print_summary(res, summ)
    if out is not None:
        typer.echo(f"wrote {out}/jobs.csv, allocations.csv, queues.csv, summary.json, "
                   "snapshot.json"
                   + (", usage_vs_fair_share.png, allocation_and_waits.png" if plots else ""))


@app.command("openb-jobs")
def openb_jobs_cmd(
    pods: Path = typer.Argument(..., metavar="PODS_CSV",
                                help="openb pod CSV (has creation_time/deletion_time)"),
    out: Path = typer.Option(..., "--out", metavar="FILE",
                             help="job file to write (never one of the inputs)"),
) -> None:
    """Turn an openb pod trace into a replay job file (tenants by QoS and a stable name hash)."""
    from gpugov.sim.jobs import openb_jobs, render_job_file
    from gpugov.sim.output_files import OutputError, write_file
    from gpugov.sim.progress import Ticker
    from gpugov.sim.trace import TraceError

    _check_out_file(out, [pods])
    ticker = Ticker("openb-jobs", 1, "rows, 3 passes")  # a 10x trace takes seconds
    try:
        specs = openb_jobs(pods, tick=lambda done, total: ticker.update(done, total=total))
    except TraceError as e:
        raise _fail(str(e)) from None
    finally:
        ticker.close()
    if not specs:
        raise _fail(f"{pods}: no pods (only a header?)")
    try:
        write_file(out, render_job_file(specs))
    except OutputError as e:
        raise _fail(str(e)) from None
    typer.echo(f"wrote {len(specs)} jobs to {out}")
