/* A fake libcuda.so.1 on host memory, for testing libgpugov without a GPU.
 * Environment: FAKECUDA_DEVICES (default 1), FAKECUDA_MEM_BYTES (card size, default
 * 1 GiB), FAKECUDA_FAIL=<function> (that call returns 999), FAKECUDA_QUEUE_US (launch
 * queue depth in device time before launches block, default 20000), CUDA_VISIBLE_DEVICES
 * (a list of device indexes: CUDA ordinal i is the i-th listed device, as in the driver).
 * FAKECUDA_DEVICE_FILE=<path>: device 0's linear memory is that file (FAKECUDA_MEM_BYTES long,
 * shared between processes), handed out from offset 0 by each process: what one process
 * leaves in memory when it exits (the driver releases it without clearing) is what the next
 * process's allocations start with, as a real GPU's memory outlives its processes.
 * Kernels are simulated: each function has a duration (a kernel whose first parameter
 * points to a uint64_t of 1 takes the duration in its second parameter instead: a
 * data-dependent kernel); a device runs one at a time.
 * FAKECUDA_SHARED_TIMELINE=<path>: the devices are shared by every process naming the same
 * file (several containers on one physical GPU). Each process is a context with its own
 * queue (its kernels run in order); the device time-slices between the contexts that have
 * work queued, as the driver's time-slicing does, modelled as processor sharing: k busy
 * contexts each progress at 1/k (a kernel cannot be preempted by its own process, but
 * another context's work shares the device with it). Events complete when their context's
 * work before them is done, so an event pair around a launch measures wall time on the
 * device, other contexts' slices included, as on a real GPU. FAKECUDA_CLIENT=<n> labels the
 * process's contexts in the file; fakegpu_timeline_clients() reports each context's device
 * time so far (the fake's own accounting, for benches and tests).
 * Where libgpugov's correctness depends on it, the fake refuses what the real driver
 * refuses: sizes that cannot fit (2^64-byte requests fail with CUDA_ERROR_OUT_OF_MEMORY,
 * never wrap), destroying a pool with live allocations defers its release until the last
 * one is freed, cuMemFree / cuMemFreeAsync accept each other's pointers. */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../native/cuda_types.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEV 16
#define MAX_ALLOCS 65536
#define ERR_UNKNOWN 999
#define ERR_INVALID_CONTEXT 201
#define ERR_INVALID_HANDLE 400

struct dev {
    uint64_t total, used;
    uint64_t busy_until, busy_total, launches;
    CUmemoryPool default_pool, current_pool;
};
struct pool;
struct alloc { uint64_t base, size; unsigned char *mem; int dev, kind, live; struct pool *pool; void *graph; };
struct pool { int dev; uint64_t reserved, live; int destroyed; };
struct ctx { int dev; uint64_t limits[3]; }; /* physical device index; cuCtxSetLimit values */
struct ev { int dev, recorded, resolved; uint64_t t, marker; }; /* marker: shared timeline */
struct func { uint64_t ns; };
struct graph { uint64_t ns, bytes; int dev; }; /* an executable graph: kernels' time, memory nodes */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct dev devs[MAX_DEV];
static int ndev;
static struct alloc allocs[MAX_ALLOCS];
static int nallocs;
static struct ctx primary[MAX_DEV];
static __thread struct ctx *current;
static const char *fail_name;
static uint64_t queue_ns = 20000000ULL;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int vis[MAX_DEV], nvis; /* CUDA ordinal -> physical device */
static unsigned char *device_file;  /* FAKECUDA_DEVICE_FILE mapped, or NULL */
static uint64_t device_file_next;   /* next offset handed out (caller holds mu) */

EXPORT uint64_t fakegpu_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void tl_setup(void);
static void setup(void) {
    const char *e = getenv("FAKECUDA_DEVICES");
    ndev = e ? atoi(e) : 1;
    if (ndev < 1 || ndev > MAX_DEV) ndev = 1;
    e = getenv("FAKECUDA_MEM_BYTES");
    uint64_t total = e ? strtoull(e, NULL, 10) : (1ULL << 30);
    for (int i = 0; i < ndev; i++) { devs[i].total = total; primary[i].dev = i; }
    fail_name = getenv("FAKECUDA_FAIL");
    e = getenv("FAKECUDA_DEVICE_FILE");
    if (e && *e) {
        int fd = open(e, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        void *m = fd >= 0 && ftruncate(fd, (off_t)total) == 0
                  ? mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0) close(fd);
        device_file = m == MAP_FAILED ? NULL : m;
    }
    tl_setup();
    e = getenv("FAKECUDA_QUEUE_US");
    if (e) queue_ns = strtoull(e, NULL, 10) * 1000ULL;
    e = getenv("CUDA_VISIBLE_DEVICES");
    nvis = 0;
    if (!e) for (; nvis < ndev; nvis++) vis[nvis] = nvis;
    while (e && *e && nvis < MAX_DEV) {
        char *end;
        long v = strtol(e, &end, 10);
        if (end == e || v < 0 || v >= ndev) break; /* the driver stops at the first bad entry */
        vis[nvis++] = (int)v;
        if (*end != ',') break;
        e = end + 1;
    }
}

/* ordinal -> physical index, or -1 */
static int phys(CUdevice d) { pthread_once(&once, setup); return d >= 0 && d < nvis ? vis[d] : -1; }
static int ordinal(int p) { for (int i = 0; i < nvis; i++) if (vis[i] == p) return i; return -1; }

static int failing(const char *fn) {
    pthread_once(&once, setup);
    return fail_name && strcmp(fail_name, fn) == 0;
}
#define ENTER() do { if (failing(__func__)) return ERR_UNKNOWN; } while (0)

static int cur_dev(void) { return current ? current->dev : -1; }
/* A stream belongs to the device of the context it was created in; the NULL, legacy (0x1) and
 * per-thread (0x2) streams are the current context's. Work on a stream runs on its device. */
struct fstream { int dev; };
static int stream_dev(CUstream s) { return (uintptr_t)s > 2 ? ((struct fstream *)s)->dev : cur_dev(); }

/* ---- device memory ---- */

static struct alloc *find_alloc(uint64_t p) {
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].live && p >= allocs[i].base && p < allocs[i].base + allocs[i].size) return &allocs[i];
    return NULL;
}

/* Freed buffers are kept and handed out again *without clearing*, like a real allocator
 * would reuse pages, so tests can see whether scrub worked. */
static unsigned char *take_buffer(uint64_t size, int dev) {
    for (int i = 0; i < nallocs; i++)
        if (!allocs[i].live && allocs[i].mem && allocs[i].size == size) {
            unsigned char *m = allocs[i].mem;
            allocs[i].mem = NULL;
            return m;
        }
    if (device_file && dev == 0 && size <= devs[0].total) { /* the device's own memory */
        if (device_file_next + size > devs[0].total) device_file_next = 0;
        unsigned char *m = device_file + device_file_next;
        device_file_next += (size + 4095) & ~(uint64_t)4095;
        return m;
    }
    return calloc(1, size ? size : 1);
}

