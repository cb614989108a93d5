"""Metric names the node exporter writes (docs/contracts.md). The names live once, in
gpugov.observe.names, which the reconciler, alert rules and dashboards also import."""

from gpugov.observe.names import (  # noqa: F401
    DEV_CLOCK_THROTTLE_REASONS,
    DEV_CLOCKS_EVENT_REASONS,
    DEV_FB_FREE,
    DEV_FB_USED,
    DEV_GPU_TEMP,
    DEV_GPU_UTIL,
    DEV_MEM_COPY_UTIL,
    DEV_POWER_USAGE,
    DEV_SM_CLOCK,
    DEV_XID_ERRORS,
    DEVICE_DRIVER_OVERHEAD,
    DEVICE_HEALTHY,
    DEVICE_UNACCOUNTED,
    DEVICE_ZOMBIE,
    EXPORTER_ERRORS,
    EXPORTER_METRICS,
    NODE_GPUS,
    POD_COMPUTE_LIMIT,
    POD_DEVICE_TIME,
    POD_MEMORY_LIMIT,
    POD_MEMORY_USED,
    POD_REFUSED,
    POD_THROTTLED,
)
