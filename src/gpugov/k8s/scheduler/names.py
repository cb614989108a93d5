"""Names the scheduler shares with the other components (docs/contracts.md).

Kept in one module so a rename cannot split the scheduler from the webhook or the device
plugin; the annotation names are the contract's.
"""

from __future__ import annotations

#: `spec.schedulerName` of pods gpugov schedules (the webhook sets it on GPU pods).
SCHEDULER_NAME = "gpugov-scheduler"

ANN_REQUEST = "gpugov.io/request"
ANN_QUEUE = "gpugov.io/queue"
ANN_TENANT = "gpugov.io/tenant"
ANN_TRUST = "gpugov.io/trust-tier"
ANN_ALLOCATION = "gpugov.io/allocation"
ANN_INVENTORY = "gpugov.io/inventory"
#: PriorityClass annotations carrying gpugov's extensions of a Kubernetes PriorityClass.
ANN_PREEMPTIBLE = "gpugov.io/preemptible"
ANN_MIN_RUNTIME = "gpugov.io/min-runtime"

GROUP = "gpugov.io"
VERSION = "v1alpha1"
QUEUES = "queues"
TENANTS = "tenants"

PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_VERSION = "v1alpha1"
PODGROUPS = "podgroups"
#: pod label naming its PodGroup (scheduler-plugins coscheduling).
PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"

#: reason of the PodScheduled=False condition (what cluster-autoscaler and kubectl key on);
#: gpugov's own reason code starts the message.
UNSCHEDULABLE = "Unschedulable"
EVENT_SOURCE = "gpugov-scheduler"
