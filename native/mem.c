/* Memory quota: every driver path that takes device memory is charged to the
 * shared region before the driver is asked, and credited back on its free. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gg.h"

#define READY()                         \
    do {                                \
        CUresult rc_ = gg_ready();      \
        if (rc_) return rc_;            \
    } while (0)

/* CUDA ordinal -> region device index. Without GPUGOV_DEVICE_UUIDS they are equal; with it
 * the device is found by UUID, so a process that narrows CUDA_VISIBLE_DEVICES itself (Ray,
 * custom launchers) still charges the device that owns the memory. Cached per ordinal:
 * 0 unknown, k > 0 index k - 1, -1 not a device of this container. */
#define GG_MAX_ORDINALS 64
static int ord_map[GG_MAX_ORDINALS];

static int lookup_index(CUdevice ord) {
    CUuuid u;
    CUresult (*get)(CUuuid *, CUdevice) = gg_real.cuDeviceGetUuid_v2 ? gg_real.cuDeviceGetUuid_v2
                                                                     : gg_real.cuDeviceGetUuid;
    char hex[33];
    if (!get || get(&u, ord) != CUDA_SUCCESS) {
        gg_log(GG_LOG_ERROR, "cannot read the UUID of device %d; refusing to account it", ord);
        return -1;
    }
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)u.bytes[i]);
    for (int i = 0; i < gg_cfg.n_uuids; i++)
        if (strcmp(hex, gg_cfg.uuids[i]) == 0) return i;
    gg_log(GG_LOG_ERROR, "device %d (UUID %.8s-%.4s-%.4s-%.4s-%.12s) is not one of this container's "
           "devices (GPUGOV_DEVICE_UUIDS); refusing to account it", ord, hex, hex + 8, hex + 12,
           hex + 16, hex + 20);
    return -1;
}

int gg_device_index(CUdevice ord) {
    if (ord < 0) return -1;
    if (!gg_cfg.n_uuids) {
        if (ord < GG_MAX_DEVICES) return ord;
        gg_log(GG_LOG_ERROR, "device %d is beyond the %d devices gpugov can account", ord, GG_MAX_DEVICES);
        return -2;
    }
    if (ord >= GG_MAX_ORDINALS) return -2;
    int v = __atomic_load_n(&ord_map[ord], __ATOMIC_RELAXED);
    if (!v) {
        int idx = lookup_index(ord);
        v = idx < 0 ? -1 : idx + 1;
        __atomic_store_n(&ord_map[ord], v, __ATOMIC_RELAXED);
    }
    return v < 0 ? -2 : v - 1;
}

/* Region index -> a CUDA ordinal of it (for calls that need an ordinal), or -1. */
int gg_device_ordinal(int idx) {
    int n = 0;
    if (!gg_cfg.n_uuids) return idx;
    if (gg_real.cuDeviceGetCount && gg_real.cuDeviceGetCount(&n) == CUDA_SUCCESS)
        for (int o = 0; o < n && o < GG_MAX_ORDINALS; o++)
            if (gg_device_index(o) == idx) return o;
    return -1;
}

/* The current context's device: its region index (ord gets the CUDA ordinal), -1 without a
 * context, -2 for a device gpugov cannot account. */
int gg_current_device_ord(CUdevice *ord) {
    CUdevice d = -1;
    if (gg_real.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0) return -1;
    if (ord) *ord = d;
    return gg_device_index(d);
}

int gg_current_device(void) { return gg_current_device_ord(NULL); }

/* Work and stream-ordered memory go to the stream's device, whatever context is current. */
int gg_stream_device_ord(CUstream s, CUdevice *ord) {
    if ((uintptr_t)s <= 2) return gg_current_device_ord(ord); /* NULL, legacy, per-thread */
    CUdevice d = -1;
    if (gg_real.cuStreamGetDevice && gg_real.cuStreamGetDevice(s, &d) == CUDA_SUCCESS && d >= 0) {
        if (ord) *ord = d;
        return gg_device_index(d);
    }
    CUcontext c = NULL, popped = NULL; /* drivers before 12.8: through the stream's context */
    if (gg_real.cuStreamGetCtx && gg_real.cuCtxPushCurrent_v2 && gg_real.cuCtxPopCurrent_v2
        && gg_real.cuStreamGetCtx(s, &c) == CUDA_SUCCESS && c
        && gg_real.cuCtxPushCurrent_v2(c) == CUDA_SUCCESS) {
        CUresult rc = gg_real.cuCtxGetDevice(&d);
        gg_real.cuCtxPopCurrent_v2(&popped);
        if (rc == CUDA_SUCCESS && d >= 0) {
            if (ord) *ord = d;
            return gg_device_index(d);
        }
    }
    return gg_current_device_ord(ord); /* cannot tell: the current device */
}

static void refresh_pools(int dev, int locked);
static void refresh_graph_memory(int dev);
static void graph_settle(int dev);

/* Charges bytes or logs one line naming limit, in-use and requested bytes. */
static int charge_or_oom_locked(int dev, uint64_t bytes, const char *api, int pools_locked, int graph_locked) {
    uint64_t limit = 0, in_use = 0;
    if (gg_charge(dev, bytes, 0, &limit, &in_use) == 0) return 0;
    refresh_pools(dev, pools_locked); /* pools may have returned memory since we looked */
    /* the graph pool may have been trimmed; lock order is graph_mu before pool_mu, so a
     * caller holding pool_mu does not look */
    if (graph_locked) graph_settle(dev);
    else if (!pools_locked) refresh_graph_memory(dev);
    if (gg_charge(dev, bytes, 0, &limit, &in_use) == 0) return 0;
    gg_count_refused(dev);
    gg_log(GG_LOG_ERROR, "%s: out of memory on device %d: limit %llu bytes, in use %llu bytes, "
           "requested %llu bytes", api, dev, (unsigned long long)limit,
           (unsigned long long)in_use, (unsigned long long)bytes);
    return -1;
}

int gg_charge_or_oom(int dev, uint64_t bytes, const char *api) {
    return charge_or_oom_locked(dev, bytes, api, 0, 0);
}
#define charge_or_oom gg_charge_or_oom

static void scrub(CUdeviceptr p, uint64_t bytes) {
    if (gg_cfg.scrub && bytes && gg_real.cuMemsetD8_v2) gg_real.cuMemsetD8_v2(p, 0, (size_t)bytes);
}

/* ---- linear allocations ---- */

/* Bytes that cannot even be counted (the product overflows) are refused like bytes over the
 * limit; the driver could not have given them either. */
#define GG_TOO_BIG UINT64_MAX

/* aux of a linear entry: flags */
#define GG_AUX_EXPORTED 1ULL /* exported with cuIpcGetMemHandle: its free settles the export */
#define GG_AUX_MANAGED 2ULL  /* cuMemAllocManaged: follows prefetches and preferred locations */
static CUresult call_managed(CUdeviceptr *p, size_t b, unsigned int f);

static CUresult alloc_linear(CUdeviceptr *dptr, size_t bytes, const char *api,
                             CUresult (*call)(CUdeviceptr *, size_t, unsigned int), unsigned int flags) {
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || !dptr || bytes == 0) return call(dptr, bytes, flags); /* driver reports the error */
    if (charge_or_oom(dev, bytes, api)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = call(dptr, bytes, flags);
    if (rc != CUDA_SUCCESS) {
        gg_uncharge(dev, bytes);
        return rc;
    }
    gg_track_put(GG_KIND_LINEAR, *dptr, bytes, dev, call == call_managed ? GG_AUX_MANAGED : 0);
    return rc;
}

static CUresult call_alloc(CUdeviceptr *p, size_t b, unsigned int f) { (void)f; return gg_real.cuMemAlloc_v2(p, b); }
static CUresult call_managed(CUdeviceptr *p, size_t b, unsigned int f) { return gg_real.cuMemAllocManaged(p, b, f); }

GG_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    READY();
    return alloc_linear(dptr, bytes, "cuMemAlloc", call_alloc, 0);
}

GG_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
    READY();
    return alloc_linear(dptr, bytes, "cuMemAllocManaged", call_managed, flags);
}

