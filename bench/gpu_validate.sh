#!/usr/bin/env bash
# Validate libgpugov on a real NVIDIA GPU with PyTorch and CuPy installed (< 5 minutes).
# Prints one table: memory caps (PyTorch, CuPy), torch.cuda.mem_get_info under the quota,
# the driver paths of issue 12 through ctypes (graph memory nodes, stream-captured
# allocations, cuCtxSetLimit, memory pools destroyed with live allocations, a (size_t)-1
# request), a matmul loop's GPU share under GPUGOV_CORE_LIMIT, small-kernel launch
# overhead (unthrottled, and throttled at 99 %: every launch timed with two events), and the
# node's scrub between tenants (python -m gpugov.node.scrub 0: bytes zeroed, seconds; it
# zeroes ALL free memory of device 0, so run it on an idle node). The first thing to run when
# a GPU is available.
# Usage: bench/gpu_validate.sh [memory_limit=2Gi] [core_limit=30]
set -euo pipefail
MEM="${1:-2Gi}"
CORE="${2:-30}"
LIB="$(gpugov native path)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
gpugov verify --json "$WORK/verify.json"  # node acceptance first: each isolation claim

cat >"$WORK/probe.py" <<'PY'
import json, sys, time
what = sys.argv[1]
out = {}
if what == "torch-mem":
    import torch
    free, total = torch.cuda.mem_get_info()
    chunks = []
    try:
        while True:
            chunks.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
    except RuntimeError:
        pass
    out = {"total": total, "free": free, "allocated": 64 * len(chunks) << 20}
elif what == "cupy-mem":
    import cupy
    cupy.cuda.set_allocator(None)  # plain cudaMalloc, no pool
    chunks = []
    try:
        while True:
            chunks.append(cupy.cuda.alloc(64 << 20))
    except cupy.cuda.memory.OutOfMemoryError:
        pass
    out = {"allocated": 64 * len(chunks) << 20}