static CUresult new_alloc(CUdeviceptr *out, uint64_t size, int dev, int kind, int charge) {
    if (dev < 0) return ERR_INVALID_CONTEXT;
    if (!out || !size) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (charge && size > devs[dev].total - devs[dev].used) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    int slot = -1;
    for (int i = 0; i < nallocs && slot < 0; i++) if (!allocs[i].live && !allocs[i].mem) slot = i;
    if (slot < 0 && nallocs < MAX_ALLOCS) slot = nallocs++;
    unsigned char *m = slot >= 0 ? take_buffer(size, dev) : NULL;
    if (!m) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    allocs[slot] = (struct alloc){(uint64_t)(uintptr_t)m, size, m, dev, kind, 1, NULL, NULL};
    if (charge) devs[dev].used += size;
    *out = (CUdeviceptr)(uintptr_t)m;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static CUresult drop_alloc(CUdeviceptr p, int charge) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    if (!a || a->base != p) { pthread_mutex_unlock(&mu); return CUDA_ERROR_INVALID_VALUE; }
    a->live = 0; /* keep a->mem for reuse */
    if (charge && a->kind != 2) devs[a->dev].used -= a->size;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { ENTER(); return new_alloc(p, n, cur_dev(), 0, 1); }
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int f) { (void)f; ENTER(); return new_alloc(p, n, cur_dev(), 0, 1); }
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e) {
    (void)e; ENTER();
    uint64_t bytes;
    if (!pitch || w > SIZE_MAX - 511 || __builtin_mul_overflow((uint64_t)((w + 511) & ~(size_t)511), (uint64_t)h, &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = (w + 511) & ~(size_t)511;
    return new_alloc(p, bytes, cur_dev(), 0, 1);
}
static CUresult pool_free(CUdeviceptr p);
static int is_pool_ptr(CUdeviceptr p);
/* cuMemFree also frees stream-ordered pointers (synchronously), as the driver does. */
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { ENTER(); return is_pool_ptr(p) ? pool_free(p) : drop_alloc(p, 1); }
/* Managed memory moves to the device it is prefetched to, or that is made its preferred
 * location (the whole allocation, in the fake); -1 (the host) leaves it where it is. */
static CUresult migrate(CUdeviceptr p, CUdevice dst) {
    if (dst == -1) return 0;
    int d = phys(dst);
    if (d < 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    CUresult rc = a ? 0 : CUDA_ERROR_INVALID_VALUE;
    if (a && a->kind == 0 && a->dev != d) {
        if (a->size > devs[d].total - devs[d].used) rc = CUDA_ERROR_OUT_OF_MEMORY;
        else { devs[a->dev].used -= a->size; devs[d].used += a->size; a->dev = d; }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s) { (void)n; (void)s; ENTER(); return migrate(p, dst); }
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int f, CUstream s) {
    (void)n; (void)f; (void)s; ENTER();
    return migrate(p, loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : -1);
}
EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice dev) { (void)n; ENTER(); return advice == 3 ? migrate(p, dev) : 0; }
EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
    (void)n; ENTER();
    return advice == 3 ? migrate(p, loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : -1) : 0;
}
EXPORT CUresult cuMemAllocHost_v2(void **p, size_t n) { ENTER(); *p = malloc(n); return *p ? 0 : 2; }
EXPORT CUresult cuMemFreeHost(void *p) { ENTER(); free(p); return 0; }

EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
    ENTER();
    int d = cur_dev();
    if (d < 0) return ERR_INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    if (f) *f = devs[d].total - devs[d].used;
    if (t) *t = devs[d].total;
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) {
    ENTER();
    if (phys(d) < 0 || !b) return CUDA_ERROR_INVALID_VALUE;
    *b = devs[phys(d)].total;
    return 0;
}
EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    ENTER();
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    if (a) { if (base) *base = a->base; if (size) *size = a->size; }
    pthread_mutex_unlock(&mu);
    return a ? 0 : CUDA_ERROR_NOT_FOUND;
}

static unsigned char *resolve(CUdeviceptr p, size_t n);
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    ENTER();
    unsigned char *m = resolve(p, n);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    memset(m, v, n);
    return 0;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { (void)s; return cuMemsetD8_v2(p, v, n); }
EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { (void)s; return cuMemsetD8_v2(p, v, n); }
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
    ENTER();
    unsigned char *m = resolve(d, n);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    memcpy(m, h, n);
    return 0;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
    ENTER();
    unsigned char *m = resolve(d, n);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    memcpy(h, m, n);
    return 0;
}

/* ---- stream-ordered pools: freed blocks stay reserved until trimmed ---- */

static CUresult pool_alloc(CUdeviceptr *p, size_t n, CUmemoryPool h) {
    struct pool *pl = (struct pool *)h;
    if (!pl || !p || !n || pl->destroyed) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (n > devs[pl->dev].total) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    uint64_t grow = pl->live + n > pl->reserved ? pl->live + n - pl->reserved : 0;
    if (grow > devs[pl->dev].total - devs[pl->dev].used) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    devs[pl->dev].used += grow;
    pl->reserved += grow;
    pl->live += n;
    pthread_mutex_unlock(&mu);
    CUresult rc = new_alloc(p, n, pl->dev, (int)(intptr_t)0, 0);
    if (rc == 0) { pthread_mutex_lock(&mu); find_alloc(*p)->kind = 1; pthread_mutex_unlock(&mu); }
    return rc;
}
static struct pool *pool_of(CUdeviceptr p);
static void pool_release(struct pool *pl) { /* caller holds mu */
    devs[pl->dev].used -= pl->reserved;
    free(pl);
}
static CUresult pool_free(CUdeviceptr p) {
    struct pool *pl = pool_of(p);
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    uint64_t n = a ? a->size : 0;
    pthread_mutex_unlock(&mu);
    if (a && !pl && a->kind == 2) return drop_alloc(p, 0); /* an imported pool pointer */
    if (!a || !pl) return CUDA_ERROR_INVALID_VALUE;
    drop_alloc(p, 0);
    pthread_mutex_lock(&mu);
    pl->live -= n;
    if (pl->destroyed && pl->live == 0) pool_release(pl); /* the deferred destroy completes */
    pthread_mutex_unlock(&mu);
    return 0;
}

/* the pool of a stream-ordered allocation (its base), taken off it when it is freed */
static struct pool *pool_of(CUdeviceptr p) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    struct pool *r = a && a->base == p ? a->pool : NULL;
    if (r) a->pool = NULL;
    pthread_mutex_unlock(&mu);
    return r;
}
static int is_pool_ptr(CUdeviceptr p) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    int r = a && a->base == p && a->pool;
    pthread_mutex_unlock(&mu);
    return r;
}
static void remember_pool(CUdeviceptr p, struct pool *pl) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    if (a) a->pool = pl;
    pthread_mutex_unlock(&mu);
}

static CUmemoryPool device_pool(int d) {
    if (d < 0) return NULL;
    pthread_mutex_lock(&mu);
    if (!devs[d].default_pool) {
        struct pool *pl = calloc(1, sizeof(*pl));
        pl->dev = d;
        devs[d].default_pool = devs[d].current_pool = (CUmemoryPool)pl;
    }
    CUmemoryPool r = devs[d].current_pool;
    pthread_mutex_unlock(&mu);
    return r;
}

