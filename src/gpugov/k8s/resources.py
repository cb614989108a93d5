"""Request spellings for the Kubernetes side: a re-export of `gpugov.model.resource_spellings`.

The translation is pure and also serves the replay's jobs files (sim/ may not import k8s/), so
it lives in model/; this module keeps the names the webhook, scheduler and tests import.
"""

from __future__ import annotations

from gpugov.model.gpu_request import GpuRequest, mig_milli
from gpugov.model.resource_spellings import (
    ALIASES,
    ANN_ISOLATION,
    ANN_MODEL,
    ANN_TOPOLOGY,
    GPU,
    GPUCORES,
    GPUMEM,
    GPUMEM_PCT,
    KAI_FRACTION,
    KAI_MEMORY,
    KAI_NUM_DEVICES,
    MIG_PREFIX,
    OUR_ANNOTATIONS,
    PRIORITY,
    PRODUCT_LABEL,
    SHARED,
    TOPOLOGY_VALUES,
    RequestError,
    ResourceNames,
    annotation_warnings,
    model_from_product_label,
    translate,
)

__all__ = ["ALIASES", "PRIORITY", "ResourceNames", "annotation_warnings",
           "ANN_ISOLATION", "ANN_MODEL", "ANN_TOPOLOGY", "GPU", "GPUCORES", "GPUMEM",
           "GPUMEM_PCT", "KAI_FRACTION", "KAI_MEMORY", "KAI_NUM_DEVICES", "MIG_PREFIX",
           "OUR_ANNOTATIONS", "PRODUCT_LABEL", "SHARED", "TOPOLOGY_VALUES", "GpuRequest",
           "RequestError", "mig_milli", "model_from_product_label", "translate"]