elif what == "driver":
    # The issue-12 paths through the driver API itself (ctypes: dlsym, so the wrappers).
    import ctypes as C
    limit = int(sys.argv[2])
    cu = C.CDLL("libcuda.so.1")
    u64, p = C.c_uint64, C.c_void_p
    class Loc(C.Structure):
        _fields_ = [("type", C.c_int), ("id", C.c_int)]
    class PoolProps(C.Structure):
        _fields_ = [("allocType", C.c_int), ("handleTypes", C.c_int), ("location", Loc),
                    ("win32", p), ("maxSize", C.c_size_t), ("usage", C.c_ushort),
                    ("reserved", C.c_ubyte * 54)]
    class NodeParams(C.Structure):
        _fields_ = [("poolProps", PoolProps), ("accessDescs", p), ("accessDescCount", C.c_size_t),
                    ("bytesize", C.c_size_t), ("dptr", u64)]
    def props():
        x = PoolProps()
        x.allocType, x.location.type, x.location.id = 1, 1, 0  # pinned, device 0
        return x
    def free_bytes():
        f, t = C.c_size_t(), C.c_size_t()
        cu.cuMemGetInfo_v2(C.byref(f), C.byref(t))
        return f.value
    ctx = p()
    cu.cuInit(0)
    cu.cuDevicePrimaryCtxRetain(C.byref(ctx), 0)
    cu.cuCtxSetCurrent(ctx)
    big, small = limit + (1 << 30), 64 << 20
    d, held = u64(), u64()
    cu.cuMemAlloc_v2(C.byref(held), C.c_size_t(limit // 4))  # in use, so a wrap would erase it
    f1 = free_bytes()
    out["huge_alloc_rc"] = (cu.cuMemAlloc_v2(C.byref(d), C.c_size_t(2**64 - 1))
                            or cu.cuMemAlloc_v2(C.byref(d), C.c_size_t(2**64 - limit // 4)))
    out["huge_alloc_free_unchanged"] = free_bytes() == f1
    cu.cuMemFree_v2(held)
    f0 = free_bytes()
    g, node = p(), p()
    cu.cuGraphCreate(C.byref(g), 0)
    prm = NodeParams(poolProps=props(), bytesize=big)
    out["graph_node_over_rc"] = cu.cuGraphAddMemAllocNode(C.byref(node), g, None, 0, C.byref(prm))
    prm = NodeParams(poolProps=props(), bytesize=small)
    out["graph_node_ok_rc"] = cu.cuGraphAddMemAllocNode(C.byref(node), g, None, 0, C.byref(prm))
    out["graph_node_charged"] = f0 - free_bytes()
    ge = p()
    out["graph_exec_rc"] = cu.cuGraphInstantiateWithFlags(C.byref(ge), g, C.c_ulonglong(0))
    if out["graph_exec_rc"] == 0:  # the launch backs the node from the graph memory pool
        cu.cuGraphLaunch(ge, None)
        cu.cuCtxSynchronize()
    cu.cuGraphDestroy(g)
    out["graph_exec_still_charged"] = f0 - free_bytes()  # the pool still holds it
    if out["graph_exec_rc"] == 0:
        cu.cuGraphExecDestroy(ge)
    cu.cuDeviceGraphMemTrim(0)
    cu.cuGraphCreate(C.byref(g), 0)  # any destroy or trim settles; trim was just called
    cu.cuGraphDestroy(g)
    out["graph_destroy_credited"] = free_bytes() == f0
    s, cg = p(), p()
    cu.cuStreamCreate(C.byref(s), 1)
    cu.cuStreamBeginCapture_v2(s, 0)
    out["captured_over_rc"] = cu.cuMemAllocAsync(C.byref(d), C.c_size_t(big), s)
    cu.cuStreamEndCapture(s, C.byref(cg))
    if cg.value:
        cu.cuGraphDestroy(cg)
    out["ctx_heap_over_rc"] = cu.cuCtxSetLimit(2, C.c_size_t(big))  # CU_LIMIT_MALLOC_HEAP_SIZE
    out["ctx_heap_ok_rc"] = cu.cuCtxSetLimit(2, C.c_size_t(small))
    out["ctx_heap_charged"] = f0 - free_bytes()
    cu.cuCtxSetLimit(2, C.c_size_t(8 << 20))
    pool, pd = p(), u64()
    pp = props()
    out["pool_create_rc"] = cu.cuMemPoolCreate(C.byref(pool), C.byref(pp))
    out["pool_alloc_rc"] = cu.cuMemAllocFromPoolAsync(C.byref(pd), C.c_size_t(limit * 3 // 4), pool, s)
    cu.cuStreamSynchronize(s)
    out["pool_destroy_rc"] = cu.cuMemPoolDestroy(pool)
    out["alloc_after_destroy_rc"] = cu.cuMemAlloc_v2(C.byref(d), C.c_size_t(limit // 2))
    if out["alloc_after_destroy_rc"] == 0:
        cu.cuMemFree_v2(d)
    cu.cuMemFreeAsync(pd, s)
    cu.cuStreamSynchronize(s)
    out["alloc_after_last_free_rc"] = cu.cuMemAlloc_v2(C.byref(d), C.c_size_t(limit // 2))
elif what == "matmul":
    import torch
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    t0, n = time.time(), 0
    while time.time() - t0 < 10:
        a @ a
        n += 1
        if n % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    out = {"matmul_per_s": n / (time.time() - t0)}
elif what == "small":
    import torch
    x = torch.zeros(1, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100000):
        x.add_(1)
    torch.cuda.synchronize()
    out = {"us_per_launch": (time.perf_counter() - t0) / 100000 * 1e6}
print(json.dumps(out))
PY

probe() { # probe <name> [env assignments...]
  local name="$1"; shift
  env "$@" python3 "$WORK/probe.py" "$name"
}
REGION="$WORK/region"
ON=(LD_PRELOAD="$LIB" GPUGOV_SHARED_REGION="$REGION" GPUGOV_MEMORY_LIMIT="$MEM")

t_mem=$(probe torch-mem "${ON[@]}")
c_mem=$(probe cupy-mem "${ON[@]}")
LIMIT_BYTES=$(python3 -c "import sys; m=sys.argv[1]; u={'Ki':1<<10,'Mi':1<<20,'Gi':1<<30}; print(int(m[:-2])*u[m[-2:]] if m[-2:] in u else int(m))" "$MEM")
d_paths=$(env "${ON[@]}" python3 "$WORK/probe.py" driver "$LIMIT_BYTES")
m_off=$(probe matmul)
m_on=$(probe matmul LD_PRELOAD="$LIB" GPUGOV_CORE_LIMIT="$CORE")
s_off=$(probe small)
s_on=$(probe small LD_PRELOAD="$LIB")
s_thr=$(probe small LD_PRELOAD="$LIB" GPUGOV_CORE_LIMIT=99)
scrub=$(python3 -m gpugov.node.scrub 0 2>/dev/null | tail -1)
[ -n "$scrub" ] || scrub='{"error": "gpugov not importable"}'

python3 - "$MEM" "$CORE" "$t_mem" "$c_mem" "$m_off" "$m_on" "$s_off" "$s_on" "$d_paths" "$s_thr" "$scrub" <<'PY'
import json, sys
mem, core = sys.argv[1], int(sys.argv[2])
units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
limit = int(mem[:-2]) * units[mem[-2:]] if mem[-2:] in units else int(mem)
t, c, moff, mon, soff, son, dp, sthr, scr = (json.loads(a) for a in sys.argv[3:])
gib = lambda b: f"{b / (1 << 30):.2f} GiB"
share = mon["matmul_per_s"] / moff["matmul_per_s"]
rows = [
    ("memory limit", gib(limit), ""),
    ("PyTorch allocated before OOM", gib(t["allocated"]), "ok" if t["allocated"] <= limit else "OVER"),
    ("CuPy allocated before OOM", gib(c["allocated"]), "ok" if c["allocated"] <= limit else "OVER"),
    ("torch.cuda.mem_get_info total", gib(t["total"]), "ok" if t["total"] == limit else "NOT QUOTA"),
    ("cuMemAlloc((size_t)-1) refused, charge kept",
     f"rc {dp['huge_alloc_rc']}", "ok" if dp["huge_alloc_rc"] and dp["huge_alloc_free_unchanged"] else "ESCAPE"),
    ("graph memory node over the limit", f"rc {dp['graph_node_over_rc']}",
     "ok" if dp["graph_node_over_rc"] == 2 else "ESCAPE"),
    ("graph memory node charged / credited", gib(dp["graph_node_charged"]),
     "ok" if dp["graph_node_ok_rc"] == 0 and dp["graph_node_charged"] >= 64 << 20
     and dp["graph_destroy_credited"] else "NOT CHARGED"),
    ("graph memory held by an executable graph", gib(dp["graph_exec_still_charged"]),
     "ok" if dp["graph_exec_rc"] == 0 and dp["graph_exec_still_charged"] >= 64 << 20
     else "NOT CHARGED"),
    ("captured cuMemAllocAsync over the limit", f"rc {dp['captured_over_rc']}",
     "ok" if dp["captured_over_rc"] == 2 else "ESCAPE"),
    ("cuCtxSetLimit heap over the limit", f"rc {dp['ctx_heap_over_rc']}",
     "ok" if dp["ctx_heap_over_rc"] == 2 else "ESCAPE"),
    ("cuCtxSetLimit heap 64 MiB charged", gib(dp["ctx_heap_charged"]),
     "ok" if dp["ctx_heap_ok_rc"] == 0 and dp["ctx_heap_charged"] >= 64 << 20 else "NOT CHARGED"),
    ("pool destroyed with a live 3/4 allocation", f"alloc 1/2: rc {dp['alloc_after_destroy_rc']}",
     "ok" if dp["pool_alloc_rc"] == 0 and dp["alloc_after_destroy_rc"] == 2 else "ESCAPE"),
    ("... after its last free", f"alloc 1/2: rc {dp['alloc_after_last_free_rc']}",
     "ok" if dp["alloc_after_last_free_rc"] == 0 else "NOT CREDITED"),
    (f"matmul throughput at {core}% limit", f"{100 * share:.1f}% of unlimited",
     "ok" if abs(100 * share - core) <= 5 else "OFF TARGET"),
    ("small-kernel launch, no library", f"{soff['us_per_launch']:.2f} us", ""),
    ("small-kernel launch, library loaded", f"{son['us_per_launch']:.2f} us",
     f"+{1000 * (son['us_per_launch'] - soff['us_per_launch']):.0f} ns"),
    ("small-kernel launch, throttled at 99 %", f"{sthr['us_per_launch']:.2f} us",
     f"+{1000 * (sthr['us_per_launch'] - soff['us_per_launch']):.0f} ns"),
    ("node scrub of device 0 (free memory)",
     f"{gib(scr.get('bytes', 0))} in {scr.get('seconds', 0):.3f} s" if not scr.get("error") else scr["error"],
     "ok" if scr.get("bytes") and not scr.get("error") else "FAILED"),
]
w = max(len(r[0]) for r in rows)
print(f"{'check':<{w}}  {'value':<24}  verdict")
for name, value, verdict in rows:
    print(f"{name:<{w}}  {value:<24}  {verdict}")
PY