static int capturing(CUstream s);
static CUresult capture_alloc(CUdeviceptr *p, size_t n, CUstream s);
static CUresult alloc_from(CUdeviceptr *p, size_t n, CUmemoryPool h) {
    CUresult rc = pool_alloc(p, n, h);
    if (rc == 0) remember_pool(*p, (struct pool *)h);
    return rc;
}
/* (internal calls never go through exported names: a preloaded library would interpose them) */
static CUresult alloc_async(CUdeviceptr *p, size_t n, CUstream s) {
    if (cur_dev() < 0) return ERR_INVALID_CONTEXT;
    if (capturing(s)) return capture_alloc(p, n, s); /* becomes a memory node of the graph */
    return alloc_from(p, n, device_pool(stream_dev(s))); /* the stream's device's pool */
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { ENTER(); return alloc_async(p, n, s); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { ENTER(); return alloc_async(p, n, s); }
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool h, CUstream s) { (void)s; ENTER(); return alloc_from(p, n, h); }
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool h, CUstream s) { (void)s; ENTER(); return alloc_from(p, n, h); }
/* cuMemFreeAsync also frees cuMemAlloc pointers (stream-ordered), as the driver does. */
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; ENTER(); return is_pool_ptr(p) ? pool_free(p) : drop_alloc(p, 1); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { (void)s; ENTER(); return is_pool_ptr(p) ? pool_free(p) : drop_alloc(p, 1); }
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pl, CUdevice d) { ENTER(); if (phys(d) < 0) return 1; *pl = device_pool(phys(d)); return 0; }
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pl, CUdevice d) { return cuDeviceGetMemPool(pl, d); }
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props) {
    ENTER();
    if (!out || !props || phys(props->location.id) < 0) return CUDA_ERROR_INVALID_VALUE;
    struct pool *pl = calloc(1, sizeof(*pl));
    pl->dev = phys(props->location.id);
    *out = (CUmemoryPool)pl;
    return 0;
}
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t keep) {
    ENTER();
    struct pool *pl = (struct pool *)h;
    pthread_mutex_lock(&mu);
    uint64_t floor_b = pl->live > keep ? pl->live : keep;
    if (pl->reserved > floor_b) { devs[pl->dev].used -= pl->reserved - floor_b; pl->reserved = floor_b; }
    pthread_mutex_unlock(&mu);
    return 0;
}
/* A pool with live allocations is released when its last allocation is freed (the
 * driver returns at once and defers the release); a device's default pool is refused. */
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool h) {
    ENTER();
    struct pool *pl = (struct pool *)h;
    if (!pl || pl->destroyed) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (devs[pl->dev].default_pool == h) { pthread_mutex_unlock(&mu); return CUDA_ERROR_INVALID_VALUE; }
    if (devs[pl->dev].current_pool == h) devs[pl->dev].current_pool = devs[pl->dev].default_pool;
    pl->destroyed = 1;
    if (pl->live == 0) pool_release(pl);
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool h, int attr, void *v) {
    ENTER();
    struct pool *pl = (struct pool *)h;
    if (!pl || !v || pl->destroyed || attr != CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    *(cuuint64_t *)v = pl->reserved;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* ---- arrays: texel memory the client can only reach with cuMemcpy3D ----
 * Freed array memory is reused for the next array of the same size without clearing. */

static uint64_t fmt_bytes(int f) { return f == 0x01 || f == 0x08 ? 1 : f == 0x02 || f == 0x09 || f == 0x10 ? 2 : 4; }
static uint64_t d1(size_t v) { return v ? v : 1; }
struct farr { uint64_t size, row; CUDA_ARRAY3D_DESCRIPTOR d; unsigned char *mem; int dev; };
struct fmip { unsigned int levels; struct farr *lv[32]; };
#define MAX_SPARE 1024
static struct { uint64_t size; unsigned char *mem; } spare[MAX_SPARE];

static unsigned char *spare_take(uint64_t size) { /* caller holds mu */
    for (int i = 0; i < MAX_SPARE; i++)
        if (spare[i].mem && spare[i].size == size) { unsigned char *m = spare[i].mem; spare[i].mem = NULL; return m; }
    return calloc(1, size ? size : 1);
}
static void spare_put(uint64_t size, unsigned char *m) { /* caller holds mu */
    for (int i = 0; i < MAX_SPARE; i++)
        if (!spare[i].mem) { spare[i].size = size; spare[i].mem = m; return; }
    free(m);
}

static CUresult new_array(int dev, const CUDA_ARRAY3D_DESCRIPTOR *d, struct farr **out) {
    if (dev < 0) return ERR_INVALID_CONTEXT;
    if (!d || !out) return CUDA_ERROR_INVALID_VALUE;
    uint64_t row, n;
    if (__builtin_mul_overflow(d1(d->Width), fmt_bytes(d->Format) * (d->NumChannels ? d->NumChannels : 1), &row)
        || __builtin_mul_overflow(row, d1(d->Height), &n) || __builtin_mul_overflow(n, d1(d->Depth), &n))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (n > devs[dev].total - devs[dev].used) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    devs[dev].used += n;
    struct farr *a = malloc(sizeof(*a));
    *a = (struct farr){n, row, *d, spare_take(n), dev};
    pthread_mutex_unlock(&mu);
    *out = a;
    return 0;
}
static void free_array(struct farr *a) {
    pthread_mutex_lock(&mu);
    devs[a->dev].used -= a->size;
    spare_put(a->size, a->mem);
    pthread_mutex_unlock(&mu);
    free(a);
}
EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d) {
    ENTER();
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {d->Width, d->Height, 0, d->Format, d->NumChannels, 0};
    return new_array(cur_dev(), &d3, (struct farr **)a);
}
EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d) { ENTER(); return new_array(cur_dev(), d, (struct farr **)a); }
EXPORT CUresult cuArrayDestroy(CUarray a) { ENTER(); if (!a) return ERR_INVALID_HANDLE; free_array((struct farr *)a); return 0; }
EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray a) {
    ENTER();
    if (!a || !d) return ERR_INVALID_HANDLE;
    *d = ((struct farr *)a)->d;
    return 0;
}
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *m, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
    ENTER();
    if (!m || !d || !levels || levels > 32) return CUDA_ERROR_INVALID_VALUE;
    struct fmip *mp = calloc(1, sizeof(*mp));
    for (unsigned int l = 0; l < levels; l++) {
        CUDA_ARRAY3D_DESCRIPTOR dl = *d;
        dl.Width = d1(d->Width >> l);
        dl.Height = d->Height ? d1(d->Height >> l) : 0;
        dl.Depth = d->Depth ? d1(d->Depth >> l) : 0;
        CUresult rc = new_array(cur_dev(), &dl, &mp->lv[l]);
        if (rc) { while (l--) free_array(mp->lv[l]); free(mp); return rc; }
        mp->levels = l + 1;
    }
    *m = (CUmipmappedArray)mp;
    return 0;
}
EXPORT CUresult cuMipmappedArrayGetLevel(CUarray *a, CUmipmappedArray m, unsigned int l) {
    ENTER();
    struct fmip *mp = (struct fmip *)m;
    if (!mp || !a || l >= mp->levels) return CUDA_ERROR_INVALID_VALUE;
    *a = (CUarray)mp->lv[l];
    return 0;
}
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
    ENTER();
    struct fmip *mp = (struct fmip *)m;
    if (!mp) return ERR_INVALID_HANDLE;
    for (unsigned int l = 0; l < mp->levels; l++) free_array(mp->lv[l]);
    free(mp);
    return 0;
}

static unsigned char *resolve(CUdeviceptr p, size_t n);
/* Copies between host/linear device memory and arrays (no array-to-array, no LOD). */
EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) {
    ENTER();
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    int to_array = c->dstMemoryType == CU_MEMORYTYPE_ARRAY;
    struct farr *a = (struct farr *)(to_array ? c->dstArray : c->srcArray);
    if (!a || (!to_array && c->srcMemoryType != CU_MEMORYTYPE_ARRAY)) return CUDA_ERROR_INVALID_VALUE;
    size_t ax = to_array ? c->dstXInBytes : c->srcXInBytes, ay = to_array ? c->dstY : c->srcY,
           az = to_array ? c->dstZ : c->srcZ;
    int lt = to_array ? c->srcMemoryType : c->dstMemoryType;
    size_t pitch = to_array ? c->srcPitch : c->dstPitch, lh = to_array ? c->srcHeight : c->dstHeight;
    size_t depth = d1(c->Depth), height = d1(c->Height);
    if (ax + c->WidthInBytes > a->row || ay + height > d1(a->d.Height) || az + depth > d1(a->d.Depth)
        || pitch < c->WidthInBytes)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char *lin;
    size_t span = pitch * (lh ? lh : height) * (depth - 1) + pitch * (height - 1) + c->WidthInBytes;
    if (lt == CU_MEMORYTYPE_HOST) lin = (unsigned char *)(to_array ? (void *)(uintptr_t)c->srcHost : c->dstHost);
    else if (lt == CU_MEMORYTYPE_DEVICE) lin = resolve(to_array ? c->srcDevice : c->dstDevice, span);
    else return CUDA_ERROR_INVALID_VALUE;
    if (!lin) return CUDA_ERROR_INVALID_VALUE;
    for (size_t z = 0; z < depth; z++)
        for (size_t y = 0; y < height; y++) {
            unsigned char *l = lin + (z * (lh ? lh : height) + y) * pitch;
            unsigned char *m = a->mem + ((az + z) * d1(a->d.Height) + ay + y) * a->row + ax;
            if (to_array) memcpy(m, l, c->WidthInBytes);
            else memcpy(l, m, c->WidthInBytes);
        }
    return 0;
}

/* ---- virtual memory management ----
 * A physical allocation (struct phys) lives while a handle or a mapping refers to it;
 * freed physical memory is reused without clearing, like arrays. Shareable handles are a
 * fake-only 24-byte token {pid, phys, size}: importing it in another process gives a
 * new physical allocation of that size (not charged: it is the exporter's memory). */

struct phys { uint64_t size; unsigned char *mem; int dev, refs, charged, exported; };
struct vmm { struct phys *p; int refs, maps; }; /* the handle outlives its release while mapped */
struct token { uint64_t pid, ptr, size, dev; };
#define MAX_MAPS 256
static struct { uint64_t va, size; struct vmm *h; } maps[MAX_MAPS];
static uint64_t next_va = 0x7e0000000000ULL;