GG_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                      unsigned int elem) {
    READY();
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || !dptr || !pitch || !width || !height)
        return gg_real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    uint64_t est;
    if ((uint64_t)width > UINT64_MAX - 511
        || __builtin_mul_overflow(((uint64_t)width + 511) & ~511ULL, (uint64_t)height, &est))
        est = GG_TOO_BIG;
    if (charge_or_oom(dev, est, "cuMemAllocPitch")) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = gg_real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    if (rc != CUDA_SUCCESS) {
        gg_uncharge(dev, est);
        return rc;
    }
    uint64_t actual;
    if (__builtin_mul_overflow((uint64_t)*pitch, (uint64_t)height, &actual)) actual = GG_TOO_BIG;
    if (actual > est && charge_or_oom(dev, actual - est, "cuMemAllocPitch")) {
        gg_real.cuMemFree_v2(*dptr);
        gg_uncharge(dev, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < est) gg_uncharge(dev, est - actual);
    gg_track_put(GG_KIND_LINEAR, *dptr, actual, dev, 0);
    return rc;
}

static int forget_import(CUdeviceptr p);
static void scrub_graph_ptr(CUdeviceptr dp, CUstream s, int ptsz, int sync);
static CUresult free_async_entry(CUdeviceptr dp, const struct gg_entry *e, CUstream s, int ptsz, int sync);

/* A linear allocation is freed (by cuMemFree or, legally, cuMemFreeAsync): scrub, free, credit. */
static CUresult free_linear_entry(CUdeviceptr p, const struct gg_entry *e, CUresult (*f)(CUdeviceptr, CUstream),
                                  CUstream s, int ptsz) {
    if (f && gg_cfg.scrub) { /* stream-ordered: the memset is ordered before the free */
        CUresult (*ms)(CUdeviceptr, unsigned char, size_t, CUstream) =
            ptsz ? gg_real.cuMemsetD8Async_ptsz : gg_real.cuMemsetD8Async;
        if (ms) ms(p, 0, (size_t)e->bytes, s);
    } else if (!f) {
        scrub(p, e->bytes); /* the owner scrubs, even while same-container imports are open */
    }
    CUresult rc = f ? f(p, s) : gg_real.cuMemFree_v2(p);
    if (rc == CUDA_SUCCESS) {
        uint64_t kept = e->aux & GG_AUX_EXPORTED ? gg_export_drop(p) : 0;
        if (e->bytes > kept) gg_uncharge(e->dev, e->bytes - kept);
    } else {
        gg_track_put(GG_KIND_LINEAR, p, e->bytes, e->dev, e->aux);
    }
    return rc;
}

GG_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    READY();
    struct gg_entry e;
    if (gg_track_take(GG_KIND_LINEAR, p, &e)) return free_linear_entry(p, &e, NULL, NULL, 0);
    if (gg_track_take(GG_KIND_ASYNC, p, &e)) return free_async_entry(p, &e, NULL, 0, 1);
    scrub_graph_ptr(p, NULL, 0, 1);
    CUresult rc = gg_real.cuMemFree_v2(p); /* pool pointers imported from another process */
    if (rc == CUDA_SUCCESS) forget_import(p);
    return rc;
}

/* ---- managed memory follows its pages: prefetching it to a device, or making a device its
 * preferred location, puts it in that device's memory, so its charge moves there first
 * (refused over that device's limit; the call then does not happen). Moving it to the host
 * keeps the charge where it was (the safe side). ---- */

#define CU_DEVICE_CPU (-1)
#define CU_MEM_ADVISE_SET_PREFERRED_LOCATION 3

static CUresult follow_managed(CUdeviceptr p, CUdevice ord, const char *api) {
    CUdeviceptr base = p;
    size_t size = 0;
    struct gg_entry e;
    if (ord == CU_DEVICE_CPU || ord < 0) return CUDA_SUCCESS;
    if (gg_real.cuMemGetAddressRange_v2(&base, &size, p) != CUDA_SUCCESS) base = p;
    if (!gg_track_get(GG_KIND_LINEAR, base, &e) || !(e.aux & GG_AUX_MANAGED)) return CUDA_SUCCESS;
    int dev = gg_device_index(ord);
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || dev == e.dev) return CUDA_SUCCESS;
    if (charge_or_oom(dev, e.bytes, api)) return CUDA_ERROR_OUT_OF_MEMORY;
    gg_uncharge(e.dev, e.bytes);
    gg_track_put(GG_KIND_LINEAR, base, e.bytes, dev, e.aux);
    return CUDA_SUCCESS;
}

GG_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s) {
    READY();
    CUresult rc = follow_managed(p, dst, "cuMemPrefetchAsync");
    return rc ? rc : gg_real.cuMemPrefetchAsync ? gg_real.cuMemPrefetchAsync(p, n, dst, s) : CUDA_ERROR_NOT_FOUND;
}
GG_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dst, CUstream s) {
    READY();
    CUresult rc = follow_managed(p, dst, "cuMemPrefetchAsync");
    return rc ? rc : gg_real.cuMemPrefetchAsync_ptsz ? gg_real.cuMemPrefetchAsync_ptsz(p, n, dst, s)
                                                   : CUDA_ERROR_NOT_FOUND;
}
GG_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int fl, CUstream s) {
    READY();
    CUresult rc = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? follow_managed(p, loc.id, "cuMemPrefetchAsync") : 0;
    return rc ? rc : gg_real.cuMemPrefetchAsync_v2 ? gg_real.cuMemPrefetchAsync_v2(p, n, loc, fl, s)
                                                 : CUDA_ERROR_NOT_FOUND;
}
GG_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int fl, CUstream s) {
    READY();
    CUresult rc = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? follow_managed(p, loc.id, "cuMemPrefetchAsync") : 0;
    return rc ? rc : gg_real.cuMemPrefetchAsync_v2_ptsz ? gg_real.cuMemPrefetchAsync_v2_ptsz(p, n, loc, fl, s)
                                                      : CUDA_ERROR_NOT_FOUND;
}
GG_EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice dev) {
    READY();
    CUresult rc = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ? follow_managed(p, dev, "cuMemAdvise") : 0;
    return rc ? rc : gg_real.cuMemAdvise ? gg_real.cuMemAdvise(p, n, advice, dev) : CUDA_ERROR_NOT_FOUND;
}
GG_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
    READY();
    CUresult rc = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION && loc.type == CU_MEM_LOCATION_TYPE_DEVICE
                      ? follow_managed(p, loc.id, "cuMemAdvise") : 0;
    return rc ? rc : gg_real.cuMemAdvise_v2 ? gg_real.cuMemAdvise_v2(p, n, advice, loc) : CUDA_ERROR_NOT_FOUND;
}

/* ---- stream-ordered allocations: a pool is charged max(reserved, live) bytes ---- */

#define GG_MAX_POOLS 256
struct pool {
    CUmemoryPool handle;
    int dev;
    int destroyed; /* cuMemPoolDestroy returned, allocations still live: the driver defers */
    uint64_t charged;
    uint64_t live;
};
static struct pool pools[GG_MAX_POOLS];
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static int pool_exports; /* pointers this process exported with cuMemPoolExportPointer */

