"""A power-constrained fleet (`gpugov replay --scenario power`): racks whose panels cannot
feed every GPU at full power.

Four racks of 4 nodes x 8 H100-SXM5-80GB (700 W TDP, 70 W idle in the power model) = 128
GPUs; a rack at full load would draw 32 x 700 = 22.4 kW. Panels of 16, 20, 20 and 24 kW at
the default 0.80 admission ratio leave room for 16, 21, 21 and 26 GPUs at full power (plus
fractions) out of 32 each. Two teams submit a mix of whole-GPU jobs (1, 2, 4 and 8 GPUs,
some gangs) and soft fractions, more than the fleet holds, so power, not GPUs, is what
binds. Generated from a fixed seed: every run prints the same numbers.
`power_nodes(budgets=False)` is the same fleet without budgets (what the constraint costs).
"""

from __future__ import annotations

import numpy as np
import yaml

from gpugov.control.config import ControlConfig, parse_config
from gpugov.model.cluster import NodeSpec
from gpugov.model.power import PowerDomain
from gpugov.sim.jobs import JobSpec

MODEL = "H100-SXM5-80GB"
#: rack -> panel rating (W)
PANELS = {"r0": 16_000.0, "r1": 20_000.0, "r2": 20_000.0, "r3": 24_000.0}
NODES_PER_RACK, GPUS_PER_NODE = 4, 8

POWER_QUEUES = """
queues:
  - {name: train, quota: {gpu: 64}, weight: 1}
  - {name: infer, quota: {gpu: 64}, weight: 1}
tenants:
  - {namespace: ns-train, queue: train, trust: internal}
  - {namespace: ns-infer, queue: infer, trust: trusted}
priorityClasses:
  - {name: normal, value: 100, preemptible: false}
"""


def power_config() -> ControlConfig:
    return parse_config(yaml.safe_load(POWER_QUEUES), "<built-in power scenario>")


def power_nodes(budgets: bool = True) -> list[NodeSpec]:
    """16 nodes x 8 H100 in four racks (labelled gpugov.io/rack), budgeted unless told."""
    out = []
    for rack, panel in PANELS.items():
        dom = PowerDomain(rack, panel) if budgets else None
        for i in range(NODES_PER_RACK):
            out.append(NodeSpec(f"{rack}-n{i}", 192_000, 2_097_152, GPUS_PER_NODE, MODEL,
                                labels=(("gpugov.io/rack", rack),), power_domain=dom))
    return out


def power_jobs(seed: int = 11, hours: float = 24.0, jobs: int = 600) -> list[JobSpec]:
    """Poisson arrivals over `hours`; sizes from 0.25 GPU to 8-GPU gangs of two."""
    rng = np.random.default_rng(seed)
    times = np.sort(rng.uniform(0, hours * 3600 * 0.8, jobs))
    out = []
    for i, t in enumerate(times):
        kind = rng.choice(["frac", "one", "two", "four", "eight", "gang"],
                          p=[0.2, 0.35, 0.15, 0.15, 0.1, 0.05])
        pods, gpus, milli = {"frac": (1, 1, int(rng.choice([250, 500]))), "one": (1, 1, 1000),
                             "two": (1, 2, 1000), "four": (1, 4, 1000),
                             "eight": (1, 8, 1000), "gang": (2, 8, 1000)}[str(kind)]
        ns = "ns-infer" if kind in ("frac", "one") else "ns-train"
        dur = round(float(rng.lognormal(np.log(2 * 3600), 0.8))) + 300
        out.append(JobSpec(f"{kind}-{i:04d}", ns, "normal", round(float(t)), dur, pods, gpus,
                           milli, 4000 * gpus, 16384 * gpus))
    return out