static void phys_unref(struct phys *p) { /* caller holds mu */
    if (--p->refs > 0) return;
    if (p->charged && p->dev >= 0) devs[p->dev].used -= p->size;
    spare_put(p->size, p->mem);
    free(p);
}
static struct vmm *new_handle(struct phys *p) { struct vmm *v = malloc(sizeof(*v)); v->p = p; v->refs = 1; v->maps = 0; p->refs++; return v; }
static void handle_unref(struct vmm *v) { /* caller holds mu */
    if (v->refs > 0 || v->maps > 0) return;
    phys_unref(v->p);
    free(v);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop, unsigned long long f) {
    (void)f; ENTER();
    if (!h || !prop || !n) return CUDA_ERROR_INVALID_VALUE;
    int dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? phys(prop->location.id) : -1;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && dev < 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (dev >= 0 && n > devs[dev].total - devs[dev].used) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    if (dev >= 0) devs[dev].used += n;
    struct phys *p = calloc(1, sizeof(*p));
    *p = (struct phys){n, spare_take(n), dev, 0, 1, 0};
    *h = (CUmemGenericAllocationHandle)(uintptr_t)new_handle(p);
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    ENTER();
    struct vmm *v = (struct vmm *)(uintptr_t)h;
    if (!v) return ERR_INVALID_HANDLE;
    pthread_mutex_lock(&mu);
    if (v->refs > 0) v->refs--;
    handle_unref(v);
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long f) {
    (void)type; (void)f; ENTER();
    struct vmm *v = (struct vmm *)(uintptr_t)h;
    if (!v || !out) return CUDA_ERROR_INVALID_VALUE;
    struct token t = {(uint64_t)getpid(), (uint64_t)(uintptr_t)v->p, v->p->size, (uint64_t)v->p->dev};
    memcpy(out, &t, sizeof(t));
    pthread_mutex_lock(&mu);
    if (!v->p->exported) { v->p->exported = 1; v->p->refs++; } /* the shareable handle (an fd the
        program never closes here) keeps the memory alive after every handle and mapping is gone */
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type) {
    (void)type; ENTER();
    if (!h || !os) return CUDA_ERROR_INVALID_VALUE;
    struct token t;
    memcpy(&t, os, sizeof(t));
    pthread_mutex_lock(&mu);
    struct phys *p;
    if (t.pid == (uint64_t)getpid()) p = (struct phys *)(uintptr_t)t.ptr;
    else { p = calloc(1, sizeof(*p)); *p = (struct phys){t.size, spare_take(t.size), (int)t.dev, 0, 0, 0}; }
    *h = (CUmemGenericAllocationHandle)(uintptr_t)new_handle(p);
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    ENTER();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_MAPS; i++)
        if (maps[i].h && maps[i].va == (uint64_t)(uintptr_t)addr) {
            maps[i].h->refs++;
            *h = (CUmemGenericAllocationHandle)(uintptr_t)maps[i].h;
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&mu);
    return rc;
}
EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h) {
    ENTER();
    struct vmm *v = (struct vmm *)(uintptr_t)h;
    if (!v || !prop) return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof(*prop));
    prop->type = 1;
    prop->location.type = v->p->dev >= 0 ? CU_MEM_LOCATION_TYPE_DEVICE : 2;
    prop->location.id = v->p->dev >= 0 ? ordinal(v->p->dev) : 0;
    return 0;
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long f) {
    (void)align; (void)addr; (void)f; ENTER();
    pthread_mutex_lock(&mu);
    *p = next_va;
    next_va += (n + 0xFFFFF) & ~(uint64_t)0xFFFFF;
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t n) { (void)p; (void)n; ENTER(); return 0; }
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f) {
    (void)f; ENTER();
    struct vmm *v = (struct vmm *)(uintptr_t)h;
    if (!v || off > v->p->size || n > v->p->size - off) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_MAPS; i++)
        if (!maps[i].h) { maps[i].va = p; maps[i].size = n; maps[i].h = v; v->maps++; rc = 0; break; }
    pthread_mutex_unlock(&mu);
    return rc;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
    ENTER();
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_MAPS; i++)
        if (maps[i].h && maps[i].va >= p && maps[i].va < p + n) { struct vmm *v = maps[i].h; maps[i].h = NULL; v->maps--; handle_unref(v); }
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const void *d, size_t c) { (void)p; (void)n; (void)d; (void)c; ENTER(); return 0; }

static unsigned char *resolve(CUdeviceptr p, size_t n) {
    unsigned char *r = NULL;
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    if (a && p + n <= a->base + a->size) r = a->mem + (p - a->base);
    for (int i = 0; !r && i < MAX_MAPS; i++)
        if (maps[i].h && p >= maps[i].va && p + n <= maps[i].va + maps[i].size) r = maps[i].h->p->mem + (p - maps[i].va);
    pthread_mutex_unlock(&mu);
    return r;
}

/* ---- IPC and pool pointer export: a token {pid, ptr, size, dev}; importing it in the
 * exporting process maps the same memory, in another process a new uncharged buffer ---- */

static CUresult export_token(void *out, CUdeviceptr p) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    struct token t = {(uint64_t)getpid(), a ? a->base : 0, a ? a->size : 0, a ? (uint64_t)a->dev : 0};
    pthread_mutex_unlock(&mu);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, 64);
    memcpy(out, &t, sizeof(t));
    return 0;
}
static CUresult import_token(CUdeviceptr *p, const void *in) {
    struct token t;
    memcpy(&t, in, sizeof(t));
    if (t.pid == (uint64_t)getpid()) {
        pthread_mutex_lock(&mu);
        struct alloc *a = find_alloc(t.ptr);
        t.size = a ? a->size : 0;
        pthread_mutex_unlock(&mu);
    }
    if (!t.size) return CUDA_ERROR_INVALID_VALUE;
    return new_alloc(p, t.size, (int)t.dev, 2, 0);
}
EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) { ENTER(); return h ? export_token(h->reserved, p) : 1; }
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int f) { (void)f; ENTER(); return import_token(p, h.reserved); }
EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) { ENTER(); return drop_alloc(p, 0); }
EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *d, CUdeviceptr p) { ENTER(); return d ? export_token(d->reserved, p) : 1; }
EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool, CUmemPoolPtrExportData *d) { (void)pool; ENTER(); return d ? import_token(p, d->reserved) : 1; }

/* ---- contexts, devices ---- */