static uint64_t pool_reserved(CUmemoryPool h) {
    cuuint64_t v = 0;
    if (gg_real.cuMemPoolGetAttribute(h, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
        return 0;
    return v;
}

static struct pool *pool_find(CUmemoryPool h, int dev, int create) {
    struct pool *free_slot = NULL;
    for (int i = 0; i < GG_MAX_POOLS; i++) {
        if (pools[i].handle == h) return &pools[i];
        if (!pools[i].handle && !free_slot) free_slot = &pools[i];
    }
    if (!create || !free_slot) return NULL;
    free_slot->handle = h;
    free_slot->dev = dev;
    free_slot->destroyed = 0;
    free_slot->charged = 0;
    free_slot->live = 0;
    return free_slot;
}

/* Brings a pool's charge to max(reserved, live) (a destroyed pool: live, its handle is gone);
 * a destroyed pool with nothing live leaves the table. Caller holds pool_mu. */
static void pool_settle(struct pool *p) {
    uint64_t want = p->destroyed ? 0 : pool_reserved(p->handle), limit, in_use;
    if (want < p->live) want = p->live;
    if (want > p->charged) gg_charge(p->dev, want - p->charged, 1, &limit, &in_use);
    else if (want < p->charged) gg_uncharge(p->dev, p->charged - want);
    p->charged = want;
    if (p->destroyed && !p->live) memset(p, 0, sizeof(*p));
}

/* The device (region index) that owns a pool gpugov has not seen created: one of the
 * devices' default or current pools, else the current device; -1 if none is known. */
static int pool_device(CUmemoryPool h, int cur) {
    int n = 0;
    if (gg_real.cuDeviceGetCount && gg_real.cuDeviceGetCount(&n) == CUDA_SUCCESS)
        for (int o = 0; o < n && o < 64; o++) {
            CUmemoryPool q = NULL;
            if ((gg_real.cuDeviceGetDefaultMemPool && gg_real.cuDeviceGetDefaultMemPool(&q, o) == CUDA_SUCCESS && q == h)
                || (gg_real.cuDeviceGetMemPool(&q, o) == CUDA_SUCCESS && q == h))
                return gg_device_index(o);
        }
    return cur;
}

GG_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props) {
    READY();
    CUresult rc = gg_real.cuMemPoolCreate(out, props);
    if (rc != CUDA_SUCCESS || !out || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return rc;
    int dev = gg_device_index(props->location.id);
    pthread_mutex_lock(&pool_mu);
    struct pool *p = dev >= 0 ? pool_find(*out, dev, 1) : NULL;
    if (p) p->dev = dev;
    pthread_mutex_unlock(&pool_mu);
    if (!p) { /* unaccountable: no allocation could be charged correctly, so no pool */
        if (gg_real.cuMemPoolDestroy) gg_real.cuMemPoolDestroy(*out);
        *out = NULL;
        gg_log(GG_LOG_ERROR, "cuMemPoolCreate: %s; refusing", dev < 0 ? "its device cannot be accounted"
               : "more than 256 memory pools");
        return dev < 0 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_OUT_OF_MEMORY;
    }
    return rc;
}

static void refresh_pools(int dev, int locked) {
    if (!gg_real.cuMemPoolGetAttribute) return;
    if (!locked) pthread_mutex_lock(&pool_mu);
    for (int i = 0; i < GG_MAX_POOLS; i++)
        if (pools[i].handle && pools[i].dev == dev) pool_settle(&pools[i]);
    if (!locked) pthread_mutex_unlock(&pool_mu);
}

/* ---- graph-owned memory: memory nodes (cuGraphAddMemAllocNode, cuGraphAddNode of a
 * memory-allocation node, cuMemAllocAsync captured from a stream, and the nodes a
 * cuGraphClone copies) are declared by a graph (GG_KIND_GRAPH: key = graph ^ device, bytes)
 * until it is destroyed. The driver backs them from the device's graph memory pool, which
 * keeps what executable graphs allocated reserved until cuDeviceGraphMemTrim — also after
 * the graphs are destroyed. So each device is charged max(declared, reserved): the declared
 * part before the driver is asked (refused over the limit), the reserved part when gpugov
 * looks (a graph is destroyed, the pool trimmed, or an allocation is about to be refused).
 * ---- */

#define CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT 2
static uint64_t graph_declared[GG_MAX_DEVICES], graph_charged[GG_MAX_DEVICES];
static pthread_mutex_t graph_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t graph_key(uint64_t g, int dev) { return g ^ ((uint64_t)dev << 56); }

static uint64_t graph_reserved(int dev) {
    cuuint64_t v = 0;
    int ord = gg_device_ordinal(dev);
    if (ord < 0 || !gg_real.cuDeviceGetGraphMemAttribute
        || gg_real.cuDeviceGetGraphMemAttribute(ord, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
        return 0;
    return v;
}

/* Brings dev's graph charge to max(declared, reserved). Caller holds graph_mu. */
static void graph_settle(int dev) {
    uint64_t want = graph_reserved(dev), limit, in_use;
    if (want < graph_declared[dev]) want = graph_declared[dev];
    if (want > graph_charged[dev]) gg_charge(dev, want - graph_charged[dev], 1, &limit, &in_use);
    else if (want < graph_charged[dev]) gg_uncharge(dev, graph_charged[dev] - want);
    graph_charged[dev] = want;
}

/* Declares bytes more graph memory on dev, charging what the charge does not cover yet;
 * -1 (logged) over the limit. */
static int graph_reserve(int dev, uint64_t bytes, const char *api) {
    pthread_mutex_lock(&graph_mu);
    uint64_t need = graph_declared[dev] > UINT64_MAX - bytes ? GG_TOO_BIG : graph_declared[dev] + bytes;
    uint64_t grow = need > graph_charged[dev] ? need - graph_charged[dev] : 0;
    int rc = grow && charge_or_oom_locked(dev, grow, api, 0, 1) ? -1 : 0;
    if (!rc) {
        graph_declared[dev] = need;
        graph_charged[dev] += grow;
    }
    pthread_mutex_unlock(&graph_mu);
    return rc;
}

/* Graph memory no longer declared (destroyed graph, failed call). */
static void graph_unreserve(int dev, uint64_t bytes) {
    pthread_mutex_lock(&graph_mu);
    graph_declared[dev] = graph_declared[dev] > bytes ? graph_declared[dev] - bytes : 0;
    graph_settle(dev);
    pthread_mutex_unlock(&graph_mu);
}

static void refresh_graph_memory(int dev) {
    pthread_mutex_lock(&graph_mu);
    if (graph_charged[dev]) graph_settle(dev);
    pthread_mutex_unlock(&graph_mu);
}

/* A graph's entry: bytes = what it declares (is charged for), aux = its memory nodes' bytes
 * (its declaration moves to its first executable graph, which is what holds the memory). */
static void graph_add(int kind, uint64_t key, int dev, uint64_t bytes) {
    struct gg_entry e;
    uint64_t k = graph_key(key, dev);
    int had = gg_track_get(kind, k, &e);
    gg_track_put(kind, k, (had ? e.bytes : 0) + bytes, dev, (had ? e.aux : 0) + bytes);
}

static void graph_release(int kind, uint64_t key, int move_to_kind, uint64_t to_key) {
    for (int d = 0; d < GG_MAX_DEVICES; d++) {
        struct gg_entry e;
        if (!gg_track_take(kind, graph_key(key, d), &e)) continue;
        if (move_to_kind) graph_add(move_to_kind, to_key, d, e.bytes);
        else graph_unreserve(d, e.bytes);
    }
}

static int stream_capturing(CUstream s, int ptsz) {
    int status = 0;
    CUresult (*f)(CUstream, int *) = ptsz && gg_real.cuStreamIsCapturing_ptsz ? gg_real.cuStreamIsCapturing_ptsz
                                                                            : gg_real.cuStreamIsCapturing;
    return f && f(s, &status) == CUDA_SUCCESS && status == 1; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
}

static CUresult alloc_captured(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s, int ptsz,
                               int dev, const char *api) {
    if (graph_reserve(dev, bytes, api)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = pool ? (ptsz ? gg_real.cuMemAllocFromPoolAsync_ptsz : gg_real.cuMemAllocFromPoolAsync)(dptr, bytes, pool, s)
                       : (ptsz ? gg_real.cuMemAllocAsync_ptsz : gg_real.cuMemAllocAsync)(dptr, bytes, s);
    if (rc != CUDA_SUCCESS) {
        graph_unreserve(dev, bytes);
    } else {
        graph_add(GG_KIND_CAPTURE, (uint64_t)(uintptr_t)s, dev, bytes);
        if (dptr) gg_track_put(GG_KIND_GRAPHPTR, *dptr, bytes, dev, 0);
    }
    return rc;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s,
                            int ptsz, const char *api) {
    CUdevice ord = -1;
    /* the default pool is the one of the stream's device, not the current context's */
    int dev = pool ? gg_current_device_ord(&ord) : gg_stream_device_ord(s, &ord);
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult (*from_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        ptsz ? gg_real.cuMemAllocFromPoolAsync_ptsz : gg_real.cuMemAllocFromPoolAsync;
    CUresult (*plain)(CUdeviceptr *, size_t, CUstream) =
        ptsz ? gg_real.cuMemAllocAsync_ptsz : gg_real.cuMemAllocAsync;
    int explicit_pool = pool != NULL;
    if (!dptr || !bytes)
        return explicit_pool ? from_pool(dptr, bytes, pool, s) : plain(dptr, bytes, s);
    if (!explicit_pool) {
        if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT; /* the default pool is the context's device's */
        if (gg_real.cuDeviceGetMemPool(&pool, ord) != CUDA_SUCCESS) pool = NULL;
        if (!pool) return CUDA_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&pool_mu);
    struct pool *p = pool_find(pool, 0, 0);
    if (!p) { /* a pool not created through gpugov: find its device; the charge follows it */
        int pdev = explicit_pool ? pool_device(pool, dev) : dev;
        p = pdev >= 0 ? pool_find(pool, pdev, 1) : NULL;
        if (!p) {
            pthread_mutex_unlock(&pool_mu);
            gg_log(GG_LOG_ERROR, "%s: %s; refusing", api, pdev < 0 ? "the pool's device is unknown and "
                   "there is no current context" : "more than 256 memory pools");
            return pdev < 0 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (p->destroyed) {
        pthread_mutex_unlock(&pool_mu);
        return CUDA_ERROR_INVALID_VALUE; /* the driver refuses allocations from a destroyed pool */
    }
    if (stream_capturing(s, ptsz)) { /* graph-owned memory, not the pool's */
        int pdev = p->dev;
        pthread_mutex_unlock(&pool_mu);
        return alloc_captured(dptr, bytes, explicit_pool ? pool : NULL, s, ptsz, pdev, api);
    }
    if (bytes > UINT64_MAX - p->live) {
        pthread_mutex_unlock(&pool_mu);
        gg_count_refused(p->dev);
        gg_log(GG_LOG_ERROR, "%s: out of memory on device %d: requested %llu bytes", api, p->dev,
               (unsigned long long)bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t grow = p->live + bytes > p->charged ? p->live + bytes - p->charged : 0;
    if (grow && charge_or_oom_locked(p->dev, grow, api, 1, 0)) {
        pthread_mutex_unlock(&pool_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->charged += grow;
    CUresult rc = explicit_pool ? from_pool(dptr, bytes, pool, s) : plain(dptr, bytes, s);
    if (rc == CUDA_SUCCESS) {
        p->live += bytes;
        gg_track_put(GG_KIND_ASYNC, *dptr, bytes, p->dev, (uint64_t)(uintptr_t)pool);
    }
    pool_settle(p);
    pthread_mutex_unlock(&pool_mu);
    return rc;
}

GG_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t b, CUstream s) {
    READY();
    return alloc_async(d, b, NULL, s, 0, "cuMemAllocAsync");
}
GG_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t b, CUstream s) {
    READY();
    return alloc_async(d, b, NULL, s, 1, "cuMemAllocAsync");
}
GG_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t b, CUmemoryPool p, CUstream s) {
    READY();
    if (!p) return gg_real.cuMemAllocFromPoolAsync(d, b, p, s);
    return alloc_async(d, b, p, s, 0, "cuMemAllocFromPoolAsync");
}
GG_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t b, CUmemoryPool p, CUstream s) {
    READY();
    if (!p) return gg_real.cuMemAllocFromPoolAsync_ptsz(d, b, p, s);
    return alloc_async(d, b, p, s, 1, "cuMemAllocFromPoolAsync");
}

/* A pool allocation is freed: by cuMemFreeAsync (sync = 0) or, legally, by cuMemFree (sync = 1). */
static CUresult free_async_entry(CUdeviceptr dp, const struct gg_entry *e, CUstream s, int ptsz, int sync) {
    CUresult (*f)(CUdeviceptr, CUstream) = ptsz ? gg_real.cuMemFreeAsync_ptsz : gg_real.cuMemFreeAsync;
    if (__atomic_load_n(&pool_exports, __ATOMIC_RELAXED)) gg_export_drop(dp);
    if (gg_cfg.scrub && sync) {
        scrub(dp, e->bytes);
    } else if (gg_cfg.scrub) {
        CUresult (*ms)(CUdeviceptr, unsigned char, size_t, CUstream) =
            ptsz ? gg_real.cuMemsetD8Async_ptsz : gg_real.cuMemsetD8Async;
        if (ms) ms(dp, 0, (size_t)e->bytes, s); /* ordered before the free on the same stream */
    }
    CUresult rc = sync ? gg_real.cuMemFree_v2(dp) : f(dp, s);
    if (rc != CUDA_SUCCESS) {
        gg_track_put(GG_KIND_ASYNC, dp, e->bytes, e->dev, e->aux);
        return rc;
    }
    pthread_mutex_lock(&pool_mu);
    struct pool *p = pool_find((CUmemoryPool)(uintptr_t)e->aux, e->dev, 0);
    if (p) {
        p->live = p->live > e->bytes ? p->live - e->bytes : 0;
        pool_settle(p);
    }
    pthread_mutex_unlock(&pool_mu);
    return rc;
}

/* A graph allocation freed outside its graph (or by a captured free): zeroed first, on the
 * stream (a captured memset becomes a node before the free node). */
static void scrub_graph_ptr(CUdeviceptr dp, CUstream s, int ptsz, int sync) {
    struct gg_entry e;
    struct gg_entry imp;
    if (!gg_track_take(GG_KIND_GRAPHPTR, dp, &e) || !gg_cfg.scrub) return;
    /* an address a destroyed graph once used may now be an import: never zero another's memory */
    if (gg_track_get(GG_KIND_IPC, dp, &imp) || gg_track_get(GG_KIND_IPC_SHARED, dp, &imp)) return;
    if (sync) {
        scrub(dp, e.bytes);
    } else {
        CUresult (*ms)(CUdeviceptr, unsigned char, size_t, CUstream) =
            ptsz ? gg_real.cuMemsetD8Async_ptsz : gg_real.cuMemsetD8Async;
        if (ms) ms(dp, 0, (size_t)e.bytes, s);
    }
}

static CUresult free_async(CUdeviceptr dp, CUstream s, int ptsz) {
    CUresult (*f)(CUdeviceptr, CUstream) = ptsz ? gg_real.cuMemFreeAsync_ptsz : gg_real.cuMemFreeAsync;
    struct gg_entry e;
    if (gg_track_take(GG_KIND_ASYNC, dp, &e)) return free_async_entry(dp, &e, s, ptsz, 0);
    if (gg_track_take(GG_KIND_LINEAR, dp, &e)) return free_linear_entry(dp, &e, f, s, ptsz);
    scrub_graph_ptr(dp, s, ptsz, 0);
    CUresult rc = f(dp, s);
    if (rc == CUDA_SUCCESS) forget_import(dp);
    return rc;
}

GG_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { READY(); return free_async(p, s, 0); }
GG_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { READY(); return free_async(p, s, 1); }

GG_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    READY();
    CUresult rc = gg_real.cuMemPoolTrimTo(pool, keep);
    pthread_mutex_lock(&pool_mu);
    struct pool *p = pool_find(pool, 0, 0);
    if (p) pool_settle(p);
    pthread_mutex_unlock(&pool_mu);
    return rc;
}

/* With allocations still live the driver returns at once and releases the pool after the
 * last one is freed: until then the live bytes stay charged (the reservation beyond them
 * is released with the handle). */
GG_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    READY();
    CUresult rc = gg_real.cuMemPoolDestroy(pool);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&pool_mu);
    struct pool *p = pool_find(pool, 0, 0);
    if (p) {
        p->destroyed = 1;
        pool_settle(p);
    }
    pthread_mutex_unlock(&pool_mu);
    return rc;
}

/* ---- graph memory nodes ---- */

/* Declares one memory node's bytes, asks the driver (call), keeps or rolls back. */
static CUresult add_mem_node(CUgraph g, const CUDA_MEM_ALLOC_NODE_PARAMS *prm, const char *api,
                             CUresult (*call)(void *), void *ctx) {
    if (!prm || !g || !prm->bytesize || prm->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return call(ctx); /* the driver refuses it */
    int dev = gg_device_index(prm->poolProps.location.id);
    if (dev < 0) return dev == -2 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (graph_reserve(dev, prm->bytesize, api)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = call(ctx);
    if (rc != CUDA_SUCCESS) {
        graph_unreserve(dev, prm->bytesize);
    } else {
        graph_add(GG_KIND_GRAPH, (uint64_t)(uintptr_t)g, dev, prm->bytesize);
        if (prm->dptr) gg_track_put(GG_KIND_GRAPHPTR, prm->dptr, prm->bytesize, dev, 0);
    }
    return rc;
}

struct node_call {
    CUgraphNode *node;
    CUgraph g;
    const CUgraphNode *deps;
    const void *edges;
    size_t n;
    void *prm;
};
static CUresult call_mem_node(void *c) {
    struct node_call *x = c;
    return gg_real.cuGraphAddMemAllocNode(x->node, x->g, x->deps, x->n, x->prm);
}
static CUresult call_add_node(void *c) {
    struct node_call *x = c;
    return gg_real.cuGraphAddNode(x->node, x->g, x->deps, x->n, x->prm);
}
static CUresult call_add_node_v2(void *c) {
    struct node_call *x = c;
    return gg_real.cuGraphAddNode_v2(x->node, x->g, x->deps, x->edges, x->n, x->prm);
}

GG_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *prm) {
    READY();
    struct node_call c = {node, g, deps, NULL, n, prm};
    return add_mem_node(g, prm, "cuGraphAddMemAllocNode", call_mem_node, &c);
}

/* A memory-free node gets a zeroing memset node before it (the freed memory goes back to
 * the graph pool, which hands it to the next graph allocation). *deps_out is the one node
 * the free must then depend on; returns 0 when no memset was added. */
static int zero_before_free(CUgraph g, const CUgraphNode *deps, size_t n, CUdeviceptr dptr, CUgraphNode *ms) {
    struct gg_entry e;
    CUcontext ctx = NULL;
    if (!gg_cfg.scrub || !gg_real.cuGraphAddMemsetNode || !gg_track_take(GG_KIND_GRAPHPTR, dptr, &e))
        return 0;
    if (gg_real.cuCtxGetCurrent) gg_real.cuCtxGetCurrent(&ctx);
    CUDA_MEMSET_NODE_PARAMS p = {dptr, 0, 0, 1, (size_t)e.bytes, 1};
    if (gg_real.cuGraphAddMemsetNode(ms, g, deps, n, &p, ctx) == CUDA_SUCCESS) return 1;
    gg_log(GG_LOG_ERROR, "cuGraphAddMemFreeNode: cannot add a node zeroing %#llx; it is freed unscrubbed",
           (unsigned long long)dptr);
    return 0;
}

GG_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                         CUdeviceptr dptr) {
    READY();
    if (!gg_real.cuGraphAddMemFreeNode) return CUDA_ERROR_NOT_FOUND;
    CUgraphNode ms = NULL;
    if (zero_before_free(g, deps, n, dptr, &ms)) return gg_real.cuGraphAddMemFreeNode(node, g, &ms, 1, dptr);
    return gg_real.cuGraphAddMemFreeNode(node, g, deps, n, dptr);
}

/* The generic node API: only memory-allocation nodes take memory. */
static const CUDA_MEM_ALLOC_NODE_PARAMS *alloc_params(const CUgraphNodeParams *p) {
    return p && p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? &p->alloc : NULL;
}

GG_EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                  CUgraphNodeParams *prm) {
    READY();
    if (!gg_real.cuGraphAddNode) return CUDA_ERROR_NOT_FOUND;
    struct node_call c = {node, g, deps, NULL, n, prm};
    CUgraphNode ms = NULL;
    if (prm && prm->type == CU_GRAPH_NODE_TYPE_MEM_FREE && zero_before_free(g, deps, n, prm->free_.dptr, &ms)) {
        c.deps = &ms;
        c.n = 1;
    }
    if (!alloc_params(prm)) return call_add_node(&c);
    return add_mem_node(g, alloc_params(prm), "cuGraphAddNode", call_add_node, &c);
}

GG_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const void *edges,
                                     size_t n, CUgraphNodeParams *prm) {
    READY();
    if (!gg_real.cuGraphAddNode_v2) return CUDA_ERROR_NOT_FOUND;
    struct node_call c = {node, g, deps, edges, n, prm};
    CUgraphNode ms = NULL;
    if (prm && prm->type == CU_GRAPH_NODE_TYPE_MEM_FREE && zero_before_free(g, deps, n, prm->free_.dptr, &ms)) {
        c.deps = &ms; /* the free depends on the memset only (plain edge) */
        c.edges = NULL;
        c.n = 1;
    }
    if (!alloc_params(prm)) return call_add_node_v2(&c);
    return add_mem_node(g, alloc_params(prm), "cuGraphAddNode", call_add_node_v2, &c);
}

/* A clone has memory nodes of its own: declared like the original's. */
GG_EXPORT CUresult cuGraphClone(CUgraph *clone, CUgraph orig) {
    READY();
    uint64_t bytes[GG_MAX_DEVICES] = {0};
    int d = 0;
    for (; d < GG_MAX_DEVICES; d++) {
        struct gg_entry e;
        if (gg_track_get(GG_KIND_GRAPH, graph_key((uint64_t)(uintptr_t)orig, d), &e)) bytes[d] = e.aux;
        if (bytes[d] && graph_reserve(d, bytes[d], "cuGraphClone")) break;
    }
    if (d < GG_MAX_DEVICES) {
        while (d--) if (bytes[d]) graph_unreserve(d, bytes[d]);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = gg_real.cuGraphClone(clone, orig);
    for (d = 0; d < GG_MAX_DEVICES; d++) {
        if (!bytes[d]) continue;
        if (rc == CUDA_SUCCESS && clone && *clone) graph_add(GG_KIND_GRAPH, (uint64_t)(uintptr_t)*clone, d, bytes[d]);
        else graph_unreserve(d, bytes[d]);
    }
    return rc;
}

/* The graph memory pool returns reserved memory: settle the device's charge. */
GG_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice ord) {
    READY();
    CUresult rc = gg_real.cuDeviceGraphMemTrim ? gg_real.cuDeviceGraphMemTrim(ord) : CUDA_ERROR_NOT_FOUND;
    int dev = gg_device_index(ord);
    if (dev >= 0) refresh_graph_memory(dev);
    return rc;
}

static CUresult end_capture(CUstream s, CUgraph *g, CUresult (*f)(CUstream, CUgraph *)) {
    CUresult rc = f(s, g);
    if (rc == CUDA_SUCCESS && g && *g) graph_release(GG_KIND_CAPTURE, (uint64_t)(uintptr_t)s, GG_KIND_GRAPH,
                                                     (uint64_t)(uintptr_t)*g);
    else graph_release(GG_KIND_CAPTURE, (uint64_t)(uintptr_t)s, 0, 0); /* capture failed: no graph */
    return rc;
}

GG_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    READY();
    return end_capture(s, g, gg_real.cuStreamEndCapture);
}

GG_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) {
    READY();
    return end_capture(s, g, gg_real.cuStreamEndCapture_ptsz ? gg_real.cuStreamEndCapture_ptsz
                                                             : gg_real.cuStreamEndCapture);
}

/* An executable graph allocates its memory nodes from the device's graph pool whenever it is
 * launched (again after cuDeviceGraphMemTrim returned them), so it declares the memory of
 * the graph it was made from until cuGraphExecDestroy — whether or not that graph still
 * lives. Charged before the driver is asked; refused over the limit. */
static CUresult instantiate(CUgraphExec *out, CUgraph g, CUresult (*call)(void *), void *ctx, const char *api) {
    uint64_t bytes[GG_MAX_DEVICES] = {0}, fresh[GG_MAX_DEVICES] = {0};
    int d = 0;
    for (; d < GG_MAX_DEVICES; d++) {
        struct gg_entry e;
        if (!gg_track_get(GG_KIND_GRAPH, graph_key((uint64_t)(uintptr_t)g, d), &e)) continue;
        bytes[d] = e.aux;
        fresh[d] = e.aux > e.bytes ? e.aux - e.bytes : 0; /* beyond what the graph still declares */
        if (fresh[d] && graph_reserve(d, fresh[d], api)) break;
    }
    if (d < GG_MAX_DEVICES) {
        while (d--) if (fresh[d]) graph_unreserve(d, fresh[d]);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = call(ctx);
    for (d = 0; d < GG_MAX_DEVICES; d++) {
        if (!bytes[d]) continue;
        if (rc == CUDA_SUCCESS && out && *out) {
            graph_add(GG_KIND_EXEC, (uint64_t)(uintptr_t)*out, d, bytes[d]);
            /* the graph's own declaration moved to the executable graph */
            gg_track_put(GG_KIND_GRAPH, graph_key((uint64_t)(uintptr_t)g, d), 0, d, bytes[d]);
        } else if (fresh[d]) {
            graph_unreserve(d, fresh[d]);
        }
    }
    return rc;
}

struct inst_call { CUgraphExec *out; CUgraph g; unsigned long long flags; void *params; CUgraphNode *err_node;
                   char *log; size_t log_size; int ptsz; };
static CUresult call_inst_flags(void *c) {
    struct inst_call *x = c;
    return gg_real.cuGraphInstantiateWithFlags(x->out, x->g, x->flags);
}
static CUresult call_inst_params(void *c) {
    struct inst_call *x = c;
    CUresult (*f)(CUgraphExec *, CUgraph, void *) = x->ptsz && gg_real.cuGraphInstantiateWithParams_ptsz
        ? gg_real.cuGraphInstantiateWithParams_ptsz : gg_real.cuGraphInstantiateWithParams;
    return f ? f(x->out, x->g, x->params) : CUDA_ERROR_NOT_FOUND;
}
static CUresult call_inst_v2(void *c) {
    struct inst_call *x = c;
    return gg_real.cuGraphInstantiate_v2 ? gg_real.cuGraphInstantiate_v2(x->out, x->g, x->err_node, x->log, x->log_size)
                                         : CUDA_ERROR_NOT_FOUND;
}

GG_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags) {
    READY();
    if (!gg_real.cuGraphInstantiateWithFlags) return CUDA_ERROR_NOT_FOUND;
    struct inst_call c = {out, g, flags, NULL, NULL, NULL, 0, 0};
    return instantiate(out, g, call_inst_flags, &c, "cuGraphInstantiateWithFlags");
}
GG_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph g, void *params) {
    READY();
    struct inst_call c = {out, g, 0, params, NULL, NULL, 0, 0};
    return instantiate(out, g, call_inst_params, &c, "cuGraphInstantiateWithParams");
}
GG_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph g, void *params) {
    READY();
    struct inst_call c = {out, g, 0, params, NULL, NULL, 0, 1};
    return instantiate(out, g, call_inst_params, &c, "cuGraphInstantiateWithParams");
}
GG_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *out, CUgraph g, CUgraphNode *err_node, char *log, size_t n) {
    READY();
    struct inst_call c = {out, g, 0, NULL, err_node, log, n, 0};
    return instantiate(out, g, call_inst_v2, &c, "cuGraphInstantiate");
}

