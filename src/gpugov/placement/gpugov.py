"""`gpugov`, the policy meant to become the production default: FGD's fragmentation gradient
descent in both GPU dimensions, compute milli and GPU memory.

A typical pod can use a device only if both its milli and its memory fit there, and free
memory no typical pod can use counts as fragment too (in milli units of the card). On
workloads whose typical pods name no GPU memory (the openb traces) the measure is FGD's and
it decides exactly as FGD does. On the generated memory-bound workload it does NOT yet beat
FGD-on-milli (bench/bench_memory_bound.py; docs/placement-study.md has the table), so it is
nobody's default yet. Planned, not built: weights chosen by measurement, MIG slices in the
measure, topology for multi-GPU pods and energy as a tie-breaker.
"""

from __future__ import annotations

from gpugov.placement.fgd import FgdPolicy


class GpugovPolicy(FgdPolicy):
    name = "gpugov"
    label = "07-gpugov"
    memory_aware = True
