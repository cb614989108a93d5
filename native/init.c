/* Lazy start-up: nothing happens at load time (the library may sit in
 * /etc/ld.so.preload of every process); configuration, the region and the real
 * driver are set up on the first intercepted call, and failures close GPU use. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dlvsym, dladdr1, RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gg.h"

extern char **environ;

struct gg_real gg_real;
struct gg_config gg_cfg;
int gg_state; /* 1 once ready and registered in this process */

static pthread_once_t core_once = PTHREAD_ONCE_INIT, cuda_once = PTHREAD_ONCE_INIT,
                      nvml_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static CUresult core_rc, cuda_rc;
static int nvml_rc, registered;
static char core_err[512];

uint64_t gg_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void after_fork_child(void) {
    gg_state = 0;
    registered = 0;
    pthread_mutex_init(&slot_mu, NULL);
    gg_region_after_fork();
    gg_track_reset();
    gg_vmm_after_fork();
    gg_throttle_after_fork();
    gg_qos_after_fork();
}

static void core_init(void) {
    if (gg_config_parse(environ, &gg_cfg, core_err, sizeof(core_err)) != 0) {
        core_rc = CUDA_ERROR_NOT_PERMITTED;
        gg_log(GG_LOG_ERROR, "refusing GPU use: invalid configuration: %s", core_err);
        return;
    }
    gg_log_level = gg_cfg.log_level;
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* Registers this process in the region once per process (again after fork). */
static CUresult ensure_registered(void) {
    pthread_once(&core_once, core_init);
    if (core_rc) return core_rc;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&slot_mu);
    if (!registered) {
        char err[512];
        if (gg_region_open(&gg_cfg, err, sizeof(err)) != 0) {
            gg_log(GG_LOG_ERROR, "refusing GPU use: %s", err);
            rc = CUDA_ERROR_NOT_PERMITTED;
        } else {
            registered = 1;
        }
    }
    pthread_mutex_unlock(&slot_mu);
    return rc;
}

static void *real_sym(void *lib, const char *name) { return lib ? gg_real_dlsym(lib, name) : NULL; }

static void cuda_init(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        gg_log(GG_LOG_ERROR, "cannot load the driver libcuda.so.1: %s", dlerror());
        cuda_rc = CUDA_ERROR_NOT_INITIALIZED;
        return;
    }
#define GG_LOAD(name, ret, args) gg_real.name = (ret(*) args)real_sym(lib, #name);
    GG_REAL_CUDA(GG_LOAD)
#undef GG_LOAD
    if (!gg_real.cuCtxGetDevice) {
        gg_log(GG_LOG_ERROR, "libcuda.so.1 lacks cuCtxGetDevice; not a CUDA driver");
        cuda_rc = CUDA_ERROR_NOT_INITIALIZED;
    }
}

static void nvml_init(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL);
#define GG_LOAD(name, ret, args) gg_real.name = (ret(*) args)real_sym(lib, #name);
    GG_REAL_NVML(GG_LOAD)
#undef GG_LOAD
    nvml_rc = lib ? NVML_SUCCESS : 9 /* NVML_ERROR_DRIVER_NOT_LOADED */;
}

