"""The compatibility table: for each kept upstream pod (tests/compat/upstream), what its
project's docs promise and the GpuRequest gpugov must translate it to, or the refusal words.

`render()` is the Markdown table docs/migration.md carries (a test keeps them equal):
`python3 -m tests.compat.compat_table` prints it.
"""

from __future__ import annotations

from typing import Any

from gpugov.model.devices import DeviceMode

S, X, M = DeviceMode.SOFT, DeviceMode.EXCLUSIVE, DeviceMode.MIG
TS = DeviceMode.TIMESLICE
A100_V100 = "A100/V100 models"

#: key -> (what the source project's docs promise, expected: dict of GpuRequest fields,
#: None for no GPU, or a list of words the refusal must contain)
EXPECTED: dict[str, tuple[str, Any]] = {
    "device-plugin/README.md#gpu-pod": (
        "1 whole GPU", dict(count=1, mode=X)),
    "device-plugin/testdata/job-1.yaml#gpu-pod": (
        "1 whole GPU", dict(count=1, mode=X)),
    "gpu-operator/tests/plugin-test.yaml#nvidia-plugin-test": (
        "1 time-sliced replica of a T4 (renameByDefault: false, -SHARED product selector)",
        dict(count=1, mode=TS, models=("T4",), memory_mib=None)),
    "hami/examples/nvidia/default_use.yaml#gpu-pod": (
        "1 GPU, 3000 MiB, 30 % of its cores",
        dict(count=1, mode=S, memory_mib=3000, milli=300)),
    "hami/examples/nvidia/default_use_legacy.yaml#gpu-pod": (
        "2 whole GPUs", dict(count=2, mode=X)),
    "hami/examples/nvidia/dynamic_mig_example.yaml#gpu-pod": (
        "2 MIG instances of at least 8000 MiB, sized by HAMi",
        ["nvidia.com/vgpu-mode", "nvidia.com/mig-<profile>"]),
    "hami/examples/nvidia/example.yaml#cuda-sample-vector-add": (
        "1 GPU, 3000 MiB, cores not limited",
        dict(count=1, mode=S, memory_mib=3000, milli=None)),
    "hami/examples/nvidia/mig_example.yaml#gpu-pod": (
        "1 MIG 3g.20gb instance", dict(count=1, mode=M, mig_profile="3g.20gb")),
    "hami/examples/nvidia/specify_card_type_not_use.yaml#gpu-pod": (
        "2 whole GPUs, never a 1080 or 2080 card", dict(count=2, mode=X, models=())),
    "hami/examples/nvidia/specify_card_type_to_use.yaml#gpu-pod": (
        "2 whole GPUs on A100 or V100 cards", dict(count=2, mode=X, models=A100_V100)),
    "hami/examples/nvidia/specify_scheduling_policy.yaml#gpu-pod": (
        "1 whole GPU, nodes spread, GPUs binpacked",
        ["hami.io/node-scheduler-policy", "spread", "binpack"]),
    "hami/examples/nvidia/specify_uuid_not_use.yaml#gpu-pod": (
        "2 whole GPUs, never GPU-03f69c50-…", ["nvidia.com/nouse-gpuuuid", "by UUID"]),
    "hami/examples/nvidia/specify_uuid_to_use.yaml#gpu-pod": (
        "1 whole GPU among two UUIDs", ["nvidia.com/use-gpuuuid", "by UUID"]),
    "hami/examples/nvidia/use_as_normal.yaml#gpu-pod1": (
        "1 whole GPU, not shared", dict(count=1, mode=X)),
    "hami/examples/nvidia/use_as_normal.yaml#gpu-pod2": (
        "1 whole GPU, not shared", dict(count=1, mode=X)),
    "hami/examples/nvidia/use_exclusive_card.yaml#gpu-pod1": (
        "2 exclusive GPUs (100 % memory, 100 % cores)", dict(count=2, mode=X)),
    "hami/examples/nvidia/use_memory_fraction.yaml#gpu-pod": (
        "2 GPUs, each 50 % of its memory and 30 % of its cores",
        dict(count=2, mode=S, memory_percent=50.0, milli=300)),
    "hami/examples/nvidia/use_sharing_card.yaml#gpu-pod1": (
        "1 GPU, 40 % memory, 60 % cores, may share with pod2",
        dict(count=1, mode=S, memory_percent=40.0, milli=600)),
    "hami/examples/nvidia/use_sharing_card.yaml#gpu-pod2": (
        "1 GPU, 60 % memory, 40 % cores, may share with pod1",
        dict(count=1, mode=S, memory_percent=60.0, milli=400)),
    "hami/examples/nvidia/vllm_cross_vgpu.yaml#vllm-cross-vgpu": (
        "2 GPUs (tensor parallel), each 30 % memory and 30 % cores",
        dict(count=2, mode=S, memory_percent=30.0, milli=300)),
    "kai/docs/batch/batch-job.yaml#batch-job": (
        "1 whole GPU per pod, queue default-queue", dict(count=1, mode=X)),
    "kai/docs/gpu-sharing/gpu-memory.yaml#gpu-sharing": (
        "2000 MiB of one GPU, compute shared", dict(count=1, mode=S, memory_mib=2000,
                                                     milli=None)),
    "kai/docs/gpu-sharing/gpu-sharing-init-container.yaml#gpu-sharing-init-container": (
        "half of one GPU's memory, for the init container gpu-init",
        dict(count=1, mode=S, memory_percent=50.0, milli=None)),
    "kai/docs/gpu-sharing/gpu-sharing-non-default-container.yaml#gpu-sharing-non-default": (
        "half of one GPU's memory, for container gpu-workload",
        dict(count=1, mode=S, memory_percent=50.0, milli=None)),
    "kai/docs/gpu-sharing/gpu-sharing.yaml#gpu-sharing": (
        "half of one GPU's memory, compute shared",
        dict(count=1, mode=S, memory_percent=50.0, milli=None)),
    "kai/docs/gpu-sharing/mps/gpu-sharing-with-mps.yaml#gpu-sharing-with-mps": (
        "half of one GPU's memory, through the node's MPS daemon",
        dict(count=1, mode=S, memory_percent=50.0, milli=None)),
    "kai/docs/priority/example/build-priority-pod.yaml#build-pod": (
        "1 whole GPU, priority class build (label)", dict(count=1, mode=X)),
    "kai/docs/priority/example/train-priority-pod.yaml#train-pod": (
        "1 whole GPU, priority class train (label)", dict(count=1, mode=X)),
    "kai/docs/quickstart/pods/cpu-only-pod.yaml#cpu-only-pod": (
        "no GPU", None),
    "kai/docs/quickstart/pods/gpu-pod.yaml#gpu-pod": (
        "1 whole GPU", dict(count=1, mode=X)),
    "kueue/site/static/examples/provisioning/sample-job.yaml#sample-job": (
        "1 whole GPU per pod", dict(count=1, mode=X)),
    "kueue/site/static/examples/serving-workloads/sample-hami.yaml#gpu-burn": (
        "2 HAMi vGPUs, each 30 % cores and 1024 MiB",
        dict(count=2, mode=S, memory_mib=1024, milli=300)),
    "volcano/docs/user-guide/how_to_use_volcano_vgpu.md#hami-pod": (
        "1 vGPU, 50 % cores, 3000 MiB", dict(count=1, mode=S, memory_mib=3000, milli=500)),
    "volcano/docs/user-guide/how_to_use_volcano_vgpu.md#mig-pod": (
        "1 MIG instance of at least 3000 MiB, sized by Volcano",
        ["volcano.sh/vgpu-mode", "nvidia.com/mig-<profile>"]),
    "volcano/docs/user-guide/how_to_use_volcano_vgpu.md#training-job": (
        "4 vGPUs of 16384 MiB each", dict(count=4, mode=S, memory_mib=16384, milli=None)),
}