static CUresult call_inst_v1(void *c) {
    struct inst_call *x = c;
    return gg_real.cuGraphInstantiate ? gg_real.cuGraphInstantiate(x->out, x->g, x->err_node, x->log, x->log_size)
                                      : CUDA_ERROR_NOT_FOUND;
}
/* The unversioned export (direct linking, dlsym): the CUDA 11 signature, enforced the same way. */
GG_EXPORT CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph g, CUgraphNode *err_node, char *log, size_t n) {
    READY();
    struct inst_call c = {out, g, 0, NULL, err_node, log, n, 0};
    return instantiate(out, g, call_inst_v1, &c, "cuGraphInstantiate");
}

GG_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) {
    READY();
    if (!gg_real.cuGraphExecDestroy) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = gg_real.cuGraphExecDestroy(e);
    if (rc == CUDA_SUCCESS) graph_release(GG_KIND_EXEC, (uint64_t)(uintptr_t)e, 0, 0);
    return rc;
}

GG_EXPORT CUresult cuGraphDestroy(CUgraph g) {
    READY();
    CUresult rc = gg_real.cuGraphDestroy(g);
    if (rc == CUDA_SUCCESS) graph_release(GG_KIND_GRAPH, (uint64_t)(uintptr_t)g, 0, 0);
    return rc;
}

