/* Launch paths that put work on the device: plain, extended, cooperative and graph
 * launches, with their per-thread-default-stream variants. Unthrottled devices
 * pay one flag test. */
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

static int launch_device(void) {
    CUdevice d = -1;
    if (gg_real.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= GG_MAX_DEVICES) return -1;
    return d;
}

#define GG_LAUNCH(kind, stream, ptsz, call)                                 \
    do {                                                                    \
        CUresult rc_ = gg_ready();                                          \
        if (rc_) return rc_;                                                \
        if (__builtin_expect(!throttling(), 1)) return call;                \
        int dev_ = launch_device();                                         \
        if (dev_ < 0) return call;                                          \
        int s_ = gg_throttle_before(dev_, kind, stream, ptsz);              \
        rc_ = call;                                                         \
        gg_throttle_after(dev_, s_, stream, ptsz, rc_);                     \
        return rc_;                                                         \
    } while (0)

#define KARGS CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
              unsigned int by, unsigned int bz, unsigned int shm, CUstream s
#define KVALS f, gx, gy, gz, bx, by, bz, shm, s

GG_EXPORT CUresult cuLaunchKernel(KARGS, void **params, void **extra) {
    GG_LAUNCH(GG_COST_KERNEL, s, 0, gg_real.cuLaunchKernel(KVALS, params, extra));
}
GG_EXPORT CUresult cuLaunchKernel_ptsz(KARGS, void **params, void **extra) {
    GG_LAUNCH(GG_COST_KERNEL, s, 1, gg_real.cuLaunchKernel_ptsz(KVALS, params, extra));
}
GG_EXPORT CUresult cuLaunchCooperativeKernel(KARGS, void **params) {
    GG_LAUNCH(GG_COST_KERNEL, s, 0, gg_real.cuLaunchCooperativeKernel(KVALS, params));
}
GG_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(KARGS, void **params) {
    GG_LAUNCH(GG_COST_KERNEL, s, 1, gg_real.cuLaunchCooperativeKernel_ptsz(KVALS, params));
}
GG_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GG_LAUNCH(GG_COST_KERNEL, c ? c->hStream : NULL, 0, gg_real.cuLaunchKernelEx(c, f, params, extra));
}
GG_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GG_LAUNCH(GG_COST_KERNEL, c ? c->hStream : NULL, 1, gg_real.cuLaunchKernelEx_ptsz(c, f, params, extra));
}
GG_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    GG_LAUNCH(GG_COST_GRAPH, s, 0, gg_real.cuGraphLaunch(g, s));
}
GG_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    GG_LAUNCH(GG_COST_GRAPH, s, 1, gg_real.cuGraphLaunch_ptsz(g, s));
}
