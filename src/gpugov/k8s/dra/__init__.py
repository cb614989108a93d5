"""gpugov's Dynamic Resource Allocation driver `gpu.gpugov.io` (resource.k8s.io/v1, docs/dra.md).

`slices.py`: ResourceSlices and DeviceClasses from the node agent's inventory (pure);
`publisher.py`: keeps them in the API; `claims.py`: what a claim asks for and charges (pure).
"""
