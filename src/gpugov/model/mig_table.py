"""MIG placements as bitmasks, so the cluster state can test every device in one numpy pass.

A placement is one (profile, start) pair a GPU model allows. Its `bits` are the memory slices
it covers; an instance fits a dynamic MIG device when its bits miss the device's occupied
slices and its compute slices fit what is left. Placements of one model are numbered in a
fixed order, so a fixed layout is a bitmask over placement numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.mig import MIG_GEOMETRIES, MigGeometry, MigInstance, get_geometry


@dataclass(frozen=True, slots=True)
class Placement:
    profile: str
    start: int
    bits: int  # memory slices covered, bit s = slice s
    compute_slices: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class MigTable:
    """Every base placement of one model, and per profile its placements' numbers."""

    geometry: MigGeometry
    placements: tuple[Placement, ...]
    by_profile: dict[str, tuple[int, ...]]

    def number(self, profile: str, start: int) -> int:
        for k in self.by_profile.get(profile, ()):
            if self.placements[k].start == start:
                return k
        raise KeyError(f"{self.geometry.model}: no MIG placement {profile}@{start}")

    def milli(self, profile: str) -> int:
        """Compute share of a profile in milli: its compute slices over the GPU's."""
        p = self.geometry.profile(profile)
        return MILLI_PER_GPU * p.compute_slices // self.geometry.compute_slices

    def layout_mask(self, instances: tuple[MigInstance, ...]) -> int:
        mask = 0
        for inst in instances:
            mask |= 1 << self.number(inst.profile, inst.start)
        return mask


@cache
def mig_table(model: str) -> MigTable:
    g = get_geometry(model)
    placements: list[Placement] = []
    by_profile: dict[str, tuple[int, ...]] = {}
    for p in g.base_profiles():
        ks = []
        for s in p.starts:
            bits = ((1 << p.memory_slices) - 1) << s
            ks.append(len(placements))
            placements.append(Placement(p.name, s, bits, p.compute_slices, p.memory_mib))
        by_profile[p.name] = tuple(ks)
    return MigTable(g, tuple(placements), by_profile)


def has_mig(model: str) -> bool:
    return model in MIG_GEOMETRIES
