"""What one scheduling cycle did: jobs started and preemption events (plain data).

Shared by the cycle (`cycle.py`), which fills it, and preemption (`preemption.py`), which adds
its evictions; neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpugov.control.workload import Job


@dataclass(frozen=True, slots=True)
class PreemptionEvent:
    victim: str
    victim_queue: str
    preemptor: str
    preemptor_queue: str
    kind: str  # "preempt" (same queue, priority) or "reclaim" (across queues)


@dataclass
class CycleResult:
    started: list[Job] = field(default_factory=list)
    preempted: list[PreemptionEvent] = field(default_factory=list)
    considered: int = 0
    fair: np.ndarray | None = None
    skipped: bool = False  # provably the same as the previous, quiet, cycle (see cycle())
