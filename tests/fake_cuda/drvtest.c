/* Test client that drives the (fake) driver the way real programs do.
 * usage: drvtest <direct|dlsym|procaddr|procaddr-ptsz> <command>...
 * Commands run in order; each prints one line "<command> rc=<code> [details]".
 *   ctx:D alloc:B pitch:W:H managed:B async:B poolalloc:B freeasync:I trim:K
 *   array:W:H array3d:W:H:D mipmap:W:H:L vmm:B ipc:B free:I fill:I:V check:I
 *   meminfo totalmem nvml launch:N:US launchex:N:US coop:N:US graph:N:K:US
 *   util:KIND:US:SECONDS fillup:B barrier:PATH sleep:MS
 *   vmap:I (map VMM handle I) vretain:I (retain the handle of mapping I) vexport:I:PATH
 *   vimport:PATH ipcput:I:PATH ipcopen:PATH pexport:I:PATH pimport:PATH afill:I:V acheck:I
 *   poolalloc:B:DEV (the explicit pool is created on DEV, default 0) pooldestroy (the explicit pool) xfree:I xfreeasync:I (cuMemFree / cuMemFreeAsync whatever I is)
 *   vmany:N:B:V (N handles of B bytes mapped back to back in one range, filled with V, released;
 *   free unmaps the whole range with one cuMemUnmap) arrayfmt:W:H:FORMAT
 *   legacy:array|alloc|ipc (the pre-3.2 / pre-11.0 exports) setlimit:WHICH:BYTES (cuCtxSetLimit)
 *   launchv:launch|grid|gridasync|multi:N:US graphmem:B (a graph with one memory node; free
 *   destroys it) capture:B (cuMemAllocAsync captured into a graph) pattern:NAME:PCT-free:SECONDS
 *   threads:N:ITERS (N threads allocating, freeing and launching) exec:PROGRAM:ARG
 *   fork:MS (a child that sleeps MS milliseconds and exits; prints its pid)
 *   graphnode:B / graphnode1:B (a graph with one memory node added with cuGraphAddNode_v2 /
 *   the pre-12.3 cuGraphAddNode) graphclone:I (clone graph I) graphtrim (cuDeviceGraphMemTrim)
 *   graphexec:I (instantiate graph I, launch the executable graph, keep it; free destroys it)
 *   graphrun:I (launch executable graph I again)
 *   burst:N:US (N launches, then exit without synchronising: prints the device time submitted)
 *   pattern names: uniform random argdep rotating periodic16 loop4 multistream multidevice first
 *   gfill:I:V (fill graph I's memory node allocation) gfree:I (add a memory-free node for it)
 *   newctx:D (a new context on device D, current) ctxdestroy (destroy it)
 *   vsym:dlvsym|libc:B (cuMemAlloc_v2 looked up around gpugov's dlsym)
 *   prefetch:I:D / advise:I:D (managed handle I to device D: prefetch / preferred location)
 *   nvmlx:I (NVML device I: memory total, processes listed) nvmlproc:I:B (the fake NVML lists
 *   this process on device I with B bytes)
 *   stream (a stream of the current context) asyncon:B:S (cuMemAllocAsync on stream S)
 *   exitfree:I / exitalloc:B (free handle I / allocate B bytes after the library's destructor)
 *   load:US:SECONDS[:ON_MS:OFF_MS] (US-microsecond kernels flat out, in on/off phases if given)
 * free:I releases whatever I is (cuMemFree, cuMemFreeAsync, cuArrayDestroy, cuMemRelease,
 * cuMemUnmap for a mapping, cuIpcCloseMemHandle); exported handles go through files.
 * Sizes accept Ki/Mi/Gi suffixes. */
#define _GNU_SOURCE /* dlvsym */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../native/cuda_types.h"

#define API(X) \
    X(cuInit, (unsigned int)) X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice)) \
    X(cuCtxSetCurrent, (CUcontext)) X(cuMemAlloc_v2, (CUdeviceptr *, size_t)) \
    X(cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int)) \
    X(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int)) X(cuMemFree_v2, (CUdeviceptr)) \
    X(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream)) \
    X(cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
    X(cuMemFreeAsync, (CUdeviceptr, CUstream)) X(cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *)) \
    X(cuMemPoolTrimTo, (CUmemoryPool, size_t)) X(cuDeviceGetMemPool, (CUmemoryPool *, CUdevice)) \
    X(cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *)) \
    X(cuArray3DCreate_v2, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *)) X(cuArrayDestroy, (CUarray)) \
    X(cuMipmappedArrayCreate, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int)) \
    X(cuMipmappedArrayDestroy, (CUmipmappedArray)) \
    X(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
    X(cuMemRelease, (CUmemGenericAllocationHandle)) X(cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr)) \
    X(cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned int)) \
    X(cuIpcCloseMemHandle, (CUdeviceptr)) X(cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t)) \
    X(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t)) X(cuMemGetInfo_v2, (size_t *, size_t *)) \
    X(cuDeviceTotalMem_v2, (size_t *, CUdevice)) \
    X(cuLaunchKernel, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **)) \
    X(cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **)) \
    X(cuLaunchCooperativeKernel, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **)) \
    X(cuGraphLaunch, (CUgraphExec, CUstream)) X(cuCtxSynchronize, (void)) \
    X(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)) \
    X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
    X(cuMemUnmap, (CUdeviceptr, size_t)) X(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)) \
    X(cuMemExportToShareableHandle, (void *, CUmemGenericAllocationHandle, int, unsigned long long)) \
    X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, int)) \
    X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *)) \
    X(cuMemPoolExportPointer, (CUmemPoolPtrExportData *, CUdeviceptr)) \
    X(cuMemPoolImportPointer, (CUdeviceptr *, CUmemoryPool, CUmemPoolPtrExportData *)) \
    X(cuArray3DGetDescriptor_v2, (CUDA_ARRAY3D_DESCRIPTOR *, CUarray)) \
    X(cuMipmappedArrayGetLevel, (CUarray *, CUmipmappedArray, unsigned int)) \
    X(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *)) X(cuMemPoolDestroy, (CUmemoryPool)) \
    X(cuCtxSetLimit, (int, size_t)) X(cuGraphCreate, (CUgraph *, unsigned int)) \
    X(cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *)) \
    X(cuGraphDestroy, (CUgraph)) X(cuStreamCreate, (CUstream *, unsigned int)) \
    X(cuStreamBeginCapture_v2, (CUstream, int)) X(cuStreamEndCapture, (CUstream, CUgraph *)) \
    X(cuGraphAddNode_v2, (CUgraphNode *, CUgraph, const CUgraphNode *, const void *, size_t, CUgraphNodeParams *)) \
    X(cuGraphClone, (CUgraph *, CUgraph)) X(cuDeviceGraphMemTrim, (CUdevice)) \
    X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long)) \
    X(cuGraphExecDestroy, (CUgraphExec)) X(cuStreamSynchronize, (CUstream)) \
    X(cuCtxCreate_v2, (CUcontext *, unsigned int, CUdevice)) X(cuCtxDestroy_v2, (CUcontext)) \
    X(cuLaunchCooperativeKernelMultiDevice, (CUDA_LAUNCH_PARAMS *, unsigned int, unsigned int))

