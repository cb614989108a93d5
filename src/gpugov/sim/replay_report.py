"""Files a replay writes: jobs.csv, allocations.csv, queues.csv, summary.json, snapshot.json,
PNG plots.

Everything is rendered in memory first and written only at the end, so a failing run leaves
no partial output folder behind.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from gpugov.sim.numbers import csv_number
from gpugov.sim.replay import (
    ALLOCATION_COLUMNS,
    OptionError,
    ReplayOptions,
    ReplayResult,
    allocation_rows,
    job_rows,
    replay,
)
from gpugov.sim.replay_power import objective_terms

JOBS_HEADER = ["name", "queue", "submit_s", "start_s", "end_s", "wait_s", "preemptions",
               "status", "reason"]
QUEUES_HEADER = ["time_s", "queue", "usage_gpus", "fair_share_gpus", "quota_gpus",
                 "pending_jobs", "wait_p50_s", "wait_p95_s", "wait_p99_s"]


def _csv(rows: list[list], header: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def queue_rows(res: ReplayResult) -> list[list]:
    """Per sample and leaf queue; wait percentiles over the jobs started by that time."""
    rows = []
    started = sorted((t, res.waits[n], res.cp.jobs[n].leaf) for n, t in res.starts.items())
    start_t = np.array([s[0] for s in started])
    for i, t in enumerate(res.times):
        upto = int(np.searchsorted(start_t, t, side="right"))
        for k, leaf in enumerate(res.leaves):
            w = np.array([s[1] for s in started[:upto] if s[2] == leaf])
            pct = [csv_number(float(np.percentile(w, p))) if len(w) else "" for p in (50, 95, 99)]
            rows.append([csv_number(t), res.cp.tree.names[leaf], csv_number(res.usage[i, k]),
                         f"{res.fair[i, k]:.3f}",
                         csv_number(res.cp.tree.quota[leaf, 0] / 1000), int(res.pending[i, k]),
                         *pct])
    return rows


def summary(res: ReplayResult) -> dict:
    """summary.json: allocation, fairness, the objective's terms, power per domain (p99 and
    max of admitted draw vs budget, energy; sim/replay_power.py), per-queue rows."""
    alloc = res.gpu_allocation()
    total = res.cp.state.total_gpu_milli / 1000
    return {
        "end_s": res.end, "cycles": res.cycles, "jobs": len(res.submitted()),
        "preemptions": len(res.preemptions),
        "reclaims": sum(e.kind == "reclaim" for e in res.preemptions),
        "cluster_gpus": total,
        "gpu_allocated_mean": float(alloc.mean()) if len(alloc) else 0.0,
        "gpu_allocated_p95": float(np.percentile(alloc, 95)) if len(alloc) else 0.0,
        "gpu_allocated_max": float(alloc.max()) if len(alloc) else 0.0,
        "jain_usage_over_fair_share": res.jain_index(),
        **objective_terms(res),
        "power": res.power,
        "queues": res.summary(),
    }


def plots(res: ReplayResult) -> dict[str, bytes]:
    """The report's PNGs by file name."""
    return {name: _png(fig) for name, fig in figures(res).items()}


