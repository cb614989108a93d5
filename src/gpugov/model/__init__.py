"""Pure data: GPU catalog, devices, nodes, cluster state, requests, allocations."""
