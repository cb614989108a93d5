"""The driver capabilities a GPU container asks for (`NVIDIA_DRIVER_CAPABILITIES` in its env),
read from the pod spec by the webhook (which refuses what the NVIDIA Container Toolkit does
not know) and by the device plugin (which passes them in the Allocate answer).

The device plugin sets `NVIDIA_DRIVER_CAPABILITIES` in every container it serves (the
toolkit's default, `utility`, mounts no CUDA library). The Allocate call does not say which
container it is for, but the plugin knows the pod and which of its GPU containers it serves
(`node.deviceplugin.handshake`: the spec's order); a container's env cannot change after
creation, so the spec is the record: the plugin passes what that container's own env asks
(`of_containers`), plus `compute,utility` (the enforcement library and nvidia-smi need
them), or `all`; the webhook checks every GPU container's (`of_pod`). The values are the
toolkit's documented set (nvidia-container-toolkit, internal/config/image DriverCapability):
compute, compat32, display, graphics, ngx, utility, video, all. An image's own ENV is not
visible here (the kubelet's env wins over it anyway, as the plugin's does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

ENV = "NVIDIA_DRIVER_CAPABILITIES"
KNOWN = ("compute", "compat32", "display", "graphics", "ngx", "utility", "video")
BASE = ("compute", "utility")
DEFAULT = ",".join(BASE)
MAX_TEXT = 256


class CapabilityError(ValueError):
    """A value the toolkit does not know, or one gpugov cannot read; names field and value."""


def parse(value: str, where: str = ENV) -> tuple[str, ...]:
    """The capabilities a value names, plus BASE, in KNOWN order; ("all",) for `all`."""
    if len(value) > MAX_TEXT:
        raise CapabilityError(f"{where}: longer than {MAX_TEXT} characters")
    names = [v.strip().lower() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in KNOWN and n != "all"]
    if unknown:
        raise CapabilityError(f"{where}: {', '.join(repr(u[:32]) for u in unknown[:4])} "
                              f"is not a driver capability the NVIDIA Container Toolkit "
                              f"knows; allowed: {', '.join(KNOWN)}, all (comma-separated)")
    if "all" in names:
        return ("all",)
    wanted = set(names) | set(BASE)
    return tuple(k for k in KNOWN if k in wanted)


def _gpu_containers(pod: Mapping[str, Any], extra: tuple[str, ...]
                    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
    spec = pod.get("spec") or {}
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    if "gpu-fraction" in ann or "gpu-memory" in ann:  # KAI: the container the webhook gives
        wanted = ann.get("gpu-fraction-container-name")  # the request (admission.kai_patch)
        for key in ("initContainers", "containers"):
            for i, c in enumerate(spec.get(key) or []):
                if isinstance(c, Mapping) and (c.get("name") == wanted or (
                        wanted is None and key == "containers" and i == 0)):
                    yield f"spec.{key}[{i}]", c
        return
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if not isinstance(c, Mapping):
                continue
            res = c.get("resources") or {}
            names = [str(k) for part in ("limits", "requests")
                     for k in ((res.get(part) or {}) if isinstance(res, Mapping) else {})]
            if any(n.startswith("nvidia.com/") or n in extra for n in names):
                yield f"spec.{key}[{i}]", c


def _wanted(where: str, c: Mapping[str, Any]) -> set[str]:
    wanted: set[str] = set()
    for j, e in enumerate(c.get("env") or []):
        if not isinstance(e, Mapping) or e.get("name") != ENV:
            continue
        at = f"{where}.env[{j}] {ENV}"
        if "valueFrom" in e:
            raise CapabilityError(f"{at}: set through valueFrom, which gpugov's device "
                                  "plugin cannot read; write the value itself "
                                  "(e.g. compute,utility,video)")
        wanted |= set(parse(str(e.get("value") or ""), at))
    return wanted


def _value(wanted: set[str]) -> str:
    if not wanted:
        return DEFAULT
    if "all" in wanted:
        return "all"
    return ",".join(k for k in KNOWN if k in wanted)


def of_pod(pod: Mapping[str, Any], gpu_names: tuple[str, ...] = ()) -> str:
    """What the pod's GPU containers ask for together, as the env value to pass (DEFAULT
    when they name none). `gpu_names`: GPU resource names besides `nvidia.com/*` (a
    cluster's renamed or Volcano's, before the webhook rewrites them). CapabilityError for an
    unknown value or one set through valueFrom, in any GPU container."""
    wanted: set[str] = set()
    for where, c in _gpu_containers(pod, gpu_names):
        wanted |= _wanted(where, c)
    return _value(wanted)


def of_containers(pod: Mapping[str, Any], gpu_names: tuple[str, ...] = ()
                  ) -> dict[str, str]:
    """Each GPU container's own value, by container name (what the device plugin passes to
    the container it serves); CapabilityError as `of_pod`."""
    out: dict[str, str] = {}
    for where, c in _gpu_containers(pod, gpu_names):
        name = c.get("name")
        if isinstance(name, str):
            out[name] = _value(_wanted(where, c))
    return out