/* ---- context limits: the malloc heap and printf FIFO are device memory of the size asked;
 * the stack is bytes per thread x every resident thread of the device ---- */

/* Charged per context (GG_KIND_CTXLIMIT: key = context | limit), since each context of a
 * device has its own heap, FIFO and stack: several contexts each raising the heap pay each. */
static pthread_mutex_t limit_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t limit_key(CUcontext c, int which) { return (uint64_t)(uintptr_t)c ^ ((uint64_t)which << 60); }

/* The context is gone (destroyed, or a primary context reset): its limits' memory with it. */
static void release_limits(CUcontext c) {
    pthread_mutex_lock(&limit_mu);
    for (int w = CU_LIMIT_STACK_SIZE; w <= CU_LIMIT_MALLOC_HEAP_SIZE; w++) {
        struct gg_entry e;
        if (gg_track_take(GG_KIND_CTXLIMIT, limit_key(c, w), &e) && e.bytes) gg_uncharge(e.dev, e.bytes);
    }
    pthread_mutex_unlock(&limit_mu);
}

GG_EXPORT CUresult cuCtxDestroy_v2(CUcontext c) {
    READY();
    CUresult rc = gg_real.cuCtxDestroy_v2 ? gg_real.cuCtxDestroy_v2(c) : CUDA_ERROR_NOT_FOUND;
    if (rc == CUDA_SUCCESS) release_limits(c);
    return rc;
}

