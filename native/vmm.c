/* Virtual memory management (cuMemCreate & co.). Physical memory lives while a handle
 * or a mapping refers to it, so it is credited when the last of both goes away, not at
 * cuMemRelease (programs commonly release the handle right after mapping it). Handles
 * imported from another process (cuMemImportFromShareableHandle) are charged to the
 * importer when mapped: the driver does not say how large an imported handle is, a
 * mapping does (largest offset + size mapped). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gg.h"

#define READY()                         \
    do {                                \
        CUresult rc_ = gg_ready();      \
        if (rc_) return rc_;            \
    } while (0)

#define REFS(aux) ((uint32_t)(aux))
#define MAPS(aux) ((uint32_t)((aux) >> 32))
#define PACK(refs, maps) ((uint64_t)(refs) | ((uint64_t)(maps) << 32))

/* Serialises handle bookkeeping (reference and mapping counts). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

void gg_vmm_after_fork(void) { pthread_mutex_init(&mu, NULL); }

static int find_handle(uint64_t h, struct gg_entry *e) {
    return gg_track_get(GG_KIND_VMM, h, e) || gg_track_get(GG_KIND_VMM_IMPORT, h, e);
}

static void store(const struct gg_entry *e, uint32_t refs, uint32_t maps) {
    gg_track_put(e->kind, e->key, e->bytes, e->dev, PACK(refs, maps));
}

/* Exported to a shareable handle (a file descriptor, a fabric handle): the handle keeps the
 * memory alive after every handle and mapping of this process is gone, and nothing tells the
 * library when its last holder closes it. */
static int exported(uint64_t h) {
    struct gg_entry t;
    return gg_track_get(GG_KIND_VMM_EXPORTED, h, &t);
}

/* Neither a handle nor a mapping refers to it any more: the driver frees it — unless it was
 * exported, when it stays charged to this process until it exits (the safe side). */
static void drop(const struct gg_entry *e) {
    struct gg_entry t;
    gg_track_take(e->kind, e->key, &t);
    if (e->kind == GG_KIND_VMM && gg_track_take(GG_KIND_VMM_EXPORTED, e->key, &t)) {
        gg_log(GG_LOG_INFO, "VMM allocation %#llx was exported: its %llu bytes stay charged while "
               "this process lives", (unsigned long long)e->key, (unsigned long long)e->bytes);
        return;
    }
    if (e->bytes && e->dev >= 0) gg_uncharge(e->dev, e->bytes);
}

GG_EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type,
                                                unsigned long long flags) {
    READY();
    if (!gg_real.cuMemExportToShareableHandle) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&mu);
    CUresult rc = gg_real.cuMemExportToShareableHandle(out, h, type, flags);
    struct gg_entry e;
    if (rc == CUDA_SUCCESS && gg_track_get(GG_KIND_VMM, h, &e))
        gg_track_put(GG_KIND_VMM_EXPORTED, h, e.bytes, e.dev, 0);
    pthread_mutex_unlock(&mu);
    return rc;
}

/* Zeroes an owned allocation that has no mapping, through a temporary one. */
static void scrub_unmapped(CUmemGenericAllocationHandle h, uint64_t bytes, int dev) {
    CUdeviceptr va = 0;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, gg_device_ordinal(dev)}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!gg_real.cuMemAddressReserve || !gg_real.cuMemMap || !gg_real.cuMemSetAccess
        || !gg_real.cuMemAddressFree || gg_real.cuMemAddressReserve(&va, bytes, 0, 0, 0) != CUDA_SUCCESS) {
        gg_log(GG_LOG_ERROR, "cuMemRelease: cannot map allocation %#llx to scrub it; it is freed "
               "unscrubbed", (unsigned long long)h);
        return;
    }
    CUresult rc = gg_real.cuMemMap(va, bytes, 0, h, 0);
    if (rc == CUDA_SUCCESS) {
        rc = gg_real.cuMemSetAccess(va, bytes, &acc, 1);
        if (rc == CUDA_SUCCESS) rc = gg_real.cuMemsetD8_v2(va, 0, bytes);
        if (rc == CUDA_SUCCESS && gg_real.cuStreamSynchronize) rc = gg_real.cuStreamSynchronize(NULL);
        gg_real.cuMemUnmap(va, bytes);
    }
    gg_real.cuMemAddressFree(va, bytes);
    if (rc != CUDA_SUCCESS)
        gg_log(GG_LOG_ERROR, "cuMemRelease: scrubbing allocation %#llx failed (error %d)",
               (unsigned long long)h, rc);
}

