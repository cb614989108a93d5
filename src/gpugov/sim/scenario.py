"""The built-in multi-tenant scenario (`gpugov replay` with no arguments).

Three orgs on a 128-GPU cluster: research (two teams, bursty, with gangs), prod (serving,
non-preemptible, fractional GPUs) and an external untrusted tenant, whose trust tier allows
only hard isolation: it asks for whole GPUs (this cluster has no MIG devices; a fraction
would be refused with reason `isolation`). Arrivals come in bursts; priorities are mixed.
Generated from a fixed seed, so every run prints the same numbers.
"""

from __future__ import annotations

import numpy as np
import yaml

from gpugov.control.config import ControlConfig, parse_config
from gpugov.model.cluster import NodeSpec
from gpugov.sim.jobs import JobSpec

SCENARIO_QUEUES = """
queues:
  - {name: research, quota: {gpu: 64}, weight: 2}
  - {name: nlp, parent: research, quota: {gpu: 40}, borrowingLimit: {gpu: 48}}
  - {name: vision, parent: research, quota: {gpu: 24}, lendingLimit: {gpu: 16}}
  - {name: prod, quota: {gpu: 40}, weight: 1, priority: 10}
  - {name: serving, parent: prod, quota: {gpu: 40}}
  - {name: external, quota: {gpu: 16}, limit: {gpu: 32}, weight: 1}
  - {name: partner, parent: external, quota: {gpu: 16}}
tenants:
  - {namespace: ns-nlp, queue: nlp, trust: internal}
  - {namespace: ns-vision, queue: vision, trust: internal}
  - {namespace: ns-serving, queue: serving, trust: trusted}
  - {namespace: ns-partner, queue: partner, trust: untrusted}
priorityClasses:
  - {name: critical, value: 1000, preemptible: false}
  - {name: normal, value: 100, preemptible: true, minRuntime: 10m}
  - {name: scavenger, value: 10, preemptible: true}
"""


def scenario_config() -> ControlConfig:
    return parse_config(yaml.safe_load(SCENARIO_QUEUES), "<built-in scenario>")


def scenario_nodes() -> list[NodeSpec]:
    """12 nodes x 8 A100 + 8 nodes x 4 T4 = 128 GPUs."""
    big = [NodeSpec(f"a100-{i:02d}", 96_000, 1_048_576, 8, "A100") for i in range(12)]
    small = [NodeSpec(f"t4-{i:02d}", 48_000, 262_144, 4, "T4") for i in range(8)]
    return big + small


def scenario_jobs(seed: int = 7, hours: float = 48.0) -> list[JobSpec]:
    """Bursty arrivals per tenant; research submits gangs, serving fractional pods."""
    rng = np.random.default_rng(seed)
    out: list[JobSpec] = []
    horizon = hours * 3600

    def burst_times(rate_per_h: float, bursts: int) -> list[float]:
        times: list[float] = []
        for _ in range(bursts):
            t0 = rng.uniform(0, horizon * 0.8)
            n = int(rng.poisson(rate_per_h))
            times.extend(t0 + rng.exponential(300, n).cumsum())
        return sorted(times)

    for t in burst_times(25, 6):  # nlp: gangs of 2-4 pods x 4-8 GPUs, some scavenger
        pods = int(rng.choice([1, 2, 4]))
        gpus = int(rng.choice([1, 4, 8]))
        pclass = str(rng.choice(["normal", "scavenger"], p=[0.6, 0.4]))
        out.append(JobSpec(f"nlp-{len(out):04d}", "ns-nlp", pclass, round(t),
                           round(float(rng.exponential(3 * 3600)) + 600), pods, gpus, 1000,
                           8000 * gpus, 32768 * gpus))
    for t in burst_times(40, 5):  # vision: many 1-2 GPU jobs
        gpus = int(rng.choice([1, 2]))
        out.append(JobSpec(f"vision-{len(out):04d}", "ns-vision", "normal", round(t),
                           round(float(rng.exponential(2 * 3600)) + 300), 1, gpus, 1000,
                           6000 * gpus, 16384 * gpus))
    for i, t in enumerate(np.sort(rng.uniform(0, horizon, 160))):  # serving: steady
        milli = int(rng.choice([250, 500, 1000]))
        out.append(JobSpec(f"serving-{i:04d}", "ns-serving", "critical", round(float(t)),
                           round(float(rng.exponential(6 * 3600)) + 1800), 1, 1, milli,
                           4000, 16384))
    for t in burst_times(30, 4):  # partner: untrusted, so whole GPUs (hard isolation)
        rng.choice([300, 500, 1000])  # the draw of its former fraction: keeps the stream
        out.append(JobSpec(f"partner-{len(out):04d}", "ns-partner", "scavenger", round(t),
                           round(float(rng.exponential(3600)) + 300), 1, 1, 1000, 4000,
                           16384))
    return out
