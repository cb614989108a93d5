"""`gpugov report`: per-tenant chargeback — GPU-hours allocated vs used, idle cost, energy.

Allocated and used GPU-hours integrate the reconciler's per-pod compute series over the
period (a subquery at `step`); idle GPU-hours come from its idle counter; energy (kWh)
integrates its per-pod GPU power (`gpugov_pod_gpu_power_watts`, each pod's share of its GPUs'
measured draw, observe/power.py), priced at `energy_price` per kWh. Outputs (CSV and
PNG) are written atomically: both appear, or neither changes.
"""

from __future__ import annotations

import csv
import io
import os
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
                     energy_price: float = 0.0) -> list[TenantRow]:
    got: dict[str, dict[str, float]] = {}
    for name, q in queries(period, step).items():
        for s in await prom.query(q):
            got.setdefault(s.labels.get("tenant", ""), {})[name] = s.value
    return [TenantRow(t, v.get("allocated", 0.0), v.get("used", 0.0), v.get("idle", 0.0),
                      price, v.get("energy", 0.0), energy_price)
            for t, v in sorted(got.items())]


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


def write_outputs(rows: list[TenantRow], out: Path, period: str) -> list[Path]:
    """chargeback.csv and chargeback.png in `out`, all or nothing."""
    out.mkdir(parents=True, exist_ok=True)
    files = {out / "chargeback.csv": csv_text(rows).encode(),
             out / "chargeback.png": png_bytes(rows, period)}
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
