"""One validated GPU request, whatever spelling it came in (see `k8s.resources`).

Pure data shared by the drivers that translate requests and the placement that serves them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpugov.model.catalog import CATALOG, MILLI_PER_GPU
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import get_geometry, models_with_profile
from gpugov.model.request import PodRequest


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What one container asks for, whatever the spelling. Per-device values.

    `milli` None = compute not stated (a memory-only soft slice): `to_pod_request` derives it
    from the memory share of the card. `isolation` is the minimum the pod asked for; None =
    let the tenant's trust tier decide (`model.isolation.required_isolation`).
    """

    count: int
    mode: DeviceMode
    milli: int | None = MILLI_PER_GPU
    memory_mib: int | None = None
    memory_percent: float | None = None
    mig_profile: str | None = None
    models: tuple[str, ...] = ()
    isolation: IsolationLevel | None = None
    topology: str = "preferred"
    spellings: tuple[str, ...] = ()

    @property
    def delivered_isolation(self) -> IsolationLevel:
        return self.mode.isolation

    def memory_on(self, card_memory_mib: int) -> int | None:
        """GPU memory (MiB) this request needs on each device of a card with
        `card_memory_mib` MiB: `memory_mib` when stated, else `memory_percent` of that card,
        else None (the request names no memory)."""
        if self.memory_mib is not None:
            return self.memory_mib
        if self.memory_percent is not None:
            return math.ceil(card_memory_mib * self.memory_percent / 100)
        return None

    def to_pod_request(self, name: str, cpu_milli: int = 0, memory_mib: int = 0,
                       card_memory_mib: int | None = None) -> PodRequest:
        """The engine's request: compute share per device and GPU memory per device.

        `gpu_memory_mib` is `memory_on(card)` when the request names memory (0 otherwise,
        and for MIG, whose profile fixes the memory), so the state only places it on devices
        with that much free memory. `card_memory_mib` is the card the share is taken of
        (default: the largest in the catalog); a `memory_percent` request needs it to know
        its MiB. A memory-only slice (`milli` None) also gets the memory's share of that card
        as its compute share, so compute bin-packing counts it against something."""
        card = card_memory_mib or largest_card_mib()
        need = self.memory_on(card)
        milli = self.milli
        if milli is None:
            milli = min(MILLI_PER_GPU, max(1, math.ceil(MILLI_PER_GPU * (need or card) / card)))
        if self.mode is DeviceMode.MIG and self.mig_profile:
            milli = mig_milli(self.mig_profile, self.models)
            need = None
        return PodRequest(name, cpu_milli, memory_mib, self.count, milli, self.models,
                          gpu_memory_mib=int(need or 0))


def largest_card_mib() -> int:
    """Memory of the largest card in the catalog (the default card for memory shares)."""
    return max(m.memory_mib or 0 for m in CATALOG.values())


def mig_milli(profile: str, models: tuple[str, ...]) -> int:
    """Compute share of a MIG profile: its compute slices over the GPU's."""
    candidates = [m for m in models_with_profile(profile) if not models or m in models]
    g = get_geometry(candidates[0])
    return MILLI_PER_GPU * g.profile(profile).compute_slices // g.compute_slices
