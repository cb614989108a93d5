"""Every supported spelling of a GPU request, the translation users rely on, and every rejection
with the words its message must contain (so users are told what to write instead)."""

from __future__ import annotations

import pytest

from gpugov.k8s.resources import RequestError, model_from_product_label, translate
from gpugov.model.catalog import CATALOG
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import models_with_profile

H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"


def _hami_match(test) -> tuple[str, ...]:
    """Catalog models whose card name (NVML name and ours, upper case) passes `test`, as
    HAMi matches nvidia.com/use-gputype (a case-insensitive substring)."""
    return tuple(m.name for m in CATALOG.values()
                 if test(f"{m.nvml_name or ''} {m.name}".upper()))

ACCEPTED = [
    # (id, limits, annotations, node_selector, expected fields)
    ("whole", {"nvidia.com/gpu": "2"}, {}, {},
     dict(count=2, mode=DeviceMode.EXCLUSIVE, milli=1000)),
    ("whole-int", {"nvidia.com/gpu": 1, "cpu": "4"}, {}, {},
     dict(count=1, mode=DeviceMode.EXCLUSIVE)),
    ("hami-mem", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240"}, {}, {},
     dict(count=1, mode=DeviceMode.SOFT, memory_mib=10240, milli=None)),
    ("hami-mem-default-count", {"nvidia.com/gpumem": 4096}, {}, {},
     dict(count=1, mode=DeviceMode.SOFT, memory_mib=4096)),
    ("hami-mem-cores", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000,
                        "nvidia.com/gpucores": 30}, {}, {},
     dict(mode=DeviceMode.SOFT, memory_mib=8000, milli=300)),
    ("hami-pct", {"nvidia.com/gpumem-percentage": "25"}, {}, {},
     dict(mode=DeviceMode.SOFT, memory_percent=25.0)),
    ("hami-cores-100", {"nvidia.com/gpucores": "100"}, {}, {},
     dict(mode=DeviceMode.EXCLUSIVE, milli=1000)),
    ("mig-mixed", {"nvidia.com/mig-1g.10gb": "1"}, {}, {},
     dict(count=1, mode=DeviceMode.MIG, mig_profile="1g.10gb", milli=142,
          models=tuple(models_with_profile("1g.10gb")))),
    ("mig-mixed-model", {"nvidia.com/mig-3g.40gb": 2}, {"gpugov.io/model": "H100-SXM5-80GB"}, {},
     dict(count=2, mode=DeviceMode.MIG, mig_profile="3g.40gb", milli=428,
          models=("H100-SXM5-80GB",))),
    ("mig-single", {"nvidia.com/gpu": 1}, {}, {"nvidia.com/gpu.product": H100_PRODUCT
                                                + "-MIG-2g.20gb"},
     dict(mode=DeviceMode.MIG, mig_profile="2g.20gb", models=("H100-SXM5-80GB",))),
    ("timeslice", {"nvidia.com/gpu.shared": 1}, {}, {},
     dict(count=1, mode=DeviceMode.TIMESLICE, milli=None)),
    ("mps", {"nvidia.com/gpu.mps": 1}, {}, {},
     dict(count=1, mode=DeviceMode.MPS, milli=None, memory_mib=None)),
    ("mps-sized", {"nvidia.com/gpu.mps": 1, "nvidia.com/gpumem": 8000,
                   "nvidia.com/gpucores": 20}, {}, {},
     dict(count=1, mode=DeviceMode.MPS, milli=200, memory_mib=8000)),
    ("timeslice-gpumem", {"nvidia.com/gpu.shared": 1, "nvidia.com/gpumem": 20000}, {}, {},
     dict(count=1, mode=DeviceMode.TIMESLICE, milli=None, memory_mib=20000)),
    ("timeslice-gpumem-pct", {"nvidia.com/gpu.shared": 1, "nvidia.com/gpumem-percentage": 25},
     {}, {}, dict(mode=DeviceMode.TIMESLICE, memory_percent=25.0)),
    ("timeslice-mig", {"nvidia.com/mig-1g.10gb.shared": 1}, {}, {},
     dict(mode=DeviceMode.TIMESLICE, mig_profile="1g.10gb")),
    # KAI: a fraction of the device's memory, compute shared in time (no compute limit)
    ("kai-fraction", {}, {"gpu-fraction": "0.5"}, {},
     dict(count=1, mode=DeviceMode.SOFT, milli=None, memory_percent=50.0)),
    ("kai-fraction-two-devices", {}, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"},
     {}, dict(count=2, mode=DeviceMode.SOFT, milli=None, memory_percent=50.0)),
    ("kai-fraction-third", {}, {"gpu-fraction": "0.333"}, {},
     dict(count=1, mode=DeviceMode.SOFT, memory_percent=34.0)),  # rounded up, never less
    ("kai-fraction-almost-one", {}, {"gpu-fraction": "0.999"}, {},
     dict(mode=DeviceMode.SOFT, memory_percent=99.0)),  # below 1 is never a whole card
    ("kai-fraction-one", {}, {"gpu-fraction": "1"}, {},
     dict(count=1, mode=DeviceMode.EXCLUSIVE, milli=1000, memory_percent=None)),
    ("kai-memory", {}, {"gpu-memory": "20000"}, {},
     dict(mode=DeviceMode.SOFT, memory_mib=20000)),
    ("kai-one-device", {}, {"gpu-fraction": "0.25", "gpu-fraction-num-devices": "1"}, {},
     dict(count=1, memory_percent=25.0)),
    # HAMi: nvidia.com/gpu: N with a slice = N devices, each with that slice
    ("hami-n-devices", {"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 50,
                        "nvidia.com/gpucores": 30}, {}, {},
     dict(count=2, mode=DeviceMode.SOFT, milli=300, memory_percent=50.0)),
    ("hami-n-devices-mib", {"nvidia.com/gpu": 3, "nvidia.com/gpumem": 1000}, {}, {},
     dict(count=3, mode=DeviceMode.SOFT, milli=None, memory_mib=1000)),
    # HAMi's defaultExclusiveCoreIfNeeded: all of the memory, or gpucores 100, is a whole card
    ("hami-pct-100", {"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 100}, {}, {},
     dict(count=2, mode=DeviceMode.EXCLUSIVE, milli=1000, memory_percent=None)),
    ("hami-priority", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000,
                       "nvidia.com/priority": 0}, {}, {}, dict(priority=0, memory_mib=3000)),
    ("hami-use-type", {"nvidia.com/gpu": 2}, {"nvidia.com/use-gputype": "A100,V100"}, {},
     dict(models=_hami_match(lambda n: "A100" in n or "V100" in n))),
    ("hami-use-type-within-ours", {"nvidia.com/gpu": 1},
     {"nvidia.com/use-gputype": "a100", "gpugov.io/model": "A100-SXM4-80GB,H200"}, {},
     dict(models=("A100-SXM4-80GB",))),
    ("hami-nouse-type", {"nvidia.com/gpu": 1}, {"nvidia.com/nouse-gputype": "H100,H200"}, {},
     dict(models=_hami_match(lambda n: "H100" not in n and "H200" not in n))),
    ("hami-nouse-nothing-known", {"nvidia.com/gpu": 1}, {"nvidia.com/nouse-gputype": "1080"},
     {}, dict(models=())),
    ("hami-binpack", {"nvidia.com/gpu": 1}, {"hami.io/node-scheduler-policy": "binpack",
                                              "hami.io/gpu-scheduler-policy": "binpack"}, {},
     dict(count=1)),
    ("hami-core-mode", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100},
     {"nvidia.com/vgpu-mode": "hami-core"}, {}, dict(mode=DeviceMode.SOFT)),
    ("volcano", {"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 3000,
                 "volcano.sh/vgpu-cores": 50}, {}, {},
     dict(count=2, mode=DeviceMode.SOFT, memory_mib=3000, milli=500)),
    ("ours", {"nvidia.com/gpu": 4},
     {"gpugov.io/model": "H100-SXM5-80GB,H200", "gpugov.io/isolation": "hard",
      "gpugov.io/topology": "required"}, {},
     dict(count=4, models=("H100-SXM5-80GB", "H200"), isolation=IsolationLevel.HARD,
          topology="required")),
    ("ours-soft-ok", {"nvidia.com/gpumem": 1000}, {"gpugov.io/isolation": "soft"}, {},
     dict(isolation=IsolationLevel.SOFT, mode=DeviceMode.SOFT)),
]