def figures(res: ReplayResult) -> dict:
    """The report's figures, on bare Agg canvases (no pyplot global state to leak)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out: dict = {}
    n = len(res.leaves)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(5 * cols, 3 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    hours = res.times / 3600
    for k, leaf in enumerate(res.leaves):
        ax = axes[k // cols][k % cols]
        ax.step(hours, res.usage[:, k], where="post", label="usage")
        ax.step(hours, res.fair[:, k], where="post", label="fair share", linestyle="--")
        ax.axhline(res.cp.tree.quota[leaf, 0] / 1000, color="grey", lw=0.8, label="quota")
        ax.set_title(res.cp.tree.names[leaf])
        ax.set_xlabel("hours")
        ax.set_ylabel("GPUs")
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].axis("off")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    out["usage_vs_fair_share.png"] = fig
    fig = Figure(figsize=(11, 3.5))
    FigureCanvasAgg(fig)
    a1, a2 = fig.subplots(1, 2)
    a1.step(hours, res.gpu_allocation(), where="post")
    a1.set_title(f"GPUs allocated (cluster: {res.cp.state.total_gpu_milli / 1000:g})")
    a1.set_xlabel("hours")
    a1.set_ylabel("GPUs allocated")
    for leaf in res.leaves:
        w = np.sort(res.waits_of(leaf))
        if len(w):
            a2.plot(np.maximum(w, 1), np.arange(1, len(w) + 1) / len(w),
                    label=res.cp.tree.names[leaf])
    a2.set_xscale("log")
    a2.set_xlabel("wait (s, log; 0 shown as 1)")
    a2.set_ylabel("fraction of jobs waiting ≤ x")
    a2.set_title("wait-time CDF per queue")
    a2.legend(fontsize=7)
    fig.tight_layout()
    out["allocation_and_waits.png"] = fig
    return out


def _png(fig) -> bytes:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def write_outputs(res: ReplayResult, out: Path, with_plots: bool = True) -> dict:
    """Render everything, then write it under `out`; returns the summary."""
    summ = summary(res)
    files: dict[str, bytes] = {
        "jobs.csv": _csv(job_rows(res), JOBS_HEADER).encode(),
        "allocations.csv": _csv(allocation_rows(res), list(ALLOCATION_COLUMNS)).encode(),
        "queues.csv": _csv(queue_rows(res), QUEUES_HEADER).encode(),
        "summary.json": json.dumps(summ, indent=2).encode(),
        "snapshot.json": json.dumps(res.snapshot, indent=1).encode(),
    }
    if with_plots:
        files.update(plots(res))
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out / name).write_bytes(data)
    return summ


class InputError(ValueError):
    """Bad replay input (config, nodes, jobs): the CLI prints it and exits 2."""


SCENARIOS = ("tenants", "mixed", "power")


def run_from_files(cluster: Path | None, jobs: Path | None, queues: Path | None,
                   opts: ReplayOptions, scenario: str | None = None) -> ReplayResult:
    """Load and validate every input first, then replay; no files are written here.

    No arguments at all runs the built-in scenario (`scenario`: tenants, the default, or
    mixed); otherwise all three are required. `cluster` is an openb nodes CSV or a
    cluster.yaml (see `sim.fleet`).
    """
    from gpugov.control.config import ConfigError, load_config
    from gpugov.model.cluster_spec import ClusterFileError
    from gpugov.sim.fleet import load_fleet
    from gpugov.sim.jobs import load_job_file
    from gpugov.sim.scenario import scenario_config, scenario_jobs, scenario_nodes
    from gpugov.sim.trace import TraceError

    try:
        opts.check()
    except OptionError as exc:
        raise InputError(str(exc)) from None
    given = [p for p in (cluster, jobs, queues) if p is not None]
    if scenario is not None:
        if scenario not in SCENARIOS:
            raise InputError(f"--scenario: unknown scenario {scenario!r}; allowed: "
                             f"{', '.join(SCENARIOS)}")
        if given:
            raise InputError("--scenario runs a built-in scenario; give it without --nodes, "
                             "--jobs and --queues")
        if scenario == "mixed":
            from gpugov.sim.mixed_scenario import mixed_config, mixed_jobs, mixed_nodes

            return replay(mixed_config(), mixed_nodes(), mixed_jobs(), opts,
                          "<built-in mixed scenario>")
        if scenario == "power":  # racks whose panels cannot feed every GPU (docs/power.md)
            from gpugov.sim.power_scenario import power_config, power_jobs, power_nodes

            return replay(power_config(), power_nodes(), power_jobs(), opts,
                          "<built-in power scenario>")
    if not given:
        return replay(scenario_config(), scenario_nodes(), scenario_jobs(), opts,
                      "<built-in scenario>")
    if len(given) != 3:
        raise InputError("give --nodes, --jobs and --queues together, or none of them "
                         "for the built-in scenario")
    assert cluster is not None and jobs is not None and queues is not None
    try:
        cfg = load_config(queues)
        nodes = load_fleet(cluster)
        specs = load_job_file(jobs)
        return replay(cfg, nodes, specs, opts, str(jobs), str(queues))
    except (ConfigError, TraceError, ClusterFileError) as exc:
        raise InputError(str(exc)) from None
    except KeyError as exc:  # unknown placement policy
        raise InputError(str(exc.args[0])) from None


def print_summary(res: ReplayResult, summ: dict | None = None) -> None:
    """Per-queue waits, usage vs fair share, and the cluster's allocation and fairness."""
    from rich.console import Console
    from rich.table import Table

    summ = summ or summary(res)
    if res.warnings:
        warn = Console(stderr=True)
        for w in res.warnings:
            warn.print(f"warning: {w}", markup=False, highlight=False)
    from rich import box

    rows = [[r["queue"], str(r["jobs"]), str(r["started"]), str(r["rejected"]),
             f"{r['wait_p50_s']:.0f}", f"{r['wait_p95_s']:.0f}", f"{r['wait_p99_s']:.0f}",
             f"{r['mean_gpus']:.1f}", f"{r['mean_fair_gpus']:.1f}",
             "—" if r["usage_over_fair"] is None else f"{r['usage_over_fair']:.3f}",
             str(r["preempted"])] for r in summ["queues"]]
    table = Table(title=f"replay: {summ['jobs']} jobs, {summ['cycles']} cycles, "
                        f"{summ['preemptions']} preemptions ({summ['reclaims']} reclaims)",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True,
                  caption="p50/p95/p99: wait in seconds; ran: started; rej: rejected; "
                          "GPUs, fair: mean over time (fair = fair share); evicted: preempted")
    cols = ("queue", "jobs", "ran", "rej", "p50", "p95", "p99", "GPUs", "fair", "use/fair",
            "evicted")
    for k, col in enumerate(cols):
        # numbers are never cut: a column is at least as wide as its widest cell; short
        # headers keep the table inside an 80-column terminal
        widest = max([len(row[k]) for row in rows] + [len(col)])
        table.add_column(col, justify="left" if k == 0 else "right",
                         min_width=widest if k else min(widest, 12), overflow="fold")
    for row in rows:
        table.add_row(*row)
    console = Console()  # the terminal's width (80 when not a terminal)
    console.print(table)
    console.print(
        f"GPU allocation over time: mean {summ['gpu_allocated_mean']:.1f}, p95 "
        f"{summ['gpu_allocated_p95']:.1f}, max {summ['gpu_allocated_max']:.1f} of "
        f"{summ['cluster_gpus']:g} GPUs; Jain's index of usage/fair share: "
        f"{summ['jain_usage_over_fair_share']:.4f}")