GG_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
    READY();
    if (!h || !prop || !bytes || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return gg_real.cuMemCreate(h, bytes, prop, flags); /* host-located memory is not device memory */
    int dev = gg_device_index(prop->location.id);
    if (dev < 0) return dev == -2 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (gg_charge_or_oom(dev, bytes, "cuMemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = gg_real.cuMemCreate(h, bytes, prop, flags);
    if (rc != CUDA_SUCCESS) gg_uncharge(dev, bytes);
    else gg_track_put(GG_KIND_VMM, *h, bytes, dev, PACK(1, 0));
    return rc;
}

GG_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
                                                  int type) {
    READY();
    CUresult rc = gg_real.cuMemImportFromShareableHandle(h, os_handle, type);
    if (rc != CUDA_SUCCESS || !h) return rc;
    pthread_mutex_lock(&mu);
    struct gg_entry e;
    if (find_handle(*h, &e)) {
        store(&e, REFS(e.aux) + 1, MAPS(e.aux)); /* the driver handed back a handle we know */
    } else {
        CUmemAllocationProp prop;
        int dev;
        memset(&prop, 0, sizeof(prop));
        if (gg_real.cuMemGetAllocationPropertiesFromHandle
            && gg_real.cuMemGetAllocationPropertiesFromHandle(&prop, *h) == CUDA_SUCCESS)
            dev = prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? gg_device_index(prop.location.id) : -1;
        else
            dev = gg_current_device(); /* unknown: charge the current device, the safe side */
        if (dev < 0) dev = -1;
        gg_track_put(GG_KIND_VMM_IMPORT, *h, 0, dev, PACK(1, 0));
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

GG_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    READY();
    CUresult rc = gg_real.cuMemRetainAllocationHandle(h, addr);
    if (rc != CUDA_SUCCESS || !h) return rc;
    pthread_mutex_lock(&mu);
    struct gg_entry e;
    if (find_handle(*h, &e)) store(&e, REFS(e.aux) + 1, MAPS(e.aux)); /* one more cuMemRelease due */
    pthread_mutex_unlock(&mu);
    return rc;
}

GG_EXPORT CUresult cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                            unsigned long long flags) {
    READY();
    pthread_mutex_lock(&mu);
    struct gg_entry e;
    int known = find_handle(h, &e);
    uint64_t grow = 0;
    if (known && (uint64_t)offset > UINT64_MAX - size) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE; /* no allocation reaches past 2^64 */
    }
    if (known && e.kind == GG_KIND_VMM_IMPORT && e.dev >= 0 && (uint64_t)offset + size > e.bytes) {
        grow = (uint64_t)offset + size - e.bytes;
        if (gg_charge_or_oom(e.dev, grow, "cuMemMap (imported allocation)")) {
            pthread_mutex_unlock(&mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    CUresult rc = gg_real.cuMemMap(va, size, offset, h, flags);
    if (rc != CUDA_SUCCESS) {
        if (grow) gg_uncharge(e.dev, grow);
    } else if (known) {
        e.bytes += grow;
        store(&e, REFS(e.aux), MAPS(e.aux) + 1);
        gg_track_put(GG_KIND_VMAP, va, size, e.dev, h);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

GG_EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t size) {
    READY();
    struct gg_entry one[8], *maps = one, *more;
    size_t n = 0, cap = 8;
    uint64_t end = (uint64_t)va + size < (uint64_t)va ? UINT64_MAX : (uint64_t)va + size;
    pthread_mutex_lock(&mu);
    /* every mapping the range covers, however many: each is scrubbed and credited */
    for (uint64_t at = va; at < end; at += maps[n++].bytes) {
        if (n == cap) {
            more = malloc(2 * cap * sizeof(*maps));
            if (!more) {
                pthread_mutex_unlock(&mu);
                if (maps != one) free(maps);
                gg_log(GG_LOG_ERROR, "cuMemUnmap: out of host memory; refusing");
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            memcpy(more, maps, n * sizeof(*maps));
            if (maps != one) free(maps);
            maps = more;
            cap *= 2;
        }
        if (!gg_track_get(GG_KIND_VMAP, at, &maps[n]) || !maps[n].bytes || maps[n].bytes > end - at) break;
    }
    /* Zero an owned allocation when this unmap is the last reference to it; an imported one
     * belongs to its exporter, which scrubs it at its own release. */
    for (size_t i = 0; i < n && gg_cfg.scrub; i++) {
        struct gg_entry h;
        if (find_handle(maps[i].aux, &h) && h.kind == GG_KIND_VMM && REFS(h.aux) == 0 && MAPS(h.aux) == 1
            && !exported(h.key)) { /* exported memory lives on in its shareable handle */
            gg_real.cuMemsetD8_v2(maps[i].key, 0, (size_t)maps[i].bytes);
            if (gg_real.cuStreamSynchronize) gg_real.cuStreamSynchronize(NULL);
        }
    }
    CUresult rc = gg_real.cuMemUnmap(va, size);
    for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
        struct gg_entry m, h;
        gg_track_take(GG_KIND_VMAP, maps[i].key, &m);
        if (!find_handle(maps[i].aux, &h)) continue;
        uint32_t left = MAPS(h.aux) ? MAPS(h.aux) - 1 : 0;
        if (REFS(h.aux) == 0 && left == 0) drop(&h);
        else store(&h, REFS(h.aux), left);
    }
    pthread_mutex_unlock(&mu);
    if (maps != one) free(maps);
    return rc;
}

GG_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    READY();
    pthread_mutex_lock(&mu);
    struct gg_entry e;
    int known = find_handle(h, &e);
    if (known && gg_cfg.scrub && e.kind == GG_KIND_VMM && REFS(e.aux) == 1 && MAPS(e.aux) == 0 && !exported(h))
        scrub_unmapped(h, e.bytes, e.dev); /* the last reference: the driver frees it now */
    CUresult rc = gg_real.cuMemRelease(h);
    if (rc == CUDA_SUCCESS && known) {
        uint32_t refs = REFS(e.aux) ? REFS(e.aux) - 1 : 0;
        if (refs == 0 && MAPS(e.aux) == 0) drop(&e);
        else store(&e, refs, MAPS(e.aux));
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
