"""`gpugov`, the policy meant to become the production default: FGD's fragmentation gradient
descent with a memory-aware measure (`FragmentationModel.node_frag_memory`).

Every device choice respects GPU memory (as every policy's does). The measure sees every
typical shape, uncut, when shapes name memory (`TypicalPods.complete`), and adds the memory
fragment weighted by `fragmentation.MEMORY_WEIGHT` — chosen by measurement as 0 on the
memory-bound workload (docs/placement-study.md), where it allocates more GPU compute than
FGD-on-milli and BestFit. On workloads whose typical pods name no GPU memory (the openb
traces) the measure is FGD's and it decides exactly as FGD does. Planned, not built: MIG
slices in the measure, topology for multi-GPU pods and energy as a tie-breaker.
"""

from __future__ import annotations

from gpugov.placement.fgd import FgdPolicy


class GpugovPolicy(FgdPolicy):
    name = "gpugov"
    label = "07-gpugov"
    memory_aware = True
