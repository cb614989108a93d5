"""Every supported spelling of a GPU request, the translation users rely on, and every rejection
with the words its message must contain (so users are told what to write instead)."""

from __future__ import annotations

import pytest

from gpugov.k8s.resources import RequestError, model_from_product_label, translate
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel

H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"

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
          models=("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB"))),
    ("mig-mixed-model", {"nvidia.com/mig-3g.40gb": 2}, {"gpugov.io/model": "H100-SXM5-80GB"}, {},
     dict(count=2, mode=DeviceMode.MIG, mig_profile="3g.40gb", milli=428,
          models=("H100-SXM5-80GB",))),
    ("mig-single", {"nvidia.com/gpu": 1}, {}, {"nvidia.com/gpu.product": H100_PRODUCT
                                                + "-MIG-2g.20gb"},
     dict(mode=DeviceMode.MIG, mig_profile="2g.20gb", models=("H100-SXM5-80GB",))),
    ("timeslice", {"nvidia.com/gpu.shared": 1}, {}, {},
     dict(count=1, mode=DeviceMode.TIMESLICE, milli=None)),
    ("timeslice-gpumem", {"nvidia.com/gpu.shared": 1, "nvidia.com/gpumem": 20000}, {}, {},
     dict(count=1, mode=DeviceMode.TIMESLICE, milli=None, memory_mib=20000)),
    ("timeslice-gpumem-pct", {"nvidia.com/gpu.shared": 1, "nvidia.com/gpumem-percentage": 25},
     {}, {}, dict(mode=DeviceMode.TIMESLICE, memory_percent=25.0)),
    ("timeslice-mig", {"nvidia.com/mig-1g.10gb.shared": 1}, {}, {},
     dict(mode=DeviceMode.TIMESLICE, mig_profile="1g.10gb")),
    ("kai-fraction", {}, {"gpu-fraction": "0.5"}, {},
     dict(count=1, mode=DeviceMode.SOFT, milli=500, memory_percent=50.0)),
    ("kai-memory", {}, {"gpu-memory": "20000"}, {},
     dict(mode=DeviceMode.SOFT, memory_mib=20000)),
    ("kai-one-device", {}, {"gpu-fraction": "0.25", "gpu-fraction-num-devices": "1"}, {},
     dict(milli=250)),
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
    ("memory-too-big", {"nvidia.com/gpumem": 200000}, {}, {},
     ["more than any allowed card (H200", "whole GPUs"]),
    ("memory-too-big-for-model", {"nvidia.com/gpumem": 30000}, {"gpugov.io/model": "T4"}, {},
     ["T4: 16384 MiB"]),
    ("cores-over-100", {"nvidia.com/gpucores": 150}, {}, {},
     ["more than one GPU", "nvidia.com/gpucores: 100"]),
    ("cores-zero", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 0}, {}, {},
     ["no compute share"]),
    ("fraction-count", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000}, {}, {},
     ["cannot be combined with nvidia.com/gpu: 2", "whole GPUs"]),
    ("kai-fraction-multi", {}, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}, {},
     ["on 2 devices", "nvidia.com/gpu: 2"]),
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
