"""FGD's per-node score in C (native/placement/fgd.c, built by the package build as
gpugov/_native/libgpugov_placement.so), over the same numpy arrays as the Python path.

Why: on trace work a pod changes one node, so FGD scores one to four nodes per pod; in
Python that is a dozen small numpy calls (≈9 µs), in C one call. The integers are the same
(exact integer arithmetic, in any order), and the score of a gain is read from thresholds
found with the Python path's own float formula, so every decision is the same.

The Python path stays: when the library is absent, when `GPUGOV_PLACEMENT_NATIVE=0`, or for
anything the context does not cover (then `FgdContext.build` answers None).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

#: where the package build puts the library (an editable install: src/gpugov/_native/)
LIBRARY = Path(__file__).resolve().parent.parent / "_native" / "libgpugov_placement.so"
#: set to 0 to force the Python path (tests compare both)
ENV_SWITCH = "GPUGOV_PLACEMENT_NATIVE"

_P = ctypes.c_void_p
_I = ctypes.c_int64


class _Ctx(ctypes.Structure):
    _fields_ = [("n_nodes", _I), ("width", _I), ("m", _I),
                ("gpu_free", _P), ("cpu_free", _P), ("model_idx", _P), ("full_gpus", _P),
                ("version", _P), ("parts_version", _P), ("free_total", _P), ("both", _P),
                ("frag", _P), ("milli", _P), ("weight", _P), ("total_weight", _I),
                ("need", _P), ("need_rows", _I), ("cpu_levels", _P), ("n_levels", _I),
                ("thresholds", _P)]


_lib: ctypes.CDLL | None = None
_loaded = False


def library() -> ctypes.CDLL | None:
    """The loaded library, or None (absent, or switched off by the environment)."""
    global _lib, _loaded
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    if not _loaded:
        _loaded = True
        path = os.environ.get("GPUGOV_PLACEMENT_LIBRARY") or str(LIBRARY)
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            return None
        lib.gg_fgd_score_one.restype = _I
        lib.gg_fgd_score_one.argtypes = [_P, _I, _I, _I, _I, ctypes.c_int, ctypes.c_int]
        lib.gg_fgd_refresh.restype = _I
        lib.gg_fgd_refresh.argtypes = [_P, _I]
        lib.gg_fgd_ranked.restype = _I
        lib.gg_fgd_ranked.argtypes = [_P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I,
                                      ctypes.c_int, ctypes.c_int]
        if hasattr(lib, "gg_fgd_run"):  # placement/fgd_run.py (absent from older builds)
            lib.gg_fgd_run.restype = _I
            lib.gg_fgd_run.argtypes = [_P, _P, _I]
        _lib = lib
    return _lib


def score_thresholds(score_of_gains, weight: int) -> np.ndarray:
    """[101]: the least gain whose score is at least k (int64 max where none is), found by
    bisection with the Python path's own vectorised formula `score_of_gains`. The score is
    non-decreasing in the gain (division, exp and truncation are monotone), so "gain >=
    thresholds[k]" counts exactly the scores the formula gives."""
    bound = 700 * max(weight, 1) * 1000  # |x| = 700: exp stays finite, scores saturate
    lo = np.full(101, -bound, dtype=np.int64)  # score(lo) < k (for k >= 1)
    hi = np.full(101, bound, dtype=np.int64)  # score(hi) >= k when reachable
    k = np.arange(101)
    reachable = score_of_gains(hi) >= k
    with np.errstate(over="ignore"):
        while (hi - lo > 1).any():
            mid = lo + (hi - lo) // 2
            ok = score_of_gains(mid) >= k
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
    out = np.where(reachable, hi, np.iinfo(np.int64).max)
    out[0] = np.iinfo(np.int64).min
    return out


def _ok(a: np.ndarray, shape: tuple[int, ...]) -> bool:
    return (a.dtype == np.int64 and a.flags.c_contiguous and a.shape == shape)


class FgdContext:
    """The C context of one (FragmentationModel, ClusterState) pair; it keeps the arrays
    it points into alive, and `matches` tells whether the state still uses them."""

    __slots__ = ("lib", "ctx", "ref", "keep", "arrays")

    def __init__(self, lib: ctypes.CDLL, ctx: _Ctx, arrays: tuple, keep: tuple) -> None:
        self.lib = lib
        self.ctx = ctx
        self.ref = ctypes.addressof(ctx)
        self.arrays = arrays
        self.keep = keep

    def matches(self, state) -> bool:  # type: ignore[no-untyped-def]
        a = self.arrays
        return (state.gpu_free is a[0] and state.cpu_free is a[1] and state.model_idx is a[2]
                and state.full_gpus is a[3] and state.version is a[4])

    @classmethod
    def build(cls, model, state, thresholds: np.ndarray):  # type: ignore[no-untyped-def]
        """The context, or None when the library is absent or a size is not what the C
        code reads (then the Python path answers)."""
        lib = library()
        if lib is None:
            return None
        n, m = len(state), len(model._milli)
        width = state.gpu_free.shape[1] if state.gpu_free.ndim == 2 else -1
        model._need(0, 0)  # builds the (model, CPU level) table when it is small enough
        need = model._need_table
        levels = np.asarray(model._cpu_levels, dtype=np.int64)
        rows = model._access.shape[0]
        if need is None or width < 0 or width > 1022 or m == 0:
            return None
        need = np.ascontiguousarray(need, dtype=np.int64)
        milli = np.ascontiguousarray(model._milli, dtype=np.int64)
        weight = np.ascontiguousarray(model._weight, dtype=np.int64)
        frag = model._cached[0]
        checks = [
            _ok(state.gpu_free, (n, width)), _ok(state.cpu_free, (n,)),
            _ok(state.model_idx, (n,)), _ok(state.full_gpus, (n,)), _ok(state.version, (n,)),
            _ok(model._parts_version, (n,)), _ok(model._free_total, (n,)),
            _ok(model._both, (n, 2 * m)), _ok(frag, (n,)), _ok(milli, (m,)),
            _ok(weight, (m,)), _ok(need, (rows, len(levels) + 1, m)),
            _ok(thresholds, (101,)),
        ]
        if not all(checks):
            return None
        if n and (int(state.model_idx.min()) < -1 or int(state.model_idx.max()) > rows - 2):
            return None
        ptr = lambda a: a.ctypes.data  # noqa: E731
        ctx = _Ctx(n, width, m, ptr(state.gpu_free), ptr(state.cpu_free),
                   ptr(state.model_idx), ptr(state.full_gpus), ptr(state.version),
                   ptr(model._parts_version), ptr(model._free_total), ptr(model._both),
                   ptr(frag), ptr(milli), ptr(weight), int(model.total_weight), ptr(need),
                   rows, ptr(levels), len(levels), ptr(thresholds))
        arrays = (state.gpu_free, state.cpu_free, state.model_idx, state.full_gpus,
                  state.version)
        keep = (model._parts_version, model._free_total, model._both, frag, milli, weight,
                need, levels, thresholds)
        return cls(lib, ctx, arrays, keep)