#define FIELD(name, args) CUresult(*name) args;
static struct { API(FIELD) } api;

/* direct: addresses bound by the dynamic linker (the program is linked with -lcuda) */
#define DECL(name, args) CUresult name args;
API(DECL)
static void load_direct(void) {
#define DIRECT(name, args) api.name = name;
    API(DIRECT)
}

static void *lib;
static const char *mode;
static CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static void load_dlsym(void) {
#define VIA_DLSYM(name, args) *(void **)&api.name = dlsym(lib, #name);
    API(VIA_DLSYM)
}

/* procaddr: only cuGetProcAddress_v2 comes from dlsym, like the CUDA runtime >= 12 */
static CUresult resolve_rc; /* first failure of cuGetProcAddress, reported as init's rc */
static void load_procaddr(unsigned long long flags) {
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    *(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
    void *again = NULL; /* the runtime also re-resolves cuGetProcAddress through itself */
    gpa("cuGetProcAddress", &again, 12080, 0, NULL);
    if (again) *(void **)&gpa = again;
    gpa_fn = gpa;
    char base[128];
#define VIA_GPA(name, args)                                                     \
    do {                                                                        \
        snprintf(base, sizeof(base), "%s", #name);                             \
        char *v = strstr(base, "_v2");                                          \
        if (v) *v = '\0';                                                       \
        CUresult r_ = gpa(base, (void **)&api.name, 12080, flags, NULL);         \
        if (r_ && !resolve_rc) resolve_rc = r_;                                \
    } while (0);
    API(VIA_GPA)
}

/* An entry point outside the API table, reached the way this mode reaches the driver. */
static void *entry(const char *name, int version) {
    if (strcmp(mode, "direct") == 0) return dlsym(RTLD_DEFAULT, name); /* what the linker binds */
    if (strcmp(mode, "dlsym") == 0) return dlsym(lib, name);
    void *f = NULL;
    return gpa_fn && gpa_fn(name, &f, version, 0, NULL) == 0 ? f : NULL;
}

static uint64_t (*busy_ns)(int);
static uint64_t (*submitted_ns)(int);
static uint64_t (*now_ns)(void);
static CUfunction (*make_function)(uint64_t);
static CUgraphExec (*make_graph)(unsigned int, uint64_t);

static uint64_t parse_size(const char *s) {
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    if (strncmp(end, "Ki", 2) == 0) v <<= 10;
    else if (strncmp(end, "Mi", 2) == 0) v <<= 20;
    else if (strncmp(end, "Gi", 2) == 0) v <<= 30;
    return v;
}

enum { H_LINEAR, H_ASYNC, H_ARRAY, H_MIPMAP, H_VMM, H_IPC, H_VMAP, H_PIMPORT, H_VRANGE, H_GRAPH, H_EXEC };
struct handle { int kind; uint64_t v; uint64_t size; uint64_t chunk; uint64_t aux; };
static struct handle handles[4096];
static int nhandles;
static CUmemoryPool explicit_pool;
static CUstream streams[64];
static int nstreams;
static CUcontext ctx;

static int add(int kind, uint64_t v, uint64_t size) {
    handles[nhandles] = (struct handle){kind, v, size, size, 0};
    return nhandles++;
}

static CUresult release(int i) {
    struct handle *h = &handles[i];
    switch (h->kind) {
    case H_LINEAR: return api.cuMemFree_v2(h->v);
    case H_ASYNC: return api.cuMemFreeAsync(h->v, NULL);
    case H_ARRAY: return api.cuArrayDestroy((CUarray)(uintptr_t)h->v);
    case H_MIPMAP: return api.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h->v);
    case H_VMM: return api.cuMemRelease(h->v);
    case H_VMAP: case H_VRANGE: return api.cuMemUnmap(h->v, h->size);
    case H_GRAPH: return api.cuGraphDestroy((CUgraph)(uintptr_t)h->v);
    case H_EXEC: return api.cuGraphExecDestroy((CUgraphExec)(uintptr_t)h->v);
    case H_PIMPORT: return api.cuMemFree_v2(h->v);
    default: return api.cuIpcCloseMemHandle(h->v);
    }
}

static void launch(const char *kind, CUfunction f, CUgraphExec g) {
    CUlaunchConfig cfg = {1, 1, 1, 1, 1, 1, 0, NULL, NULL, 0};
    if (strcmp(kind, "kernel") == 0) api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    else if (strcmp(kind, "ex") == 0) api.cuLaunchKernelEx(&cfg, f, NULL, NULL);
    else if (strcmp(kind, "coop") == 0) api.cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL);
    else api.cuGraphLaunch(g, NULL);
}

/* Launches one of the throttle accuracy patterns for SECONDS (after 0.3 s of warm-up, except
 * "first", measured from the first launch of the process) and returns the fraction of the
 * interval the device was busy with its launches. Patterns: uniform (one 500 us kernel),
 * random (one kernel, data-dependent 50 us - 1.05 ms), periodic16 (one kernel: 1 ms, and
 * 10 us every 16th launch), loop4 (four kernels of 2 ms, 100 us, 500 us, 50 us in turn),
 * first (100 ms kernels from the start of the process). */
