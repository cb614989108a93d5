"""Study outputs: the artifact's three `*_discrete.csv` files, a PNG of allocation curves and a
summary table. Files are written to a temporary folder and moved into place only when all of
them are complete, so a failure never leaves half-written results behind."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpugov.sim.curves import columns
from gpugov.sim.study import StudyResult

CURVE_FILES = {"alloc": "alloc_discrete.csv", "frag": "frag_discrete.csv",
               "frag_ratio": "frag_ratio_discrete.csv"}
PLOT_FILE = "alloc_curves.png"
SUMMARY_FILE = "summary.json"


def _cell(v: float) -> str:
    return "" if math.isnan(v) else repr(float(v))


def _write_curves(result: StudyResult, kind: str, path: Path) -> None:
    cols = columns(result.tune)
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["workload", "sc_policy", "tune", "seed", "total_gpus", *map(str, cols)])
        for r in result.runs:
            w.writerow([result.workload, r.label, result.tune, r.seed, r.total_gpus,
                        *(_cell(v) for v in r.curves[kind])])


def _plot(result: StudyResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = np.array(columns(result.tune))
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for i, (label, runs) in enumerate(result.by_policy().items()):
        color = f"C{i}"
        for ax, kind in ((axes[0], "alloc"), (axes[1], "alloc"), (axes[2], "frag")):
            curves = np.array([r.curves[kind] for r in runs], dtype=float)
            with warnings.catch_warnings():  # columns no run reached are NaN: leave gaps
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(curves, axis=0)
                lo, hi = np.nanmin(curves, axis=0), np.nanmax(curves, axis=0)
            ax.plot(cols, mean, color=color, label=label if ax is axes[0] else None)
            ax.fill_between(cols, lo, hi, color=color, alpha=0.2, lw=0)
    axes[0].plot(cols, np.minimum(cols, 100), "k:", lw=0.8, label="ideal")
    axes[0].set_title(f"GPU allocation — {result.workload}")
    axes[1].set_xlim(min(80, cols[-1]), cols[-1])
    axes[1].set_ylim(80, 100)
    axes[1].set_title("zoom (bands: min–max over seeds)")
    axes[2].set_title("fragmented GPU (FGD measure)")
    for ax in axes:
        ax.set_xlabel("arrived GPU request (% of capacity)")
        ax.set_ylabel("% of GPU capacity")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("allocated GPU (% of capacity)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_study(result: StudyResult, outdir: Path | str) -> list[Path]:
    """Write all outputs into `outdir` atomically (all files appear, or none)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gpugov-", dir=outdir))
    try:
        names = []
        for kind, name in CURVE_FILES.items():
            _write_curves(result, kind, tmp / name)
            names.append(name)
        _plot(result, tmp / PLOT_FILE)
        names.append(PLOT_FILE)
        _write_summary(result, tmp / SUMMARY_FILE)
        names.append(SUMMARY_FILE)
        for name in names:
            os.replace(tmp / name, outdir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [outdir / n for n in names]


@dataclass(frozen=True)
class PolicyRow:
    """One line of the summary table (allocation % of GPU capacity, over seeds)."""

    label: str
    seeds: int
    at_100: tuple[float, float, float]  # mean, min, max
    at_end: tuple[float, float, float]
    frag_end: float
    failed_pods: float
    failed_by_reason: dict[str, float]  # mean per seed, by the first constraint nobody met


def _stats(values: list[float]) -> tuple[float, float, float]:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return (math.nan, math.nan, math.nan)
    return (round(float(np.mean(vals)), 2), min(vals), max(vals))


def summarise(result: StudyResult) -> list[PolicyRow]:
    last = columns(result.tune)[-1]
    rows = []
    for label, runs in result.by_policy().items():
        at100 = [float(r.curves["alloc"][100]) if last >= 100 else math.nan for r in runs]
        rows.append(PolicyRow(
            label, len(runs), _stats(at100), _stats([float(r.curves["alloc"][last]) for r in runs]),
            _stats([float(r.curves["frag"][last]) for r in runs])[0],
            float(np.mean([r.pods - r.placed for r in runs])),
            {reason: sum(r.failures.get(reason, 0) for r in runs) / len(runs)
             for reason in sorted({k for r in runs for k in r.failures})},
        ))
    return rows


def _write_summary(result: StudyResult, path: Path) -> None:
    """The printed table, machine-readable (NaN, for columns no run reached, becomes null)."""
    def clean(v: float) -> float | None:
        return None if math.isnan(v) else v

    rows = [{"policy": r.label, "seeds": r.seeds,
             "alloc_at_100": dict(zip(("mean", "min", "max"), map(clean, r.at_100),
                                      strict=True)),
             "alloc_at_end": dict(zip(("mean", "min", "max"), map(clean, r.at_end),
                                      strict=True)),
             "frag_at_end": clean(r.frag_end), "failed_pods": r.failed_pods,
             "failed_by_reason": r.failed_by_reason}
            for r in summarise(result)]
    doc = {"workload": result.workload, "tune": result.tune,
           "end_column": columns(result.tune)[-1], "policies": rows}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def load_targets(path: Path | str, workload: str) -> dict[str, tuple[float, float]]:
    """Published (alloc@100, alloc@130) means per policy label from a targets CSV."""
    out = {}
    with Path(path).open(newline="") as f:
        for row in csv.DictReader(f):
            if row.get("workload") == workload:
                out[row["policy"]] = (float(row["alloc_at_100_mean"]),
                                      float(row["alloc_at_130_mean"]))
    return out
