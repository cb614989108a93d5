"""All placement policies by command-line name. Adding a policy = one module + one line here."""

from __future__ import annotations

from gpugov.placement.base import Policy
from gpugov.placement.best_fit import BestFitPolicy
from gpugov.placement.dot_product import DotProductPolicy
from gpugov.placement.fgd import FgdPolicy
from gpugov.placement.gpu_clustering import GpuClusteringPolicy
from gpugov.placement.gpu_packing import GpuPackingPolicy
from gpugov.placement.gpugov import GpugovPolicy
from gpugov.placement.random_node import RandomPolicy

POLICIES: dict[str, type[Policy]] = {
    p.name: p
    for p in (
        RandomPolicy,
        DotProductPolicy,
        GpuClusteringPolicy,
        GpuPackingPolicy,
        BestFitPolicy,
        FgdPolicy,
    )
}

#: policies beyond the FGD study's six (which `POLICIES` lists, in the study's order):
#: usable by name everywhere a policy is chosen, not part of the study's "all".
PRODUCTION_POLICIES: dict[str, type[Policy]] = {GpugovPolicy.name: GpugovPolicy}


#: other spellings people type, after `_key` (lower case, letters and digits only)
ALIASES = {"dotproduct": "dotprod", "fragmentation": "fgd", "fgdscore": "fgd",
           "clustering": "gpuclustering", "packing": "gpupacking", "rand": "random"}


def _key(text: str) -> str:
    key = "".join(ch for ch in text.strip().lower() if ch.isalnum())
    return key.lstrip("0123456789") or key  # "06-FGD" -> "fgd"


def get_policy(name: str) -> type[Policy]:
    """Look a policy up by name or label, however it is spelled: "fgd", "06-FGD",
    "best-fit", "BestFit", "gpu_packing", "dot-product" all work."""
    wanted = _key(name)
    wanted = ALIASES.get(wanted, wanted)
    for p in (*POLICIES.values(), *PRODUCTION_POLICIES.values()):
        if wanted in (p.name, _key(p.label)):
            return p
    raise KeyError(f"unknown policy {name!r}; choose one of: "
                   f"{', '.join([*POLICIES, *PRODUCTION_POLICIES])} "
                   "(or all; several: repeat --policy or separate with commas)")
