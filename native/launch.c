/* Launch paths that put work on the device: plain, extended, cooperative, multi-device
 * cooperative, legacy (cuLaunch, cuLaunchGrid, cuLaunchGridAsync) and graph launches, with
 * their per-thread-default-stream variants. Unthrottled devices pay one flag test. Each
 * launch names its work by a key (function and launch shape, or the graph), the unit of the
 * throttle's cost estimates. */
#include "gg.h"

static int any_core_limit = -1;

static int throttling(void) {
    int v = __atomic_load_n(&any_core_limit, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    v = 0;
    for (int d = 0; d < GG_MAX_DEVICES; d++) v |= gg_device_core_limit(d) != 0;
    __atomic_store_n(&any_core_limit, v, __ATOMIC_RELAXED);
    return v;
}

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x9E3779B97F4A7C15ULL; }

static uint64_t shape_key(const void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shm) {
    uint64_t h = mix(0x6767, (uint64_t)(uintptr_t)f);
    h = mix(h, (uint64_t)gx | (uint64_t)gy << 32);
    h = mix(h, (uint64_t)gz | (uint64_t)bx << 32);
    h = mix(h, (uint64_t)by | (uint64_t)bz << 32);
    return mix(h, shm) | 1; /* never 0: 0 marks an empty estimate slot */
}

#define GG_LAUNCH(key, stream, call)                                        \
    do {                                                                    \
        CUresult rc_ = gg_ready();                                          \
        if (rc_) return rc_;                                                \
        if (__builtin_expect(!throttling(), 1)) return call;                \
        int dev_ = gg_current_device();                                     \
        if (dev_ < 0) return call;                                          \
        int s_ = gg_throttle_before(dev_, key, stream);                     \
        rc_ = call;                                                         \
        gg_throttle_after(dev_, s_, stream, rc_);                           \
        return rc_;                                                         \
    } while (0)

#define KARGS CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
              unsigned int by, unsigned int bz, unsigned int shm, CUstream s
#define KVALS f, gx, gy, gz, bx, by, bz, shm, s
#define KKEY shape_key(f, gx, gy, gz, bx, by, bz, shm)
#define EXKEY(c) (c ? shape_key(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, \
                                c->blockDimZ, c->sharedMemBytes) : shape_key(f, 0, 0, 0, 0, 0, 0, 0))

GG_EXPORT CUresult cuLaunchKernel(KARGS, void **params, void **extra) {
    GG_LAUNCH(KKEY, s, gg_real.cuLaunchKernel(KVALS, params, extra));
}
GG_EXPORT CUresult cuLaunchKernel_ptsz(KARGS, void **params, void **extra) {
    GG_LAUNCH(KKEY, s, gg_real.cuLaunchKernel_ptsz(KVALS, params, extra));
}
GG_EXPORT CUresult cuLaunchCooperativeKernel(KARGS, void **params) {
    GG_LAUNCH(KKEY, s, gg_real.cuLaunchCooperativeKernel(KVALS, params));
}
GG_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(KARGS, void **params) {
    GG_LAUNCH(KKEY, s, gg_real.cuLaunchCooperativeKernel_ptsz(KVALS, params));
}
GG_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GG_LAUNCH(EXKEY(c), c ? c->hStream : NULL, gg_real.cuLaunchKernelEx(c, f, params, extra));
}
GG_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GG_LAUNCH(EXKEY(c), c ? c->hStream : NULL, gg_real.cuLaunchKernelEx_ptsz(c, f, params, extra));
}
GG_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    GG_LAUNCH(mix(0x6772, (uint64_t)(uintptr_t)g) | 1, s, gg_real.cuGraphLaunch(g, s));
}
GG_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    GG_LAUNCH(mix(0x6772, (uint64_t)(uintptr_t)g) | 1, s, gg_real.cuGraphLaunch_ptsz(g, s));
}

/* Legacy launches: the grid set by cuFuncSetBlockShape & co. is not visible here, so the key
 * is the function and the grid passed. */
static CUresult no_entry(void) { return CUDA_ERROR_NOT_FOUND; }
#define REAL_OR_MISSING(fn, call) (gg_real.fn ? gg_real.call : no_entry())

GG_EXPORT CUresult cuLaunch(CUfunction f) {
    GG_LAUNCH(shape_key(f, 1, 1, 1, 0, 0, 0, 0), NULL, REAL_OR_MISSING(cuLaunch, cuLaunch(f)));
}
GG_EXPORT CUresult cuLaunchGrid(CUfunction f, int w, int h) {
    GG_LAUNCH(shape_key(f, (unsigned)w, (unsigned)h, 1, 0, 0, 0, 0), NULL,
              REAL_OR_MISSING(cuLaunchGrid, cuLaunchGrid(f, w, h)));
}
GG_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s) {
    GG_LAUNCH(shape_key(f, (unsigned)w, (unsigned)h, 1, 0, 0, 0, 0), s,
              REAL_OR_MISSING(cuLaunchGridAsync, cuLaunchGridAsync(f, w, h, s)));
}
/* One cooperative launch over several devices: throttled on the current device as one
 * launch of the first device's kernel (the devices run it concurrently). */
GG_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *l, unsigned int n, unsigned int fl) {
    GG_LAUNCH(l && n ? shape_key(l->function, l->gridDimX, l->gridDimY, l->gridDimZ, l->blockDimX,
                                 l->blockDimY, l->blockDimZ, l->sharedMemBytes) : 1,
              l && n ? l->hStream : NULL,
              REAL_OR_MISSING(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice(l, n, fl)));
}