def describe(req) -> str:
    """A GpuRequest in a table cell's words."""
    if req is None:
        return "no GPU"
    per = []
    if req.mode is DeviceMode.MIG:
        return f"{req.count} × MIG {req.mig_profile}"
    if req.mode is DeviceMode.EXCLUSIVE:
        what = f"{req.count} whole GPU{'s' if req.count > 1 else ''}"
    elif req.mode is DeviceMode.TIMESLICE:
        mem = f"{req.memory_mib} MiB" if req.memory_mib is not None else "card/replicas"
        return f"1 time-slice replica (memory capped at {mem})" + \
            (f", only on {', '.join(req.models)}" if req.models else "")
    else:
        if req.memory_mib is not None:
            per.append(f"{req.memory_mib} MiB")
        if req.memory_percent is not None:
            per.append(f"{req.memory_percent:g} % of its card's memory")
        per.append(f"{req.milli / 10:g} % compute" if req.milli is not None
                   else "compute not limited")
        what = f"{req.count} soft slice{'s' if req.count > 1 else ''} ({', '.join(per)}" + \
            (" each)" if req.count > 1 else ")")
    if req.models:
        what += ", only on the models the annotations name"
    return what


def render() -> str:
    """The Markdown table (offline translation of every kept upstream pod)."""
    from tests.compat.upstream_pods import upstream_pods

    from gpugov.k8s.resources import RequestError
    from gpugov.k8s.webhook.admission import pod_request

    lines = ["| upstream file#pod | its docs promise | gpugov (translation) |",
             "|---|---|---|"]
    for p in upstream_pods():
        promise, _ = EXPECTED[p.key]
        try:
            got = describe(pod_request(p.pod))
            if len(got) > 160:
                got = got[:157] + "…"
        except RequestError as exc:
            got = f"refused: {exc.problem}; instead, {exc.instead}"
        lines.append(f"| `{p.key}` | {promise} | {got.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
