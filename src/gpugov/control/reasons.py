"""Why a job is pending: a short code (stable, for tools) plus a sentence (for people).

Codes, in the order a job meets them: `rejected` (can never run here), `over-quota` (a cap
on its queue path: limit, quota + borrowingLimit, or non-preemptible beyond quota),
`waiting-for-fair-share` (the capacity is held by other queues and reclaim cannot or may not
take it), `no-node-fits` (quota is fine, no node has room), `gang-incomplete` (only some of
its pods would fit), `blocked-by-priority` (the nodes that would fit are reserved for a job
ahead of it).
"""

from __future__ import annotations

REJECTED = "rejected"
OVER_QUOTA = "over-quota"
FAIR_SHARE = "waiting-for-fair-share"
NO_NODE = "no-node-fits"
GANG = "gang-incomplete"
PRIORITY = "blocked-by-priority"
NOT_TRIED = "not-yet-considered"

ALL = (REJECTED, OVER_QUOTA, FAIR_SHARE, NO_NODE, GANG, PRIORITY, NOT_TRIED)

#: engine failure reasons -> words
NODE_WORDS = {
    "gpu": "no node has enough free GPU capacity of an allowed model",
    "gpu-memory": "no node has a GPU with both the compute and the GPU memory asked for free",
    "gpu-model": "no node has an allowed GPU model",
    "cpu": "no node with room on its GPUs has enough free CPU",
    "memory": "no node with room on its GPUs and CPU has enough free memory",
    "reserved": "the nodes that would fit are reserved for a job ahead of it",
}
