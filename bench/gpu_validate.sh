#!/usr/bin/env bash
# Validate libgpugov on a real NVIDIA GPU with PyTorch and CuPy installed (< 5 minutes).
# Prints one table: memory caps (PyTorch, CuPy), torch.cuda.mem_get_info under the quota,
# a matmul loop's GPU share under GPUGOV_CORE_LIMIT, and small-kernel launch overhead.
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
m_off=$(probe matmul)
m_on=$(probe matmul LD_PRELOAD="$LIB" GPUGOV_CORE_LIMIT="$CORE")
s_off=$(probe small)
s_on=$(probe small LD_PRELOAD="$LIB")

python3 - "$MEM" "$CORE" "$t_mem" "$c_mem" "$m_off" "$m_on" "$s_off" "$s_on" <<'PY'
import json, sys
mem, core = sys.argv[1], int(sys.argv[2])
units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
limit = int(mem[:-2]) * units[mem[-2:]] if mem[-2:] in units else int(mem)
t, c, moff, mon, soff, son = (json.loads(a) for a in sys.argv[3:])
gib = lambda b: f"{b / (1 << 30):.2f} GiB"
share = mon["matmul_per_s"] / moff["matmul_per_s"]
rows = [
    ("memory limit", gib(limit), ""),
    ("PyTorch allocated before OOM", gib(t["allocated"]), "ok" if t["allocated"] <= limit else "OVER"),
    ("CuPy allocated before OOM", gib(c["allocated"]), "ok" if c["allocated"] <= limit else "OVER"),
    ("torch.cuda.mem_get_info total", gib(t["total"]), "ok" if t["total"] == limit else "NOT QUOTA"),
    (f"matmul throughput at {core}% limit", f"{100 * share:.1f}% of unlimited",
     "ok" if abs(100 * share - core) <= 5 else "OFF TARGET"),
    ("small-kernel launch, no library", f"{soff['us_per_launch']:.2f} us", ""),
    ("small-kernel launch, library loaded", f"{son['us_per_launch']:.2f} us",
     f"+{1000 * (son['us_per_launch'] - soff['us_per_launch']):.0f} ns"),
]
w = max(len(r[0]) for r in rows)
print(f"{'check':<{w}}  {'value':<24}  verdict")
for name, value, verdict in rows:
    print(f"{name:<{w}}  {value:<24}  {verdict}")
PY
