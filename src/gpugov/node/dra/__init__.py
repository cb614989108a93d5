"""gpugov's DRA kubelet plugin for the `gpu.gpugov.io` driver (docs/dra.md).

`prepare.py` (pure): an allocated ResourceClaim + the node's inventory -> the devices the
kubelet is told about and the CDI spec that gives the container its GPUs, the environment and,
for slices, the enforcement library with the claim's limits. `plugin.py`: the gRPC servers
(DRA v1 + plugin registration) and the on-disk state that makes prepare idempotent.
"""
