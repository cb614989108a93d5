"""Metric names the reconciler exports and the exporter metrics it reads (docs/contracts.md).

Kept in one module so the reconciler, alert rules, dashboards and `gpugov top` cannot drift
apart; tests check that every name used in the rules and dashboards is one of these.
"""

from __future__ import annotations

# --- exporter (per node) metrics this room reads ---------------------------------------
DEV_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DEV_MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
DEV_FB_USED = "DCGM_FI_DEV_FB_USED"
DEV_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DEV_POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
DEV_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
DEV_SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
DEV_XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
DEV_CLOCKS_EVENT_REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"  # dcgm-exporter's name
DEV_CLOCK_THROTTLE_REASONS = DEV_CLOCKS_EVENT_REASONS  # the old constant, same metric
POD_MEMORY_USED = "gpugov_pod_memory_used_bytes"
POD_MEMORY_LIMIT = "gpugov_pod_memory_limit_bytes"
POD_COMPUTE_LIMIT = "gpugov_pod_compute_limit_ratio"
POD_DEVICE_TIME = "gpugov_pod_device_time_seconds_total"
POD_THROTTLED = "gpugov_pod_throttled_seconds_total"
POD_REFUSED = "gpugov_pod_refused_allocations_total"
DEVICE_UNACCOUNTED = "gpugov_device_memory_unaccounted_bytes"
DEVICE_ZOMBIE = "gpugov_device_memory_zombie_bytes"
DEVICE_DRIVER_OVERHEAD = "gpugov_device_memory_driver_overhead_bytes"
DEVICE_HEALTHY = "gpugov_device_healthy"
NODE_GPUS = "gpugov_node_gpus"
EXPORTER_ERRORS = "gpugov_exporter_errors_total"
# the rest of dcgm-exporter's default counters (+ the optional profiling ones), by its names
# (gpugov.node.nvml.dcgm_fields says which NVML call gives each)
DCGM_MORE = (
    "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
)

EXPORTER_METRICS = (
    DEV_GPU_UTIL, DEV_MEM_COPY_UTIL, DEV_FB_USED, DEV_FB_FREE, DEV_POWER_USAGE, DEV_GPU_TEMP,
    DEV_SM_CLOCK, DEV_XID_ERRORS, DEV_CLOCK_THROTTLE_REASONS, POD_MEMORY_USED,
    POD_MEMORY_LIMIT, POD_COMPUTE_LIMIT, POD_DEVICE_TIME, POD_THROTTLED, POD_REFUSED,
    DEVICE_UNACCOUNTED, DEVICE_ZOMBIE, DEVICE_DRIVER_OVERHEAD, DEVICE_HEALTHY, NODE_GPUS,
    EXPORTER_ERRORS, *DCGM_MORE,
)

# --- reconciler (per cluster) metrics ---------------------------------------------------
VIEWS = ("declared", "allocated", "used")
GPUS = {v: f"gpugov_{v}_gpus" for v in VIEWS}
MEMORY = {v: f"gpugov_{v}_memory_bytes" for v in VIEWS}
COMPUTE = {v: f"gpugov_{v}_compute_ratio" for v in VIEWS}
EFFICIENCY = "gpugov_efficiency_ratio"
IDLE_ALLOCATED = "gpugov_idle_allocated_gpu_seconds_total"
QUEUE_QUOTA = "gpugov_queue_quota_gpus"
QUEUE_FAIR_SHARE = "gpugov_queue_fair_share_gpus"
QUEUE_USAGE = "gpugov_queue_usage_gpus"
QUEUE_PENDING = "gpugov_queue_pending_pods"
QUOTA_REFUSALS = "gpugov_quota_refusals_total"
TIMESLICE_OVERCOMMIT = "gpugov_timeslice_memory_overcommit_ratio"
DEVICE_ALLOCATED_COMPUTE = "gpugov_device_allocated_compute_ratio"
DEVICE_ALLOCATED_MEMORY = "gpugov_device_allocated_memory_bytes"
NODE_AGENT_MISSING = "gpugov_node_agent_missing"
RECONCILER_PROBLEMS = "gpugov_reconciler_input_problems"
RECONCILER_ERRORS = "gpugov_reconciler_errors_total"
RECONCILER_LAST_SUCCESS = "gpugov_reconciler_last_success_timestamp_seconds"
# power (observe/power.py, docs/power.md)
POWER_PANEL = "gpugov_power_domain_panel_watts"
POWER_BUDGET = "gpugov_power_domain_budget_watts"
POWER_ADMITTED = "gpugov_power_domain_admitted_watts"
POWER_MEASURED = "gpugov_power_domain_measured_watts"
POD_GPU_POWER = "gpugov_pod_gpu_power_watts"
#: usage by DRA claim (the exporter's `claim` label): charged memory, busy fraction
CLAIM_USED_MEMORY = "gpugov_claim_used_memory_bytes"
CLAIM_USED_COMPUTE = "gpugov_claim_used_compute_ratio"

RECONCILER_METRICS = (
    *GPUS.values(), *MEMORY.values(), *COMPUTE.values(), EFFICIENCY, IDLE_ALLOCATED,
    QUEUE_QUOTA, QUEUE_FAIR_SHARE, QUEUE_USAGE, QUEUE_PENDING, QUOTA_REFUSALS,
    TIMESLICE_OVERCOMMIT, DEVICE_ALLOCATED_COMPUTE, DEVICE_ALLOCATED_MEMORY,
    NODE_AGENT_MISSING, RECONCILER_PROBLEMS, RECONCILER_ERRORS,
    RECONCILER_LAST_SUCCESS, POWER_PANEL, POWER_BUDGET, POWER_ADMITTED, POWER_MEASURED,
    POD_GPU_POWER, CLAIM_USED_MEMORY, CLAIM_USED_COMPUTE,
)

ALL_METRICS = frozenset(EXPORTER_METRICS + RECONCILER_METRICS)