GG_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice ord) {
    READY();
    CUcontext c = NULL;
    if (!gg_real.cuDevicePrimaryCtxReset_v2) return CUDA_ERROR_NOT_FOUND;
    if (gg_real.cuDevicePrimaryCtxRetain && gg_real.cuDevicePrimaryCtxRetain(&c, ord) == CUDA_SUCCESS
        && gg_real.cuDevicePrimaryCtxRelease_v2)
        gg_real.cuDevicePrimaryCtxRelease_v2(ord);
    CUresult rc = gg_real.cuDevicePrimaryCtxReset_v2(ord);
    if (rc == CUDA_SUCCESS && c) release_limits(c);
    return rc;
}

static uint64_t limit_bytes(int which, size_t value, CUdevice ord) {
    int sms = 0, threads = 0;
    uint64_t b;
    if (which != CU_LIMIT_STACK_SIZE) return value;
    if (!gg_real.cuDeviceGetAttribute
        || gg_real.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ord) != CUDA_SUCCESS
        || gg_real.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, ord) != CUDA_SUCCESS
        || sms <= 0 || threads <= 0)
        sms = 1024, threads = 2048; /* unknown: more than any current part, the safe side */
    if (__builtin_mul_overflow((uint64_t)value, (uint64_t)sms * (uint64_t)threads, &b)) return GG_TOO_BIG;
    return b;
}

GG_EXPORT CUresult cuCtxSetLimit(int which, size_t value) {
    READY();
    CUdevice ord = -1;
    int dev = gg_current_device_ord(&ord);
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || which < CU_LIMIT_STACK_SIZE || which > CU_LIMIT_MALLOC_HEAP_SIZE)
        return gg_real.cuCtxSetLimit(which, value); /* other limits are not memory */
    uint64_t want = limit_bytes(which, value, ord);
    CUcontext c = NULL;
    if (!gg_real.cuCtxGetCurrent || gg_real.cuCtxGetCurrent(&c) != CUDA_SUCCESS || !c)
        return gg_real.cuCtxSetLimit(which, value);
    pthread_mutex_lock(&limit_mu);
    struct gg_entry e;
    uint64_t key = limit_key(c, which), have = gg_track_get(GG_KIND_CTXLIMIT, key, &e) ? e.bytes : 0;
    if (want > have && charge_or_oom(dev, want - have, "cuCtxSetLimit")) {
        pthread_mutex_unlock(&limit_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = gg_real.cuCtxSetLimit(which, value);
    if (rc != CUDA_SUCCESS) {
        if (want > have) gg_uncharge(dev, want - have);
    } else {
        if (want < have) gg_uncharge(dev, have - want);
        gg_track_put(GG_KIND_CTXLIMIT, key, want, dev, 0);
    }
    pthread_mutex_unlock(&limit_mu);
    return rc;
}

/* ---- arrays ---- */

/* Bytes per channel of the formats gpugov can size and scrub; 0 for any other (block-
 * compressed, video and packed formats): those arrays are refused, not guessed at. */
static uint64_t format_bytes(int format) {
    switch (format) {
    case 0x01: case 0x08: return 1;          /* (un)signed int8 */
    case 0x02: case 0x09: case 0x10: return 2; /* int16, half */
    case 0x03: case 0x0a: case 0x20: return 4; /* int32, float */
    default: return 0;
    }
}

static uint64_t dim(size_t v) { return v ? (uint64_t)v : 1; }

static uint64_t array_bytes(size_t w, size_t h, size_t d, int format, unsigned int ch) {
    uint64_t b = format_bytes(format) * (ch ? ch : 1);
    if (__builtin_mul_overflow(b, dim(w), &b) || __builtin_mul_overflow(b, dim(h), &b)
        || __builtin_mul_overflow(b, dim(d), &b))
        return GG_TOO_BIG;
    return b;
}

static int format_known(int format, const char *api) {
    if (format_bytes(format)) return 1;
    gg_log(GG_LOG_ERROR, "%s: array format %#x is not one gpugov can size and scrub (8/16/32-bit "
           "integers, half, float); refused", api, format);
    return 0;
}

static CUresult charged_create(int kind, uint64_t bytes, const char *api, int dev,
                               CUresult rc_call_ok(void *), void *ctx, uint64_t (*key)(void *),
                               uint64_t aux) {
    if (charge_or_oom(dev, bytes, api)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = rc_call_ok(ctx);
    if (rc != CUDA_SUCCESS) gg_uncharge(dev, bytes);
    else gg_track_put(kind, key(ctx), bytes, dev, aux);
    return rc;
}

struct arr_ctx { CUarray *out; const void *desc; CUmipmappedArray *mout; unsigned int levels; };
static CUresult do_arr2d(void *c) { struct arr_ctx *a = c; return gg_real.cuArrayCreate_v2(a->out, a->desc); }
static CUresult do_arr3d(void *c) { struct arr_ctx *a = c; return gg_real.cuArray3DCreate_v2(a->out, a->desc); }
static CUresult do_mip(void *c) { struct arr_ctx *a = c; return gg_real.cuMipmappedArrayCreate(a->mout, a->desc, a->levels); }
static uint64_t key_arr(void *c) { return (uint64_t)(uintptr_t)*((struct arr_ctx *)c)->out; }
static uint64_t key_mip(void *c) { return (uint64_t)(uintptr_t)*((struct arr_ctx *)c)->mout; }

GG_EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d) {
    READY();
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || !out || !d) return gg_real.cuArrayCreate_v2(out, d);
    if (!format_known(d->Format, "cuArrayCreate")) return CUDA_ERROR_NOT_SUPPORTED;
    struct arr_ctx c = {out, d, NULL, 0};
    return charged_create(GG_KIND_ARRAY, array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels),
                          "cuArrayCreate", dev, do_arr2d, &c, key_arr, 0);
}

