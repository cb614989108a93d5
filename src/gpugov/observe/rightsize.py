"""`gpugov rightsize`: GPU requests per workload from what its pods really used.

The rule (pure, property-tested): recommend `max(peak, p95 x (1 + headroom))`, rounded up
to a step — never below the observed peak, so following the advice cannot cause an out of
memory the workload did not already have. What it frees is `declared - recommended` when
positive; a workload that needs more than it declared is shown as such, not hidden.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from gpugov.observe import names as m
from gpugov.observe.promapi import Prometheus
from gpugov.observe.views import MIB

MEMORY_STEP = 256 * MIB
COMPUTE_STEP = 0.05  # 50 milli
#: suffixes Kubernetes controllers add to pod names (ReplicaSet hash + pod hash; Job/StatefulSet)
_SUFFIX = re.compile(r"(-[a-z0-9]{8,10})?-[a-z0-9]{5}$|-\d+$")


@dataclass(frozen=True)
class Observed:
    namespace: str
    workload: str
    pods: int
    declared_memory: float | None
    declared_compute: float | None
    p95_memory: float
    peak_memory: float
    p95_compute: float
    peak_compute: float


@dataclass(frozen=True)
class Advice:
    observed: Observed
    memory: float  # bytes to request
    compute: float  # 1.0 = one whole GPU

    @property
    def frees_memory(self) -> float:
        d = self.observed.declared_memory
        return 0.0 if d is None else max(0.0, d - self.memory)

    @property
    def frees_compute(self) -> float:
        d = self.observed.declared_compute
        return 0.0 if d is None else max(0.0, d - self.compute)


def workload_of(pod: str) -> str:
    """The controller's name from a pod name (`web-7c9f8d6b5-x2x7q` -> `web`)."""
    base = _SUFFIX.sub("", pod)
    return base or pod


def _up(x: float, step: float) -> float:
    return math.ceil(x / step - 1e-9) * step


def recommend(obs: Observed, headroom: float = 0.2) -> Advice:
    if headroom < 0:
        raise ValueError(f"headroom must be >= 0, got {headroom}")
    # whole bytes first: the step's float tolerance must never round a fractional byte above
    # a step boundary down below the peak
    memory = _up(math.ceil(max(obs.peak_memory, obs.p95_memory * (1 + headroom))), MEMORY_STEP)
    compute = _up(max(obs.peak_compute, obs.p95_compute * (1 + headroom)), COMPUTE_STEP)
    return Advice(obs, max(memory, MEMORY_STEP), max(round(compute, 4), COMPUTE_STEP))


def queries(period: str, step: str, rate_window: str) -> dict[str, str]:
    mem = f"sum by (namespace, pod) ({m.POD_MEMORY_USED})"
    comp = f"sum by (namespace, pod) (rate({m.POD_DEVICE_TIME}[{rate_window}]))"
    return {
        "p95_memory": f"quantile_over_time(0.95, ({mem})[{period}:{step}])",
        "peak_memory": f"max_over_time(({mem})[{period}:{step}])",
        "p95_compute": f"quantile_over_time(0.95, ({comp})[{period}:{step}])",
        "peak_compute": f"max_over_time(({comp})[{period}:{step}])",
        "declared_memory": f"max_over_time({m.MEMORY['declared']}[{period}])",
        "declared_compute": f"max_over_time({m.COMPUTE['declared']}[{period}])",
    }


def group(per_pod: dict[str, dict[tuple[str, str], float]]) -> list[Observed]:
    """Per-pod answers -> per-workload observations (max over the workload's pods; pure)."""
    pods_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for series in ("p95_memory", "peak_memory"):
        for ns, pod in per_pod.get(series, {}):
            pods_of[(ns, workload_of(pod))].add(pod)
    out = []
    for (ns, wl), pods in sorted(pods_of.items()):
        def worst(series: str, ns: str = ns, pods: set[str] = pods) -> float | None:
            vals = [per_pod.get(series, {}).get((ns, p)) for p in pods]
            vals = [v for v in vals if v is not None]
            return max(vals) if vals else None
        out.append(Observed(ns, wl, len(pods), worst("declared_memory"),
                            worst("declared_compute"), worst("p95_memory") or 0.0,
                            worst("peak_memory") or 0.0, worst("p95_compute") or 0.0,
                            worst("peak_compute") or 0.0))
    return out


async def observe(prom: Prometheus, period: str, step: str, rate_window: str,
                  say: Callable[[str], None] = lambda _step: None) -> list[Observed]:
    """`say(step)` before each query: over a long period with many pods Prometheus takes
    seconds per query."""
    per_pod: dict[str, dict[tuple[str, str], float]] = {}
    qs = queries(period, step, rate_window)
    for i, (name, q) in enumerate(qs.items(), 1):
        say(f"query {i}/{len(qs)}: {name} over {period} at {step}")
        per_pod[name] = {(s.labels.get("namespace", ""), s.labels.get("pod", "")): s.value
                         for s in await prom.query(q)}
    return group(per_pod)
