"""Fragmentation-aware MIG placement: put a profile where it hurts future profiles least.

Same spirit as FGD (ATC'23): among the valid free starts (on every candidate GPU), pick the one
after which the profiles we expect to see are still most placeable. "Placeable" is measured per
profile as the number of its allowed starts that stay free; profiles are weighted by expected
demand, by default larger profiles first (they are the first to become unplaceable). Example: a
1g on an empty H100 goes to start 6, keeping 4g@0, 3g@0/4 and 2g@0/2/4 open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

import numpy as np

from gpugov.model.mig import MigGeometry, MigInstance, free_starts, occupancy
from gpugov.model.mig_table import mig_table


def default_weights(geometry: MigGeometry) -> dict[str, float]:
    """Weight a profile by its compute slices: losing a 7g costs more than losing a 1g."""
    return {p.name: float(p.compute_slices) for p in geometry.base_profiles()}


def placeability(geometry: MigGeometry, instances: Sequence[MigInstance],
                 weights: Mapping[str, float] | None = None) -> float:
    """Weighted count of free valid starts over all profiles: higher = less fragmented."""
    w = weights if weights is not None else default_weights(geometry)
    occ, compute, _ = occupancy(geometry, instances)
    return sum(
        w.get(p.name, 0.0) * len(free_starts(geometry, p, occ, compute))
        for p in geometry.base_profiles()
    )


def candidate_starts(geometry: MigGeometry, instances: Sequence[MigInstance],
                     profile: str) -> list[int]:
    """Valid free starts for `profile` given the instances already on the GPU."""
    p = geometry.profile(profile)
    occ, compute, media = occupancy(geometry, instances)
    if p.media_extensions and media:
        return []
    return free_starts(geometry, p, occ, compute)


def best_start(geometry: MigGeometry, instances: Sequence[MigInstance], profile: str,
               weights: Mapping[str, float] | None = None) -> tuple[int, float] | None:
    """(start, placeability after) of the least-fragmenting valid start, or None if none."""
    best: tuple[int, float] | None = None
    for s in candidate_starts(geometry, instances, profile):
        score = placeability(geometry, [*instances, MigInstance(s, profile)], weights)
        if best is None or score > best[1]:  # ties: the lower start wins (scan order)
            best = (s, score)
    return best


# -- the same measure on the cluster state's bitmasks, as lookup tables -----------------------

@cache
def placeability_table(model: str) -> np.ndarray:
    """`placeability` (default weights) of a dynamic MIG device of `model` in every state,
    indexed [occupied memory-slice mask, free compute slices] — the form `ClusterState` holds
    (`mig_occ`, `mig_compute_free`), so many devices are looked up in one numpy pass."""
    table = mig_table(model)
    g = table.geometry
    out = np.zeros((1 << g.memory_slices, g.compute_slices + 1))
    for occ in range(out.shape[0]):
        for compute in range(out.shape[1]):
            out[occ, compute] = sum(pl.compute_slices for pl in table.placements
                                    if not occ & pl.bits and pl.compute_slices <= compute)
    return out


@cache
def start_loss_table(model: str, profile: str) -> tuple[np.ndarray, np.ndarray]:
    """(loss, start) of a new `profile` instance on a dynamic MIG device of `model` in every
    state, indexed as `placeability_table`: the least placeability any valid free start
    loses and that start (the lowest on ties, as `ClusterState.mig_start` picks it); loss
    is inf and start -1 where the profile fits nowhere. Unknown profile: all inf."""
    table = mig_table(model)
    before = placeability_table(model)
    loss = np.full(before.shape, np.inf)
    start = np.full(before.shape, -1, dtype=np.int64)
    for occ in range(before.shape[0]):
        for compute in range(before.shape[1]):
            for k in table.by_profile.get(profile, ()):
                pl = table.placements[k]
                if occ & pl.bits or pl.compute_slices > compute:
                    continue
                lost = before[occ, compute] - before[occ | pl.bits, compute - pl.compute_slices]
                if lost < loss[occ, compute]:
                    loss[occ, compute], start[occ, compute] = lost, pl.start
    return loss, start
