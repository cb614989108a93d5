"""Names the scheduler uses: the shared ones come from `gpugov.k8s.annotations` (the one
module both sides of docs/contracts.md import), the rest are the scheduler's own.
"""

from __future__ import annotations

from gpugov.k8s import annotations as _ann

#: `spec.schedulerName` of pods gpugov schedules (the webhook sets it on GPU pods).
SCHEDULER_NAME = _ann.SCHEDULER_NAME

ANN_REQUEST = _ann.REQUEST
ANN_QUEUE = _ann.QUEUE
ANN_TENANT = _ann.TENANT
ANN_TRUST = _ann.TRUST_TIER
ANN_ALLOCATION = _ann.ALLOCATION
ANN_INVENTORY = _ann.INVENTORY
ANN_UNSCHEDULABLE_GPUS = _ann.UNSCHEDULABLE_GPUS

GROUP = "gpugov.io"
VERSION = "v1alpha1"
QUEUES = "queues"
TENANTS = "tenants"
#: gpugov's extension (preemptible, minRuntime) of the Kubernetes PriorityClass of that name
PRIORITY_POLICIES = "prioritypolicies"

PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_VERSION = "v1alpha1"
PODGROUPS = "podgroups"
#: pod label naming its PodGroup (scheduler-plugins coscheduling).
PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: Volcano's PodGroup (same `spec.minMember`); its pods name it in an annotation
VOLCANO_PODGROUP_GROUP = "scheduling.volcano.sh"
VOLCANO_PODGROUP_VERSION = "v1beta1"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
#: KAI-Scheduler's pod label naming the priority class (when spec.priorityClassName is unset)
KAI_PRIORITY_LABEL = "priorityClassName"

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = _ann.GFD_PRODUCT
GPU_MEMORY_LABEL = _ann.GFD_MEMORY

#: reason of the PodScheduled=False condition (what cluster-autoscaler and kubectl key on);
#: gpugov's own reason code starts the message.
UNSCHEDULABLE = "Unschedulable"
EVENT_SOURCE = "gpugov-scheduler"
