"""On-demand MIG instances, on the node: the agent creates the instances gpugov's scheduler asks
for (node annotation `gpugov.io/mig-requests`), in free memory slices only, and says what became
of each (`gpugov.io/mig-requests-state`: `created` or `refused: <why>`).

Why only free slices: creating a GPU instance where no instance is touches nothing that runs
(NVML creates it beside running instances), while destroying or moving one would stop its
work. So a request that overlaps an existing instance — in use or not —, names a profile the
driver does not offer, a start the profile cannot take, or a GPU not in MIG mode (switching
modes needs a reset) is refused with the reason, untouched; the driver's own refusal
(`NVML_ERROR_INSUFFICIENT_RESOURCES`, …) is passed on the same way. The scheduler turns a
refusal into a reason on the pod. A request is answered once (its key stays in the state while
the scheduler still asks), so a refused one is not retried in a loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from typing import Any

import pynvml

from gpugov.k8s.annotations import (
    MIG_REQUESTS,
    MIG_REQUESTS_STATE,
    AnnotationError,
    MigRequest,
    decode_mig_requests,
    decode_mig_requests_state,
    encode_mig_requests_state,
)
from gpugov.node.mig_apply import _CI_INDEX
from gpugov.node.nvml.discovery import GpuInfo, mig_profiles
from gpugov.node.nvml.library import Nvml

log = logging.getLogger(__name__)

CREATED = "created"


def create_instance(nv: Nvml, gpu: GpuInfo, profile: str, start: int) -> str:
    """Create `profile` at `start` on `gpu` with its whole-instance compute instance, if that
    touches no existing instance: `created`, or `refused: <why>`."""
    i = gpu.index
    if not gpu.mig_enabled:
        return (f"refused: GPU {i} is not in MIG mode (switching needs a GPU reset; apply a "
                "layout with nvidia.com/mig.config)")
    for m in gpu.mig:
        if (m.profile, m.start) == (profile, start):
            return CREATED if m.uuid else f"refused: GPU {i}: {profile}@{start} exists without " \
                "a compute instance"
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    offered = {p.name: p for p in mig_profiles(nv, h, gpu.model)}
    p = offered.get(profile)
    if p is None:
        return (f"refused: GPU {i}: profile {profile} is not available on this driver "
                f"(offered: {', '.join(sorted(offered)) or 'none'})")
    if start not in p.starts:
        return (f"refused: GPU {i}: {profile} cannot start at {start} (starts: "
                f"{', '.join(map(str, p.starts))})")
    for m in gpu.mig:
        if start < m.start + m.size and m.start < start + p.memory_slices:
            return (f"refused: GPU {i}: slices {start}..{start + p.memory_slices - 1} are taken "
                    f"by {m.profile}@{m.start}; an existing instance is never touched")
    place = pynvml.c_nvmlGpuInstancePlacement_t()
    place.start, place.size = start, p.memory_slices
    try:
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, p.profile_id,
                                                             ctypes.byref(place))
    except pynvml.NVMLError as exc:
        return f"refused: GPU {i}: the driver refused {profile}@{start}: {exc}"
    try:
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, _CI_INDEX[p.compute_slices])
    except (pynvml.NVMLError, KeyError) as exc:
        try:  # leave nothing half made: the GPU instance has no work yet
            pynvml.nvmlGpuInstanceDestroy(gi)
        except pynvml.NVMLError:
            log.warning("GPU %s: could not remove the GPU instance %s@%s left by a failed "
                        "create", i, profile, start)
        return f"refused: GPU {i}: no compute instance for {profile}@{start}: {exc}"
    return CREATED


async def reconcile_requests(agent: Any) -> dict[str, str] | None:
    """One round: answer the scheduler's new requests on this node, re-publish the inventory
    and the outcomes (None when there was nothing to do)."""
    node = await agent.core.read_node(agent.cfg.node_name)
    annotations = node.metadata.annotations or {}
    text = annotations.get(MIG_REQUESTS)
    if text is None:
        return None
    try:
        reqs = decode_mig_requests(text)
    except AnnotationError as exc:
        agent.errors["bad_mig_requests"] += 1
        log.warning("node %s: %s; no instance created", agent.cfg.node_name, exc)
        return None
    try:
        done = decode_mig_requests_state(annotations[MIG_REQUESTS_STATE]) \
            if MIG_REQUESTS_STATE in annotations else {}
    except AnnotationError:
        done = {}  # the agent owns it: rewritten below
    wanted = {r.key for r in reqs}
    results = {k: v for k, v in done.items() if k in wanted}
    todo = [r for r in reqs if r.key not in results]
    if not todo and results == done:
        return None
    loop = asyncio.get_running_loop()
    for r in todo:
        results[r.key] = await loop.run_in_executor(None, _answer, agent, r)
        created = results[r.key] == CREATED
        await agent.event("MigInstanceCreated" if created else "MigInstanceRefused",
                          f"{r.profile}@{r.start} on GPU {r.gpu} for {r.pod or 'a pod'}: "
                          f"{results[r.key]}", warning=not created)
        if created:  # the next request sees the new instance
            await loop.run_in_executor(None, agent.source.refresh)
    from gpugov.node.agent import now
    await agent.publish(extra_annotations={
        MIG_REQUESTS_STATE: encode_mig_requests_state(results, now())}, force=True)
    return results


def _answer(agent: Any, r: MigRequest) -> str:
    inv = {d.index: d for d in agent.source.inventory().devices}
    gpu = next((g for g in agent.source.node.gpus if g.index == r.gpu), None)
    if gpu is None:
        return f"refused: no GPU {r.gpu} on this node"
    if not inv[r.gpu].mig_on_demand:
        return (f"refused: GPU {r.gpu} does not take MIG instances on demand (node config "
                "migOnDemand is off, or the GPU is not in MIG mode)")
    return create_instance(agent.source.nvml, gpu, r.profile, r.start)
