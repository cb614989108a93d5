"""Study outputs: the artifact's three `*_discrete.csv` files, a PNG of allocation curves and a
summary table. Everything is rendered to bytes first and written by `sim.output_files` (a
temporary folder beside the destination, renamed into place only when all files are complete),
so a failure never leaves half-written results behind."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpugov.sim.curves import columns
from gpugov.sim.output_files import write_folder
from gpugov.sim.png_chart import (
    MARGIN_BOTTOM,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    MARGIN_TOP,
    SIZE,
    Chart,
    Panel,
    min_mean_max,
)
from gpugov.sim.study import StudyResult
from gpugov.sim.text_input import InputFileError, number, read_table

CURVE_FILES = {"alloc": "alloc_discrete.csv", "frag": "frag_discrete.csv",
               "frag_ratio": "frag_ratio_discrete.csv"}
PLOT_FILE = "alloc_curves.png"
SUMMARY_FILE = "summary.json"


def _cell(v: float) -> str:
    return "" if math.isnan(v) else repr(float(v))


def _curves_csv(result: StudyResult, kind: str) -> bytes:
    cols = columns(result.tune)
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["workload", "sc_policy", "tune", "seed", "total_gpus", *map(str, cols)])
    for r in result.runs:
        w.writerow([result.workload, r.label, result.tune, r.seed, r.total_gpus,
                    *(_cell(v) for v in r.curves[kind])])
    return f.getvalue().encode()


#: one clearly different colour per policy (FGD and GpuPacking used to look alike)
POLICY_COLORS = {"01-Random": "#7f7f7f", "02-DotProd": "#ff7f0e", "03-GpuClustering": "#2ca02c",
                 "04-GpuPacking": "#1f77b4", "05-BestFit": "#e377c2", "06-FGD": "#d62728"}
_SPARE_COLORS = ("#8c564b", "#9467bd", "#17becf", "#bcbd22", "#000000")


def policy_color(label: str, i: int) -> str:
    return POLICY_COLORS.get(label, _SPARE_COLORS[i % len(_SPARE_COLORS)])


def plot_figure(result: StudyResult, published: dict[str, tuple[float, float]] | None = None
                ) -> Chart:
    """The curves figure: allocation, a zoom, fragmentation; bands = min–max over seeds;
    published @100/@130 as hollow diamonds. Drawn with Pillow (`sim.png_chart` says why)."""
    published = published or {}
    cols = np.array(columns(result.tune), dtype=float)
    last = float(cols[-1])
    runs_by = result.by_policy()
    stats = {label: {kind: min_mean_max(np.array([r.curves[kind] for r in runs], dtype=float))
                     for kind in ("alloc", "frag")}
             for label, runs in runs_by.items()}
    frag_top = max([float(np.nanmax(s["frag"][2])) for s in stats.values()
                    if np.isfinite(s["frag"][2]).any()] or [1.0])
    right = max(last, 130 if published else 0) + (2 if published else 0)  # whole markers
    x_label = "arrived GPU request (% of capacity)"
    alloc_label = "allocated GPU (% of capacity)"
    width = (SIZE[0] - 3 * (MARGIN_LEFT + MARGIN_RIGHT)) // 3
    boxes = [(MARGIN_LEFT + k * (width + MARGIN_LEFT + MARGIN_RIGHT), MARGIN_TOP,
              MARGIN_LEFT + k * (width + MARGIN_LEFT + MARGIN_RIGHT) + width,
              SIZE[1] - MARGIN_BOTTOM) for k in range(3)]
    panels = [
        Panel(boxes[0], (0, right), (0, 102), f"GPU allocation — {result.workload}", x_label,
              alloc_label),
        # the zoom shows the last stretch: from 80 % arrived, or the last 20 points of a short
        # run (a --tune below 0.8 once gave it zero width: NaN ticks, a crash after the work)
        Panel(boxes[1], (min(80.0, max(0.0, right - 20.0)), right), (80, 100),
              "zoom (bands: min–max over seeds" + ("; ◇ published)" if published else ")"),
              x_label, alloc_label),
        Panel(boxes[2], (0, right), (0, frag_top * 1.05), "fragmented GPU (FGD measure)",
              x_label, "fragmented GPU (% of capacity)"),
    ]
    chart = Chart(panels)
    for i, label in enumerate(runs_by):
        colour = policy_color(label, i)
        for panel, kind in ((0, "alloc"), (1, "alloc"), (2, "frag")):
            mean, lo, hi = stats[label][kind]
            chart.band(panel, cols, lo, hi, colour)
            chart.line(panel, cols, mean, colour)
        panels[0].legend.append((label, colour, "line"))
        if label in published:
            for panel in (0, 1):
                chart.markers(panel, [100, 130], published[label], colour)
            panels[0].legend.append((f"{label} published", colour, "marker"))
    chart.line(0, cols, np.minimum(cols, 100), "black", dotted=True)
    panels[0].legend.append(("ideal", "black", "dotted"))
    return chart


def _plot_png(result: StudyResult, published: dict[str, tuple[float, float]] | None) -> bytes:
    return plot_figure(result, published).png()


OUTPUT_FILES = (*CURVE_FILES.values(), PLOT_FILE, SUMMARY_FILE)


def write_study(result: StudyResult, outdir: Path | str,
                published: dict[str, tuple[float, float]] | None = None) -> list[Path]:
    """Write all outputs into `outdir` atomically (all files appear, or none)."""
    files = {name: _curves_csv(result, kind) for kind, name in CURVE_FILES.items()}
    files[PLOT_FILE] = _plot_png(result, published)
    files[SUMMARY_FILE] = _summary_json(result)
    return write_folder(Path(outdir), files)


@dataclass(frozen=True)
class ColumnStats:
    """Allocation at one column over the seeds that reached it (a seed whose arrivals stop
    short of a column has no value there: it is not averaged in, it is counted out)."""

    mean: float
    min: float
    max: float
    seeds: int  # how many seeds reached the column

    def as_dict(self) -> dict:
        def clean(v: float) -> float | None:
            return None if math.isnan(v) else v
        return {"mean": clean(self.mean), "min": clean(self.min), "max": clean(self.max),
                "seeds": self.seeds}


@dataclass(frozen=True)
class PolicyRow:
    """One line of the summary table (allocation % of GPU capacity, over seeds)."""

    label: str
    seeds: int
    at_100: ColumnStats
    at_end: ColumnStats
    frag_end: float
    failed_pods: float
    failed_by_reason: dict[str, float]  # mean per seed, by the first constraint nobody met
    at_130: ColumnStats | None = None  # when the run reaches 130 % (the published column)


def _stats(values: list[float]) -> ColumnStats:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return ColumnStats(math.nan, math.nan, math.nan, 0)
    return ColumnStats(round(float(np.mean(vals)), 2), min(vals), max(vals), len(vals))


def _at(runs, kind: str, col: int) -> list[float]:
    return [float(r.curves[kind][col]) if col < len(r.curves[kind]) else math.nan
            for r in runs]


def summarise(result: StudyResult) -> list[PolicyRow]:
    last = columns(result.tune)[-1]
    rows = []
    for label, runs in result.by_policy().items():
        rows.append(PolicyRow(
            label, len(runs), _stats(_at(runs, "alloc", 100)), _stats(_at(runs, "alloc", last)),
            _stats(_at(runs, "frag", last)).mean,
            float(np.mean([r.pods - r.placed for r in runs])),
            {reason: sum(r.failures.get(reason, 0) for r in runs) / len(runs)
             for reason in sorted({k for r in runs for k in r.failures})},
            _stats(_at(runs, "alloc", 130)) if last >= 130 else None,
        ))
    return rows


def _summary_json(result: StudyResult) -> bytes:
    """The printed table, machine-readable (columns no run reached: null, seeds 0)."""
    def clean(v: float) -> float | None:
        return None if math.isnan(v) else v

    rows = [{"policy": r.label, "seeds": r.seeds,
             "alloc_at_100": r.at_100.as_dict(), "alloc_at_end": r.at_end.as_dict(),
             **({"alloc_at_130": r.at_130.as_dict()} if r.at_130 else {}),
             "frag_at_end": clean(r.frag_end), "failed_pods": r.failed_pods,
             "failed_by_reason": r.failed_by_reason}
            for r in summarise(result)]
    doc = {"workload": result.workload, "tune": result.tune,
           "end_column": columns(result.tune)[-1], "policies": rows}
    return (json.dumps(doc, indent=2) + "\n").encode()


TARGET_COLUMNS = ("workload", "policy", "alloc_at_100_mean", "alloc_at_130_mean")


def load_targets(path: Path | str, workload: str) -> dict[str, tuple[float, float]]:
    """Published (alloc@100, alloc@130) means per policy label from a targets CSV.

    Policy cells may be labels (`06-FGD`) or names (`fgd`); they are keyed by label."""
    from gpugov.placement.registry import get_policy

    path = Path(path)
    out = {}
    for line, row in read_table(path, TARGET_COLUMNS):
        if row["workload"] != workload:
            continue
        try:
            label = get_policy(row["policy"]).label
        except KeyError as exc:
            raise InputFileError(path, line, "policy", exc.args[0]) from None
        if label in out:  # two published numbers for one policy: which is meant?
            raise InputFileError(path, line, "policy", f"{row['policy']!r}: {label} of "
                                 f"workload {workload!r} is listed twice")
        out[label] = (number(path, line, row, "alloc_at_100_mean", lo=0, hi=100),
                      number(path, line, row, "alloc_at_130_mean", lo=0, hi=100))
    return out