CUresult gg_ready(void) {
    if (__builtin_expect(gg_state == 1, 1)) return CUDA_SUCCESS;
    CUresult rc = ensure_registered();
    if (rc) return rc;
    pthread_once(&cuda_once, cuda_init);
    if (cuda_rc) return cuda_rc;
    __atomic_store_n(&gg_state, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

int gg_nvml_ready(void) {
    if (ensure_registered()) return NVML_ERROR_NO_PERMISSION;
    pthread_once(&nvml_once, nvml_init);
    return nvml_rc;
}

/* ---- symbol resolution: dlsym and cuGetProcAddress ---- */

static void *(*next_dlsym)(void *, const char *);
static void *(*libc_dlvsym)(void *, const char *, const char *);

/* glibc's dlvsym (gpugov's own export would answer a plain call). */
GG_NO_SANITIZE static void *(*real_dlvsym(void))(void *, const char *, const char *) {
    void *(*f)(void *, const char *, const char *) = __atomic_load_n(&libc_dlvsym, __ATOMIC_ACQUIRE);
    if (!f) {
        *(void **)&f = gg_libc_symbol("dlvsym");
        if (f) __atomic_store_n(&libc_dlvsym, f, __ATOMIC_RELEASE);
    }
    return f;
}

GG_NO_SANITIZE void *gg_real_dlsym(void *handle, const char *name) {
    void *(*f)(void *, const char *) = __atomic_load_n(&next_dlsym, __ATOMIC_ACQUIRE);
    if (!f) {
        static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.17", "GLIBC_2.2.5", "GLIBC_2.0"};
        void *(*vsym)(void *, const char *, const char *) = real_dlvsym();
        for (size_t i = 0; vsym && !f && i < sizeof(versions) / sizeof(versions[0]); i++)
            f = (void *(*)(void *, const char *))vsym(RTLD_NEXT, "dlsym", versions[i]);
        if (!f) return NULL;
        __atomic_store_n(&next_dlsym, f, __ATOMIC_RELEASE);
    }
    return f(handle, name);
}

/* RTLD_NEXT must mean "after the caller", not "after gpugov". For a caller loaded
 * before gpugov (e.g. a sanitizer runtime) the two agree except for gpugov's own
 * exports, so the real RTLD_NEXT is used. For a caller loaded after gpugov, the
 * link map after the caller is searched (in glibc a link_map is a dlopen handle). */
GG_NO_SANITIZE static void *next_after(const void *caller, const char *name, const char *version) {
    Dl_info info;
    struct link_map *lm = NULL, *self = NULL, *p;
    void *(*vsym)(void *, const char *, const char *) = version ? real_dlvsym() : NULL;
    if (version && !vsym) return NULL;
#define GG_LOOKUP(h) (version ? vsym((h), name, version) : gg_real_dlsym((h), name))
    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm
        || !dladdr1((void *)next_after, &info, (void **)&self, RTLD_DL_LINKMAP) || !self)
        return GG_LOOKUP(RTLD_NEXT);
    for (p = lm; p && p != self; p = p->l_next) {
    }
    if (p == self) return GG_LOOKUP(RTLD_NEXT); /* caller precedes gpugov */
    for (p = lm->l_next; p; p = p->l_next) {
        if (!p->l_name || !p->l_name[0]) continue;
        void *sym = GG_LOOKUP(p);
        if (sym) return sym;
    }
#undef GG_LOOKUP
    return NULL;
}

/* A plain loop: dlsym runs inside sanitizer start-up, before their string interceptors work. */
GG_NO_SANITIZE static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

/* Names that would hand out a symbol lookup gpugov does not see: its own answers instead
 * (dlsym, dlvsym), or none (glibc's private lookups). */
GG_NO_SANITIZE static int lookup_entry(const char *n, void **out) {
    if (same(n, "dlsym")) { *out = (void *)dlsym; return 1; }
    if (same(n, "dlvsym")) { *out = (void *)dlvsym; return 1; }
    if (same(n, "__libc_dlsym") || same(n, "__libc_dlvsym") || same(n, "_dl_sym") || same(n, "_dl_vsym")) {
        *out = NULL;
        return 1;
    }
    return 0;
}

GG_EXPORT GG_NO_SANITIZE void *dlsym(void *handle, const char *name) {
    const char *n = name; /* glibc declares name nonnull; callers still pass NULL */
    __asm__("" : "+r"(n));
    void *e;
    if (n && ((n[0] == 'c' && n[1] == 'u') || strncmp(n, "nvml", 4) == 0)) {
        void *hook = gg_hook_for_symbol(n);
        if (hook) return hook;
    }
    if (n && (n[0] == 'd' || n[0] == '_') && lookup_entry(n, &e)) return e;
    if (handle == RTLD_NEXT) return next_after(__builtin_return_address(0), name, NULL);
    return gg_real_dlsym(handle, name);
}

/* dlvsym answers like dlsym: a wrapped driver function's wrapper whatever version is asked,
 * gpugov's dlsym/dlvsym for those names, so no lookup reaches the unwrapped driver. */
GG_EXPORT GG_NO_SANITIZE void *dlvsym(void *handle, const char *name, const char *version) {
    const char *n = name;
    __asm__("" : "+r"(n));
    void *e;
    if (n && ((n[0] == 'c' && n[1] == 'u') || strncmp(n, "nvml", 4) == 0)) {
        void *hook = gg_hook_for_symbol(n);
        if (hook) return hook;
    }
    if (n && (n[0] == 'd' || n[0] == '_') && lookup_entry(n, &e)) return e;
    if (handle == RTLD_NEXT) return next_after(__builtin_return_address(0), name, version);
    void *(*vsym)(void *, const char *, const char *) = real_dlvsym();
    return vsym ? vsym(handle, name, version) : NULL;
}

/* Hooked driver functions whose versions we know. v2_since: first CUDA version whose
 * cuGetProcAddress answer is the _v2 variant (0: no legacy variant); ptsz: a
 * per-thread-default-stream variant exists. */
struct gg_versioned {
    const char *base;
    int v2_since;
    int ptsz;
};
static const struct gg_versioned versioned[] = {
    {"cuMemAlloc", 3020, 0}, {"cuMemAllocPitch", 3020, 0}, {"cuMemFree", 3020, 0},
    {"cuMemGetInfo", 3020, 0}, {"cuDeviceTotalMem", 3020, 0}, {"cuArrayCreate", 3020, 0},
    {"cuArray3DCreate", 3020, 0}, {"cuIpcOpenMemHandle", 11000, 0},
    {"cuGetProcAddress", 12000, 0}, {"cuMemAllocManaged", 0, 0}, {"cuMemAllocAsync", 0, 1},
    {"cuMemAllocFromPoolAsync", 0, 1}, {"cuMemFreeAsync", 0, 1}, {"cuMemPoolTrimTo", 0, 0},
    {"cuMemPoolDestroy", 0, 0}, {"cuArrayDestroy", 0, 0}, {"cuMipmappedArrayCreate", 0, 0},
    {"cuMipmappedArrayDestroy", 0, 0}, {"cuMemCreate", 0, 0}, {"cuMemRelease", 0, 0},
    {"cuMemUnmap", 0, 0}, {"cuIpcCloseMemHandle", 0, 0}, {"cuLaunchKernel", 0, 1},
    {"cuLaunchKernelEx", 0, 1}, {"cuLaunchCooperativeKernel", 0, 1}, {"cuGraphLaunch", 0, 1},
    {"cuInit", 0, 0}, {"cuMemMap", 0, 0}, {"cuMemImportFromShareableHandle", 0, 0},
    {"cuMemRetainAllocationHandle", 0, 0}, {"cuIpcGetMemHandle", 0, 0},
    {"cuMemPoolExportPointer", 0, 0}, {"cuMemPoolImportPointer", 0, 0},
    {"cuMemPoolCreate", 0, 0}, {"cuGraphAddMemAllocNode", 0, 0}, {"cuGraphDestroy", 0, 0},
    {"cuStreamEndCapture", 0, 1}, {"cuCtxSetLimit", 0, 0}, {"cuLaunch", 0, 0}, {"cuLaunchGrid", 0, 0},
    {"cuLaunchGridAsync", 0, 0}, {"cuLaunchCooperativeKernelMultiDevice", 0, 0},
    {"cuGraphAddNode", 12030, 0}, {"cuGraphClone", 0, 0}, {"cuDeviceGraphMemTrim", 0, 0},
    {"cuMemExportToShareableHandle", 0, 0}, {"cuGraphInstantiateWithFlags", 0, 0},
    {"cuGraphInstantiateWithParams", 0, 1}, {"cuGraphExecDestroy", 0, 0}, {"cuGraphInstantiate", 11000, 0},
    {"cuMemPrefetchAsync", 12020, 1}, {"cuMemAdvise", 12020, 0}, {"cuGraphAddMemFreeNode", 0, 0},
    {"cuCtxDestroy", 4000, 0}, {"cuDevicePrimaryCtxReset", 11000, 0},
};

/* Replaces the driver's answer with our wrapper. A hooked function whose variant we
 * cannot wrap is refused rather than handed out unenforced. */
static CUresult swap_for_hook(const char *symbol, int version, cuuint64_t flags, void **pfn) {
    char name[128];
    const struct gg_versioned *v = NULL;
    for (size_t i = 0; i < sizeof(versioned) / sizeof(versioned[0]); i++)
        if (strcmp(symbol, versioned[i].base) == 0) v = &versioned[i];
    if (!v) {
        void *hook = gg_hook_for_symbol(symbol); /* e.g. nvml-free names we export as-is */
        if (hook) *pfn = hook;
        return CUDA_SUCCESS;
    }
    if (strcmp(symbol, "cuGraphInstantiate") == 0 && version >= 12000) {
        /* since CUDA 12 the name stands for cuGraphInstantiateWithFlags (same signature) */
        *pfn = gg_hook_for_symbol("cuGraphInstantiateWithFlags");
        return CUDA_SUCCESS;
    }
    if (v->v2_since && version < v->v2_since
        && (strcmp(symbol, "cuGraphAddNode") == 0 || strcmp(symbol, "cuMemPrefetchAsync") == 0
            || strcmp(symbol, "cuMemAdvise") == 0)) {
        /* their v1 (cuGraphAddNode before 12.3 differs only by the edge data; the device-
         * number cuMemPrefetchAsync / cuMemAdvise before 12.2) are wrapped too */
        snprintf(name, sizeof(name), "%s%s", symbol,
                 v->ptsz && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? "_ptsz" : "");
        *pfn = gg_hook_for_symbol(name);
        return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    }
    if (v->v2_since && version < v->v2_since) {
        gg_log(GG_LOG_ERROR, "refusing %s for CUDA version %d: its legacy variant is not "
               "enforced", symbol, version);
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    snprintf(name, sizeof(name), "%s%s%s", symbol, v->v2_since ? "_v2" : "",
             v->ptsz && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? "_ptsz" : "");
    void *hook = gg_hook_for_symbol(name);
    if (!hook) {
        gg_log(GG_LOG_ERROR, "refusing %s: no enforced wrapper for %s", symbol, name);
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = hook;
    return CUDA_SUCCESS;
}

GG_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
    CUresult rc = gg_ready();
    if (rc) return rc;
    if (!gg_real.cuGetProcAddress_v2) return CUDA_ERROR_NOT_FOUND;
    rc = gg_real.cuGetProcAddress_v2(symbol, pfn, version, flags, status);
    if (rc != CUDA_SUCCESS || !symbol || !pfn || !*pfn) return rc;
    rc = swap_for_hook(symbol, version, flags, pfn);
    if (rc && status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return rc;
}

GG_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    CUresult rc = gg_ready();
    if (rc) return rc;
    if (!gg_real.cuGetProcAddress) return CUDA_ERROR_NOT_FOUND;
    rc = gg_real.cuGetProcAddress(symbol, pfn, version, flags);
    if (rc != CUDA_SUCCESS || !symbol || !pfn || !*pfn) return rc;
    return swap_for_hook(symbol, version, flags, pfn);
}

GG_EXPORT CUresult cuInit(unsigned int flags) {
    CUresult rc = gg_ready();
    return rc ? rc : gg_real.cuInit(flags);
}
