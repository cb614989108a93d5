"""gpugov's Kubernetes scheduler: API objects in, the control plane's decisions out.

`translate` turns pods, nodes, Queues, Tenants, PriorityClasses and PodGroups into the
engine's inputs; `state` feeds them to `control.cycle.ControlPlane` and turns its decisions
into a plan of API writes (pure, no I/O); `apply` performs the plan; `runner` watches the API
and drives cycles; `explain` answers "why is this pod pending" from the live API.
"""
