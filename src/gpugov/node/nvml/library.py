"""Loading NVML and calling it so that a missing or refusing function degrades, never crashes.

NVML is loaded the standard way (`pynvml` opens `libnvidia-ml.so.1` through the dynamic
loader, so `LD_LIBRARY_PATH` can point at another build); `library=` names a file instead, for
hosts where the driver lives outside the loader path (e.g. a driver container's root).
Every query goes through `Nvml.query`: a function the driver lacks (`FUNCTION_NOT_FOUND`) or
refuses (`NOT_SUPPORTED`, `NO_PERMISSION`) yields None and is counted by reason, and the caller
falls back to an older call or reports fewer values.
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

T = TypeVar("T")

# errors that mean "this driver/device cannot give this value": degrade quietly
_ABSENT = {
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "function_not_found",
    pynvml.NVML_ERROR_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
    pynvml.NVML_ERROR_NOT_FOUND: "not_found",
}
_LOCK = threading.Lock()
_REFS = 0


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised (no driver, wrong library path)."""


class GpuLost(RuntimeError):
    """The GPU fell off the bus or stopped answering (NVML_ERROR_GPU_IS_LOST)."""


class Nvml:
    """An initialised NVML session; use as a context manager or call `close()`."""

    def __init__(self, library: str | None = None) -> None:
        global _REFS
        with _LOCK:
            if library is not None:
                try:
                    lib = ctypes.CDLL(library)
                except OSError as exc:
                    raise NvmlUnavailable(f"cannot load NVML from {library}: {exc}") from None
                if pynvml.nvmlLib is not lib:
                    pynvml.nvmlLib = lib
                    pynvml._nvmlGetFunctionPointer_cache.clear()
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                raise NvmlUnavailable(f"NVML init failed: {exc} (is the NVIDIA driver "
                                      "installed and libnvidia-ml.so.1 on the loader path?)"
                                      ) from None
            _REFS += 1
        self.missing: Counter[str] = Counter()  # "<function>:<reason>" -> times
        self.errors: Counter[str] = Counter()  # unexpected NVML errors by reason
        self._closed = False

    def close(self) -> None:
        global _REFS
        with _LOCK:
            if not self._closed:
                self._closed = True
                _REFS -= 1
                pynvml.nvmlShutdown()

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, fn: Callable[..., T] | str, *args: Any) -> T | None:
        """Call one pynvml function; None when the driver lacks or refuses it.

        GPU_IS_LOST raises GpuLost (the caller marks the device unhealthy); other NVML errors
        are counted in `errors` and yield None.
        """
        if isinstance(fn, str):  # a wrapper an older nvidia-ml-py may not have
            name = fn
            fn = getattr(pynvml, name, None)  # type: ignore[assignment]
            if fn is None:
                self.missing[f"{name}:function_not_found"] += 1
                return None
        try:
            return fn(*args)  # type: ignore[operator]
        except pynvml.NVMLError as exc:
            code = exc.value
            if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(f"{_name(fn)}: GPU is lost") from None
            reason = _ABSENT.get(code)
            if reason:
                self.missing[f"{_name(fn)}:{reason}"] += 1
            else:
                self.errors[_reason(exc)] += 1
            return None
        except pynvml.NVMLLibraryMismatchError:
            self.missing[f"{_name(fn)}:function_not_found"] += 1
            return None

    def first(self, *calls: tuple[Callable[..., T] | str, tuple[Any, ...]]) -> T | None:
        """The first call that gives a value: newest function first, older fallbacks after."""
        for fn, args in calls:
            value = self.query(fn, *args)
            if value is not None:
                return value
        return None


def _name(fn: object) -> str:
    return getattr(fn, "__name__", str(fn))


MEMORY_V2 = getattr(pynvml, "nvmlMemory_v2", None)  # absent from older nvidia-ml-py


def _reason(exc: pynvml.NVMLError) -> str:
    try:
        return str(exc).lower().replace(" ", "_")[:40]
    except Exception:  # pragma: no cover - nvmlErrorString itself missing
        return f"nvml_error_{exc.value}"
