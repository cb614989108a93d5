"""Fragmentation-aware MIG placement: put a profile where it hurts future profiles least.

Same spirit as FGD (ATC'23): among the valid free starts (on every candidate GPU), pick the one
after which the profiles we expect to see are still most placeable. "Placeable" is measured per
profile as the number of its allowed starts that stay free; profiles are weighted by expected
demand, by default larger profiles first (they are the first to become unplaceable). Example: a
1g on an empty H100 goes to start 6, keeping 4g@0, 3g@0/4 and 2g@0/2/4 open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpugov.model.devices import MigState
from gpugov.model.mig import MigGeometry, MigInstance, free_starts, get_geometry, occupancy


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


def place_on_gpus(states: Sequence[MigState], profile: str, owner: str,
                  weights: Mapping[str, float] | None = None) -> tuple[int, MigState] | None:
    """Give `owner` a `profile` instance on one of `states` (GPUs of one model family).

    First reuse a free existing instance of that profile (no re-layout needed); otherwise create
    one at the start that loses the least placeability (FGD-style: minimise the drop, so a
    GPU that is already cut up is preferred over breaking an empty one). Returns the GPU index
    and its new state, or None when no GPU can host the profile.
    """
    for i, st in enumerate(states):
        for k, (inst, own) in enumerate(zip(st.instances, st.owners, strict=True)):
            if inst.profile == profile and own is None:
                owners = st.owners[:k] + (owner,) + st.owners[k + 1:]
                return i, replace(st, owners=owners)
    best: tuple[float, int, int] | None = None  # (loss, gpu, start)
    for i, st in enumerate(states):
        g = get_geometry(st.model)
        if profile not in g.profile_names():
            continue
        found = best_start(g, st.instances, profile, weights)
        if found is None:
            continue
        loss = placeability(g, st.instances, weights) - found[1]
        if best is None or loss < best[0]:
            best = (loss, i, found[0])
    if best is None:
        return None
    _, i, start = best
    st = states[i]
    inst = MigInstance(start, profile)
    pairs = sorted([*zip(st.instances, st.owners, strict=True), (inst, owner)],
                   key=lambda x: x[0])
    return i, MigState(st.model, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))


def release(state: MigState, owner: str) -> MigState:
    """Free the instances `owner` holds; the instances stay (re-layout is the planner's job)."""
    return replace(state, owners=tuple(None if o == owner else o for o in state.owners))
