/* Memory quota: every driver path that takes device memory is charged to the
 * shared region before the driver is asked, and credited back on its free. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gg.h"

#define READY()                         \
    do {                                \
        CUresult rc_ = gg_ready();      \
        if (rc_) return rc_;            \
    } while (0)

int gg_current_device(void) {
    CUdevice d = -1;
    if (gg_real.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0) return -1;
    if (d >= GG_MAX_DEVICES) {
        gg_log(GG_LOG_ERROR, "device %d is beyond the %d devices gpugov can account", d, GG_MAX_DEVICES);
        return -2;
    }
    return d;
}

static void refresh_pools(int dev, int locked);

/* Charges bytes or logs one line naming limit, in-use and requested bytes. */
static int charge_or_oom_locked(int dev, uint64_t bytes, const char *api, int pools_locked) {
    uint64_t limit = 0, in_use = 0;
    if (gg_charge(dev, bytes, 0, &limit, &in_use) == 0) return 0;
    refresh_pools(dev, pools_locked); /* pools may have returned memory since we looked */
    if (gg_charge(dev, bytes, 0, &limit, &in_use) == 0) return 0;
    gg_log(GG_LOG_ERROR, "%s: out of memory on device %d: limit %llu bytes, in use %llu bytes, "
           "requested %llu bytes", api, dev, (unsigned long long)limit,
           (unsigned long long)in_use, (unsigned long long)bytes);
    return -1;
}

int gg_charge_or_oom(int dev, uint64_t bytes, const char *api) {
    return charge_or_oom_locked(dev, bytes, api, 0);
}
#define charge_or_oom gg_charge_or_oom

static void scrub(CUdeviceptr p, uint64_t bytes) {
    if (gg_cfg.scrub && bytes && gg_real.cuMemsetD8_v2) gg_real.cuMemsetD8_v2(p, 0, (size_t)bytes);
}

/* ---- linear allocations ---- */

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
    gg_track_put(GG_KIND_LINEAR, *dptr, bytes, dev, 0);
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
    uint64_t est = (((uint64_t)width + 511) & ~511ULL) * height;
    if (charge_or_oom(dev, est, "cuMemAllocPitch")) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = gg_real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    if (rc != CUDA_SUCCESS) {
        gg_uncharge(dev, est);
        return rc;
    }
    uint64_t actual = (uint64_t)*pitch * height;
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

GG_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    READY();
    struct gg_entry e;
    if (!gg_track_take(GG_KIND_LINEAR, p, &e)) {
        CUresult rc = gg_real.cuMemFree_v2(p); /* pool pointers imported from another process */
        if (rc == CUDA_SUCCESS) forget_import(p);
        return rc;
    }
    scrub(p, e.bytes); /* the owner scrubs, even while same-container imports are open */
    CUresult rc = gg_real.cuMemFree_v2(p);
    if (rc == CUDA_SUCCESS) {
        uint64_t kept = e.aux ? gg_export_drop(p) : 0; /* aux: exported with cuIpcGetMemHandle */
        if (e.bytes > kept) gg_uncharge(e.dev, e.bytes - kept);
    } else {
        gg_track_put(GG_KIND_LINEAR, p, e.bytes, e.dev, e.aux);
    }
    return rc;
}

/* ---- stream-ordered allocations: a pool is charged max(reserved, live) bytes ---- */

#define GG_MAX_POOLS 256
struct pool {
    CUmemoryPool handle;
    int dev;
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
    free_slot->charged = 0;
    free_slot->live = 0;
    return free_slot;
}

/* Brings a pool's charge to max(reserved, live). Caller holds pool_mu. */
static void pool_settle(struct pool *p) {
    uint64_t want = pool_reserved(p->handle), limit, in_use;
    if (want < p->live) want = p->live;
    if (want > p->charged) gg_charge(p->dev, want - p->charged, 1, &limit, &in_use);
    else if (want < p->charged) gg_uncharge(p->dev, p->charged - want);
    p->charged = want;
}