EXPORT CUresult cuInit(unsigned int f) { (void)f; ENTER(); return 0; }
EXPORT CUresult cuDriverGetVersion(int *v) { ENTER(); *v = 12080; return 0; }
EXPORT CUresult cuDeviceGetCount(int *n) { ENTER(); *n = nvis; return 0; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int i) { ENTER(); if (phys(i) < 0) return 101; *d = i; return 0; }
/* UUID bytes: fa ce 00 .. 00 <physical index>, i.e. GPU-face0000-0000-0000-0000-0000000000NN */
static CUresult get_uuid(CUuuid *u, CUdevice d) {
    if (!u || phys(d) < 0) return CUDA_ERROR_INVALID_VALUE;
    memset(u, 0, sizeof(*u));
    u->bytes[0] = (char)0xfa;
    u->bytes[1] = (char)0xce;
    u->bytes[15] = (char)phys(d);
    return 0;
}
EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) { ENTER(); return get_uuid(u, d); }
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) { ENTER(); return get_uuid(u, d); }
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) { ENTER(); snprintf(name, (size_t)len, "Fake GPU %d", d); return 0; }
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) { (void)d; ENTER(); *v = attr == 16 ? 132 : attr == 39 ? 2048 : 1; return 0; }
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { ENTER(); if (phys(d) < 0) return 101; *c = (CUcontext)&primary[phys(d)]; return 0; }
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; ENTER(); return 0; }
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned int f, CUdevice d) {
    (void)f; ENTER();
    if (phys(d) < 0) return 101;
    struct ctx *x = calloc(1, sizeof(*x));
    x->dev = phys(d);
    current = x;
    *c = (CUcontext)x;
    return 0;
}
static void drop_limits(struct ctx *x);
EXPORT CUresult cuCtxDestroy_v2(CUcontext c) {
    ENTER();
    if (!c) return ERR_INVALID_CONTEXT;
    drop_limits((struct ctx *)c);
    if (current == (struct ctx *)c) current = NULL;
    if (c != (CUcontext)&primary[((struct ctx *)c)->dev]) free(c);
    return 0;
}
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) { ENTER(); if (phys(d) < 0) return 101; drop_limits(&primary[phys(d)]); return 0; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { ENTER(); current = (struct ctx *)c; return 0; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { ENTER(); *c = (CUcontext)current; return 0; }
EXPORT CUresult cuCtxGetDevice(CUdevice *d) { ENTER(); if (!current) return ERR_INVALID_CONTEXT; *d = ordinal(current->dev); return 0; }

/* ---- simulated execution: one timeline per device ---- */

/* Shared timeline (FAKECUDA_SHARED_TIMELINE): processor sharing between the processes'
 * contexts, advanced lazily to "now" by whichever process calls in. Every context keeps a
 * history of (time, work done) points where its progress rate changed, so an event's
 * completion time can be found after the fact. */
#define TL_MAGIC 0x31454e494c454d54ULL /* "TMELINE1" */
#define TL_CTX 64
#define TL_HIST 1024
struct tl_point { uint64_t t, done; };
struct tl_ctx {
    uint32_t used, pid, client, dev;
    uint64_t submitted, done;  /* device time of work queued / executed (ns) */
    uint64_t waited;           /* time other contexts ran while this one had work queued */
    uint64_t nhist, rate_k;    /* points written; busy contexts when the last point was made */
    struct tl_point hist[TL_HIST];
};
struct tl_file {
    uint64_t magic;
    union { pthread_mutex_t mu; char pad[64]; };
    uint64_t sim_t[MAX_DEV];   /* the simulation has advanced up to here (per device) */
    struct tl_ctx ctx[TL_CTX];
};
static struct tl_file *tl;     /* NULL: each process has its own devices (default) */
static int tl_slot[MAX_DEV];   /* this process's context per device, -1 none yet */
static uint32_t tl_client;

static void tl_setup(void) {
    for (int d = 0; d < MAX_DEV; d++) tl_slot[d] = -1;
    const char *e = getenv("FAKECUDA_SHARED_TIMELINE");
    if (!e || !*e) return;
    const char *c = getenv("FAKECUDA_CLIENT");
    tl_client = c ? (uint32_t)strtoul(c, NULL, 10) : (uint32_t)getpid();
    int fd = open(e, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    flock(fd, LOCK_EX);
    struct stat sb;
    void *m = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (sb.st_size == (off_t)sizeof(struct tl_file)
                                || ftruncate(fd, sizeof(struct tl_file)) == 0))
        m = mmap(NULL, sizeof(struct tl_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
        struct tl_file *f = m;
        if (f->magic != TL_MAGIC) {
            pthread_mutexattr_t a;
            pthread_mutexattr_init(&a);
            pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
            pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
            pthread_mutex_init(&f->mu, &a);
            f->magic = TL_MAGIC;
        }
        tl = f;
    }
    flock(fd, LOCK_UN);
    close(fd);
}

static void tl_lock(void) {
    if (pthread_mutex_lock(&tl->mu) == EOWNERDEAD) pthread_mutex_consistent(&tl->mu);
}

static void tl_point_add(struct tl_ctx *c, uint64_t t, uint64_t k) {
    struct tl_point *last = c->nhist ? &c->hist[(c->nhist - 1) % TL_HIST] : NULL;
    /* same rate since the last point: move the point instead of adding one */
    if (last && c->rate_k == k && c->nhist > 1) { last->t = t; last->done = c->done; return; }
    c->hist[c->nhist % TL_HIST] = (struct tl_point){t, c->done};
    c->nhist++;
    c->rate_k = k;
}

/* Advances device d's simulation to now; caller holds the lock. */
static void tl_advance(int d, uint64_t now) {
    uint64_t t = tl->sim_t[d];
    if (!t || t > now) t = now;
    while (t < now) {
        uint64_t k = 0, rmin = UINT64_MAX;
        for (int i = 0; i < TL_CTX; i++) {
            struct tl_ctx *c = &tl->ctx[i];
            if (!c->used || (int)c->dev != d || c->done >= c->submitted) continue;
            k++;
            if (c->submitted - c->done < rmin) rmin = c->submitted - c->done;
        }
        if (!k) { t = now; break; }
        uint64_t span = now - t, step = rmin * k <= span ? rmin : span / k;
        if (!step) { t = now; break; }
        t += step * k;
        for (int i = 0; i < TL_CTX; i++) {
            struct tl_ctx *c = &tl->ctx[i];
            if (!c->used || (int)c->dev != d || c->done >= c->submitted) continue;
            c->done += step;
            c->waited += step * (k - 1);
            tl_point_add(c, t, c->done >= c->submitted ? 0 : k);
        }
    }
    tl->sim_t[d] = now;
}

/* This process's context on device d (made at its first use); caller holds the lock. */
static struct tl_ctx *tl_mine(int d) {
    if (tl_slot[d] < 0)
        for (int i = 0; i < TL_CTX; i++)
            if (!tl->ctx[i].used) {
                tl->ctx[i] = (struct tl_ctx){.used = 1, .pid = (uint32_t)getpid(), .client = tl_client,
                                             .dev = (uint32_t)d};
                tl_slot[d] = i;
                break;
            }
    return tl_slot[d] < 0 ? NULL : &tl->ctx[tl_slot[d]];
}

/* When context c's executed work reached `marker` (c->done >= marker). */
static uint64_t tl_when(struct tl_ctx *c, uint64_t marker) {
    uint64_t n = c->nhist, lo = n > TL_HIST ? n - TL_HIST : 0;
    for (uint64_t i = n; i-- > lo;) {
        struct tl_point *p = &c->hist[i % TL_HIST];
        if (p->done < marker) {
            if (i + 1 >= n) return p->t;
            struct tl_point *q = &c->hist[(i + 1) % TL_HIST];
            return p->t + (uint64_t)((double)(q->t - p->t) * (double)(marker - p->done)
                                     / (double)(q->done - p->done));
        }
        if (i == lo) return p->t; /* older than the history: its oldest point */
    }
    return 0;
}

/* Queues ns of work for this process on device d; returns the work still queued. */
static uint64_t tl_submit(int d, uint64_t ns) {
    tl_lock();
    uint64_t now = fakegpu_now_ns();
    tl_advance(d, now);
    struct tl_ctx *c = tl_mine(d);
    uint64_t pending = 0;
    if (c) {
        if (c->done >= c->submitted) tl_point_add(c, now, UINT64_MAX); /* starts now */
        c->submitted += ns;
        pending = c->submitted - c->done;
    }
    pthread_mutex_unlock(&tl->mu);
    return pending;
}

/* Work of this process still queued on d, and how many contexts share the device now. */
static uint64_t tl_pending(int d, uint64_t *busy) {
    tl_lock();
    tl_advance(d, fakegpu_now_ns());
    struct tl_ctx *c = tl_mine(d);
    uint64_t k = 0;
    for (int i = 0; i < TL_CTX; i++)
        k += tl->ctx[i].used && (int)tl->ctx[i].dev == d && tl->ctx[i].done < tl->ctx[i].submitted;
    uint64_t r = c ? c->submitted - c->done : 0;
    pthread_mutex_unlock(&tl->mu);
    if (busy) *busy = k ? k : 1;
    return r;
}

/* Waits until this process's queued work on d drops to `left` ns. */
static void tl_wait(int d, uint64_t left) {
    uint64_t k, r;
    while ((r = tl_pending(d, &k)) > left) {
        uint64_t ns = (r - left) * k;
        if (ns > 1000000) ns = 1000000;
        if (ns < 20000) ns = 20000;
        struct timespec ts = {0, (long)ns};
        nanosleep(&ts, NULL);
    }
}

/* Device time each context of device d executed so far: fills up to max entries of clients
 * (FAKECUDA_CLIENT) and done (ns); returns the number of contexts. Also the device's total in
 * *total. For benches and tests: the fake's own accounting. */
/* Like fakegpu_timeline_clients, with each context's waited time: how long other contexts'
 * work ran while it had work queued (the time-slicing it suffered). */
EXPORT int fakegpu_timeline_waited(int d, uint32_t *clients, uint64_t *waited, int max) {
    pthread_once(&once, setup);
    if (!tl || d < 0 || d >= MAX_DEV) return -1;
    tl_lock();
    tl_advance(d, fakegpu_now_ns());
    int n = 0;
    for (int i = 0; i < TL_CTX && n < max; i++)
        if (tl->ctx[i].used && (int)tl->ctx[i].dev == d) {
            clients[n] = tl->ctx[i].client;
            waited[n++] = tl->ctx[i].waited;
        }
    pthread_mutex_unlock(&tl->mu);
    return n;
}

EXPORT int fakegpu_timeline_clients(int d, uint32_t *clients, uint64_t *done, int max, uint64_t *now) {
    pthread_once(&once, setup);
    if (!tl || d < 0 || d >= MAX_DEV) return -1;
    tl_lock();
    uint64_t t = fakegpu_now_ns();
    tl_advance(d, t);
    int n = 0;
    for (int i = 0; i < TL_CTX && n < max; i++)
        if (tl->ctx[i].used && (int)tl->ctx[i].dev == d) {
            clients[n] = tl->ctx[i].client;
            done[n++] = tl->ctx[i].done;
        }
    pthread_mutex_unlock(&tl->mu);
    if (now) *now = t;
    return n;
}


static void sleep_until(uint64_t t) {
    uint64_t now = fakegpu_now_ns();
    if (t <= now) return;
    struct timespec ts = {(time_t)((t - now) / 1000000000ULL), (long)((t - now) % 1000000000ULL)};
    nanosleep(&ts, NULL);
}

static CUresult run_on(int d, uint64_t ns) {
    if (d < 0) return ERR_INVALID_CONTEXT;
    if (tl) { /* a full launch queue blocks */
        pthread_mutex_lock(&mu);
        devs[d].busy_total += ns;
        devs[d].launches++;
        pthread_mutex_unlock(&mu);
        if (tl_submit(d, ns) > queue_ns) tl_wait(d, queue_ns);
        return 0;
    }
    pthread_mutex_lock(&mu);
    uint64_t now = fakegpu_now_ns();
    uint64_t start = devs[d].busy_until > now ? devs[d].busy_until : now;
    devs[d].busy_until = start + ns;
    devs[d].busy_total += ns;
    devs[d].launches++;
    uint64_t until = devs[d].busy_until;
    pthread_mutex_unlock(&mu);
    if (until > now + queue_ns) sleep_until(until - queue_ns); /* a full launch queue blocks */
    return 0;
}

static CUresult run(uint64_t ns) { return run_on(cur_dev(), ns); }

EXPORT CUfunction fakegpu_make_function(uint64_t duration_ns) {
    struct func *f = malloc(sizeof(*f));
    f->ns = duration_ns;
    return (CUfunction)f;
}
EXPORT CUgraphExec fakegpu_make_graph(unsigned int kernels, uint64_t duration_ns) {
    struct graph *g = calloc(1, sizeof(*g));
    g->ns = (uint64_t)kernels * duration_ns;
    return (CUgraphExec)g;
}
/* Device time spent on finished or running work up to now. */
EXPORT uint64_t fakegpu_busy_ns(int d) {
    if (tl) return devs[d].busy_total - tl_pending(d, NULL); /* this process's own work */
    pthread_mutex_lock(&mu);
    uint64_t now = fakegpu_now_ns(), pending = devs[d].busy_until > now ? devs[d].busy_until - now : 0;
    uint64_t r = devs[d].busy_total - pending;
    pthread_mutex_unlock(&mu);
    return r;
}
/* Device time of all work submitted so far, finished or not. */
EXPORT uint64_t fakegpu_submitted_ns(int d) {
    pthread_mutex_lock(&mu);
    uint64_t r = devs[d].busy_total;
    pthread_mutex_unlock(&mu);
    return r;
}
/* Callbacks run from the fake driver's destructor, i.e. after libgpugov's (a preloaded
 * library is finalised before the libraries it does not depend on): what a program's late
 * destructors or still-running threads do at exit. */
static struct { void (*fn)(void *); void *arg; } at_exit[16];
static int n_at_exit;
EXPORT void fakegpu_at_exit(void (*fn)(void *), void *arg) {
    if (n_at_exit < 16) { at_exit[n_at_exit].fn = fn; at_exit[n_at_exit].arg = arg; n_at_exit++; }
}
__attribute__((destructor)) static void run_at_exit(void) {
    for (int i = 0; i < n_at_exit; i++) at_exit[i].fn(at_exit[i].arg);
}
EXPORT uint64_t fakegpu_launches(int d) { return devs[d].launches; }
EXPORT uint64_t fakegpu_used(int d) { pthread_once(&once, setup); return devs[d].used; }
EXPORT uint64_t fakegpu_total(int d) { pthread_once(&once, setup); return devs[d].total; }

#define KARGS CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
              unsigned int by, unsigned int bz, unsigned int shm, CUstream s
#define UNUSED_K (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)s
/* A kernel's duration: its function's, or for a data-dependent launch (params[0] points to a
 * uint64_t 1) the uint64_t nanoseconds params[1] points to. */
static uint64_t kernel_ns(CUfunction f, void **p) {
    if (p && p[0] && *(uint64_t *)p[0] == 1 && p[1]) return *(uint64_t *)p[1];
    return ((struct func *)f)->ns;
}
EXPORT CUresult cuLaunchKernel(KARGS, void **p, void **e) { UNUSED_K; (void)e; ENTER(); return f ? run_on(stream_dev(s), kernel_ns(f, p)) : 1; }
EXPORT CUresult cuLaunchKernel_ptsz(KARGS, void **p, void **e) { UNUSED_K; (void)e; ENTER(); return f ? run_on(stream_dev(s), kernel_ns(f, p)) : 1; }
/* Legacy launch entry points (deprecated in the driver but still exported). */
EXPORT CUresult cuLaunch(CUfunction f) { ENTER(); return f ? run(((struct func *)f)->ns) : 1; }
EXPORT CUresult cuLaunchGrid(CUfunction f, int w, int h) { (void)w; (void)h; ENTER(); return f ? run(((struct func *)f)->ns) : 1; }
EXPORT CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s) { (void)w; (void)h; (void)s; ENTER(); return f ? run(((struct func *)f)->ns) : 1; }
EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *l, unsigned int n, unsigned int fl) {
    (void)fl; ENTER();
    if (!l || !n) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < n; i++) if (!l[i].function) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < n; i++) run_on(stream_dev(l[i].hStream), ((struct func *)l[i].function)->ns);
    return 0;
}
EXPORT CUresult cuLaunchCooperativeKernel(KARGS, void **p) { UNUSED_K; (void)p; ENTER(); return f ? run_on(stream_dev(s), ((struct func *)f)->ns) : 1; }
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(KARGS, void **p) { UNUSED_K; (void)p; ENTER(); return f ? run_on(stream_dev(s), ((struct func *)f)->ns) : 1; }
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { (void)e; ENTER(); return f ? run_on(stream_dev(c ? c->hStream : NULL), kernel_ns(f, p)) : 1; }
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { (void)e; ENTER(); return f ? run_on(stream_dev(c ? c->hStream : NULL), kernel_ns(f, p)) : 1; }
static void exec_memory(struct graph *g);
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) { ENTER(); if (!g) return 1; exec_memory((struct graph *)g); return run_on(stream_dev(s), ((struct graph *)g)->ns); }
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { ENTER(); if (!g) return 1; exec_memory((struct graph *)g); return run_on(stream_dev(s), ((struct graph *)g)->ns); }
static void sync_dev(int d) { if (tl) tl_wait(d, 0); else sleep_until(devs[d].busy_until); }
EXPORT CUresult cuCtxSynchronize(void) { ENTER(); int d = cur_dev(); if (d < 0) return ERR_INVALID_CONTEXT; sync_dev(d); return 0; }
EXPORT CUresult cuStreamSynchronize(CUstream s) { ENTER(); int d = stream_dev(s); if (d < 0) return ERR_INVALID_CONTEXT; sync_dev(d); return 0; }
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int f) {
    (void)f; ENTER();
    if (cur_dev() < 0) return ERR_INVALID_CONTEXT;
    struct fstream *x = calloc(1, sizeof(*x));
    x->dev = cur_dev();
    *s = (CUstream)x;
    return 0;
}
EXPORT CUresult cuStreamGetDevice(CUstream s, CUdevice *d) { ENTER(); if (!d || stream_dev(s) < 0) return ERR_INVALID_CONTEXT; *d = ordinal(stream_dev(s)); return 0; }
EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *c) { ENTER(); if (!c || stream_dev(s) < 0) return ERR_INVALID_CONTEXT; *c = (CUcontext)&primary[stream_dev(s)]; return 0; }
static __thread struct ctx *ctx_stack[16];
static __thread int ctx_depth;
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) { ENTER(); if (ctx_depth >= 16) return CUDA_ERROR_INVALID_VALUE; ctx_stack[ctx_depth++] = current; current = (struct ctx *)c; return 0; }
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c) { ENTER(); if (!ctx_depth) return ERR_INVALID_CONTEXT; if (c) *c = (CUcontext)current; current = ctx_stack[--ctx_depth]; return 0; }
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { ENTER(); free(s); return 0; }

