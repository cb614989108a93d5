"""Jobs as the control plane sees them: a gang of identical pods in one leaf queue.

A job with `pods > 1` is a gang: all pods run together or none does. `request` is what
placement is asked for: the pod with its tenant's trust tier applied where the driver did not
set it (`placement_request`): the isolation floor of the tier, a seal for untrusted tenants
(never share a device with another tenant) and the tenant's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpugov.control.resources import RESOURCES, ResourceSet, demand_estimate
from gpugov.control.schema import PriorityClassConfig
from gpugov.model.isolation import MIN_ISOLATION, TrustTier
from gpugov.model.request import Allocation, PodRequest

PENDING, RUNNING, FINISHED, REJECTED = "pending", "running", "finished", "rejected"


def placement_request(pod: PodRequest, trust: TrustTier, tenant: str = "") -> PodRequest:
    """The request placement sees: at least the isolation floor of `trust`
    (`model.isolation.MIN_ISOLATION`: untrusted hard, internal soft, trusted none), sealed for
    an untrusted tenant, and `tenant` when the pod names none. What the driver set is kept
    when it is stricter (never loosened). An untrusted soft slice is therefore refused by
    placement (reason `isolation`), not silently widened: it must ask for a MIG profile or a
    whole GPU."""
    floor = max(pod.min_isolation, MIN_ISOLATION[trust]) if pod.gpu_count else pod.min_isolation
    sealed = pod.sealed or (trust is TrustTier.UNTRUSTED and pod.gpu_count > 0)
    name = pod.tenant or tenant
    if (floor, sealed, name) == (pod.min_isolation, pod.sealed, pod.tenant):
        return pod
    return replace(pod, min_isolation=floor, sealed=sealed, tenant=name)


#: the resource set of a job not yet submitted (no MIG columns); `ControlPlane.submit`
#: recomputes `Job.demand` over the plane's own columns
_BASE = ResourceSet(RESOURCES)


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
    #: the tenant (namespace) the job came from, if the driver knows it: sealed pods of one
    #: tenant may share a device with each other (a request's own `tenant` wins)
    tenant: str = ""
    # -- state --------------------------------------------------------------------------
    status: str = PENDING
    start: float = -1.0
    allocations: list[Allocation] = field(default_factory=list)
    preemptions: int = 0
    reason: str = ""
    detail: str = ""
    #: the dimension that blocked it last: a `model.cluster.REASONS` code (placement) or a
    #: queue resource (quota: gpu, gpumem, mig-1g.10gb, ...); "" when none
    blocked_by: str = ""
    attempt: int = 0  # bumped on every start, so stale finish events can be ignored

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError(f"job {self.name}: pods must be >= 1, got {self.pods}")
        self.request = placement_request(self.pod, self.trust, self.tenant)
        r = self.request
        #: what it asks (before placement: a lower bound, `resources.demand_estimate`)
        self.demand = demand_estimate(_BASE, r, self.pods, {})
        #: what it holds while running (from its allocations, `resources.charge_of`)
        self.charged = self.demand
        # immutable, and looked up for every pending job in every cycle: build it once
        self._shape = (r.cpu_milli, r.memory_mib, r.gpu_count, r.gpu_milli, r.models, self.pods,
                       r.gpu_memory_mib, r.gpu_memory_percent, r.nvlink)
        if not r.is_plain or r.mode is not None or r.tenant:
            self._shape += (r.mode, r.mig_profile, int(r.min_isolation), r.tenant, r.sealed,
                            r.node_selector, r.tolerations, r.oversubscribe, r.node_affinity,
                            r.preferred, r.pods)

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
