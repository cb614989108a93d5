"""What one pod asks for, reduced to the numbers placement needs."""

from __future__ import annotations

from dataclasses import dataclass

from gpugov.model.catalog import MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod's request.

    `gpu_milli` is per device (1000 = a whole GPU); a sharing pod has `gpu_count == 1`
    and `0 < gpu_milli < 1000`. `models` empty means any GPU model is acceptable.
    `gpu_memory_mib` is the GPU memory needed on each device (0 = not asked, as in the
    openb traces); a whole-GPU pod holds all of its devices' memory whatever it asks.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = 0
    models: tuple[str, ...] = ()
    gpu_memory_mib: int = 0

    def __post_init__(self) -> None:
        for field in ("cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_memory_mib"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field} must be >= 0, got {getattr(self, field)}")
        if self.gpu_milli > MILLI_PER_GPU:
            raise ValueError(f"gpu_milli must be <= {MILLI_PER_GPU}, got {self.gpu_milli}")
        if self.gpu_count > 1 and self.gpu_milli != MILLI_PER_GPU:
            raise ValueError(
                f"a {self.gpu_count}-GPU request must ask for whole GPUs (gpu_milli=1000), "
                f"got gpu_milli={self.gpu_milli}"
            )
        if (self.gpu_count == 0) != (self.gpu_milli == 0):
            raise ValueError(
                f"gpu_count={self.gpu_count} and gpu_milli={self.gpu_milli} disagree: "
                "both must be 0 for a CPU-only pod, or both positive"
            )
        if self.gpu_memory_mib and not self.gpu_count:
            raise ValueError(
                f"gpu_memory_mib={self.gpu_memory_mib} needs a GPU: a CPU-only pod asks for "
                "no GPU memory"
            )

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def is_sharing(self) -> bool:
        """True for a fractional single-GPU request (shares a device with others)."""
        return self.gpu_count == 1 and self.gpu_milli < MILLI_PER_GPU

    @property
    def is_gpu(self) -> bool:
        return self.gpu_count > 0


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a request landed: a node index and, per device, the milli and GPU memory taken.

    `memory_mib` is what a sharing pod holds on its device; a whole-GPU pod holds all of its
    devices' memory, whatever this field says (the state charges the device's capacity).
    """

    node: int
    devices: tuple[int, ...]
    milli: int
    memory_mib: int = 0

    @property
    def total_gpu_milli(self) -> int:
        return len(self.devices) * self.milli
