"""The mode comparison tells the trade-off users choose between, decided on the one state."""

from __future__ import annotations

import numpy as np
import pytest

from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel, TrustTier
from gpugov.model.mig import get_geometry
from gpugov.sim.modes import (
    Pod,
    compare,
    compile_for,
    generate_workload,
    mixed_scenario,
    simulate,
)

H100 = "H100-SXM5-80GB"
GIB = 1024


def test_workload_is_seeded() -> None:
    assert generate_workload(50, seed=3) == generate_workload(50, seed=3)


def test_modes_trade_isolation_for_packing() -> None:
    rows = {r.mode: r for r in compare(n_pods=100, seed=0)}
    assert list(rows) == ["exclusive", "mig", "soft", "timeslice", "timeslice-capped", "mps"]
    assert rows["exclusive"].isolation is IsolationLevel.HARD
    assert rows["mig"].isolation is IsolationLevel.HARD
    assert rows["soft"].isolation is IsolationLevel.SOFT
    assert rows["timeslice"].isolation is IsolationLevel.NONE
    # whole GPUs strand the most memory; soft slices place the most pods
    assert rows["exclusive"].stranded_memory > rows["mig"].stranded_memory
    assert rows["soft"].pods_placed > rows["exclusive"].pods_placed
    # time-slicing "fits" by counting replicas: memory may be overcommitted, unless capped
    assert rows["timeslice"].ts_max_risk is not None and rows["timeslice"].ts_max_risk > 1.0
    capped = rows["timeslice-capped"]
    assert capped.ts_max_risk is not None and capped.ts_max_risk <= 1.0
    assert capped.ts_overcommitted == 0.0
    assert rows["mig"].mig_idle_slices is not None


def test_every_pod_is_placed_or_refused_with_the_engines_reason() -> None:
    pods = generate_workload(200, 5)
    multi = sum(p.count > 1 for p in pods)
    for r in compare(n_pods=200, seed=5, nodes=4):
        assert r.pods_placed + sum(r.refused.values()) == r.pods_total == 200
        if r.mode in ("mig", "timeslice", "timeslice-capped", "mps"):
            # multi-GPU pods need whole devices, which only soft and exclusive GPUs give
            assert r.refused.get("gpu-mode") == multi
        else:
            assert "gpu-mode" not in r.refused


@pytest.mark.parametrize("mode", list(DeviceMode))
def test_a_full_cluster_refuses_and_counts_the_rest(mode: DeviceMode) -> None:
    r = simulate(mode, generate_workload(600, 3), 2, 8, H100, 2)
    assert r.pods_placed < r.pods_total and 0 < r.compute_placed <= 1.0 + 1e-9
    assert r.refused


def test_compiled_forms_per_mode() -> None:
    nb = Pod("nb", 1, 250, 12 * GIB)
    assert compile_for(DeviceMode.MIG, nb, H100).mig_profile == "2g.20gb"
    assert compile_for(DeviceMode.MIG, Pod("big", 1, 100, 50 * GIB), H100).mig_profile == \
        "7g.80gb"  # 4g.40gb has under 50 GiB
    assert compile_for(DeviceMode.EXCLUSIVE, nb, H100).slice_mode is DeviceMode.EXCLUSIVE
    soft = compile_for(DeviceMode.SOFT, nb, H100)
    assert (soft.gpu_milli, soft.gpu_memory_mib, soft.is_plain) == (250, 12 * GIB, True)
    assert compile_for(DeviceMode.TIMESLICE, nb, H100).oversubscribe
    assert not compile_for(DeviceMode.TIMESLICE, nb, H100, oversubscribe=False).oversubscribe
    assert compile_for(DeviceMode.MIG, Pod("t", 4, 1000, 0), H100).gpu_count == 4


def test_mps_clients_are_capped_and_mig_profiles_cover_the_pod() -> None:
    pods = [Pod(f"p{i}", 1, 300, 10 * GIB) for i in range(4)]  # 300m > 1000/4 per client
    r = simulate(DeviceMode.MPS, pods, 1, 8, H100, 4)
    assert r.pods_placed == 0 and r.refused == {"gpu": 4}
    r = simulate(DeviceMode.MPS, pods, 1, 8, H100, 3)  # 333m, 26 GiB per client
    assert r.pods_placed == 4
    g = get_geometry(H100)
    # 7 × 1g.10gb fill one GPU exactly: no idle compute slice on it
    r = simulate(DeviceMode.MIG, [Pod(f"s{i}", 1, 100, 5 * GIB) for i in range(7)], 1, 1, H100)
    assert r.pods_placed == 7 and r.mig_idle_slices == 0
    assert g.profile("1g.10gb").compute_slices * 7 == g.compute_slices


def test_capped_time_slices_never_promise_more_memory_than_the_card() -> None:
    pods = [Pod(f"p{i}", 1, 100, 30 * GIB) for i in range(8)]  # 4 replicas × 30 GiB > 80 GiB
    loose = simulate(DeviceMode.TIMESLICE, pods, 1, 2, H100, 4)
    capped = simulate(DeviceMode.TIMESLICE, pods, 1, 2, H100, 4, oversubscribe=False)
    assert loose.pods_placed == 8 and loose.ts_max_risk == pytest.approx(120 / 80)
    assert capped.pods_placed == 4 and capped.refused == {"gpu-memory": 4}
    assert capped.ts_max_risk is not None and capped.ts_max_risk <= 1.0


def test_mixed_scenario_delivers_each_tier_its_floor_and_accounts_for_every_pod() -> None:
    rows = {r.tier: r for r in mixed_scenario(pods_per_tier=40, seed=0)}
    for r in rows.values():
        assert r.placed + r.refused_isolation + r.refused_no_room == r.pods == 40
        assert sum(r.delivered.values()) == r.placed
        assert all(n == 0 for lvl, n in r.delivered.items() if lvl < r.floor)
    assert rows[TrustTier.UNTRUSTED].refused_isolation > 0  # weaker room existed, not given
    assert rows[TrustTier.TRUSTED].delivered[IsolationLevel.NONE] > 0  # isolated room left
    assert rows[TrustTier.TRUSTED].refused_isolation == 0  # nothing is below its floor


def test_mixed_scenario_is_deterministic_per_seed() -> None:
    a = mixed_scenario(pods_per_tier=20, seed=4)
    assert a == mixed_scenario(pods_per_tier=20, seed=4)
    assert np.sum([r.placed for r in a]) > 0


def test_modes_command_prints_every_mode_and_why_pods_were_refused() -> None:
    from typer.testing import CliRunner

    from gpugov.cli import app

    res = CliRunner().invoke(app, ["modes", "--pod-count", "40", "--node-count", "2"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for row in ("exclusive", "mig", "soft", "timeslice", "capped", "mps"):
        assert f" {row} " in res.output
    assert "refused pods by the engine's reason" in res.output
    assert "mig: gpu-mode" in res.output  # the multi-GPU pods
    res = CliRunner().invoke(app, ["modes", "--mixed", "--pod-count", "10", "--policy", "gpugov"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "untrusted" in res.output and "policy gpugov" in res.output
    res = CliRunner().invoke(app, ["modes", "--policy", "nope"])
    assert res.exit_code == 2 and "unknown policy 'nope'" in res.output
