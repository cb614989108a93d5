"""A trace run's per-pod loop with FGD in one C call (native/placement/fgd.c, `gg_fgd_run`).

Why: on the FGD study's fast path the per-pod work in Python — the engine's filter
(`ClusterState.feasible`), the ranked pick (already one C call), the devices, the plain
`ClusterState.allocate` and the meter's update — costs ~35 µs a pod, nearly all of it
interpreter overhead around a few integer updates; in C the whole pod costs a few µs.

The C code updates the very arrays the Python path updates (the state's, the fragmentation
model's, the meter's), in the same order with the same integers, so the two paths can take
turns within one run: a pod this path does not serve (not plain, naming GPU memory, a shape
beyond the cache's bound) stops the call and goes through `Placer.place` as before. The
engine's score caches are per request shape here too (CPU, milli, GPU count: what FGD's
score reads), kept in arrays of this run; every cached value is a function of the node's
version, so either path's caches stay valid. Used only where `FgdPolicy.ranked`'s C path is
(`native_fgd`: library present, `GPUGOV_PLACEMENT_NATIVE` not 0).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from gpugov.model.request import PodRequest
from gpugov.placement.engine import Placer
from gpugov.placement.fgd import FgdPolicy
from gpugov.placement.fragmentation import FragmentationMeter

#: outcome codes of the C loop -> `Decision.reason` ("" = placed); the reasons
#: `ClusterState._fast_failure_reason` gives a request without GPU memory
REASONS = ("", "gpu-model", "gpu", "cpu", "memory")
#: per-shape cache entries (5 per node) at most, about 64 MB; pods of further shapes go
#: through the Python path
MAX_CACHE_ENTRIES = 8_000_000
#: request sizes this path takes (larger ones, never from a trace loader, go through Python)
_MAX_SIZE = 2**60
#: the state's arrays the C code writes besides the context's (in `TraceRun._keep`'s order)
_STATE_ARRAYS = ("mem_free", "gpu_mem_free", "gpu_count", "kind_count", "dev_pods",
                 "pod_count", "gpu_free_total", "max_gpu_free")
#: fields per pod (native/placement/fgd.c: P_CPU .. P_SPEC)
_FIELDS = 6

_P = ctypes.c_void_p
_I = ctypes.c_int64


class _Run(ctypes.Structure):
    _fields_ = [("gpu_free", _P), ("cpu_free", _P), ("full_gpus", _P), ("version", _P),
                ("mem_free", _P), ("gpu_mem_free", _P), ("gpu_count", _P),
                ("kind_count", _P), ("dev_pods", _P), ("pod_count", _P),
                ("gpu_free_total", _P), ("max_gpu_free", _P), ("tiebreak", _P),
                ("n_shapes", _I), ("cache", _P), ("n_specs", _I), ("model_ok", _P),
                ("n_pods", _I), ("pods", _P), ("per_node", _P), ("scratch", _P), ("frag_total", _I),
                ("arrived_total", _I), ("used_total", _I), ("placed", _I),
                ("arrived", _P), ("used", _P), ("frag", _P), ("outcome", _P)]


def _ok(a: np.ndarray, shape: tuple[int, ...], dtype: type = np.int64) -> bool:
    return a.dtype == dtype and a.flags.c_contiguous and a.shape == shape


class TraceRun:
    """`Placer.place` + `FragmentationMeter.update` over a pod sequence, in C where it
    serves; `build` answers None where it does not serve at all."""

    def __init__(self, lib: ctypes.CDLL, ctx_ref: int, run: _Run, meter: FragmentationMeter,
                 keep: tuple) -> None:
        self._lib = lib
        self._ctx_ref = ctx_ref
        self._run = run
        self._ref = ctypes.addressof(run)
        self._meter = meter
        self._keep = keep  # every array the C code points into stays alive with this run
        self.outcome: np.ndarray = keep[0]

    @classmethod
    def build(cls, placer: Placer, meter: FragmentationMeter, sequence: Sequence[PodRequest],
              arrived: np.ndarray, used: np.ndarray, frag: np.ndarray) -> TraceRun | None:
        """The run over `sequence`, writing arrival `i`'s totals into `arrived[i]`,
        `used[i]` and `frag[i]` as the Python loop does; None off FGD's C path."""
        policy, state = placer.policy, placer.state
        if (not isinstance(policy, FgdPolicy) or not policy._native_score
                or policy.memory_aware or not placer._plain_rank):
            return None
        model = policy.ctx.fragmentation
        ctx = model.native(state)
        if ctx is None or meter.model is not model or meter.state is not state:
            return None
        lib = ctx.lib
        if not hasattr(lib, "gg_fgd_run"):  # an older library (GPUGOV_PLACEMENT_LIBRARY)
            return None
        n, width, p = len(state), ctx.ctx.width, len(sequence)
        arrays = [(state.mem_free, (n,)), (state.gpu_mem_free, (n, width)),
                  (state.gpu_count, (n,)), (state.kind_count, (n, width + 1)),
                  (state.dev_pods, (n, width)), (state.pod_count, (n,)),
                  (state.gpu_free_total, (n,)), (state.max_gpu_free, (n,)),
                  (placer._tiebreak, (n,)), (arrived, (p,)), (used, (p,)), (frag, (p,))]
        if not all(_ok(a, shape) for a, shape in arrays):
            return None
        pods, shapes, specs = _pack(sequence, max(1, MAX_CACHE_ENTRIES // (5 * max(n, 1))))
        cache = np.full((max(len(shapes), 1), 5, n), -1, dtype=np.int64)
        model_ok = np.zeros((max(len(specs), 1), n), dtype=np.uint8)
        for models, k in specs.items():
            model_ok[k] = state.model_mask(models)
        outcome = np.zeros(p, dtype=np.int64)
        scratch = np.zeros(max(n, 1), dtype=np.int64)
        ptr = lambda a: a.ctypes.data  # noqa: E731
        run = _Run(ptr(state.gpu_free), ptr(state.cpu_free), ptr(state.full_gpus),
                   ptr(state.version), ptr(state.mem_free), ptr(state.gpu_mem_free),
                   ptr(state.gpu_count), ptr(state.kind_count), ptr(state.dev_pods),
                   ptr(state.pod_count), ptr(state.gpu_free_total), ptr(state.max_gpu_free),
                   ptr(placer._tiebreak), len(shapes), ptr(cache), len(specs), ptr(model_ok),
                   p, ptr(pods), None, ptr(scratch), 0, 0, 0, 0, ptr(arrived), ptr(used),
                   ptr(frag), ptr(outcome))
        keep = (outcome, pods, cache, model_ok, ctx, state.mem_free, state.gpu_mem_free,
                state.gpu_count, state.kind_count, state.dev_pods, state.pod_count,
                state.gpu_free_total, state.max_gpu_free, placer._tiebreak, arrived, used,
                frag, scratch)
        return cls(lib, ctx.ref, run, meter, keep)

    def run(self, start: int, arrived_total: int, used_total: int, placed: int
            ) -> tuple[int, int, int, int]:
        """Pods `start..` until one this path does not serve: (its index, or the sequence's
        length; then the arrived, used and placed totals). The meter is kept current;
        `outcome[i]` indexes `REASONS`. Index -1: the state no longer uses the arrays the
        run was built over (nothing was done)."""
        meter, r = self._meter, self._run
        per_node, state = meter.per_node, meter.state
        ctx = self._keep[4]
        if (not _ok(per_node, (ctx.ctx.n_nodes,)) or not ctx.matches(state)
                or any(getattr(state, name) is not a
                       for name, a in zip(_STATE_ARRAYS, self._keep[5:13], strict=True))):
            return -1, arrived_total, used_total, placed
        r.per_node = per_node.ctypes.data
        r.frag_total, r.arrived_total = meter.total, arrived_total
        r.used_total, r.placed = used_total, placed
        stop = int(self._lib.gg_fgd_run(self._ctx_ref, self._ref, start))
        meter.total = int(r.frag_total)
        return stop, int(r.arrived_total), int(r.used_total), int(r.placed)


def _pack(sequence: Sequence[PodRequest], max_shapes: int
          ) -> tuple[np.ndarray, dict[tuple[int, int, int], int], dict[tuple[str, ...], int]]:
    """[pods, 6]: CPU, memory, GPU count, milli, shape index (-1: the Python path), GPU
    model list index (-1: no GPU); the shapes and model lists met."""
    shapes: dict[tuple[int, int, int], int] = {}
    specs: dict[tuple[str, ...], int] = {}
    rows: list[tuple[int, int, int, int, int, int]] = []
    skip = (0, 0, 0, 0, -1, -1)
    for pod in sequence:
        cpu, mem, count, milli = pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_milli
        if not pod.plain or pod.gpu_memory_mib or cpu >= _MAX_SIZE or mem >= _MAX_SIZE:
            rows.append(skip)
            continue
        key = (cpu, milli, count)
        shape = shapes.get(key)
        if shape is None:
            if len(shapes) >= max_shapes:
                rows.append(skip)
                continue
            shape = shapes[key] = len(shapes)
        spec = -1
        if count:
            spec = specs.get(pod.models, -1)
            if spec < 0:
                if len(specs) >= max_shapes:
                    rows.append(skip)
                    continue
                spec = specs[pod.models] = len(specs)
        rows.append((cpu, mem, count, milli, shape, spec))
    pods = np.array(rows, dtype=np.int64).reshape(len(rows), _FIELDS)
    return pods, shapes, specs