EXPORT CUresult cuEventCreate(CUevent *e, unsigned int f) {
    (void)f; ENTER();
    struct ev *v = calloc(1, sizeof(*v));
    v->dev = cur_dev();
    *e = (CUevent)v;
    return 0;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    ENTER();
    struct ev *v = (struct ev *)e;
    int d = stream_dev(s);
    if (!v || d < 0) return ERR_INVALID_HANDLE;
    if (v->dev != d) return ERR_INVALID_HANDLE; /* an event and its stream share a context */
    if (tl) { /* completes when this context's work queued so far is done */
        tl_lock();
        uint64_t now = fakegpu_now_ns();
        tl_advance(d, now);
        struct tl_ctx *c = tl_mine(d);
        v->marker = c ? c->submitted : 0;
        v->resolved = !c || c->done >= c->submitted;
        v->t = now;
        v->recorded = 1;
        pthread_mutex_unlock(&tl->mu);
        return 0;
    }
    pthread_mutex_lock(&mu);
    uint64_t now = fakegpu_now_ns();
    v->t = devs[d].busy_until > now ? devs[d].busy_until : now;
    v->recorded = 1;
    pthread_mutex_unlock(&mu);
    return 0;
}
/* Shared timeline: 1 once the event's context executed its work before the event (its
 * completion time then in v->t). */
