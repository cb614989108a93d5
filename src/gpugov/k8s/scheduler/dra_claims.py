"""DRA claims in gpugov's scheduler's ledger: one count for both paths (docs/dra.md).

kube-scheduler allocates ResourceClaims from gpugov's ResourceSlices (driver
`gpu.gpugov.io`); gpugov's scheduler places device-plugin pods. Both take from the same
queues, so the scheduler charges every allocated gpugov claim (allocated by kube-scheduler,
not refused by the governor) to its namespace's Tenant's queue as running usage, valued the
way the governor values it (`k8s.dra.ledger.claim_charge`: `gpu`, `gpumem`, `mig-<profile>`).
Quota caps, fair share and `Queue.status.usage` then include them; `status.draUsage` says
which part of `usage` is claims, so the governor, which counts claims itself, subtracts it
(`k8s.dra.ledger.pod_usage`) and nothing is counted twice.

A claim that cannot be valued (a device not in the published slices, a consumed capacity that
is not a bounded quantity, too many results) is never charged as zero: its queue takes no new
pod, with a reason naming the claim, until the claim is fixed or gone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpugov.control.resources import GPU, GPUMEM, ResourceSet, scale
from gpugov.k8s.dra.ledger import Charge, ChargeError, claim_charge, device_index
from gpugov.k8s.dra.slices import DRIVER, REFUSED

CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


@dataclass(frozen=True, slots=True)
class ClaimCharge:
    """One counted claim: its charge, or why it cannot be valued (`charge` None)."""

    key: str  # namespace/name
    namespace: str
    charge: Charge | None
    error: str = ""


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _refused(status: Mapping[str, Any]) -> bool:
    """The governor refused this allocation (kube-scheduler deallocates it next)."""
    for d in status.get("devices") or []:
        if isinstance(d, Mapping) and d.get("driver") == DRIVER and any(
                isinstance(c, Mapping) and c.get("type") == REFUSED and c.get("status") == "True"
                for c in d.get("conditions") or []):
            return True
    return False


def counted(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """What of a claim the ledger counts (its namespace, name and gpugov results), or None
    when it holds no gpugov device: not allocated, allocated to other drivers only, or
    refused by the governor. A claim of an odd shape is counted (and fails when valued)."""
    status = claim.get("status") if isinstance(claim, Mapping) else None
    if not isinstance(status, Mapping):
        return None
    alloc = status.get("allocation")
    if not isinstance(alloc, Mapping):
        return None
    devs = alloc.get("devices")
    results = devs.get("results") if isinstance(devs, Mapping) else None
    if results is None:
        return None
    if not isinstance(results, list):
        return _slim(claim, results)  # an odd shape: counted, and refused when valued
    ours = [r for r in results if not isinstance(r, Mapping) or r.get("driver") == DRIVER]
    if not ours or _refused(status):
        return None
    return _slim(claim, ours)


def _slim(claim: Mapping[str, Any], results: Any) -> dict[str, Any]:
    meta = claim.get("metadata") or {}
    # reservedFor: a claim gpugov's own scheduler allocated is its pod's (`dra_alloc.ours`)
    return {"metadata": {"namespace": meta.get("namespace", ""), "name": meta.get("name", "")},
            "status": {"allocation": {"devices": {"results": results}},
                       "reservedFor": (claim.get("status") or {}).get("reservedFor")}}


def value(claim: dict[str, Any], devices: Mapping[tuple[str, str], dict[str, Any]]
          ) -> ClaimCharge:
    """A counted claim's charge (`claim_charge`), or the reason it has none."""
    key, ns = _key(claim), (claim.get("metadata") or {}).get("namespace", "")
    results = claim["status"]["allocation"]["devices"]["results"]
    if not isinstance(results, list) or not all(isinstance(r, Mapping) for r in results):
        return ClaimCharge(key, ns, None, "status.allocation.devices.results is not a list "
                           "of results")
    try:
        return ClaimCharge(key, ns, claim_charge(claim, devices))
    except ChargeError as e:
        return ClaimCharge(key, ns, None, str(e))
    except Exception as e:  # noqa: BLE001 - a shape nobody expected: this claim alone
        return ClaimCharge(key, ns, None, f"{type(e).__name__}: {e}")