GG_EXPORT CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    READY();
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || !out || !d) return gg_real.cuArray3DCreate_v2(out, d);
    if (!format_known(d->Format, "cuArray3DCreate")) return CUDA_ERROR_NOT_SUPPORTED;
    struct arr_ctx c = {out, d, NULL, 0};
    return charged_create(GG_KIND_ARRAY, array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels),
                          "cuArray3DCreate", dev, do_arr3d, &c, key_arr, 0);
}

GG_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                          unsigned int levels) {
    READY();
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || !out || !d || !levels) return gg_real.cuMipmappedArrayCreate(out, d, levels);
    if (!format_known(d->Format, "cuMipmappedArrayCreate")) return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t total = 0;
    for (unsigned int l = 0; l < levels && l < 64; l++)
        if (__builtin_add_overflow(total, array_bytes(d->Width >> l ? d->Width >> l : 1, d->Height >> l ? d->Height >> l : (d->Height ? 1 : 0),
                             d->Depth >> l ? d->Depth >> l : (d->Depth ? 1 : 0), d->Format, d->NumChannels),
                                  &total))
            total = GG_TOO_BIG;
    struct arr_ctx c = {NULL, d, out, levels};
    return charged_create(GG_KIND_MIPMAP, total, "cuMipmappedArrayCreate", dev, do_mip, &c, key_mip, levels);
}

static CUresult release_tracked(int kind, uint64_t key, CUresult rc) {
    struct gg_entry e;
    if (rc == CUDA_SUCCESS && gg_track_take(kind, key, &e)) gg_uncharge(e.dev, e.bytes);
    return rc;
}

/* Arrays are opaque (tiled) memory cuMemsetD8 cannot address; they are zeroed by copying
 * from a zeroed linear buffer with cuMemcpy3D, a band of rows at a time. The buffer is a
 * transient device allocation of at most 4 MiB (not charged), or host memory if that fails. */
#define GG_ZERO_CHUNK (4u << 20)
static void zero_array(CUarray a, const char *api) {
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (!gg_real.cuArray3DGetDescriptor_v2 || !gg_real.cuMemcpy3D_v2
        || gg_real.cuArray3DGetDescriptor_v2(&d, a) != CUDA_SUCCESS) {
        gg_log(GG_LOG_ERROR, "%s: cannot scrub array %p: its descriptor is unavailable", api, (void *)a);
        return;
    }
    uint64_t row = dim(d.Width) * format_bytes(d.Format) * (d.NumChannels ? d.NumChannels : 1);
    uint64_t height = dim(d.Height), depth = dim(d.Depth);
    uint64_t rows = row >= GG_ZERO_CHUNK ? 1 : GG_ZERO_CHUNK / row;
    if (rows > height) rows = height;
    size_t zb = (size_t)(row * rows);
    CUdeviceptr zdev = 0;
    void *zhost = NULL;
    if (gg_real.cuMemAlloc_v2(&zdev, zb) != CUDA_SUCCESS || gg_real.cuMemsetD8_v2(zdev, 0, zb) != CUDA_SUCCESS) {
        if (zdev) gg_real.cuMemFree_v2(zdev);
        zdev = 0;
        zhost = calloc(1, zb);
        if (!zhost) {
            gg_log(GG_LOG_ERROR, "%s: cannot scrub array %p: out of memory for a zero buffer", api, (void *)a);
            return;
        }
    }
    CUresult rc = CUDA_SUCCESS;
    for (uint64_t z = 0; z < depth && rc == CUDA_SUCCESS; z++)
        for (uint64_t y = 0; y < height && rc == CUDA_SUCCESS; y += rows) {
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof(c));
            c.srcMemoryType = zdev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
            c.srcDevice = zdev;
            c.srcHost = zhost;
            c.srcPitch = (size_t)row;
            c.srcHeight = (size_t)rows;
            c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
            c.dstArray = a;
            c.dstY = (size_t)y;
            c.dstZ = (size_t)z;
            c.WidthInBytes = (size_t)row;
            c.Height = (size_t)(height - y < rows ? height - y : rows);
            c.Depth = 1;
            rc = gg_real.cuMemcpy3D_v2(&c);
        }
    if (rc != CUDA_SUCCESS)
        gg_log(GG_LOG_ERROR, "%s: scrubbing array %p failed (error %d); it is freed unscrubbed", api,
               (void *)a, rc);
    if (zdev) gg_real.cuMemFree_v2(zdev);
    free(zhost);
}

GG_EXPORT CUresult cuArrayDestroy(CUarray a) {
    READY();
    struct gg_entry e;
    if (gg_cfg.scrub && gg_track_get(GG_KIND_ARRAY, (uint64_t)(uintptr_t)a, &e)) zero_array(a, "cuArrayDestroy");
    return release_tracked(GG_KIND_ARRAY, (uint64_t)(uintptr_t)a, gg_real.cuArrayDestroy(a));
}

GG_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
    READY();
    struct gg_entry e;
    if (gg_cfg.scrub && gg_real.cuMipmappedArrayGetLevel
        && gg_track_get(GG_KIND_MIPMAP, (uint64_t)(uintptr_t)a, &e)) {
        for (unsigned int l = 0; l < (unsigned int)e.aux; l++) {
            CUarray level = NULL;
            if (gg_real.cuMipmappedArrayGetLevel(&level, a, l) != CUDA_SUCCESS || !level) break;
            zero_array(level, "cuMipmappedArrayDestroy");
        }
    }
    return release_tracked(GG_KIND_MIPMAP, (uint64_t)(uintptr_t)a, gg_real.cuMipmappedArrayDestroy(a));
}

/* ---- imports of memory another process allocated (cuIpc*, pool pointers) ----
 * Charged once per container: an import whose exporter is a live process of the same
 * region is not charged (the exporter's charge covers it); any other import is charged
 * to the importer, since it keeps the memory alive whatever the exporter does. */

static void track_import(CUdeviceptr p, int dev, uint64_t bytes, int covered, uint64_t ref) {
    if (!covered) {
        gg_track_put(GG_KIND_IPC, p, bytes, dev, 0);
        return;
    }
    struct gg_entry r;
    uint64_t n = gg_track_get(GG_KIND_IPC_REF, ref, &r) ? r.bytes : 0;
    gg_track_put(GG_KIND_IPC_REF, ref, n + 1, dev, 0);
    gg_track_put(GG_KIND_IPC_SHARED, p, 0, dev, ref);
}

/* After the driver closed or freed an imported pointer; returns 1 if it was one. */
static int forget_import(CUdeviceptr p) {
    struct gg_entry e, r;
    if (gg_track_take(GG_KIND_IPC, p, &e)) {
        if (e.bytes) gg_uncharge(e.dev, e.bytes);
        return 1;
    }
    if (!gg_track_take(GG_KIND_IPC_SHARED, p, &e)) return 0;
    if (gg_track_take(GG_KIND_IPC_REF, e.aux, &r) && r.bytes > 1)
        gg_track_put(GG_KIND_IPC_REF, e.aux, r.bytes - 1, r.dev, 0);
    else
        gg_export_uncover(e.aux); /* the last import of it in this process */
    return 1;
}

