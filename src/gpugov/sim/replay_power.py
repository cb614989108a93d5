"""Power in the replay: each power domain's admitted (expected) draw over virtual time, and
the fleet's expected energy, for `summary.json`.

The draw is the one state's (model/power.py): every GPU's idle draw plus each allocation's
share of the rest. It is recorded once per event time (the state a cycle leaves is what holds
until the next event), so the maximum is exact and the p99 is time-weighted over the
replay. Without power domains, nodes labelled `gpugov.io/rack` are grouped by that label and
reported the same way, without a budget (`racks`): what the racks would draw unbudgeted.
Energy integrates the same draw: per domain from the state's admitted draw, for the
whole fleet from every node's catalog power model (budgeted or not), so a fleet replayed with
and without budgets can be compared (perf per watt: allocated GPU-seconds per kWh).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.power import DEFAULT_LABEL, device_power_mw

#: milliwatt-seconds (mJ) in a kWh
MJ_PER_KWH = 3.6e9


@dataclass
class PowerTrace:
    state: ClusterState
    times: list[float] = field(default_factory=list)
    domains: list[np.ndarray] = field(default_factory=list)  # admitted mW per domain
    fleet: list[float] = field(default_factory=list)  # expected mW of every GPU
    gpus: list[float] = field(default_factory=list)  # allocated GPUs (milli / 1000)

    def __post_init__(self) -> None:
        st = self.state
        pm = [device_power_mw(s.model, s.gpu_power_cap_w) if s.gpu_count else (0, 0)
              for s in st.nodes]
        self._idle = float(sum(i * s.gpu_count for (i, _), s in zip(pm, st.nodes, strict=True)))
        self._span = np.array([p - i for i, p in pm], dtype=float)
        self._node_idle = np.array([i * s.gpu_count for (i, _), s in zip(pm, st.nodes,
                                                                          strict=True)], float)
        racks = [dict(s.labels).get(DEFAULT_LABEL) for s in st.nodes]
        self.racks = sorted({r for r in racks if r}) if not st.domains else []
        self._rack_of = np.array([self.racks.index(r) if r in self.racks else -1
                                  for r in racks], dtype=np.int64)
        self.rack_mw: list[np.ndarray] = []

    def record(self, now: float) -> None:
        """The state's draw from `now` until the next record."""
        st = self.state
        used = (st.gpu_cap - st.gpu_free).sum(axis=1)
        if self.times and self.times[-1] == now:  # same instant: the later state holds
            self.times.pop(), self.domains.pop(), self.fleet.pop(), self.gpus.pop()
            if self.racks:
                self.rack_mw.pop()
        if self.racks:
            per_node = self._node_idle + self._span * used / MILLI_PER_GPU
            ok = self._rack_of >= 0
            self.rack_mw.append(np.bincount(self._rack_of[ok], per_node[ok],
                                            minlength=len(self.racks)))
        self.times.append(now)
        self.domains.append(st.dom_admitted_mw.copy())
        self.fleet.append(self._idle + float((self._span * used).sum()) / MILLI_PER_GPU)
        self.gpus.append(float(used.sum()) / MILLI_PER_GPU)

    def summary(self, end: float) -> dict:
        """`power` of summary.json (see module doc)."""
        if not self.times:
            return {"domains": [], "fleet_energy_kwh": 0.0, "allocated_gpu_seconds": 0.0,
                    "gpu_seconds_per_kwh": None}
        span = np.diff(np.array(self.times + [max(end, self.times[-1])]))
        out = []
        doms = np.array(self.domains).reshape(len(self.times), len(self.state.domains))
        for k, d in enumerate(self.state.domains):
            mw = doms[:, k].astype(float)
            budget = d.budget_mw
            out.append({
                "domain": d.name, "panel_w": d.panel_w, "ratio": d.ratio,
                "budget_w": budget / 1000,
                "admitted_p99_w": _weighted_quantile(mw, span, 0.99) / 1000,
                "admitted_max_w": float(mw.max()) / 1000,
                "admitted_p99_pct_of_panel": 100 * _weighted_quantile(mw, span, 0.99)
                / (d.panel_w * 1000),
                "admitted_max_pct_of_panel": 100 * float(mw.max()) / (d.panel_w * 1000),
                "over_budget": bool(mw.max() > budget),
                "energy_kwh": float((mw * span).sum()) / MJ_PER_KWH,
            })
        racks = []
        if self.racks:
            arr = np.array(self.rack_mw).reshape(len(self.times), len(self.racks))
            for k, name in enumerate(self.racks):
                mw = arr[:, k]
                racks.append({"rack": name, "admitted_p99_w": _weighted_quantile(mw, span, 0.99)
                              / 1000, "admitted_max_w": float(mw.max()) / 1000,
                              "energy_kwh": float((mw * span).sum()) / MJ_PER_KWH})
        energy = float((np.array(self.fleet) * span).sum()) / MJ_PER_KWH
        gpu_s = float((np.array(self.gpus) * span).sum())
        return {"domains": out, **({"racks": racks} if racks else {}),
                "fleet_energy_kwh": energy, "allocated_gpu_seconds": gpu_s,
                "gpu_seconds_per_kwh": gpu_s / energy if energy > 0 else None}


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The value below which a share `q` of the time is spent."""
    if not len(values) or not weights.sum() > 0:
        return float(values.max()) if len(values) else 0.0
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    i = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(values[order][min(i, len(values) - 1)])


def objective_terms(res) -> dict:  # noqa: ANN001 - sim.replay.ReplayResult
    """The design objective's other terms: completion rate and P50 pending -> running."""
    submitted = res.submitted()
    waits = [res.waits[j.name] for j in submitted if j.name in res.starts]
    done = sum(j.name in res.ends for j in submitted)
    return {"job_completion_rate": done / len(submitted) if submitted else None,
            "wait_p50_s": float(np.percentile(waits, 50)) if waits else 0.0}