def ledger_vector(res: ResourceSet, charge: Charge) -> np.ndarray:
    """A claim's charge in the ledger's columns and units (milli GPUs, MiB, instances); a
    `mig-<profile>` the tree does not count is not a column (as for pods)."""
    out = np.zeros(len(res), dtype=np.float64)
    out[GPU] = float(charge.gpu) * scale("gpu")
    out[GPUMEM] = float(charge.gpumem) * scale("gpumem")
    for name, n in charge.counts:
        c = res.column(name)
        if c >= 0:
            out[c] = float(n)
    return out


class ClaimBook:
    """The allocated gpugov claims and gpugov's ResourceSlices, as watched. The setters say
    whether the ledger must be counted again (a rebuild)."""

    def __init__(self) -> None:
        self.claims: dict[str, dict[str, Any]] = {}  # ns/name -> `counted(...)`
        self.slices: dict[str, Any] = {}  # slice name -> its spec (gpugov's driver only)
        self._devices: dict[tuple[str, str], dict[str, Any]] | None = None
        self._by_node: dict[str, list[dict[str, Any]]] | None = None
        self.version = 0  # bumped when the published devices change

    def set_claim(self, obj: dict[str, Any]) -> bool:
        key, slim = _key(obj), counted(obj)
        if slim is None:
            return self.claims.pop(key, None) is not None
        if self.claims.get(key) == slim:
            return False
        self.claims[key] = slim
        return True

    def delete_claim(self, obj: dict[str, Any]) -> bool:
        return self.claims.pop(_key(obj), None) is not None

    def set_slice(self, obj: dict[str, Any]) -> bool:
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        name = (obj.get("metadata") or {}).get("name", "")
        if not isinstance(spec, Mapping) or spec.get("driver") != DRIVER:
            return self.delete_slice(obj)
        if self.slices.get(name) == spec:
            return False
        self.slices[name] = spec
        self._devices = self._by_node = None
        self.version += 1
        return bool(self.claims)  # devices matter only to claims that name them

    def delete_slice(self, obj: dict[str, Any]) -> bool:
        if self.slices.pop((obj.get("metadata") or {}).get("name", ""), None) is None:
            return False
        self._devices = self._by_node = None
        self.version += 1
        return bool(self.claims)

    def devices(self) -> dict[tuple[str, str], dict[str, Any]]:
        if self._devices is None:
            self._devices = device_index([{"spec": s} for s in self.slices.values()])
        return self._devices

    def by_node(self) -> dict[str, list[dict[str, Any]]]:
        """pool (node) -> its published devices; {} when the slices cannot be read."""
        if self._by_node is None:
            try:
                devices = self.devices()
            except Exception:  # noqa: BLE001 - charges() names the problem
                devices = {}
            out: dict[str, list[dict[str, Any]]] = {}
            for (pool, _name), d in devices.items():
                out.setdefault(pool, []).append(d)
            self._by_node = out
        return self._by_node

    def published(self, node: str) -> set[str]:
        return {str(d.get("name")) for d in self.by_node().get(node, [])}

    def devices_of(self, skip: Callable[[dict[str, Any]], bool] | None = None
                   ) -> list[tuple[str, str]]:
        """(pool, device) of every counted claim's results (but the skipped claims')."""
        out = []
        for c in self.claims.values():
            if skip is not None and skip(c):
                continue
            results = c["status"]["allocation"]["devices"]["results"]
            for r in results if isinstance(results, list) else ():
                if isinstance(r, Mapping):
                    out.append((str(r.get("pool")), str(r.get("device"))))
        return out

    def charges(self, skip: Callable[[dict[str, Any]], bool] | None = None
                ) -> list[ClaimCharge]:
        """Every counted claim (but the skipped: gpugov's own, charged as its pod), valued;
        in key order (stable messages)."""
        keys = [k for k in sorted(self.claims) if skip is None or not skip(self.claims[k])]
        try:
            devices = self.devices()
        except Exception as e:  # noqa: BLE001 - a slice of a shape nobody expected
            why = f"gpugov's ResourceSlices cannot be read ({type(e).__name__}: {e})"
            return [ClaimCharge(k, self.claims[k]["metadata"]["namespace"], None, why)
                    for k in keys]
        return [value(self.claims[k], devices) for k in keys]

    def namespaces(self) -> set[str]:
        return {(c.get("metadata") or {}).get("namespace", "") for c in self.claims.values()}
