"""`gpugov`, the production default policy: FGD's fragmentation gradient descent in both GPU
dimensions, compute milli and GPU memory.

A typical pod can use a device only if both its milli and its memory fit there, and free
memory no typical pod can use counts as fragment too (in milli units of the card). On
workloads whose typical pods name no GPU memory (the openb traces) the measure is FGD's and
it decides exactly as FGD does; on memory-bound workloads it keeps memory and compute together
where FGD-on-milli strands one of them (bench/bench_memory_bound.py measures both).
Planned, not built yet: MIG slices in the measure, topology for multi-GPU pods and energy
as a tie-breaker.
"""

from __future__ import annotations

from gpugov.placement.fgd import FgdPolicy


class GpugovPolicy(FgdPolicy):
    name = "gpugov"
    label = "07-gpugov"
    memory_aware = True
