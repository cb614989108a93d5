"""The study's discretised curves: metrics bucketed by arrived GPU request in % of capacity.

Column k (0..ceil(100*tune)) is the mean over the arrivals whose cumulative arrived GPU
request, rounded half-to-even to an integer percent of capacity, equals k; an empty bucket
falls back to the window k-1..k+1, then stays empty (NaN).
"""

from __future__ import annotations

import math

import numpy as np

from gpugov.sim.experiment import RunResult


def columns(tune: float) -> list[int]:
    return list(range(math.ceil(round(100 * tune, 9)) + 1))


def _bucket_means(arrive_pct: np.ndarray, values: np.ndarray, cols: list[int]) -> np.ndarray:
    out = np.full(len(cols), np.nan)
    if len(arrive_pct) == 0:
        return out
    k = arrive_pct.astype(np.int64)
    inside = (k >= 0) & (k <= cols[-1])
    sums = np.bincount(k[inside], weights=values[inside], minlength=len(cols))
    counts = np.bincount(k[inside], minlength=len(cols))
    for c in cols:
        if counts[c]:
            out[c] = sums[c] / counts[c]
        else:
            lo, hi = max(c - 1, 0), min(c + 1, cols[-1])
            n = counts[lo:hi + 1].sum()
            if n:
                out[c] = sums[lo:hi + 1].sum() / n
    return out


def discretise(result: RunResult, tune: float) -> dict[str, np.ndarray]:
    """alloc (% of GPU capacity), frag (% of capacity) and frag_ratio (% of idle) curves."""
    cols = columns(tune)
    if result.total_gpus == 0:
        empty = np.full(len(cols), np.nan)
        return {"alloc": empty, "frag": empty.copy(), "frag_ratio": empty.copy()}
    scale = result.total_gpus * 10.0
    arrive = np.round(result.arrived_milli / scale)
    alloc = np.round(result.used_milli / scale, 2)
    idle = result.idle_milli.astype(float)
    ratio = np.divide(100.0 * result.frag_milli, idle, out=np.zeros_like(idle), where=idle > 0)
    return {
        "alloc": np.round(_bucket_means(arrive, alloc, cols), 2),
        "frag": np.round(_bucket_means(arrive, result.frag_milli, cols) / scale, 2),
        "frag_ratio": _bucket_means(arrive, ratio, cols),
    }