static double pattern(const char *name, double seconds) {
    static uint64_t one = 1;
    uint64_t ns = 0;
    void *dd[2] = {&one, &ns}; /* a data-dependent kernel: duration ns */
    CUfunction f = make_function(500000), loop[4] = {make_function(2000000), make_function(100000),
                                                       make_function(500000), make_function(50000)};
    int first = strcmp(name, "first") == 0, multidev = strcmp(name, "multidevice") == 0;
    int dev = multidev ? 1 : 0; /* whose share is measured */
    CUstream st[2] = {NULL, NULL};
    CUDA_LAUNCH_PARAMS lp[2];
    if (strcmp(name, "multistream") == 0) {
        api.cuStreamCreate(&st[0], 0);
        api.cuStreamCreate(&st[1], 0);
    } else if (multidev) { /* one stream per device, the launch made from device 0's context */
        CUcontext c1 = NULL;
        api.cuStreamCreate(&st[0], 0);
        api.cuDevicePrimaryCtxRetain(&c1, 1);
        api.cuCtxSetCurrent(c1);
        api.cuStreamCreate(&st[1], 0);
        api.cuCtxSetCurrent(ctx);
        for (int i = 0; i < 2; i++) lp[i] = (CUDA_LAUNCH_PARAMS){make_function(1000000), 1, 1, 1, 1, 1, 1, 0, st[i], NULL};
    }
    uint64_t warm = now_ns() + (first ? 0 : 300000000ULL), n = 0, b0 = 0, t0 = 0, end = 0;
    unsigned int seed = 12345;
    for (int phase = first ? 1 : 0; phase < 2; phase++) {
        if (phase == 1) {
            b0 = busy_ns(dev);
            t0 = now_ns();
            end = t0 + (uint64_t)(seconds * 1e9);
        }
        while (now_ns() < (phase ? end : warm)) {
            if (strcmp(name, "uniform") == 0) {
                api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            } else if (strcmp(name, "random") == 0) {
                ns = 50000 + (uint64_t)(rand_r(&seed) % 1000) * 1000; /* 50 us .. 1 ms */
                api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, dd, NULL);
            } else if (strcmp(name, "argdep") == 0) {
                /* an argument decides: mostly 20 us, one launch in 8 (at random) 4 ms */
                ns = rand_r(&seed) % 8 == 0 ? 4000000 : 20000;
                api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, dd, NULL);
            } else if (strcmp(name, "rotating") == 0) {
                /* a new launch shape (grid) every launch, kernels whose cost the arguments set:
                 * cheap at a shape's first launch, 2 ms afterwards */
                ns = n % 2 == 0 ? 10000 : 2000000;
                api.cuLaunchKernel(f, (unsigned)(n / 2 + 1), 1, 1, 1, 1, 1, 0, NULL, dd, NULL);
            } else if (strcmp(name, "periodic16") == 0) {
                ns = n % 16 == 0 ? 10000 : 1000000; /* a short kernel every 16th launch */
                api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, dd, NULL);
            } else if (strcmp(name, "loop4") == 0) {
                api.cuLaunchKernel(loop[n % 4], 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            } else if (strcmp(name, "multistream") == 0) {
                api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st[n % 2], NULL, NULL);
            } else if (multidev) {
                api.cuLaunchCooperativeKernelMultiDevice(lp, 2, 0);
            } else { /* first: long kernels from the start */
                ns = 100000000;
                api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, dd, NULL);
            }
            n++;
        }
    }
    uint64_t b1 = busy_ns(dev), t1 = now_ns();
    return (double)(b1 - b0) / (double)(t1 - t0);
}

/* One stress thread: its own context binding, allocations, frees and launches. */
static void *worker(void *arg) {
    long iters = (long)arg, fails = 0;
    CUcontext c = NULL;
    if (api.cuDevicePrimaryCtxRetain(&c, 0) || api.cuCtxSetCurrent(c)) return (void *)1L;
    CUfunction f = make_function(1000);
    for (long i = 0; i < iters; i++) {
        CUdeviceptr p = 0, q = 0;
        if (api.cuMemAlloc_v2(&p, 64 << 10) == 0) fails += api.cuMemFree_v2(p) != 0;
        if (api.cuMemAllocAsync(&q, 64 << 10, NULL) == 0) fails += api.cuMemFreeAsync(q, NULL) != 0;
        fails += api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != 0;
    }
    return (void *)fails;
}

static void (*at_exit_fn)(void (*)(void *), void *);
static void exit_free(void *h) {
    CUresult rc = release((int)(intptr_t)h);
    fprintf(stderr, "drvtest: free at exit rc=%d\n", rc);
}
static void exit_alloc(void *b) {
    CUdeviceptr p = 0;
    CUresult rc = api.cuMemAlloc_v2(&p, (size_t)(uintptr_t)b);
    fprintf(stderr, "drvtest: alloc at exit rc=%d\n", rc);
}