static int tl_event_done(struct ev *v) {
    if (v->resolved) return 1;
    tl_lock();
    tl_advance(v->dev, fakegpu_now_ns());
    struct tl_ctx *c = tl_mine(v->dev);
    if (c && c->done >= v->marker) {
        v->t = tl_when(c, v->marker);
        v->resolved = 1;
    }
    pthread_mutex_unlock(&tl->mu);
    return v->resolved;
}
EXPORT CUresult cuEventQuery(CUevent e) {
    ENTER();
    struct ev *v = (struct ev *)e;
    if (!v->recorded) return CUDA_ERROR_NOT_READY;
    if (tl) return tl_event_done(v) ? 0 : CUDA_ERROR_NOT_READY;
    return fakegpu_now_ns() >= v->t ? 0 : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuEventSynchronize(CUevent e) {
    ENTER();
    struct ev *v = (struct ev *)e;
    if (!tl) { sleep_until(v->t); return 0; }
    while (v->recorded && !tl_event_done(v)) { struct timespec ts = {0, 50000}; nanosleep(&ts, NULL); }
    return 0;
}
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    ENTER();
    struct ev *x = (struct ev *)a, *y = (struct ev *)b;
    if (!x->recorded || !y->recorded) return CUDA_ERROR_NOT_READY;
    if (tl && (!tl_event_done(x) || !tl_event_done(y))) return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(y->t - x->t)) / 1e6);
    return 0;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) { ENTER(); free(e); return 0; }

/* ---- context limits: the malloc heap and printf FIFO are device memory the driver
 * allocates at the size the program asks; the stack is per thread x resident threads ---- */

/* Each context has its own limits (and the device memory behind them). */
static uint64_t limit_bytes(int which, uint64_t v) { return which == 0 ? v * 132 * 2048 : v; }
EXPORT CUresult cuCtxSetLimit(int which, size_t value) {
    ENTER();
    int d = cur_dev();
    if (d < 0) return ERR_INVALID_CONTEXT;
    if (which < 0 || which > 2) return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t now_b = limit_bytes(which, current->limits[which]), want;
    if (__builtin_mul_overflow((uint64_t)value, which == 0 ? 132 * 2048ULL : 1ULL, &want)) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    uint64_t base = devs[d].used - now_b;
    if (want > devs[d].total - base) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    devs[d].used = base + want;
    current->limits[which] = value;
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuCtxGetLimit(size_t *v, int which) {
    ENTER();
    int d = cur_dev();
    if (d < 0) return ERR_INVALID_CONTEXT;
    if (!v || which < 0 || which > 2) return CUDA_ERROR_INVALID_VALUE;
    *v = (size_t)current->limits[which];
    return 0;
}
static void drop_limits(struct ctx *x) {
    pthread_mutex_lock(&mu);
    for (int w = 0; w < 3; w++) { devs[x->dev].used -= limit_bytes(w, x->limits[w]); x->limits[w] = 0; }
    pthread_mutex_unlock(&mu);
}

/* ---- graphs with memory nodes: a memory node's bytes are device memory from the moment
 * the graph holds them (the fake reserves at node creation; the driver at instantiation or
 * first launch). They return when the graph is destroyed, unless an executable graph was
 * instantiated from it: then the device's graph memory pool keeps them reserved until
 * cuDeviceGraphMemTrim, as the driver's pool does with what executable graphs allocated ---- */

struct fgraph { int dev; uint64_t bytes; int instantiated; };
#define MAX_STREAMS 64
static struct { CUstream s; struct fgraph *g; } captures[MAX_STREAMS];
static int capturing(CUstream s) {
    pthread_mutex_lock(&mu);
    int r = 0;
    for (int i = 0; i < MAX_STREAMS && !r; i++) r = s && captures[i].s == s;
    pthread_mutex_unlock(&mu);
    return r;
}
static CUresult graph_reserve(struct fgraph *g, uint64_t n, CUdeviceptr *p) {
    CUresult rc = new_alloc(p, n, g->dev, 3, 1);
    if (rc == 0) {
        g->bytes += n;
        pthread_mutex_lock(&mu);
        find_alloc(*p)->graph = g;
        pthread_mutex_unlock(&mu);
    }
    return rc;
}
static CUresult capture_alloc(CUdeviceptr *p, size_t n, CUstream s) {
    struct fgraph *g = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_STREAMS; i++) if (captures[i].s == s) g = captures[i].g;
    pthread_mutex_unlock(&mu);
    if (!g || !p || !n) return CUDA_ERROR_INVALID_VALUE;
    return graph_reserve(g, n, p);
}
EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned int f) {
    (void)f; ENTER();
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    struct fgraph *x = calloc(1, sizeof(*x));
    x->dev = cur_dev();
    *g = (CUgraph)x;
    return 0;
}
EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *prm) {
    (void)deps; (void)ndeps; ENTER();
    struct fgraph *x = (struct fgraph *)g;
    if (!node || !x || !prm || !prm->bytesize || prm->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || phys(prm->poolProps.location.id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    x->dev = phys(prm->poolProps.location.id);
    CUresult rc = graph_reserve(x, prm->bytesize, &prm->dptr);
    if (rc == 0) *node = (CUgraphNode)(uintptr_t)prm->dptr;
    return rc;
}
static CUresult add_node(CUgraphNode *node, CUgraph g, CUgraphNodeParams *prm) {
    if (!prm) return CUDA_ERROR_INVALID_VALUE;
    if (prm->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) { /* other node kinds take no memory here */
        if (node) *node = (CUgraphNode)prm;
        return 0;
    }
    struct fgraph *x = (struct fgraph *)g;
    CUDA_MEM_ALLOC_NODE_PARAMS *a = &prm->alloc;
    if (!node || !x || !a->bytesize || a->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || phys(a->poolProps.location.id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    x->dev = phys(a->poolProps.location.id);
    CUresult rc = graph_reserve(x, a->bytesize, &a->dptr);
    if (rc == 0) *node = (CUgraphNode)(uintptr_t)a->dptr;
    return rc;
}
/* The fake runs memset and memory-free nodes when they are added (it executes no graphs):
 * a freed graph allocation goes back to the fake's allocator unzeroed, for reuse. */
EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                     const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c) {
    (void)g; (void)deps; (void)n; (void)c; ENTER();
    if (!node || !p || p->elementSize != 1 || p->height != 1) return CUDA_ERROR_INVALID_VALUE;
    unsigned char *m = resolve(p->dst, p->width);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    memset(m, (int)p->value, p->width);
    *node = (CUgraphNode)(uintptr_t)p->dst;
    return 0;
}
EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUdeviceptr p) {
    (void)g; (void)deps; (void)n; ENTER();
    if (!node) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct alloc *a = find_alloc(p);
    int ok = a && a->base == p && a->kind == 3;
    if (ok) { a->live = 0; a->graph = NULL; devs[a->dev].used -= a->size; }
    pthread_mutex_unlock(&mu);
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    *node = (CUgraphNode)(uintptr_t)p;
    return 0;
}
EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *prm) {
    (void)deps; (void)n; ENTER();
    return add_node(node, g, prm);
}
EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const void *edges, size_t n,
                                  CUgraphNodeParams *prm) {
    (void)deps; (void)edges; (void)n; ENTER();
    return add_node(node, g, prm);
}
/* A clone's memory nodes are allocations of their own. */
EXPORT CUresult cuGraphClone(CUgraph *out, CUgraph g) {
    ENTER();
    struct fgraph *x = (struct fgraph *)g;
    if (!out || !x) return CUDA_ERROR_INVALID_VALUE;
    struct fgraph *c = calloc(1, sizeof(*c));
    c->dev = x->dev;
    CUdeviceptr p;
    if (x->bytes && graph_reserve(c, x->bytes, &p) != 0) { free(c); return CUDA_ERROR_OUT_OF_MEMORY; }
    *out = (CUgraph)c;
    return 0;
}
/* Graph memory the device holds (the fake backs memory nodes while their graph lives). */
EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice d, int attr, void *v) {
    ENTER();
    int p = phys(d);
    if (p < 0 || !v || attr < 0 || attr > 3) return CUDA_ERROR_INVALID_VALUE;
    uint64_t sum = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nallocs; i++) if (allocs[i].live && allocs[i].kind == 3 && allocs[i].dev == p) sum += allocs[i].size;
    pthread_mutex_unlock(&mu);
    *(cuuint64_t *)v = sum;
    return 0;
}
/* Returns what the pool keeps for no (non-executable) graph, as the driver frees what no
 * running graph uses: an idle executable graph takes its memory again at its next launch. */
