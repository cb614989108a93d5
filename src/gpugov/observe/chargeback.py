"""`gpugov report`: per-tenant chargeback — GPU-hours allocated vs used, idle cost, energy.

Allocated and used GPU-hours integrate the reconciler's per-pod compute series over the
period (a subquery at `step`); idle GPU-hours come from its idle counter; energy (kWh)
integrates its per-pod GPU power (`gpugov_pod_gpu_power_watts`, each pod's share of its GPUs'
measured draw, observe/power.py), priced at `energy_price` per kWh, per tenant and per job
(energy_jobs.csv: the pods of one controller, named as `gpugov rightsize` names them).
Outputs (CSVs and PNG) are written atomically: all appear, or none changes.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpugov.observe import names as m
from gpugov.observe.promapi import Prometheus

_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
COLUMNS = ("tenant", "allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours",
           "efficiency", "allocated_cost", "idle_cost", "energy_kwh", "energy_cost")


def seconds(duration: str) -> float:
    """Seconds in a Prometheus duration such as 7d, 90m, 250ms."""
    import re

    match = re.fullmatch(r"(\d+)(ms|s|m|h|d|w)", duration)
    if not match:
        raise ValueError(f"{duration!r} is not a duration; use e.g. 30s, 5m, 2h, 7d")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True)
class TenantRow:
    tenant: str
    allocated_gpu_hours: float
    used_gpu_hours: float
    idle_gpu_hours: float
    price: float
    energy_kwh: float = 0.0
    energy_price: float = 0.0

    @property
    def efficiency(self) -> float | None:
        return self.used_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours else None

    def cells(self) -> list[str]:
        eff = self.efficiency
        return [self.tenant, f"{self.allocated_gpu_hours:.4f}", f"{self.used_gpu_hours:.4f}",
                f"{self.idle_gpu_hours:.4f}", "" if eff is None else f"{eff:.4f}",
                f"{self.allocated_gpu_hours * self.price:.2f}",
                f"{self.idle_gpu_hours * self.price:.2f}", f"{self.energy_kwh:.6f}",
                f"{self.energy_kwh * self.energy_price:.2f}"]


def queries(period: str, step: str) -> dict[str, str]:
    step_h = seconds(step) / 3600
    return {
        "allocated": f"sum_over_time((sum by (tenant) ({m.COMPUTE['allocated']}))"
                     f"[{period}:{step}]) * {step_h!r}",
        "used": f"sum_over_time((sum by (tenant) ({m.COMPUTE['used']}))[{period}:{step}])"
                f" * {step_h!r}",
        "idle": f"sum by (tenant) (increase({m.IDLE_ALLOCATED}[{period}])) / 3600",
        "energy": f"sum_over_time((sum by (tenant) ({m.POD_GPU_POWER}))[{period}:{step}])"
                  f" * {seconds(step) / 3.6e6!r}",
    }


async def chargeback(prom: Prometheus, period: str, step: str, price: float,
                     energy_price: float = 0.0,
                     say: Callable[[str], None] = lambda _step: None) -> list[TenantRow]:
    """`say(step)` before each query (seconds each over a long period with many pods)."""
    got: dict[str, dict[str, float]] = {}
    qs = queries(period, step)
    for i, (name, q) in enumerate(qs.items(), 1):
        say(f"query {i}/{len(qs) + 1}: {name} over {period} at {step}")
        for s in await prom.query(q):
            got.setdefault(s.labels.get("tenant", ""), {})[name] = s.value
    return [TenantRow(t, v.get("allocated", 0.0), v.get("used", 0.0), v.get("idle", 0.0),
                      price, v.get("energy", 0.0), energy_price)
            for t, v in sorted(got.items())]


JOB_COLUMNS = ("namespace", "job", "tenant", "energy_kwh", "energy_cost")


@dataclass(frozen=True)
class JobEnergy:
    """GPU energy of one job: the pods of one controller (`rightsize.workload_of`)."""

    namespace: str
    job: str
    tenant: str
    energy_kwh: float
    energy_price: float

    def cells(self) -> list[str]:
        return [self.namespace, self.job, self.tenant, f"{self.energy_kwh:.6f}",
                f"{self.energy_kwh * self.energy_price:.2f}"]


async def energy_by_job(prom: Prometheus, period: str, step: str, energy_price: float = 0.0,
                        say: Callable[[str], None] = lambda _step: None) -> list[JobEnergy]:
    """Per job: its pods' GPU power integrated over the period (kWh) and its cost."""
    from gpugov.observe.rightsize import workload_of

    n = len(queries(period, step)) + 1  # the last of `report`'s queries
    say(f"query {n}/{n}: energy per job over {period} at {step}")

    q = (f"sum_over_time((sum by (namespace, pod, tenant) ({m.POD_GPU_POWER}))"
         f"[{period}:{step}]) * {seconds(step) / 3.6e6!r}")
    got: dict[tuple[str, str, str], float] = {}
    for s in await prom.query(q):
        key = (s.labels.get("namespace", ""), workload_of(s.labels.get("pod", "")),
               s.labels.get("tenant", ""))
        got[key] = got.get(key, 0.0) + s.value
    return [JobEnergy(ns, job, tenant, kwh, energy_price)
            for (ns, job, tenant), kwh in sorted(got.items())]


def jobs_csv_text(rows: list[JobEnergy]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(JOB_COLUMNS)
    for r in rows:
        w.writerow(r.cells())
    return buf.getvalue()


def csv_text(rows: list[TenantRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow(r.cells())
    return buf.getvalue()


def png_bytes(rows: list[TenantRow], period: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows) + 3), 4))
    x = np.arange(len(rows))
    for i, (label, attr) in enumerate((("allocated", "allocated_gpu_hours"),
                                       ("used", "used_gpu_hours"),
                                       ("idle", "idle_gpu_hours"))):
        ax.bar(x + (i - 1) * 0.27, [getattr(r, attr) for r in rows], 0.27, label=label)
    ax.set_xticks(x, [r.tenant for r in rows])
    ax.set_ylabel("GPU-hours")
    ax.set_title(f"GPU-hours per tenant, last {period}")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def write_outputs(rows: list[TenantRow], out: Path, period: str,
                  jobs: list[JobEnergy] | None = None) -> list[Path]:
    """chargeback.csv and chargeback.png (and, with `jobs`, energy_jobs.csv) in `out`, all
    or nothing."""
    out.mkdir(parents=True, exist_ok=True)
    files = {out / "chargeback.csv": csv_text(rows).encode(),
             out / "chargeback.png": png_bytes(rows, period)}
    if jobs is not None:
        files[out / "energy_jobs.csv"] = jobs_csv_text(jobs).encode()
    temps = []
    try:
        for path, data in files.items():
            tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
            tmp.write_bytes(data)
            temps.append((tmp, path))
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
    return list(files)
