"""The mode comparison tells the trade-off users choose between."""

from __future__ import annotations

from gpugov.model.isolation import IsolationLevel
from gpugov.sim.modes import compare, generate_workload


def test_workload_is_seeded() -> None:
    assert generate_workload(50, seed=3) == generate_workload(50, seed=3)


def test_modes_trade_isolation_for_packing() -> None:
    rows = {r.mode: r for r in compare(n_pods=100, seed=0)}
    assert rows["exclusive"].isolation is IsolationLevel.HARD
    assert rows["mig"].isolation is IsolationLevel.HARD
    assert rows["soft"].isolation is IsolationLevel.SOFT
    assert rows["timeslice"].isolation is IsolationLevel.NONE
    # whole GPUs strand the most memory; sharing modes place more pods
    assert rows["exclusive"].stranded_memory > rows["mig"].stranded_memory
    assert rows["mig"].pods_placed > rows["exclusive"].pods_placed
    # time-slicing "fits" by counting replicas: memory may be overcommitted
    assert rows["timeslice"].ts_max_risk is not None and rows["timeslice"].ts_max_risk > 1.0
    assert rows["mig"].mig_idle_slices is not None
