"""Why a job is pending: a short code (stable, for tools) plus a sentence (for people).

Codes, in the order a job meets them: `rejected` (can never run here), `over-quota` (a cap
on its queue path: limit, quota + borrowingLimit, or non-preemptible beyond quota),
`waiting-for-fair-share` (the capacity is held by other queues and reclaim cannot or may not
take it), `no-node-fits` (quota is fine, no node has room), `gang-incomplete` (only some of
its pods would fit), `blocked-by-priority` (the nodes that would fit are reserved for a job
ahead of it).

The dimension that blocked (`Job.blocked_by`) is one of placement's `model.cluster.REASONS`
(gpu-model, node-selector, taint, gpu-mode, isolation, tenant-isolation, mig-slice, replicas,
gpu, gpu-memory, power, cpu, memory) or a queue resource (gpu, gpumem, mig-<profile>, ...);
`node_words` and `quota_advice` say in words what blocked and what to change.
"""

from __future__ import annotations

from gpugov.model.cluster import REASONS
from gpugov.model.devices import DeviceMode
from gpugov.model.request import PodRequest

REJECTED = "rejected"
OVER_QUOTA = "over-quota"
FAIR_SHARE = "waiting-for-fair-share"
NO_NODE = "no-node-fits"
GANG = "gang-incomplete"
PRIORITY = "blocked-by-priority"
NOT_TRIED = "not-yet-considered"

ALL = (REJECTED, OVER_QUOTA, FAIR_SHARE, NO_NODE, GANG, PRIORITY, NOT_TRIED)

#: placement's failure reasons (`model.cluster.REASONS`, plus "reserved") -> what blocked,
#: and what to change
NODE_WORDS = {
    "gpu-model": "no node has an allowed GPU model; allow more models or add nodes of one",
    "node-selector": "no node has the labels its nodeSelector asks for; fix the selector or "
                     "label nodes",
    "taint": "every node that could take it has a taint it does not tolerate; add a "
             "toleration or use untainted nodes",
    "gpu-mode": "no node has a device in the mode it asks for (whole, MIG, soft slice, "
                "time-slice or MPS); ask for another kind of slice or repartition devices",
    "isolation": "no device in its mode isolates enough for its tenant's trust tier; ask for "
                 "a MIG profile or a whole GPU (hard isolation)",
    "tenant-isolation": "the devices with room are shared with another tenant and one of "
                        "the two must not share (an untrusted tenant); wait for a device of "
                        "its own, or ask for a MIG profile or a whole GPU elsewhere",
    "mig-slice": "no MIG device has a free instance of its profile at a valid start; ask "
                 "for a smaller profile or wait for one to free",
    "replicas": "every time-slice or MPS device of its kind has all replicas taken; wait, or "
                "ask for a soft slice or a whole GPU",
    "gpu": "no node has enough free GPU compute of an allowed model; ask for a smaller share "
           "or wait",
    "gpu-memory": "no node has a GPU with both the compute and the GPU memory asked for "
                  "free; ask for less GPU memory or wait",
    "power": "the nodes that could take it are at their power budget; wait for devices there "
             "to go idle, or ask for fewer GPUs per pod",
    "topology": "no node has enough fitting GPUs inside one NVLink domain, which "
                "gpugov.io/topology: required asks for; wait, ask for fewer GPUs per pod, or "
                "write gpugov.io/topology: preferred",
    "cpu": "no node with room on its GPUs has enough free CPU; ask for less CPU or wait",
    "memory": "no node with room on its GPUs and CPU has enough free memory; ask for less "
              "memory or wait",
    "reserved": "the nodes that would fit are reserved for a job ahead of it",
}
assert set(REASONS) <= set(NODE_WORDS), "every placement reason needs words"


#: a slice no node serves at all: which nodes would, and how an admin makes one
_MODE_SERVED = {
    DeviceMode.MPS: "no node it may use serves MPS clients (nvidia.com/gpu.mps needs GPUs "
                    "in mps mode, with the MPS control daemon: the chart's "
                    "node.defaultMode=mps, `gpugov node agent --mode mps`, or the NVIDIA "
                    "config's sharing.mps); ask for a soft slice (nvidia.com/gpu with "
                    "gpumem/gpucores) or a whole GPU instead",
    DeviceMode.TIMESLICE: "no node it may use serves time-slice replicas "
                          "(nvidia.com/gpu.shared needs GPUs in timeslice mode: "
                          "node.defaultMode=timeslice or the NVIDIA config's "
                          "sharing.timeSlicing); ask for a soft slice or a whole GPU",
}


def node_words(code: str, req: PodRequest | None = None) -> str:
    """`code` (a placement reason) as a sentence; with `req`, naming its slice when that is
    what blocked."""
    words = NODE_WORDS.get(code, code)
    if req is None:
        return words
    if code == "isolation" and req.slice_mode is DeviceMode.TIMESLICE and (
            req.oversubscribe or req.slice_mode.isolation >= req.min_isolation):
        return ("time-slice replicas that need soft isolation (capped at their memory) and a "
                "Tenant's oversubscribing (uncapped) replicas never share a device, and an "
                "uncapped replica gives none; wait for a device without the other kind, or ask "
                "for a soft slice, a MIG profile or a whole GPU")
    if code == "isolation" and req.min_isolation:
        return (f"it needs {req.min_isolation} isolation (its tenant's trust tier) and a "
                f"{req.slice_mode} slice gives {req.slice_mode.isolation}; ask for a MIG "
                "profile or a whole GPU (hard isolation)")
    if code == "gpu-mode" and req.slice_mode in _MODE_SERVED and not req.mig_profile:
        return _MODE_SERVED[req.slice_mode]
    if code == "mig-slice" and req.mig_profile:
        return words.replace("its profile", f"profile {req.mig_profile}")
    if code == "gpu-memory" and req.gpu_memory_mib:
        return words.replace("GPU memory asked for", f"{req.gpu_memory_mib} MiB of GPU memory")
    return words


def quota_advice(resource: str, kind: str = "cap") -> str:
    """What a user can change when queue `resource` blocked (appended to a quota reason);
    `kind` is the rule (`QuotaVerdict.kind`): a full cluster is not fixed by a bigger quota."""
    if kind == "capacity":
        if resource == "gpumem" or resource.startswith("mig-"):
            return f"; {resource} is what blocked: the cluster's is held"
        return ""
    if resource == "gpumem":
        return ("; GPU memory (gpumem) is what blocked: ask for less GPU memory per device, "
                "or raise the queue's gpumem quota/limit (a whole GPU charges its card's "
                "memory)")
    if resource.startswith("mig-"):
        return (f"; MIG instances ({resource}) are what blocked: ask for another profile or "
                f"raise the queue's {resource} quota/limit")
    return ""