static int run(char *cmd) {
    char *a[5] = {0};
    int n = 0;
    for (char *t = strtok(cmd, ":"); t && n < 5; t = strtok(NULL, ":")) a[n++] = t;
    if (!a[0]) return 2;
    CUresult rc = 0;
    if (strcmp(a[0], "ctx") == 0) {
        rc = api.cuDevicePrimaryCtxRetain(&ctx, atoi(a[1]));
        if (!rc) rc = api.cuCtxSetCurrent(ctx);
        printf("ctx rc=%d\n", rc);
    } else if (strcmp(a[0], "alloc") == 0 || strcmp(a[0], "managed") == 0 || strcmp(a[0], "async") == 0
               || strcmp(a[0], "poolalloc") == 0) {
        CUdeviceptr p = 0;
        uint64_t b = parse_size(a[1]);
        int kind = H_LINEAR;
        if (a[0][0] == 'a' && a[0][1] == 'l') rc = api.cuMemAlloc_v2(&p, b);
        else if (a[0][0] == 'm') rc = api.cuMemAllocManaged(&p, b, 1);
        else if (a[0][0] == 'a') { rc = api.cuMemAllocAsync(&p, b, NULL); kind = H_ASYNC; }
        else {
            if (!explicit_pool) {
                CUmemPoolProps props;
                memset(&props, 0, sizeof(props));
                props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                props.location.id = a[2] ? atoi(a[2]) : 0;
                api.cuMemPoolCreate(&explicit_pool, &props);
            }
            rc = api.cuMemAllocFromPoolAsync(&p, b, explicit_pool, NULL);
            kind = H_ASYNC;
        }
        printf("%s rc=%d handle=%d\n", a[0], rc, rc ? -1 : add(kind, p, b));
    } else if (strcmp(a[0], "pitch") == 0) {
        CUdeviceptr p = 0;
        size_t pitch = 0;
        rc = api.cuMemAllocPitch_v2(&p, &pitch, parse_size(a[1]), parse_size(a[2]), 4);
        printf("pitch rc=%d handle=%d pitch=%zu\n", rc, rc ? -1 : add(H_LINEAR, p, 0), pitch);
    } else if (strcmp(a[0], "freeasync") == 0 || strcmp(a[0], "free") == 0) {
        printf("%s rc=%d\n", a[0], release(atoi(a[1])));
    } else if (strcmp(a[0], "trim") == 0) {
        CUmemoryPool pool;
        api.cuDeviceGetMemPool(&pool, 0);
        rc = api.cuMemPoolTrimTo(pool, parse_size(a[1]));
        if (!rc && explicit_pool) rc = api.cuMemPoolTrimTo(explicit_pool, parse_size(a[1]));
        printf("trim rc=%d\n", rc);
    } else if (strcmp(a[0], "array") == 0) {
        CUDA_ARRAY_DESCRIPTOR d = {parse_size(a[1]), parse_size(a[2]), 0x20, 1};
        CUarray arr = NULL;
        rc = api.cuArrayCreate_v2(&arr, &d);
        printf("array rc=%d handle=%d\n", rc, rc ? -1 : add(H_ARRAY, (uintptr_t)arr, 0));
    } else if (strcmp(a[0], "array3d") == 0) {
        CUDA_ARRAY3D_DESCRIPTOR d = {parse_size(a[1]), parse_size(a[2]), parse_size(a[3]), 0x20, 1, 0};
        CUarray arr = NULL;
        rc = api.cuArray3DCreate_v2(&arr, &d);
        printf("array3d rc=%d handle=%d\n", rc, rc ? -1 : add(H_ARRAY, (uintptr_t)arr, 0));
    } else if (strcmp(a[0], "mipmap") == 0) {
        CUDA_ARRAY3D_DESCRIPTOR d = {parse_size(a[1]), parse_size(a[2]), 0, 0x20, 1, 0};
        CUmipmappedArray m = NULL;
        rc = api.cuMipmappedArrayCreate(&m, &d, (unsigned)atoi(a[3]));
        printf("mipmap rc=%d handle=%d\n", rc, rc ? -1 : add(H_MIPMAP, (uintptr_t)m, 0));
    } else if (strcmp(a[0], "vmm") == 0) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = 1;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CUmemGenericAllocationHandle h = 0;
        rc = api.cuMemCreate(&h, parse_size(a[1]), &prop, 0);
        printf("vmm rc=%d handle=%d\n", rc, rc ? -1 : add(H_VMM, h, parse_size(a[1])));
    } else if (strcmp(a[0], "ipc") == 0) {
        /* export a buffer allocated before the limit matters, then import it */
        int i = atoi(a[1]);
        CUipcMemHandle h;
        CUdeviceptr p = 0;
        api.cuIpcGetMemHandle(&h, handles[i].v);
        rc = api.cuIpcOpenMemHandle_v2(&p, h, 1);
        printf("ipc rc=%d handle=%d\n", rc, rc ? -1 : add(H_IPC, p, handles[i].size));
    } else if (strcmp(a[0], "vmap") == 0) {
        struct handle *h = &handles[atoi(a[1])];
        CUdeviceptr va = 0;
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        rc = api.cuMemAddressReserve(&va, h->size, 0, 0, 0);
        if (!rc) rc = api.cuMemMap(va, h->size, 0, h->v, 0);
        if (!rc) rc = api.cuMemSetAccess(va, h->size, &acc, 1);
        printf("vmap rc=%d handle=%d\n", rc, rc ? -1 : add(H_VMAP, va, h->size));
    } else if (strcmp(a[0], "vretain") == 0) {
        struct handle *h = &handles[atoi(a[1])];
        CUmemGenericAllocationHandle r = 0;
        rc = api.cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)h->v);
        printf("vretain rc=%d handle=%d\n", rc, rc ? -1 : add(H_VMM, r, h->size));
    } else if (strcmp(a[0], "vexport") == 0 || strcmp(a[0], "ipcput") == 0 || strcmp(a[0], "pexport") == 0) {
        unsigned char buf[64] = {0};
        struct handle *h = &handles[atoi(a[1])];
        if (a[0][0] == 'v') rc = api.cuMemExportToShareableHandle(buf, h->v, 1, 0);
        else if (a[0][0] == 'i') rc = api.cuIpcGetMemHandle((CUipcMemHandle *)buf, h->v);
        else rc = api.cuMemPoolExportPointer((CUmemPoolPtrExportData *)buf, h->v);
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%s.tmp", a[2]);
        FILE *f = fopen(tmp, "wb");
        if (f) { fwrite(buf, 1, sizeof(buf), f); fclose(f); rename(tmp, a[2]); }
        printf("%s rc=%d\n", a[0], rc);
    } else if (strcmp(a[0], "vimport") == 0 || strcmp(a[0], "ipcopen") == 0 || strcmp(a[0], "pimport") == 0) {
        unsigned char buf[64] = {0};
        uint64_t size = 0;
        FILE *f = fopen(a[1], "rb");
        if (f) { if (fread(buf, 1, sizeof(buf), f) != sizeof(buf)) memset(buf, 0, sizeof(buf)); fclose(f); }
        memcpy(&size, buf + 16, sizeof(size)); /* the fake's token: {pid, ptr, size, dev} */
        int idx = -1;
        if (a[0][0] == 'v') {
            CUmemGenericAllocationHandle h = 0;
            rc = api.cuMemImportFromShareableHandle(&h, buf, 1);
            if (!rc) idx = add(H_VMM, h, size);
        } else {
            CUdeviceptr p = 0;
            CUipcMemHandle ih;
            memcpy(ih.reserved, buf, sizeof(buf));
            rc = a[0][0] == 'i' ? api.cuIpcOpenMemHandle_v2(&p, ih, 1)
                                : api.cuMemPoolImportPointer(&p, NULL, (CUmemPoolPtrExportData *)buf);
            if (!rc) idx = add(a[0][0] == 'i' ? H_IPC : H_PIMPORT, p, size);
        }
        printf("%s rc=%d handle=%d\n", a[0], rc, idx);
    } else if (strcmp(a[0], "afill") == 0 || strcmp(a[0], "acheck") == 0) {
        /* every level of an array or mipmapped array, through cuMemcpy3D */
        struct handle *h = &handles[atoi(a[1])];
        size_t dirty = 0;
        for (unsigned int l = 0; !rc; l++) {
            CUarray arr = (CUarray)(uintptr_t)h->v;
            if (h->kind == H_MIPMAP) {
                if (api.cuMipmappedArrayGetLevel(&arr, (CUmipmappedArray)(uintptr_t)h->v, l)) break;
            } else if (l) {
                break;
            }
            CUDA_ARRAY3D_DESCRIPTOR d;
            rc = api.cuArray3DGetDescriptor_v2(&d, arr);
            if (rc) break;
            size_t row = d.Width * 4 * d.NumChannels, hgt = d.Height ? d.Height : 1, dep = d.Depth ? d.Depth : 1;
            unsigned char *buf = malloc(row * hgt * dep);
            memset(buf, a[0][1] == 'f' ? atoi(a[2]) : 0, row * hgt * dep);
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof(c));
            c.WidthInBytes = row;
            c.Height = hgt;
            c.Depth = dep;
            if (a[0][1] == 'f') {
                c.srcMemoryType = CU_MEMORYTYPE_HOST; c.srcHost = buf; c.srcPitch = row; c.srcHeight = hgt;
                c.dstMemoryType = CU_MEMORYTYPE_ARRAY; c.dstArray = arr;
            } else {
                c.srcMemoryType = CU_MEMORYTYPE_ARRAY; c.srcArray = arr;
                c.dstMemoryType = CU_MEMORYTYPE_HOST; c.dstHost = buf; c.dstPitch = row; c.dstHeight = hgt;
            }
            rc = api.cuMemcpy3D_v2(&c);
            for (size_t i = 0; a[0][1] == 'c' && i < row * hgt * dep; i++) dirty += buf[i] != 0;
            free(buf);
        }
        if (a[0][1] == 'f') printf("afill rc=%d\n", rc);
        else printf("acheck rc=%d nonzero=%zu\n", rc, dirty);
    } else if (strcmp(a[0], "stream") == 0) {
        /* a stream of the current context's device */
        rc = nstreams < 64 ? api.cuStreamCreate(&streams[nstreams], 0) : 1;
        printf("stream rc=%d handle=%d\n", rc, rc ? -1 : nstreams++);
    } else if (strcmp(a[0], "asyncon") == 0) {
        /* cuMemAllocAsync of B bytes on stream S (from the stream's device's default pool) */
        CUdeviceptr p = 0;
        rc = api.cuMemAllocAsync(&p, parse_size(a[1]), streams[atoi(a[2])]);
        printf("asyncon rc=%d handle=%d\n", rc, rc ? -1 : add(H_ASYNC, p, parse_size(a[1])));
    } else if (strcmp(a[0], "exitfree") == 0 || strcmp(a[0], "exitalloc") == 0) {
        /* after the library's destructor: free handle I / allocate B bytes */
        if (a[0][4] == 'f') at_exit_fn(exit_free, (void *)(intptr_t)atoi(a[1]));
        else at_exit_fn(exit_alloc, (void *)(uintptr_t)parse_size(a[1]));
        printf("%s rc=0\n", a[0]);
    } else if (strcmp(a[0], "pooldestroy") == 0) {
        printf("pooldestroy rc=%d\n", api.cuMemPoolDestroy(explicit_pool));
    } else if (strcmp(a[0], "xfree") == 0) {
        printf("xfree rc=%d\n", api.cuMemFree_v2(handles[atoi(a[1])].v));
    } else if (strcmp(a[0], "xfreeasync") == 0) {
        printf("xfreeasync rc=%d\n", api.cuMemFreeAsync(handles[atoi(a[1])].v, NULL));
    } else if (strcmp(a[0], "vmany") == 0) {
        int n = atoi(a[1]);
        uint64_t b = parse_size(a[2]);
        CUdeviceptr va = 0;
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = 1;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        rc = api.cuMemAddressReserve(&va, (size_t)(b * (uint64_t)n), 0, 0, 0);
        for (int i = 0; i < n && !rc; i++) {
            CUmemGenericAllocationHandle h = 0;
            rc = api.cuMemCreate(&h, b, &prop, 0);
            if (!rc) rc = api.cuMemMap(va + i * b, b, 0, h, 0);
            if (!rc) rc = api.cuMemSetAccess(va + i * b, b, &acc, 1);
            if (!rc && a[3]) rc = api.cuMemsetD8_v2(va + i * b, (unsigned char)atoi(a[3]), b);
            if (!rc) rc = api.cuMemRelease(h);
        }
        int idx = rc ? -1 : add(H_VRANGE, va, b * (uint64_t)n);
        if (idx >= 0) handles[idx].chunk = b;
        printf("vmany rc=%d handle=%d\n", rc, idx);
    } else if (strcmp(a[0], "arrayfmt") == 0) {
        CUDA_ARRAY_DESCRIPTOR d = {parse_size(a[1]), parse_size(a[2]), (int)strtol(a[3], NULL, 0), 1};
        CUarray arr = NULL;
        rc = api.cuArrayCreate_v2(&arr, &d);
        printf("arrayfmt rc=%d handle=%d\n", rc, rc ? -1 : add(H_ARRAY, (uintptr_t)arr, 0));
    } else if (strcmp(a[0], "legacy") == 0) {
        if (strcmp(a[1], "array") == 0) {
            CUresult (*f)(CUarray *, const void *);
            struct { unsigned int w, h; int fmt; unsigned int ch; } d = {1024, 1024, 0x20, 1};
            CUarray arr = NULL;
            *(void **)&f = entry("cuArrayCreate", 3000);
            rc = f ? f(&arr, &d) : 500;
        } else if (strcmp(a[1], "alloc") == 0) {
            CUresult (*f)(unsigned int *, unsigned int);
            unsigned int p = 0;
            *(void **)&f = entry("cuMemAlloc", 3000);
            rc = f ? f(&p, 4u << 20) : 500;
        } else {
            CUresult (*f)(CUdeviceptr *, CUipcMemHandle, unsigned int);
            CUipcMemHandle h;
            CUdeviceptr p = 0;
            api.cuIpcGetMemHandle(&h, handles[0].v);
            *(void **)&f = entry("cuIpcOpenMemHandle", 10000);
            rc = f ? f(&p, h, 1) : 500;
        }
        printf("legacy rc=%d\n", rc);
    } else if (strcmp(a[0], "setlimit") == 0) {
        printf("setlimit rc=%d\n", api.cuCtxSetLimit(atoi(a[1]), (size_t)parse_size(a[2])));
    } else if (strcmp(a[0], "launchv") == 0) {
        CUfunction f = make_function(strtoull(a[3], NULL, 10) * 1000ULL);
        CUresult (*l0)(CUfunction) = NULL;
        CUresult (*lg)(CUfunction, int, int) = NULL;
        CUresult (*la)(CUfunction, int, int, CUstream) = NULL;
        CUresult (*lm)(CUDA_LAUNCH_PARAMS *, unsigned int, unsigned int) = NULL;
        CUDA_LAUNCH_PARAMS lp = {f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL};
        if (strcmp(a[1], "launch") == 0) *(void **)&l0 = entry("cuLaunch", 12080);
        else if (strcmp(a[1], "grid") == 0) *(void **)&lg = entry("cuLaunchGrid", 12080);
        else if (strcmp(a[1], "gridasync") == 0) *(void **)&la = entry("cuLaunchGridAsync", 12080);
        else *(void **)&lm = entry("cuLaunchCooperativeKernelMultiDevice", 12080);
        uint64_t b0 = busy_ns(0), t0 = now_ns();
        for (int i = 0; i < atoi(a[2]) && !rc; i++)
            rc = l0 ? l0(f) : lg ? lg(f, 1, 1) : la ? la(f, 1, 1, NULL) : lm ? lm(&lp, 1, 0) : 500;
        if (!rc) rc = api.cuCtxSynchronize();
        printf("launchv rc=%d util=%.4f\n", rc, (double)(busy_ns(0) - b0) / (double)(now_ns() - t0));
    } else if (strcmp(a[0], "graphmem") == 0 || strcmp(a[0], "capture") == 0) {
        CUgraph g = NULL;
        CUdeviceptr gptr = 0;
        if (a[0][0] == 'g') {
            CUDA_MEM_ALLOC_NODE_PARAMS prm;
            memset(&prm, 0, sizeof(prm));
            prm.poolProps.allocType = 1;
            prm.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prm.bytesize = parse_size(a[1]);
            CUgraphNode node;
            rc = api.cuGraphCreate(&g, 0);
            if (!rc) rc = api.cuGraphAddMemAllocNode(&node, g, NULL, 0, &prm);
            gptr = prm.dptr;
        } else {
            CUstream s = NULL;
            CUdeviceptr p = 0;
            rc = api.cuStreamCreate(&s, 0);
            if (!rc) rc = api.cuStreamBeginCapture_v2(s, 0);
            CUresult arc = rc ? rc : api.cuMemAllocAsync(&p, parse_size(a[1]), s);
            if (!rc) rc = api.cuStreamEndCapture(s, &g);
            if (!rc) rc = arc;
        }
        if (rc && g) api.cuGraphDestroy(g);
        int gi = !rc && g ? add(H_GRAPH, (uintptr_t)g, parse_size(a[1])) : -1;
        if (gi >= 0) handles[gi].aux = gptr;
        printf("%s rc=%d handle=%d\n", a[0], rc, gi);
    } else if (strcmp(a[0], "gfill") == 0) {
        /* the allocation of graph I's memory node, filled with V */
        struct handle *h = &handles[atoi(a[1])];
        printf("gfill rc=%d\n", api.cuMemsetD8_v2(h->aux, (unsigned char)atoi(a[2]), h->size));
    } else if (strcmp(a[0], "gfree") == 0) {
        /* a memory-free node for graph I's allocation */
        struct handle *h = &handles[atoi(a[1])];
        CUresult (*f)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
        CUgraphNode node;
        *(void **)&f = entry("cuGraphAddMemFreeNode", 12080);
        printf("gfree rc=%d\n", f ? f(&node, (CUgraph)(uintptr_t)h->v, NULL, 0, h->aux) : 500);
    } else if (strcmp(a[0], "graphnode") == 0 || strcmp(a[0], "graphnode1") == 0) {
        CUgraph g = NULL;
        CUgraphNode node;
        CUgraphNodeParams prm;
        memset(&prm, 0, sizeof(prm));
        prm.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
        prm.alloc.poolProps.allocType = 1;
        prm.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prm.alloc.bytesize = parse_size(a[1]);
        rc = api.cuGraphCreate(&g, 0);
        if (!rc && a[0][9] == '1') {
            CUresult (*f)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
            *(void **)&f = entry("cuGraphAddNode", 12000);
            rc = f ? f(&node, g, NULL, 0, &prm) : 500;
        } else if (!rc) {
            rc = api.cuGraphAddNode_v2(&node, g, NULL, NULL, 0, &prm);
        }
        if (rc && g) api.cuGraphDestroy(g);
        printf("%s rc=%d handle=%d\n", a[0], rc, !rc ? add(H_GRAPH, (uintptr_t)g, 0) : -1);
    } else if (strcmp(a[0], "graphclone") == 0) {
        CUgraph c = NULL;
        rc = api.cuGraphClone(&c, (CUgraph)(uintptr_t)handles[atoi(a[1])].v);
        printf("graphclone rc=%d handle=%d\n", rc, !rc ? add(H_GRAPH, (uintptr_t)c, 0) : -1);
    } else if (strcmp(a[0], "graphexec") == 0) {
        CUgraphExec e = NULL;
        rc = api.cuGraphInstantiateWithFlags(&e, (CUgraph)(uintptr_t)handles[atoi(a[1])].v, 0);
        if (!rc) rc = api.cuGraphLaunch(e, NULL);
        printf("graphexec rc=%d handle=%d\n", rc, e ? add(H_EXEC, (uintptr_t)e, 0) : -1);
    } else if (strcmp(a[0], "graphrun") == 0) {
        printf("graphrun rc=%d\n", api.cuGraphLaunch((CUgraphExec)(uintptr_t)handles[atoi(a[1])].v, NULL));
    } else if (strcmp(a[0], "graphtrim") == 0) {
        printf("graphtrim rc=%d\n", api.cuDeviceGraphMemTrim(0));
    } else if (strcmp(a[0], "pattern") == 0) {
        printf("pattern rc=0 util=%.4f\n", pattern(a[1], atof(a[2])));
    } else if (strcmp(a[0], "burst") == 0) {
        /* N kernels of US microseconds, then exit at once (no synchronisation): a short-lived
         * process; prints the device time submitted */
        CUfunction f = make_function(strtoull(a[2], NULL, 10) * 1000ULL);
        for (int i = 0; i < atoi(a[1]); i++) rc = api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        printf("burst rc=%d submitted=%llu\n", rc, (unsigned long long)submitted_ns(0));
    } else if (strcmp(a[0], "threads") == 0) {
        int n = atoi(a[1]);
        pthread_t t[64];
        long iters = atol(a[2]);
        for (int i = 0; i < n && i < 64; i++) pthread_create(&t[i], NULL, worker, (void *)iters);
        long fails = 0;
        for (int i = 0; i < n && i < 64; i++) { void *r; pthread_join(t[i], &r); fails += (long)r; }
        printf("threads rc=0 fails=%ld\n", fails);
    } else if (strcmp(a[0], "fork") == 0) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            usleep((useconds_t)atoi(a[1]) * 1000);
            _exit(0);
        }
        printf("fork rc=%d pid=%d\n", child > 0 ? 0 : 1, (int)child);
    } else if (strcmp(a[0], "exec") == 0) {
        fflush(stdout);
        execl(a[1], a[1], a[2], (char *)NULL);
        printf("exec rc=1\n");
    } else if (strcmp(a[0], "fill") == 0) {
        struct handle *h = &handles[atoi(a[1])];
        printf("fill rc=%d\n", api.cuMemsetD8_v2(h->v, (unsigned char)atoi(a[2]), h->size));
    } else if (strcmp(a[0], "check") == 0) {
        struct handle *h = &handles[atoi(a[1])];
        unsigned char *buf = malloc(h->size);
        for (uint64_t at = 0; at < h->size && !rc; at += h->chunk)
            rc = api.cuMemcpyDtoH_v2(buf + at, h->v + at, h->chunk);
        size_t dirty = 0;
        for (size_t i = 0; i < h->size; i++) dirty += buf[i] != 0;
        free(buf);
        printf("check rc=%d nonzero=%zu\n", rc, dirty);
    } else if (strcmp(a[0], "meminfo") == 0) {
        size_t f = 0, t = 0;
        rc = api.cuMemGetInfo_v2(&f, &t);
        printf("meminfo rc=%d free=%zu total=%zu\n", rc, f, t);
    } else if (strcmp(a[0], "totalmem") == 0) {
        size_t t = 0;
        rc = api.cuDeviceTotalMem_v2(&t, 0);
        printf("totalmem rc=%d total=%zu\n", rc, t);
    } else if (strcmp(a[0], "nvml") == 0) {
        void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        int (*init)(void) = (int (*)(void))dlsym(nv, "nvmlInit_v2");
        int (*get)(unsigned int, nvmlDevice_t *) = (int (*)(unsigned int, nvmlDevice_t *))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
        int (*m1)(nvmlDevice_t, nvmlMemory_t *) = (int (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(nv, "nvmlDeviceGetMemoryInfo");
        int (*m2)(nvmlDevice_t, nvmlMemory_v2_t *) = (int (*)(nvmlDevice_t, nvmlMemory_v2_t *))dlsym(nv, "nvmlDeviceGetMemoryInfo_v2");
        nvmlDevice_t d;
        nvmlMemory_t v1;
        nvmlMemory_v2_t v2 = {0};
        init();
        get(0, &d);
        int r1 = m1(d, &v1), r2 = m2(d, &v2);
        printf("nvml rc=%d total=%llu used=%llu free=%llu v2rc=%d v2total=%llu v2used=%llu v2free=%llu\n",
               r1, v1.total, v1.used, v1.free, r2, v2.total, v2.used, v2.free);
    } else if (strcmp(a[0], "newctx") == 0 || strcmp(a[0], "ctxdestroy") == 0) {
        /* a new (non-primary) context on device D, made current / destroy the last one */
        static CUcontext made;
        if (a[0][0] == 'n') rc = api.cuCtxCreate_v2(&made, 0, atoi(a[1]));
        else rc = api.cuCtxDestroy_v2(made);
        printf("%s rc=%d\n", a[0], rc);
    } else if (strcmp(a[0], "vsym") == 0) {
        /* cuMemAlloc_v2 of B bytes through a lookup around gpugov's dlsym: glibc's dlsym from
         * dlvsym (how:dlvsym), or glibc's private __libc_dlsym (how:libc) */
        void *(*look)(void *, const char *) = NULL;
        if (strcmp(a[1], "dlvsym") == 0) {
            static const char *vers[] = {"GLIBC_2.34", "GLIBC_2.2.5"};
            for (int i = 0; i < 2 && !look; i++) *(void **)&look = dlvsym(RTLD_DEFAULT, "dlsym", vers[i]);
        } else {
            *(void **)&look = dlsym(RTLD_DEFAULT, "__libc_dlsym");
        }
        CUresult (*f)(CUdeviceptr *, size_t) = NULL;
        if (look) *(void **)&f = look(lib, "cuMemAlloc_v2");
        CUdeviceptr p = 0;
        rc = f ? f(&p, parse_size(a[2])) : 500;
        printf("vsym rc=%d\n", rc);
    } else if (strcmp(a[0], "prefetch") == 0 || strcmp(a[0], "advise") == 0) {
        /* managed handle I to device D: cuMemPrefetchAsync / cuMemAdvise(SET_PREFERRED_LOCATION) */
        struct handle *h = &handles[atoi(a[1])];
        CUdevice dst = atoi(a[2]);
        if (a[0][0] == 'p') {
            CUresult (*f)(CUdeviceptr, size_t, CUdevice, CUstream);
            *(void **)&f = entry("cuMemPrefetchAsync", 12000);
            rc = f ? f(h->v, h->size, dst, NULL) : 500;
        } else {
            CUresult (*f)(CUdeviceptr, size_t, int, CUdevice);
            *(void **)&f = entry("cuMemAdvise", 12000);
            rc = f ? f(h->v, h->size, 3, dst) : 500;
        }
        printf("%s rc=%d\n", a[0], rc);
    } else if (strcmp(a[0], "nvmlx") == 0) {
        /* NVML device I: memory info and the compute processes listed (pids) */
        void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        int (*init)(void) = (int (*)(void))dlsym(nv, "nvmlInit_v2");
        int (*get)(unsigned int, nvmlDevice_t *) = (int (*)(unsigned int, nvmlDevice_t *))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
        int (*m1)(nvmlDevice_t, nvmlMemory_t *) = (int (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(nv, "nvmlDeviceGetMemoryInfo");
        int (*procs)(nvmlDevice_t, unsigned int *, void *) = (int (*)(nvmlDevice_t, unsigned int *, void *))dlsym(nv, "nvmlDeviceGetComputeRunningProcesses_v3");
        nvmlDevice_t d = NULL;
        nvmlMemory_t v1 = {0, 0, 0};
        struct { unsigned int pid; unsigned long long used; unsigned int gi, ci; } p[16];
        unsigned int n = 16;
        init();
        int r0 = get((unsigned)atoi(a[1]), &d), r1 = r0 ? r0 : m1(d, &v1), r2 = r0 ? r0 : procs(d, &n, p);
        unsigned long long others = 0, mine = 0;
        for (unsigned int i = 0; !r2 && i < n; i++) {
            if (p[i].pid == (unsigned)getpid()) mine += p[i].used;
            else others += p[i].used;
        }
        printf("nvmlx rc=%d total=%llu procrc=%d procs=%u mine=%llu others=%llu\n", r1, v1.total, r2,
               r2 ? 0 : n, mine, others);
    } else if (strcmp(a[0], "nvmlproc") == 0) {
        /* the fake NVML sees this process on device I with B bytes (FAKE_NVML_EVENTS) */
        FILE *f = getenv("FAKE_NVML_EVENTS") ? fopen(getenv("FAKE_NVML_EVENTS"), "a") : NULL;
        if (f) { fprintf(f, "proc %s %d %llu\n", a[1], (int)getpid(), (unsigned long long)parse_size(a[2])); fclose(f); }
        printf("nvmlproc rc=%d\n", f ? 0 : 1);
    } else if (strcmp(a[0], "launch") == 0 || strcmp(a[0], "launchex") == 0 || strcmp(a[0], "coop") == 0) {
        CUfunction f = make_function(strtoull(a[2], NULL, 10) * 1000ULL);
        const char *kind = a[0][0] == 'c' ? "coop" : a[0][6] == 'e' ? "ex" : "kernel";
        for (int i = 0; i < atoi(a[1]); i++) launch(kind, f, NULL);
        printf("%s rc=%d\n", a[0], api.cuCtxSynchronize());
    } else if (strcmp(a[0], "graph") == 0) {
        CUgraphExec g = make_graph((unsigned)atoi(a[2]), strtoull(a[3], NULL, 10) * 1000ULL);
        for (int i = 0; i < atoi(a[1]); i++) launch("graph", NULL, g);
        printf("graph rc=%d\n", api.cuCtxSynchronize());
    } else if (strcmp(a[0], "util") == 0) {
        /* device busy fraction while launching flat out for SECONDS after a warm-up */
        uint64_t us = strtoull(a[2], NULL, 10);
        CUfunction f = make_function(us * 1000ULL);
        CUgraphExec g = make_graph(4, us * 250ULL);
        uint64_t warm = now_ns() + 300000000ULL;
        while (now_ns() < warm) launch(a[1], f, g);
        uint64_t b0 = busy_ns(0), t0 = now_ns(), end = t0 + (uint64_t)(atof(a[3]) * 1e9);
        while (now_ns() < end) launch(a[1], f, g);
        uint64_t b1 = busy_ns(0), t1 = now_ns();
        printf("util rc=0 util=%.4f\n", (double)(b1 - b0) / (double)(t1 - t0));
    } else if (strcmp(a[0], "load") == 0) {
        /* load:US:SECONDS[:ON_MS:OFF_MS]: kernels of US us flat out for SECONDS (a contention
         * workload), in phases of ON_MS launching and OFF_MS idle when given */
        CUfunction f = make_function(strtoull(a[1], NULL, 10) * 1000ULL);
        uint64_t t0 = now_ns(), end = t0 + (uint64_t)(atof(a[2]) * 1e9), launches = 0;
        uint64_t on = a[3] ? strtoull(a[3], NULL, 10) * 1000000ULL : 0;
        uint64_t off = a[4] ? strtoull(a[4], NULL, 10) * 1000000ULL : 0;
        for (uint64_t t = t0; t < end; t = now_ns()) {
            if (on && (t - t0) % (on + off) >= on) {
                uint64_t wake = t0 + ((t - t0) / (on + off) + 1) * (on + off);
                usleep((useconds_t)((wake < end ? wake : end) - t) / 1000);
                continue;
            }
            rc = api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            if (rc) break;
            launches++;
        }
        printf("load rc=%d launches=%llu\n", rc, (unsigned long long)launches);
    } else if (strcmp(a[0], "fillup") == 0) {
        int count = 0;
        CUdeviceptr p;
        while ((rc = api.cuMemAlloc_v2(&p, parse_size(a[1]))) == 0) count++;
        printf("fillup rc=%d count=%d\n", rc, count);
    } else if (strcmp(a[0], "barrier") == 0) {
        for (int i = 0; i < 3000 && access(a[1], F_OK) != 0; i++) usleep(10000);
        printf("barrier rc=%d\n", access(a[1], F_OK) == 0 ? 0 : 1);
    } else if (strcmp(a[0], "sleep") == 0) {
        usleep((useconds_t)atoi(a[1]) * 1000);
        printf("sleep rc=0\n");
    } else {
        printf("%s rc=-1 unknown command\n", a[0]);
        return 2;
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    mode = argv[1];
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (strcmp(argv[1], "direct") == 0) load_direct();
    else if (strcmp(argv[1], "dlsym") == 0) load_dlsym();
    else if (strcmp(argv[1], "procaddr") == 0) load_procaddr(0);
    else if (strcmp(argv[1], "procaddr-ptsz") == 0) load_procaddr(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    else return 2;
    *(void **)&busy_ns = dlsym(lib, "fakegpu_busy_ns");
    *(void **)&submitted_ns = dlsym(lib, "fakegpu_submitted_ns");
    *(void **)&now_ns = dlsym(lib, "fakegpu_now_ns");
    *(void **)&make_function = dlsym(lib, "fakegpu_make_function");
    *(void **)&make_graph = dlsym(lib, "fakegpu_make_graph");
    *(void **)&at_exit_fn = dlsym(lib, "fakegpu_at_exit");
    CUresult rc = api.cuInit ? api.cuInit(0) : resolve_rc;
    printf("init rc=%d\n", rc);
    fflush(stdout);
    if (rc) return 0;
    for (int i = 2; i < argc; i++)
        if (run(argv[i])) return 2;
    return 0;
}
