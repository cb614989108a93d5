"""Jobs as the control plane sees them: a gang of identical pods in one leaf queue.

A job with `pods > 1` is a gang: all pods run together or none does. `request` is what
placement is asked for; for an untrusted tenant a fractional pod is rounded up to a whole
device (so no other tenant can share it), and the queue is charged for the whole device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpugov.control.config import PriorityClassConfig
from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.isolation import TrustTier
from gpugov.model.request import Allocation, PodRequest

PENDING, RUNNING, FINISHED, REJECTED = "pending", "running", "finished", "rejected"


def placement_request(pod: PodRequest, trust: TrustTier) -> PodRequest:
    """The request placement sees: untrusted fractional pods take a whole device (one with
    at least the GPU memory they named)."""
    if trust is TrustTier.UNTRUSTED and pod.is_sharing:
        return PodRequest(pod.name, pod.cpu_milli, pod.memory_mib, 1, MILLI_PER_GPU, pod.models,
                          pod.gpu_memory_mib)
    return pod


@dataclass(eq=False)
class Job:
    """One schedulable unit. Mutable fields are owned by the control plane."""

    name: str
    leaf: int
    pclass: PriorityClassConfig
    submit: float
    pods: int
    pod: PodRequest
    trust: TrustTier = TrustTier.INTERNAL
    duration: float = 0.0  # used by the simulator only; the cycle never reads it
    seq: int = 0  # submission order, the final tie-break
    # -- state --------------------------------------------------------------------------
    status: str = PENDING
    start: float = -1.0
    allocations: list[Allocation] = field(default_factory=list)
    preemptions: int = 0
    reason: str = ""
    detail: str = ""
    attempt: int = 0  # bumped on every start, so stale finish events can be ignored

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError(f"job {self.name}: pods must be >= 1, got {self.pods}")
        self.request = placement_request(self.pod, self.trust)
        r = self.request
        self.demand = np.array([r.total_gpu_milli, r.cpu_milli, r.memory_mib],
                               dtype=np.float64) * self.pods
        # immutable, and looked up for every pending job in every cycle: build it once
        self._shape = (r.cpu_milli, r.memory_mib, r.gpu_count, r.gpu_milli, r.models, self.pods,
                       r.gpu_memory_mib)

    @property
    def priority(self) -> int:
        return self.pclass.value

    @property
    def pinned(self) -> bool:
        """Non-preemptible jobs may only use guaranteed quota."""
        return not self.pclass.preemptible

    @property
    def order_key(self) -> tuple[int, float, int]:
        """Within a queue: higher priority first, then earlier submit, then submission order."""
        return (-self.pclass.value, self.submit, self.seq)

    def shape_key(self) -> tuple:
        """What placement and quota outcomes depend on (jobs with equal keys fare alike)."""
        return self._shape