/* Charges an import not covered by a same-region export; on refusal closes it again. */
static CUresult account_import(CUdeviceptr *p, int dev, int kind, const void *handle, const char *api,
                               CUresult (*undo)(CUdeviceptr)) {
    uint64_t ref = 0;
    if (gg_export_cover(kind, handle, &ref)) {
        track_import(*p, dev, 0, 1, ref);
        return CUDA_SUCCESS;
    }
    CUdeviceptr base = 0;
    size_t bytes = 0;
    if (gg_real.cuMemGetAddressRange_v2(&base, &bytes, *p) != CUDA_SUCCESS) bytes = 0;
    if (bytes && charge_or_oom(dev, bytes, api)) {
        undo(*p);
        *p = 0;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    track_import(*p, dev, bytes, 0, 0);
    return CUDA_SUCCESS;
}

GG_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    READY();
    CUresult rc = gg_real.cuIpcGetMemHandle(h, p);
    if (rc != CUDA_SUCCESS || !h) return rc;
    CUdeviceptr base = p;
    size_t size = 0;
    if (gg_real.cuMemGetAddressRange_v2(&base, &size, p) != CUDA_SUCCESS) base = p;
    struct gg_entry e;
    if (gg_track_get(GG_KIND_LINEAR, base, &e)
        && gg_export_record(GG_EXPORT_KIND_IPC, h->reserved, base, e.bytes, e.dev) == 0
        && !(e.aux & GG_AUX_EXPORTED))
        gg_track_put(GG_KIND_LINEAR, base, e.bytes, e.dev, e.aux | GG_AUX_EXPORTED); /* its free settles it */
    return rc;
}

GG_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
    READY();
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = gg_real.cuIpcOpenMemHandle_v2(p, h, flags);
    if (rc != CUDA_SUCCESS || dev < 0 || !p) return rc;
    return account_import(p, dev, GG_EXPORT_KIND_IPC, h.reserved, "cuIpcOpenMemHandle",
                          gg_real.cuIpcCloseMemHandle);
}

GG_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    READY();
    CUresult rc = gg_real.cuIpcCloseMemHandle(p);
    if (rc == CUDA_SUCCESS) forget_import(p);
    return rc;
}

GG_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr p) {
    READY();
    CUresult rc = gg_real.cuMemPoolExportPointer(out, p);
    struct gg_entry e;
    if (rc == CUDA_SUCCESS && out && gg_track_get(GG_KIND_ASYNC, p, &e)
        && gg_export_record(GG_EXPORT_KIND_POOL_PTR, out->reserved, p, e.bytes, e.dev) == 0)
        __atomic_store_n(&pool_exports, 1, __ATOMIC_RELAXED);
    return rc;
}

static CUresult free_imported_pool_ptr(CUdeviceptr p) { return gg_real.cuMemFree_v2(p); }

GG_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool, CUmemPoolPtrExportData *data) {
    READY();
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = gg_real.cuMemPoolImportPointer(p, pool, data);
    if (rc != CUDA_SUCCESS || dev < 0 || !p || !data) return rc;
    return account_import(p, dev, GG_EXPORT_KIND_POOL_PTR, data->reserved, "cuMemPoolImportPointer",
                          free_imported_pool_ptr);
}

/* ---- virtualised capacity views ---- */

GG_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
    READY();
    size_t rf = 0, rt = 0;
    CUresult rc = gg_real.cuMemGetInfo_v2(&rf, &rt);
    if (rc != CUDA_SUCCESS) return rc;
    int dev = gg_current_device();
    if (dev >= 0 && gg_device_limit(dev)) {
        uint64_t lim = gg_device_limit(dev), used = gg_device_used(dev);
        uint64_t t = lim < rt ? lim : rt;
        uint64_t f = t > used ? t - used : 0;
        rt = (size_t)t;
        rf = f < rf ? (size_t)f : rf; /* never promise more than the card has free */
    }
    if (free_b) *free_b = rf;
    if (total_b) *total_b = rt;
    return rc;
}

GG_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    READY();
    CUresult rc = gg_real.cuDeviceTotalMem_v2(bytes, dev);
    int idx = rc == CUDA_SUCCESS ? gg_device_index(dev) : -1;
    if (bytes && idx >= 0 && gg_device_limit(idx) && gg_device_limit(idx) < *bytes)
        *bytes = (size_t)gg_device_limit(idx);
    return rc;
}

/* An NVML device's region index: by UUID when the plugin gave the container's UUIDs (NVML
 * numbers devices by PCI order over the whole node, CUDA by the container's order), else its
 * NVML index. -1 when it is not one of the container's devices. */
static int nvml_index(nvmlDevice_t d) {
    if (gg_cfg.n_uuids) {
        char buf[96], hex[33];
        int n = 0;
        if (!gg_real.nvmlDeviceGetUUID || gg_real.nvmlDeviceGetUUID(d, buf, sizeof(buf)) != NVML_SUCCESS)
            return -1;
        buf[sizeof(buf) - 1] = 0;
        const char *p = strncmp(buf, "GPU-", 4) == 0 || strncmp(buf, "MIG-", 4) == 0 ? buf + 4 : buf;
        for (; *p && n < 32; p++) {
            char c = *p >= 'A' && *p <= 'F' ? (char)(*p - 'A' + 'a') : *p;
            if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) hex[n++] = c;
            else if (c != '-') return -1;
        }
        hex[n] = 0;
        for (int i = 0; n == 32 && i < gg_cfg.n_uuids; i++)
            if (strcmp(hex, gg_cfg.uuids[i]) == 0) return i;
        return -1;
    }
    unsigned int idx = 0;
    if (!gg_real.nvmlDeviceGetIndex || gg_real.nvmlDeviceGetIndex(d, &idx) != NVML_SUCCESS
        || idx >= GG_MAX_DEVICES)
        return -1;
    return (int)idx;
}

static void virtual_view(int dev, unsigned long long *total, unsigned long long *free_b,
                         unsigned long long *used) {
    if (dev < 0 || !gg_device_limit(dev)) return;
    uint64_t lim = gg_device_limit(dev), u = gg_device_used(dev);
    if (lim < *total) *total = lim;
    *used = u;
    *free_b = *total > u ? *total - u : 0;
}

GG_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    nvmlReturn_t rc = gg_nvml_ready();
    if (rc) return rc;
    if (!gg_real.nvmlDeviceGetMemoryInfo) return NVML_ERROR_NO_PERMISSION;
    rc = gg_real.nvmlDeviceGetMemoryInfo(d, m);
    if (rc == NVML_SUCCESS && m) virtual_view(nvml_index(d), &m->total, &m->free, &m->used);
    return rc;
}

GG_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    nvmlReturn_t rc = gg_nvml_ready();
    if (rc) return rc;
    if (!gg_real.nvmlDeviceGetMemoryInfo_v2) return NVML_ERROR_NO_PERMISSION;
    rc = gg_real.nvmlDeviceGetMemoryInfo_v2(d, m);
    if (rc == NVML_SUCCESS && m && nvml_index(d) >= 0 && gg_device_limit(nvml_index(d))) {
        m->reserved = 0;
        virtual_view(nvml_index(d), &m->total, &m->free, &m->used);
    }
    return rc;
}

/* ---- NVML process lists: only this container's processes (live slots of its region) ----
 * The driver lists every process on the device, other containers' included, with their
 * memory; a container sees its own. Entries are {pid, ...}: 16 bytes (v1) or 24 (v2, v3). */

#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define GG_MAX_PROCS 1024

static nvmlReturn_t own_processes(nvmlReturn_t (*real)(nvmlDevice_t, unsigned int *, void *),
                                  nvmlDevice_t d, unsigned int *count, void *out, size_t entry) {
    nvmlReturn_t rc = gg_nvml_ready();
    if (rc) return rc;
    if (!real) return NVML_ERROR_NO_PERMISSION;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = GG_MAX_PROCS;
    unsigned char *all = malloc(GG_MAX_PROCS * entry);
    if (!all) return 20; /* NVML_ERROR_MEMORY */
    rc = real(d, &n, all);
    if (rc != NVML_SUCCESS) {
        free(all);
        return rc;
    }
    unsigned int kept = 0, cap = *count;
    for (unsigned int i = 0; i < n && i < GG_MAX_PROCS; i++) {
        uint32_t pid;
        memcpy(&pid, all + i * entry, sizeof(pid));
        if (!gg_region_has_pid(pid)) continue;
        if (out && kept < cap) memcpy((unsigned char *)out + kept * entry, all + i * entry, entry);
        kept++;
    }
    free(all);
    *count = kept;
    return kept > cap || (kept && !out) ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

#define GG_NVML_PROCS(name, size) \
    GG_EXPORT nvmlReturn_t name(nvmlDevice_t d, unsigned int *count, void *out) { \
        if (gg_nvml_ready()) return NVML_ERROR_NO_PERMISSION; \
        return own_processes(gg_real.name, d, count, out, size); \
    }
GG_NVML_PROCS(nvmlDeviceGetComputeRunningProcesses, 16)
GG_NVML_PROCS(nvmlDeviceGetComputeRunningProcesses_v2, 24)
GG_NVML_PROCS(nvmlDeviceGetComputeRunningProcesses_v3, 24)
GG_NVML_PROCS(nvmlDeviceGetGraphicsRunningProcesses, 16)
GG_NVML_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v2, 24)
GG_NVML_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v3, 24)