EXPORT CUresult cuDeviceGraphMemTrim(CUdevice d) {
    ENTER();
    int p = phys(d);
    if (p < 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].live && allocs[i].kind == 3 && !allocs[i].graph && allocs[i].dev == p) {
            allocs[i].live = 0;
            devs[p].used -= allocs[i].size;
        }
    pthread_mutex_unlock(&mu);
    return 0;
}
EXPORT CUresult cuGraphDestroy(CUgraph g) {
    ENTER();
    struct fgraph *x = (struct fgraph *)g;
    if (!x) return ERR_INVALID_HANDLE;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nallocs; i++) /* kind 3: graph memory; freed with its graph or kept by the pool */
        if (allocs[i].live && allocs[i].kind == 3 && allocs[i].graph == x) {
            allocs[i].graph = NULL;
            if (x->instantiated) continue;
            allocs[i].live = 0;
            devs[allocs[i].dev].used -= allocs[i].size;
        }
    pthread_mutex_unlock(&mu);
    free(x);
    return 0;
}
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long f) {
    (void)f; ENTER();
    if (!e || !g) return CUDA_ERROR_INVALID_VALUE;
    ((struct fgraph *)g)->instantiated = 1;
    struct graph *x = calloc(1, sizeof(*x)); /* an executable graph of no kernels */
    x->bytes = ((struct fgraph *)g)->bytes;
    x->dev = ((struct fgraph *)g)->dev;
    *e = (CUgraphExec)x;
    return 0;
}
EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) { ENTER(); free(e); return 0; }
/* A launch of an executable graph with memory nodes takes them from the device's graph pool,
 * which grows if a trim returned them (cuDeviceGraphMemTrim frees what no graph is running). */
static void exec_memory(struct graph *g) {
    if (!g->bytes) return;
    pthread_mutex_lock(&mu);
    uint64_t held = 0;
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].live && allocs[i].kind == 3 && allocs[i].dev == g->dev) held += allocs[i].size;
    pthread_mutex_unlock(&mu);
    CUdeviceptr p;
    if (held < g->bytes) new_alloc(&p, g->bytes - held, g->dev, 3, 1); /* pool-held: no graph */
}
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    (void)mode; ENTER();
    if (!s || cur_dev() < 0) return CUDA_ERROR_INVALID_VALUE; /* the legacy stream cannot capture */
    struct fgraph *x = calloc(1, sizeof(*x));
    x->dev = cur_dev();
    pthread_mutex_lock(&mu);
    int ok = 0;
    for (int i = 0; i < MAX_STREAMS && !ok; i++) if (!captures[i].s) { captures[i].s = s; captures[i].g = x; ok = 1; }
    pthread_mutex_unlock(&mu);
    if (!ok) { free(x); return CUDA_ERROR_OUT_OF_MEMORY; }
    return 0;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    ENTER();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (s && captures[i].s == s) { if (g) *g = (CUgraph)captures[i].g; captures[i].s = NULL; rc = 0; break; }
    pthread_mutex_unlock(&mu);
    return rc;
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) {
    ENTER();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    *status = capturing(s) ? 1 : 0; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
    return 0;
}

/* ---- legacy (pre-3.2, 32-bit) exports the driver still has: they allocate like the
 * current ones, so a library that does not cover them is bypassed ---- */
typedef struct { unsigned int Width, Height; int Format; unsigned int NumChannels; } ARRAY_DESC_V1;
EXPORT CUresult cuArrayCreate(CUarray *a, const ARRAY_DESC_V1 *d) {
    ENTER();
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {d->Width, d->Height, 0, d->Format, d->NumChannels, 0};
    return new_array(cur_dev(), &d3, (struct farr **)a);
}
EXPORT CUresult cuMemAlloc(unsigned int *p, unsigned int n) {
    ENTER();
    CUdeviceptr q = 0;
    CUresult rc = new_alloc(&q, n, cur_dev(), 0, 1);
    if (rc == 0 && p) *p = (unsigned int)q; /* truncated: why the legacy API is unusable today */
    return rc;
}
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned int f) { (void)f; ENTER(); return import_token(p, h.reserved); }

/* ---- cuGetProcAddress: versioned names from a static table, never through dlsym ---- */

#define TABLE(X) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) \
    X(cuDeviceGetAttribute) X(cuDeviceTotalMem_v2) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) \
    X(cuCtxCreate_v2) X(cuCtxDestroy_v2) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) \
    X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemFree_v2) X(cuMemGetInfo_v2) \
    X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemGetAddressRange_v2) \
    X(cuMemAllocHost_v2) X(cuMemFreeHost) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync) \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuDeviceGetMemPool) \
    X(cuDeviceGetDefaultMemPool) X(cuMemPoolCreate) X(cuMemPoolTrimTo) X(cuMemPoolDestroy) X(cuMemPoolGetAttribute) \
    X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy) \
    X(cuMemCreate) X(cuMemRelease) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) \
    X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle) \
    X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle) X(cuMemRetainAllocationHandle) \
    X(cuMemGetAllocationPropertiesFromHandle) X(cuArray3DGetDescriptor_v2) X(cuMipmappedArrayGetLevel) X(cuMemcpy3D_v2) \
    X(cuMemPoolExportPointer) X(cuMemPoolImportPointer) X(cuLaunchKernel) X(cuLaunchKernel_ptsz) \
    X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) \
    X(cuGraphLaunch) X(cuGraphLaunch_ptsz) X(cuStreamCreate) X(cuStreamSynchronize) X(cuStreamDestroy_v2) \
    X(cuStreamGetDevice) X(cuStreamGetCtx) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) \
    X(cuMemPrefetchAsync) X(cuMemPrefetchAsync_v2) X(cuMemAdvise) X(cuMemAdvise_v2) \
    X(cuGraphAddMemsetNode) X(cuGraphAddMemFreeNode) X(cuDevicePrimaryCtxReset_v2) \
    X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy_v2) \
    X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2) X(cuCtxSetLimit) \
    X(cuCtxGetLimit) X(cuGraphCreate) X(cuGraphAddMemAllocNode) X(cuGraphDestroy) X(cuStreamBeginCapture_v2) \
    X(cuStreamEndCapture) X(cuStreamIsCapturing) X(cuLaunch) X(cuLaunchGrid) X(cuLaunchGridAsync) \
    X(cuLaunchCooperativeKernelMultiDevice) X(cuArrayCreate) X(cuMemAlloc) X(cuIpcOpenMemHandle) \
    X(cuGraphAddNode) X(cuGraphAddNode_v2) X(cuGraphClone) X(cuDeviceGetGraphMemAttribute) X(cuDeviceGraphMemTrim) \
    X(cuGraphInstantiateWithFlags) X(cuGraphExecDestroy)

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st);
#define ROW(n) {#n, (void *)n},
static const struct { const char *name; void *fn; } table[] = {TABLE(ROW)};

static void *lookup(const char *n) {
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) if (strcmp(table[i].name, n) == 0) return table[i].fn;
    return NULL;
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st) {
    ENTER();
    char name[160];
    void *f = NULL;
    int v2_since = strcmp(sym, "cuGetProcAddress") == 0 ? 12000 : strcmp(sym, "cuIpcOpenMemHandle") == 0 ? 11000
                 : strcmp(sym, "cuGraphAddNode") == 0 ? 12030 : 3020;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        snprintf(name, sizeof(name), "%s_ptsz", sym);
        f = lookup(name);
    }
    if (!f && ver >= v2_since) { snprintf(name, sizeof(name), "%s_v2", sym); f = lookup(name); }
    if (!f) f = lookup(sym);
    *pfn = f;
    if (st) *st = f ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return f ? 0 : CUDA_ERROR_NOT_FOUND;
}
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags) {
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
