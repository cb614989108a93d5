"""Power domains on Kubernetes: the PowerDomain objects, the nodes' measured draw, and the
capping plan the node agents apply (docs/power.md)."""
