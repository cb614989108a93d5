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
    # Added for real-GPU placement; all optional so existing entries keep working.
    arch: str = ""
    pci_device_id: str | None = None  # PCI device id as mig-parted's device-filter spells it
    nvml_name: str = ""  # what nvmlDeviceGetName returns (~), for node-agent matching
    unconfirmed: tuple[str, ...] = ()  # names of fields whose value is not confirmed ("?")

    @property
    def perf_per_watt(self) -> float | None:
        """Dense FP16 TFLOPS per TDP watt: the energy term of node scoring (None if unknown)."""
        if self.fp16_tflops is None or not self.tdp_w:
            return None
        return self.fp16_tflops / self.tdp_w


# Trace models (cluster-trace-gpu-v2023). Memory sizes from public product specs where the
# name identifies the product; G2/G3 are undisclosed, so their specs stay unknown.
_TRACE_MODELS = [
    GpuModel("G2", note="undisclosed model in the Alibaba trace"),
    GpuModel("G3", note="undisclosed model in the Alibaba trace"),
    GpuModel("T4", memory_mib=16 * 1024, sms=40, memory_bandwidth_gbs=320, tdp_w=70,
             arch="turing", nvml_name="Tesla T4", fp16_tflops=65,
             unconfirmed=("fp16_tflops",)),
    GpuModel("P100", memory_mib=16 * 1024, sms=56, memory_bandwidth_gbs=732, tdp_w=250),
    GpuModel("V100M16", memory_mib=16 * 1024, sms=80, memory_bandwidth_gbs=900, tdp_w=300,
             nvlink_gbs=300),
    GpuModel("V100M32", memory_mib=32 * 1024, sms=80, memory_bandwidth_gbs=900, tdp_w=300,
             nvlink_gbs=300),
    GpuModel("A10", memory_mib=24 * 1024, sms=72, memory_bandwidth_gbs=600, tdp_w=150,
             arch="ampere", nvml_name="NVIDIA A10", fp16_tflops=125,
             unconfirmed=("fp16_tflops",)),
]

# Datacenter models. Source: ../shared/notes/data-plane-facts.md §8 (datasheet values, not
# re-read from NVIDIA datasheets there) and §1.2 (MIG-mode SM counts). Memory is the nominal
# capacity in MiB (GB x 1024); the usable amount is lower and must come from NVML at run time.
# fp16_tflops = dense FP16 tensor TFLOPS from public datasheets, written from memory: they only
# feed the perf-per-watt energy estimate and are marked unconfirmed on every entry.
_GIB = 1024
_DATACENTER_MODELS = [
    GpuModel("L4", memory_mib=24 * _GIB, sms=58, memory_bandwidth_gbs=300, tdp_w=72,
             arch="ada", pci_device_id="0x27B810DE", nvml_name="NVIDIA L4", fp16_tflops=121,
             unconfirmed=("pci_device_id", "fp16_tflops")),
    GpuModel("L40S", memory_mib=48 * _GIB, sms=142, memory_bandwidth_gbs=864, tdp_w=350,
             arch="ada", pci_device_id="0x26B910DE", nvml_name="NVIDIA L40S", fp16_tflops=362,
             unconfirmed=("pci_device_id", "fp16_tflops")),
    GpuModel("A30", memory_mib=24 * _GIB, sms=56, memory_bandwidth_gbs=933, tdp_w=165,
             nvlink_gbs=200, mig_capable=True, arch="ampere", pci_device_id="0x20B710DE",
             nvml_name="NVIDIA A30", fp16_tflops=165, unconfirmed=("nvlink_gbs", "fp16_tflops")),
    GpuModel("A100-SXM4-40GB", memory_mib=40 * _GIB, sms=108, memory_bandwidth_gbs=1555,
             tdp_w=400, nvlink_gbs=600, mig_capable=True, arch="ampere",
             pci_device_id="0x20B010DE", nvml_name="NVIDIA A100-SXM4-40GB", fp16_tflops=312,
             note="98 of 108 SMs usable in MIG mode", unconfirmed=("fp16_tflops",)),
    GpuModel("A100-SXM4-80GB", memory_mib=80 * _GIB, sms=108, memory_bandwidth_gbs=2039,
             tdp_w=400, nvlink_gbs=600, mig_capable=True, arch="ampere",
             pci_device_id="0x20B210DE", nvml_name="NVIDIA A100-SXM4-80GB", fp16_tflops=312,
             note="98 of 108 SMs usable in MIG mode", unconfirmed=("fp16_tflops",)),
    GpuModel("H100-SXM5-80GB", memory_mib=80 * _GIB, sms=132, memory_bandwidth_gbs=3350,
             tdp_w=700, nvlink_gbs=900, mig_capable=True, arch="hopper",
             pci_device_id="0x233010DE", nvml_name="NVIDIA H100 80GB HBM3", fp16_tflops=989,
             unconfirmed=("fp16_tflops",)),
    GpuModel("H100-PCIE-80GB", memory_mib=80 * _GIB, sms=114, memory_bandwidth_gbs=2000,
             tdp_w=350, nvlink_gbs=600, mig_capable=True, arch="hopper",
             pci_device_id="0x233110DE", nvml_name="NVIDIA H100 PCIe", fp16_tflops=756,
             note="MIG geometry: the H100-80GB table (mig-parted); per-profile SMs unconfirmed",
             unconfirmed=("tdp_w", "fp16_tflops")),
    GpuModel("H100-NVL", memory_mib=94 * _GIB, sms=132, memory_bandwidth_gbs=3900, tdp_w=400,
             nvlink_gbs=600, mig_capable=True, arch="hopper", pci_device_id="0x232110DE",
             nvml_name="NVIDIA H100 NVL", fp16_tflops=835, unconfirmed=("tdp_w", "fp16_tflops")),
    GpuModel("H200", memory_mib=141 * _GIB, sms=132, memory_bandwidth_gbs=4800, tdp_w=700,
             nvlink_gbs=900, mig_capable=True, arch="hopper", pci_device_id="0x233510DE",
             nvml_name="NVIDIA H200", fp16_tflops=989,
             note="MIG geometry inferred from H100 (no -lgipp capture)",
             unconfirmed=("fp16_tflops",)),
]

