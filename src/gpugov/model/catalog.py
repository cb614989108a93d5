"""GPU models known to gpugov: one catalog entry per product, looked up by name.

The trace models of the Alibaba GPU cluster trace (G2, G3 are undisclosed internal models)
are included so that trace replays can name them; datacenter models carry real specs.
Every GPU is worth 1000 milli of compute share regardless of its model.
"""

from __future__ import annotations

from dataclasses import dataclass

MILLI_PER_GPU = 1000


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Specs of one GPU product. `None` means unknown (undisclosed or not applicable)."""

    name: str
    memory_mib: int | None = None
    sms: int | None = None
    memory_bandwidth_gbs: float | None = None
    tdp_w: int | None = None
    nvlink_gbs: float | None = None
    mig_capable: bool = False
    fp16_tflops: float | None = None
    note: str = ""


# Trace models (cluster-trace-gpu-v2023). Memory sizes from public product specs where the
# name identifies the product; G2/G3 are undisclosed, so their specs stay unknown.
_TRACE_MODELS = [
    GpuModel("G2", note="undisclosed model in the Alibaba trace"),
    GpuModel("G3", note="undisclosed model in the Alibaba trace"),
    GpuModel("T4", memory_mib=16 * 1024, sms=40, memory_bandwidth_gbs=320, tdp_w=70),
    GpuModel("P100", memory_mib=16 * 1024, sms=56, memory_bandwidth_gbs=732, tdp_w=250),
    GpuModel("V100M16", memory_mib=16 * 1024, sms=80, memory_bandwidth_gbs=900, tdp_w=300,
             nvlink_gbs=300),
    GpuModel("V100M32", memory_mib=32 * 1024, sms=80, memory_bandwidth_gbs=900, tdp_w=300,
             nvlink_gbs=300),
    GpuModel("A10", memory_mib=24 * 1024, sms=72, memory_bandwidth_gbs=600, tdp_w=150),
]

CATALOG: dict[str, GpuModel] = {m.name: m for m in _TRACE_MODELS}


def register(model: GpuModel) -> GpuModel:
    """Add a model to the catalog (used by catalog extensions); names must be unique."""
    if model.name in CATALOG and CATALOG[model.name] != model:
        raise ValueError(f"GPU model {model.name!r} is already in the catalog with other specs")
    CATALOG[model.name] = model
    return model


def get_model(name: str) -> GpuModel:
    """Look a model up by name; unknown names get an entry with unknown specs.

    Traces name models the catalog may not know; placement only needs the name to match,
    so an unknown model is not an error here (validation of user requests happens elsewhere).
    """
    found = CATALOG.get(name)
    return found if found is not None else GpuModel(name, note="not in the catalog")
