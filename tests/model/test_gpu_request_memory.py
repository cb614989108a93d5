"""`GpuRequest.to_pod_request` carries GPU memory to the engine, so a memory slice only
lands on a device with that much memory free."""

from __future__ import annotations

from gpugov.k8s.resources import translate
from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest

GIB = 1024


def test_memory_slice_carries_its_memory_and_a_compute_share() -> None:
    soft = translate({"nvidia.com/gpumem": 20 * GIB})
    assert soft is not None
    pod = soft.to_pod_request("p", card_memory_mib=80 * GIB)
    assert (pod.gpu_count, pod.gpu_milli, pod.gpu_memory_mib) == (1, 250, 20 * GIB)


def test_memory_percent_is_taken_of_the_card_each_device_has() -> None:
    req = GpuRequest(1, DeviceMode.SOFT, milli=300, memory_percent=25.0)
    pod = req.to_pod_request("p", card_memory_mib=80 * GIB)
    assert (pod.gpu_memory_mib, pod.gpu_memory_percent) == (0, 25.0)
    state = ClusterState([NodeSpec("a", 8000, 65536, 1, "A100-SXM4-40GB"),
                          NodeSpec("h", 8000, 65536, 1, "H100-SXM5-80GB")])
    assert [state.charge(pod, n, 0)[1] for n in (0, 1)] == [10 * GIB, 20 * GIB]


def test_no_memory_named_means_none_asked_and_mig_has_its_profile_memory() -> None:
    whole = translate({"nvidia.com/gpu": 2})
    assert whole is not None and whole.to_pod_request("w").gpu_memory_mib == 0
    mig = translate({"nvidia.com/mig-3g.40gb": 1})
    assert mig is not None and mig.to_pod_request("m").gpu_memory_mib == 0


def test_a_memory_slice_never_lands_on_a_card_too_small_or_unknown() -> None:
    state = ClusterState([
        NodeSpec("t4", 8000, 65536, 1, "T4"),  # 16 GiB
        NodeSpec("g2", 8000, 65536, 1, "G2"),  # memory undisclosed
        NodeSpec("big", 8000, 65536, 1, "G2", gpu_memory_mib=48 * GIB),  # node's own figure
    ])
    req = GpuRequest(1, DeviceMode.SOFT, milli=100, memory_mib=20 * GIB)
    assert state.feasible(req.to_pod_request("p")).tolist() == [False, False, True]