static void refresh_pools(int dev, int locked) {
    if (!gg_real.cuMemPoolGetAttribute) return;
    if (!locked) pthread_mutex_lock(&pool_mu);
    for (int i = 0; i < GG_MAX_POOLS; i++)
        if (pools[i].handle && pools[i].dev == dev) pool_settle(&pools[i]);
    if (!locked) pthread_mutex_unlock(&pool_mu);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s,
                            int ptsz, const char *api) {
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult (*from_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        ptsz ? gg_real.cuMemAllocFromPoolAsync_ptsz : gg_real.cuMemAllocFromPoolAsync;
    CUresult (*plain)(CUdeviceptr *, size_t, CUstream) =
        ptsz ? gg_real.cuMemAllocAsync_ptsz : gg_real.cuMemAllocAsync;
    int explicit_pool = pool != NULL;
    if (dev < 0 || !dptr || !bytes)
        return explicit_pool ? from_pool(dptr, bytes, pool, s) : plain(dptr, bytes, s);
    if (!explicit_pool && gg_real.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS) pool = NULL;
    if (!pool) return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&pool_mu);
    struct pool *p = pool_find(pool, dev, 1);
    if (!p) {
        pthread_mutex_unlock(&pool_mu);
        gg_log(GG_LOG_ERROR, "%s: more than %d memory pools; refusing", api, GG_MAX_POOLS);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t grow = p->live + bytes > p->charged ? p->live + bytes - p->charged : 0;
    if (grow && charge_or_oom_locked(p->dev, grow, api, 1)) {
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

static CUresult free_async(CUdeviceptr dp, CUstream s, int ptsz) {
    CUresult (*f)(CUdeviceptr, CUstream) = ptsz ? gg_real.cuMemFreeAsync_ptsz : gg_real.cuMemFreeAsync;
    struct gg_entry e;
    if (!gg_track_take(GG_KIND_ASYNC, dp, &e)) {
        CUresult rc = f(dp, s);
        if (rc == CUDA_SUCCESS) forget_import(dp);
        return rc;
    }
    if (__atomic_load_n(&pool_exports, __ATOMIC_RELAXED)) gg_export_drop(dp);
    if (gg_cfg.scrub) {
        CUresult (*ms)(CUdeviceptr, unsigned char, size_t, CUstream) =
            ptsz ? gg_real.cuMemsetD8Async_ptsz : gg_real.cuMemsetD8Async;
        if (ms) ms(dp, 0, (size_t)e.bytes, s); /* ordered before the free on the same stream */
    }
    CUresult rc = f(dp, s);
    if (rc != CUDA_SUCCESS) {
        gg_track_put(GG_KIND_ASYNC, dp, e.bytes, e.dev, e.aux);
        return rc;
    }
    pthread_mutex_lock(&pool_mu);
    struct pool *p = pool_find((CUmemoryPool)(uintptr_t)e.aux, e.dev, 0);
    if (p) {
        p->live = p->live > e.bytes ? p->live - e.bytes : 0;
        pool_settle(p);
    }
    pthread_mutex_unlock(&pool_mu);
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

GG_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    READY();
    CUresult rc = gg_real.cuMemPoolDestroy(pool);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&pool_mu);
    struct pool *p = pool_find(pool, 0, 0);
    if (p) {
        gg_uncharge(p->dev, p->charged);
        memset(p, 0, sizeof(*p));
    }
    pthread_mutex_unlock(&pool_mu);
    return rc;
}

/* ---- arrays ---- */

static uint64_t format_bytes(int format) {
    switch (format) {
    case 0x01: case 0x08: return 1;          /* (un)signed int8 */
    case 0x02: case 0x09: case 0x10: return 2; /* int16, half */
    case 0x03: case 0x0a: case 0x20: return 4; /* int32, float */
    default: return 8;                        /* unknown: count generously, never zero */
    }
}

static uint64_t dim(size_t v) { return v ? (uint64_t)v : 1; }

static uint64_t array_bytes(size_t w, size_t h, size_t d, int format, unsigned int ch) {
    return dim(w) * dim(h) * dim(d) * format_bytes(format) * (ch ? ch : 1);
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
    struct arr_ctx c = {out, d, NULL, 0};
    return charged_create(GG_KIND_ARRAY, array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels),
                          "cuArrayCreate", dev, do_arr2d, &c, key_arr, 0);
}

GG_EXPORT CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    READY();
    int dev = gg_current_device();
    if (dev == -2) return CUDA_ERROR_NOT_SUPPORTED;
    if (dev < 0 || !out || !d) return gg_real.cuArray3DCreate_v2(out, d);
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
    uint64_t total = 0;
    for (unsigned int l = 0; l < levels && l < 64; l++)
        total += array_bytes(d->Width >> l ? d->Width >> l : 1, d->Height >> l ? d->Height >> l : (d->Height ? 1 : 0),
                             d->Depth >> l ? d->Depth >> l : (d->Depth ? 1 : 0), d->Format, d->NumChannels);
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
        && gg_export_record(GG_EXPORT_KIND_IPC, h->reserved, base, e.bytes, e.dev) == 0 && !e.aux)
        gg_track_put(GG_KIND_LINEAR, base, e.bytes, e.dev, 1); /* its free must settle the export */
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
    if (rc == CUDA_SUCCESS && bytes && dev >= 0 && dev < GG_MAX_DEVICES && gg_device_limit(dev)
        && gg_device_limit(dev) < *bytes)
        *bytes = (size_t)gg_device_limit(dev);
    return rc;
}

static int nvml_index(nvmlDevice_t d) {
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