# Current data-centre GPUs with MIG (issue 19). PCI ids: mig-parted's config-default.yaml
# device filters (tests/model/upstream/mig-parted); memory: the capacity MIG's 7g profile
# names (what the GPU exposes), in MiB. Other specs are public datasheet figures written from
# memory and marked unconfirmed; NVML names likewise (the node agent also matches by PCI id).
_U = ("sms", "memory_bandwidth_gbs", "tdp_w", "nvlink_gbs", "nvml_name")
_CURRENT_MODELS = [
    GpuModel("H100-96GB", memory_mib=96 * _GIB, sms=132, memory_bandwidth_gbs=3350, tdp_w=700,
             nvlink_gbs=900, mig_capable=True, arch="hopper", pci_device_id="0x233D10DE",
             nvml_name="NVIDIA H100 96GB HBM3", unconfirmed=_U),
    GpuModel("H20", memory_mib=96 * _GIB, sms=78, memory_bandwidth_gbs=4000, tdp_w=400,
             nvlink_gbs=900, mig_capable=True, arch="hopper", pci_device_id="0x232910DE",
             nvml_name="NVIDIA H20", unconfirmed=_U),
    GpuModel("GH200", memory_mib=96 * _GIB, sms=132, memory_bandwidth_gbs=4000, tdp_w=900,
             nvlink_gbs=900, mig_capable=True, arch="hopper", pci_device_id="0x234210DE",
             nvml_name="NVIDIA GH200 480GB", note="Grace Hopper, 96 GB HBM3", unconfirmed=_U),
    GpuModel("GH200-144GB", memory_mib=144 * _GIB, sms=132, memory_bandwidth_gbs=4900,
             tdp_w=900, nvlink_gbs=900, mig_capable=True, arch="hopper",
             pci_device_id="0x234810DE", nvml_name="NVIDIA GH200 144G HBM3e", unconfirmed=_U),
    GpuModel("H200-NVL", memory_mib=141 * _GIB, sms=132, memory_bandwidth_gbs=4800, tdp_w=600,
             nvlink_gbs=900, mig_capable=True, arch="hopper", pci_device_id="0x233B10DE",
             nvml_name="NVIDIA H200 NVL", unconfirmed=_U),
    GpuModel("B200", memory_mib=180 * _GIB, sms=148, memory_bandwidth_gbs=8000, tdp_w=1000,
             nvlink_gbs=1800, mig_capable=True, arch="blackwell", pci_device_id="0x290110DE",
             nvml_name="NVIDIA B200", unconfirmed=_U),
    GpuModel("GB200", memory_mib=186 * _GIB, sms=148, memory_bandwidth_gbs=8000, tdp_w=1200,
             nvlink_gbs=1800, mig_capable=True, arch="blackwell", pci_device_id="0x294110DE",
             nvml_name="NVIDIA GB200", unconfirmed=_U),
    GpuModel("B300", memory_mib=269 * _GIB, sms=148, memory_bandwidth_gbs=8000, tdp_w=1100,
             nvlink_gbs=1800, mig_capable=True, arch="blackwell", pci_device_id="0x318210DE",
             nvml_name="NVIDIA B300 SXM6 AC", unconfirmed=_U),
    GpuModel("GB300", memory_mib=278 * _GIB, sms=148, memory_bandwidth_gbs=8000, tdp_w=1400,
             nvlink_gbs=1800, mig_capable=True, arch="blackwell", pci_device_id="0x31C210DE",
             nvml_name="NVIDIA GB300", unconfirmed=_U),
    GpuModel("RTX-PRO-6000", memory_mib=96 * _GIB, sms=188, memory_bandwidth_gbs=1792,
             tdp_w=600, mig_capable=True, arch="blackwell", pci_device_id="0x2BB510DE",
             nvml_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
             note="GDDR7; MIG with 4 slices", unconfirmed=_U),
]

CATALOG: dict[str, GpuModel] = {m.name: m for m in
                                _TRACE_MODELS + _DATACENTER_MODELS + _CURRENT_MODELS}


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


def _alias_key(name: str) -> str:
    """Spelling-insensitive key: case, spaces, dashes and underscores do not matter."""
    key = name.strip().lower()
    for prefix in ("nvidia ", "nvidia-", "tesla ", "tesla-"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return "".join(ch for ch in key if ch.isalnum() or ch == ".")


def _aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for m in CATALOG.values():
        for spelling in (m.name, m.nvml_name):
            if spelling:
                out.setdefault(_alias_key(spelling), m.name)
    return out


def canonical_model(name: str) -> str:
    """The catalog's spelling of a GPU model name people or NVML write differently
    (`t4`, `Tesla T4`, `NVIDIA H100 80GB HBM3`, `a100_sxm4_80gb`); names the catalog does
    not know come back unchanged (traces may name private models)."""
    if name in CATALOG:
        return name
    return _aliases().get(_alias_key(name), name.strip())


def canonical_mig_profile(name: str) -> str:
    """A MIG profile as nvidia-smi lists it: `MIG-1g.10gb`, `mig 1G.10GB` -> `1g.10gb`."""
    key = name.strip().lower()
    for prefix in ("mig-", "mig ", "mig_", "nvidia.com/mig-"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key.strip()
