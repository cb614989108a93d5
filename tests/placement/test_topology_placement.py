"""Multi-GPU requests get the best-connected devices; node scores weigh topology, NUMA, energy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.devices import DeviceTopology, hgx_topology
from gpugov.placement.topology import (
    best_device_set,
    node_score,
    power_headroom_ok,
    preferred_allocation,
    topology_fit,
)

TWO_DOMAINS = hgx_topology(8, domains=2, numa_nodes=2, pcie_switches=4)


def _domain(i: int) -> int:
    return TWO_DOMAINS[i].nvlink_domain  # type: ignore[return-value]


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=4))
def test_four_gpu_request_stays_in_one_domain_while_one_exists(free: set[int]) -> None:
    chosen = best_device_set(TWO_DOMAINS, sorted(free), 4)
    assert chosen is not None and len(chosen) == 4 and set(chosen) <= free
    whole_domain_free = any(sum(_domain(i) == d for i in free) >= 4 for d in (0, 1))
    if whole_domain_free:
        assert len({_domain(i) for i in chosen}) == 1
        assert len({TWO_DOMAINS[i].numa_node for i in chosen}) == 1


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=2), st.integers(1, 8))
def test_chosen_devices_are_free_and_distinct(free: set[int], count: int) -> None:
    chosen = best_device_set(TWO_DOMAINS, sorted(free), count)
    if count > len(free):
        assert chosen is None
    else:
        assert chosen is not None and len(set(chosen)) == count and set(chosen) <= free


def test_single_gpu_goes_where_it_breaks_no_full_domain() -> None:
    # domain 0 has 3 free, domain 1 all 4: a 1-GPU pod should not break domain 1
    free = [1, 2, 3, 4, 5, 6, 7]
    chosen = best_device_set(TWO_DOMAINS, free, 1)
    assert chosen is not None and _domain(chosen[0]) == 0
    assert set(best_device_set(TWO_DOMAINS, free, 4) or ()) == {4, 5, 6, 7}


def test_pcie_and_numa_are_the_next_best_boundaries() -> None:
    # no NVLink: two PCIe switches per NUMA node
    topo = [DeviceTopology(None, i // 2, i // 4) for i in range(8)]
    assert best_device_set(topo, [0, 2, 3, 4, 5], 2) == (2, 3)  # same PCIe switch
    assert best_device_set(topo, [0, 2, 4, 6], 2) == (0, 2)  # same NUMA node
    assert topology_fit(topo, (0, 4)) == 0.0


def test_get_preferred_allocation_answer_honours_must_include() -> None:
    topo = {f"GPU-{i}": t for i, t in enumerate(TWO_DOMAINS)}
    got = preferred_allocation(topo, [f"GPU-{i}" for i in range(8)], ["GPU-5"], 4)
    assert set(got) == {"GPU-4", "GPU-5", "GPU-6", "GPU-7"}


def test_node_score_prefers_tight_sets_and_efficient_models() -> None:
    tight = node_score(TWO_DOMAINS, (0, 1, 2, 3), "H100-SXM5-80GB", 1.5)
    split = node_score(TWO_DOMAINS, (0, 1, 4, 5), "H100-SXM5-80GB", 1.5)
    assert tight > split
    assert node_score(TWO_DOMAINS, (0,), "H100-SXM5-80GB", 1.5) > node_score(
        TWO_DOMAINS, (0,), "T4", 1.5)


def test_power_cap() -> None:
    assert power_headroom_ok("H100-SXM5-80GB", 4000, 1000, power_cap_w=4000)
    assert not power_headroom_ok("H100-SXM5-80GB", 5000, 1000, power_cap_w=4000)
    assert power_headroom_ok("H100-SXM5-80GB", 8000, 1000, power_cap_w=None)
