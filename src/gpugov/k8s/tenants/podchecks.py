"""What the webhook refuses in a GPU pod of a fenced tenant, and the placement it adds.

The enforcement library's threat model (docs/threat-model.md) assumes a tenant's GPU
container cannot reach the driver around the library nor unload it. Pod Security Admission
(`restricted`/`baseline` on the tenant's namespaces) already refuses privileged pods and
hostPath for the tiers that take it; these checks hold for every GPU pod of a Tenant whose
`guardrails.podChecks` is on (the default; only a trusted Tenant may turn it off), also where
PSA is `privileged`, and they say exactly what to change:

- a `hostPath` volume at `/dev/nvidia*`, or at `/` or `/dev` (which contain it);
- in any container (init and regular): `securityContext.privileged: true`, a capability
  `SYS_ADMIN`, `SYS_PTRACE` or `ALL` added; on the pod: `hostPID` or `hostIPC`;
- an `env` entry named `NVIDIA_VISIBLE_DEVICES`, `CUDA_VISIBLE_DEVICES` (renumbers the
  devices the library's per-device limits are indexed by), `LD_PRELOAD` or `LD_AUDIT` (a
  library loaded before gpugov's), or `GPUGOV_*` (the library's own settings);
- a `volumeMount` at, under or above the paths the device plugin mounts the library at
  (`/etc/ld.so.preload`, `/usr/local/gpugov`, `/var/run/gpugov`): a volume there hides it.

`envFrom` (a ConfigMap's or Secret's keys) is not visible at admission: the device plugin's
own variables are set by the kubelet after it, and the library's preload does not read the
environment (docs/tenancy.md).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from gpugov.k8s.tenants.guardrails import GuardrailError, Guardrails, parse
from gpugov.model.isolation import TrustTier

DEVICE_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_AUDIT")
ENV_PREFIX = "GPUGOV_"
LIBRARY_PATHS = ("/etc/ld.so.preload", "/usr/local/gpugov", "/var/run/gpugov")
CAPABILITIES = ("SYS_ADMIN", "SYS_PTRACE", "ALL", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE")


def guardrails_of(tenant: str, trust: TrustTier, spec_guardrails: Mapping[str, Any] | None
                  ) -> Guardrails:
    """The Tenant's parsed guardrails (GuardrailError: the pod is refused with it)."""
    return parse(tenant, {"guardrails": dict(spec_guardrails or {})}, trust)


def _norm(path: Any) -> str:
    # normpath keeps a leading `//` (POSIX leaves it implementation-defined); the kernel
    # does not, so neither do we
    return "/" + posixpath.normpath("/" + str(path)).lstrip("/") if path else ""


def _covers(a: str, b: str) -> bool:
    """`a` is `b`, under it, or above it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def refusals(pod: Mapping[str, Any]) -> list[str]:
    """Every reason the GPU pod is refused (empty: none)."""
    spec = pod.get("spec") or {}
    out = []
    for v in spec.get("volumes") or []:
        hp = v.get("hostPath") if isinstance(v, Mapping) else None
        if isinstance(hp, Mapping):
            path = _norm(hp.get("path"))
            if path in ("/", "/dev") or path.startswith("/dev/nvidia"):
                out.append(f"volume {str(v.get('name'))[:64]!r} mounts hostPath {path[:128]!r}, "
                           "which holds the GPU device files (/dev/nvidia*): the device plugin "
                           "gives the pod its GPUs; remove the volume")
    for key in ("hostPID", "hostIPC"):
        if spec.get(key) is True:
            out.append(f"spec.{key}: true lets the pod reach other processes on the node; "
                       "remove it")
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            if not isinstance(c, Mapping):
                continue
            where = f"{kind[:-1]} {str(c.get('name', '?'))[:64]!r}"
            sc = c.get("securityContext") or {}
            if isinstance(sc, Mapping):
                if sc.get("privileged") is True:
                    out.append(f"{where}: securityContext.privileged: true reaches every "
                               "device around the enforcement library; remove it")
                caps = (sc.get("capabilities") or {}).get("add") or [] \
                    if isinstance(sc.get("capabilities"), Mapping) else []
                bad = [str(x) for x in caps if str(x).upper() in CAPABILITIES]
                if bad:
                    out.append(f"{where}: securityContext.capabilities.add {bad[:4]}; "
                               "allowed: none of SYS_ADMIN, SYS_PTRACE, ALL")
            for e in c.get("env") or []:
                name = str(e.get("name", "")) if isinstance(e, Mapping) else ""
                if name in DEVICE_ENV or name.startswith(ENV_PREFIX):
                    out.append(f"{where}: env {name[:64]} is set by gpugov's device plugin "
                               "(or would load code before its enforcement library); "
                               "remove it")
            for m in c.get("volumeMounts") or []:
                path = _norm(m.get("mountPath")) if isinstance(m, Mapping) else ""
                hit = [p for p in LIBRARY_PATHS if path and path != "/" and _covers(path, p)]
                if hit:
                    out.append(f"{where}: volumeMount at {path[:128]!r} hides {hit[0]}, where "
                               "the device plugin mounts the enforcement library; mount it "
                               "elsewhere")
    return out


def placement_patch(pod: Mapping[str, Any], g: Guardrails) -> tuple[list[dict[str, Any]],
                                                                     str | None]:
    """JSON patch adding the Tenant's nodeSelector and tolerations; a refusal when the pod
    already selects another value for one of the Tenant's keys."""
    spec = pod.get("spec") or {}
    patch: list[dict[str, Any]] = []
    if g.node_selector:
        current = spec.get("nodeSelector")
        if not isinstance(current, Mapping) or not current:
            patch.append({"op": "add", "path": "/spec/nodeSelector",
                          "value": dict(g.node_selector)})
        else:
            for k, v in g.node_selector.items():
                if k in current and str(current[k]) != v:
                    return [], (f"nodeSelector {k}={str(current[k])[:64]!r}: this tenant's GPU "
                                f"pods run on its dedicated pool ({k}={v}); drop the key")
                if k not in current:
                    patch.append({"op": "add", "path": "/spec/nodeSelector/" +
                                  k.replace("~", "~0").replace("/", "~1"), "value": v})
    if g.tolerations:
        current_t = spec.get("tolerations")
        if not isinstance(current_t, list) or not current_t:
            patch.append({"op": "add", "path": "/spec/tolerations",
                          "value": [dict(t) for t in g.tolerations]})
        else:
            for t in g.tolerations:
                if dict(t) not in current_t:
                    patch.append({"op": "add", "path": "/spec/tolerations/-", "value": dict(t)})
    return patch, None


__all__ = ["GuardrailError", "guardrails_of", "placement_patch", "refusals"]