@pytest.mark.parametrize(("limits", "ann", "sel", "expected"),
                         [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted_spellings(limits, ann, sel, expected) -> None:
    req = translate(limits, ann, sel)
    assert req is not None
    for field, value in expected.items():
        assert getattr(req, field) == value, field


REJECTED = [
    # (id, limits, annotations, node_selector, words the message must contain)
    ("unknown-profile", {"nvidia.com/mig-3g.50gb": 1}, {}, {},
     ["no GPU in the catalog has a MIG profile '3g.50gb'", "3g.40gb"]),
    ("profile-not-on-model", {"nvidia.com/mig-1g.5gb": 1}, {"gpugov.io/model": "H100-SXM5-80GB"},
     {}, ["does not exist on H100-SXM5-80GB", "A100-SXM4-40GB", "1g.10gb"]),
    ("mig-on-non-mig", {"nvidia.com/mig-1g.10gb": 1}, {"gpugov.io/model": "L4"}, {},
     ["(no MIG)"]),
    ("memory-too-big", {"nvidia.com/gpumem": 2_000_000}, {}, {},
     ["more than any allowed card (", "whole GPUs"]),
    ("memory-too-big-for-model", {"nvidia.com/gpumem": 30000}, {"gpugov.io/model": "T4"}, {},
     ["T4: 16384 MiB"]),
    ("cores-over-100", {"nvidia.com/gpucores": 150}, {}, {},
     ["more than one GPU", "nvidia.com/gpucores: 100"]),
    ("cores-zero", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 0}, {}, {},
     ["no compute share"]),
    ("kai-fraction-zero-devices", {}, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"},
     {}, ["0 devices", "'1' or more"]),
    ("hami-type-contradiction", {"nvidia.com/gpu": 1},
     {"nvidia.com/use-gputype": "A100,H100", "nvidia.com/nouse-gputype": "h100"}, {},
     ["both name H100", "only one of them"]),
    ("hami-type-unknown", {"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "MI300"}, {},
     ["no GPU model gpugov knows matches", "A100"]),
    ("hami-uuid", {"nvidia.com/gpu": 1}, {"nvidia.com/use-gpuuuid": "GPU-03f69c50"}, {},
     ["by UUID", "nodeSelector"]),
    ("hami-nouuid", {"nvidia.com/gpu": 1}, {"nvidia.com/nouse-gpuuuid": "GPU-03f69c50"}, {},
     ["by UUID"]),
    ("hami-spread", {"nvidia.com/gpu": 1}, {"hami.io/node-scheduler-policy": "spread"}, {},
     ["spread is not a policy", "binpack"]),
    ("hami-mig-mode", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 8000},
     {"nvidia.com/vgpu-mode": "mig"}, {}, ["nvidia.com/mig-<profile>"]),
    ("hami-priority-range", {"nvidia.com/gpu": 1, "nvidia.com/priority": 2}, {}, {},
     ["0 (high) or 1 (low"]),
    ("hami-annotation-without-gpu", {"cpu": "1"}, {"nvidia.com/use-gputype": "A100"}, {},
     ["no GPU"]),
    ("volcano-and-nvidia", {"volcano.sh/vgpu-number": 1, "nvidia.com/gpu": 1}, {}, {},
     ["same thing as", "only one of"]),
    ("volcano-cores-in-its-words", {"volcano.sh/vgpu-cores": 150}, {}, {},
     ["volcano.sh/vgpu-cores: 100", "volcano.sh/vgpu-number: N"]),
    ("kai-fraction-over-one", {}, {"gpu-fraction": "1.5"}, {}, ["nvidia.com/gpu: 2"]),
    ("kai-fraction-negative", {}, {"gpu-fraction": "-0.1"}, {}, ["(0, 1]"]),
    ("kai-both", {}, {"gpu-fraction": "0.5", "gpu-memory": "1000"}, {}, ["two sizes"]),
    ("kai-with-resource", {"nvidia.com/gpu": 1}, {"gpu-fraction": "0.5"}, {},
     ["cannot be combined"]),
    ("mem-and-pct", {"nvidia.com/gpumem": 1000, "nvidia.com/gpumem-percentage": 10}, {}, {},
     ["two memory sizes"]),
    ("pct-range", {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0}, {}, {},
     ["outside 1..100"]),
    ("gpumem-units", {"nvidia.com/gpumem": "10Gi"}, {}, {},
     ["not a plain integer (MiB)", "nvidia.com/gpumem: 10240"]),
    ("mig-with-gpumem", {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpumem": 1000}, {}, {},
     ["fixed memory and compute"]),
    ("mig-with-gpu", {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpu": 1}, {}, {},
     ["either MIG instances or whole GPUs"]),
    ("two-profiles", {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-2g.20gb": 1}, {}, {},
     ["one profile per container"]),
    ("shared-many", {"nvidia.com/gpu.shared": 2}, {}, {},
     ["nvidia.com/gpu.shared: 1", "nvidia.com/gpu: 2"]),
    ("shared-with-cores", {"nvidia.com/gpu.shared": 1, "nvidia.com/gpucores": 10}, {}, {},
     ["does not enforce a compute share"]),
    ("shared-two-sizes", {"nvidia.com/gpu.shared": 1, "nvidia.com/gpumem": 100,
                          "nvidia.com/gpumem-percentage": 10}, {}, {}, ["two memory sizes"]),
    ("shared-mem-range", {"nvidia.com/gpu.shared": 1, "nvidia.com/gpumem": 10**6}, {}, {},
     ["outside 1.."]),
    ("mps-many", {"nvidia.com/gpu.mps": 2}, {}, {}, ["2 MPS clients", "nvidia.com/gpu.mps: 1"]),
    ("mps-with-gpu", {"nvidia.com/gpu.mps": 1, "nvidia.com/gpu": 1}, {}, {},
     ["cannot be combined with nvidia.com/gpu"]),
    ("mps-cores", {"nvidia.com/gpu.mps": 1, "nvidia.com/gpucores": 101}, {}, {},
     ["outside 1..100"]),
    ("mps-soft", {"nvidia.com/gpu.mps": 1}, {"gpugov.io/isolation": "soft"}, {},
     ["delivers only none"]),
    ("shared-hard", {"nvidia.com/gpu.shared": 1}, {"gpugov.io/isolation": "hard"}, {},
     ["delivers only soft"]),
    ("soft-hard", {"nvidia.com/gpumem": 1000}, {"gpugov.io/isolation": "hard"}, {},
     ["delivers only soft", "nvidia.com/mig-<profile>"]),
    ("bad-isolation", {"nvidia.com/gpu": 1}, {"gpugov.io/isolation": "strong"}, {},
     ["none, soft or hard"]),
    ("bad-model", {"nvidia.com/gpu": 1}, {"gpugov.io/model": "H300"}, {}, ["unknown GPU model"]),
    ("bad-topology", {"nvidia.com/gpu": 2}, {"gpugov.io/topology": "nvlink"}, {},
     ["none, preferred, required"]),
    ("bad-annotation", {"nvidia.com/gpu": 1}, {"gpugov.io/mdoel": "H200"}, {},
     ["gpugov.io/model"]),
    ("bad-resource", {"nvidia.com/gpu-memory": 1}, {}, {}, ["nvidia.com/gpumem"]),
    ("annotation-without-gpu", {"cpu": "1"}, {"gpugov.io/model": "H200"}, {}, ["no GPU"]),
    ("single-model-conflict", {"nvidia.com/gpu": 1}, {"gpugov.io/model": "H200"},
     {"nvidia.com/gpu.product": H100_PRODUCT + "-MIG-1g.10gb"}, ["agree"]),
]


@pytest.mark.parametrize(("limits", "ann", "sel", "words"),
                         [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejected_spellings_say_what_to_write(limits, ann, sel, words) -> None:
    with pytest.raises(RequestError) as info:
        translate(limits, ann, sel)
    message = str(info.value)
    assert "instead," in message
    for w in words:
        assert w in message


def test_cpu_only_container_is_not_a_gpu_request() -> None:
    assert translate({"cpu": "2", "memory": "4Gi"}) is None


def test_product_label_mapping() -> None:
    assert model_from_product_label("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb") == (
        "A100-SXM4-40GB", "1g.5gb")
    assert model_from_product_label("Tesla-T4-SHARED") == ("T4", None)


def test_to_pod_request_gives_the_engine_a_compute_share() -> None:
    soft = translate({"nvidia.com/gpumem": 20480})
    assert soft is not None
    pod = soft.to_pod_request("p", card_memory_mib=81920)
    assert (pod.gpu_count, pod.gpu_milli) == (1, 250)
    mig = translate({"nvidia.com/mig-3g.40gb": 1})
    assert mig is not None and mig.to_pod_request("m").gpu_milli == 428
    whole = translate({"nvidia.com/gpu": 8})
    assert whole is not None and whole.to_pod_request("w").total_gpu_milli == 8000
