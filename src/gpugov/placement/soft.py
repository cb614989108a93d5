"""Soft slices (memory MiB + compute milli) and time-slice / MPS replicas.

Soft slices are a two-dimensional fit: a pod fits a device when both its compute milli and its
memory fit what is free. Fragmentation extends FGD (ATC'23) to both dimensions: the free
compute (and free memory) of a device counts as fragmented for a pod type that cannot fit
there, weighted by how often that type appears. Placement picks the device whose
fragmentation grows least (numpy over the devices of a node: this is the per-pod hot path).

Time-slicing has no isolation at all: a replica is a counter, and the memory each pod may
touch is summed as risk (> card memory = an OOM waiting to happen). MPS caps each client at
memory/clients and 100/clients % of SMs, so a pod fits only under those caps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.devices import MpsState, SoftState, TimesliceState


@dataclass(frozen=True, slots=True)
class PodType:
    """One kind of pod in the expected workload: per-device need and its share of pods."""

    milli: int
    memory_mib: int
    weight: float = 1.0


def fragmentation(free_milli: np.ndarray, free_mem: np.ndarray, card_mem: np.ndarray,
                  workload: Sequence[PodType]) -> np.ndarray:
    """Per device, the expected share of free capacity the workload cannot use, in [0, 1].

    Average of the two dimensions, each normalised by the device's capacity: free compute
    that no likely pod can take, and free memory likewise.
    """
    total_w = sum(t.weight for t in workload) or 1.0
    frag_c = np.zeros(free_milli.shape, dtype=float)
    frag_m = np.zeros(free_milli.shape, dtype=float)
    for t in workload:
        unusable = (free_milli < t.milli) | (free_mem < t.memory_mib)
        frag_c += (t.weight / total_w) * np.where(unusable, free_milli, 0)
        frag_m += (t.weight / total_w) * np.where(unusable, free_mem, 0)
    return 0.5 * (frag_c / MILLI_PER_GPU + frag_m / np.maximum(card_mem, 1))


def soft_fits(state: SoftState, milli: int, memory_mib: int) -> bool:
    return milli <= state.free_milli and memory_mib <= state.free_memory_mib


def place_soft(states: Sequence[SoftState], pod: str, milli: int, memory_mib: int,
               workload: Sequence[PodType]) -> tuple[int, SoftState] | None:
    """Put a soft slice on the device where fragmentation grows least (ties: best fit)."""
    if not states:
        return None
    free_c = np.array([s.free_milli for s in states])
    free_m = np.array([s.free_memory_mib for s in states])
    cap_m = np.array([s.memory_capacity_mib for s in states])
    fits = (free_c >= milli) & (free_m >= memory_mib)
    if not fits.any():
        return None
    before = fragmentation(free_c, free_m, cap_m, workload)
    after = fragmentation(free_c - milli, free_m - memory_mib, cap_m, workload)
    delta = np.where(fits, np.round(after - before, 12), np.inf)
    # ties (common: many devices lose nothing): best fit, the least free compute left after
    i = int(np.lexsort((free_c - milli, delta))[0])
    s = states[i]
    return i, replace(s, used_milli=s.used_milli + milli,
                      used_memory_mib=s.used_memory_mib + memory_mib, pods=(*s.pods, pod))


def place_timeslice(states: Sequence[TimesliceState], pod: str,
                    memory_mib: int) -> tuple[int, TimesliceState] | None:
    """Take a replica on the device with the least memory risk after adding this pod."""
    best: tuple[float, int] | None = None
    for i, s in enumerate(states):
        if s.used < s.replicas:
            risk = (s.touched_memory_mib + memory_mib) / s.memory_mib
            if best is None or risk < best[0]:
                best = (risk, i)
    if best is None:
        return None
    s = states[best[1]]
    return best[1], replace(s, used=s.used + 1, touched_memory_mib=s.touched_memory_mib
                            + memory_mib, pods=(*s.pods, pod))


def place_mps(states: Sequence[MpsState], pod: str, milli: int,
              memory_mib: int) -> tuple[int, MpsState] | None:
    """Take an MPS client slot if the pod fits under the per-client caps (most-used first,
    so whole devices stay free for pods that need them)."""
    order = sorted(range(len(states)), key=lambda i: -states[i].used)
    for i in order:
        s = states[i]
        if s.used < s.clients and milli <= s.client_milli and memory_mib <= s.client_memory_mib:
            return i, replace(s, used=s.used + 1, pods=(*s.pods, pod))
    return None
