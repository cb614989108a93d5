/* Launch paths that put work on the device: plain, extended, cooperative, multi-device
 * cooperative, legacy (cuLaunch, cuLaunchGrid, cuLaunchGridAsync) and graph launches, with
 * their per-thread-default-stream variants. Unthrottled devices pay one flag test. A launch is
 * throttled on (and measured on) the device of its stream, whatever context is current. */
#include "gg.h"

static int any_core_limit = -1;

static int throttling(void) {
    int v = __atomic_load_n(&any_core_limit, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    v = gg_qos_configured(); /* launches on a device with a QoS board are metered too */
    for (int d = 0; d < GG_MAX_DEVICES; d++) v |= gg_device_core_limit(d) != 0;
    __atomic_store_n(&any_core_limit, v, __ATOMIC_RELAXED);
    return v;
}

#define GG_LAUNCH(stream, call)                                             \
    do {                                                                    \
        CUresult rc_ = gg_ready();                                          \
        if (rc_) return rc_;                                                \
        if (__builtin_expect(!throttling(), 1)) return call;                \
        int dev_ = gg_stream_device_ord(stream, NULL);                      \
        if (dev_ < 0) return call;                                          \
        int s_ = gg_throttle_before(dev_, stream);                          \
        rc_ = call;                                                         \
        gg_throttle_after(dev_, s_, stream, rc_);                           \
        return rc_;                                                         \
    } while (0)

#define KARGS CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
              unsigned int by, unsigned int bz, unsigned int shm, CUstream s
#define KVALS f, gx, gy, gz, bx, by, bz, shm, s

GG_EXPORT CUresult cuLaunchKernel(KARGS, void **params, void **extra) {
    GG_LAUNCH(s, gg_real.cuLaunchKernel(KVALS, params, extra));
}
GG_EXPORT CUresult cuLaunchKernel_ptsz(KARGS, void **params, void **extra) {
    GG_LAUNCH(s, gg_real.cuLaunchKernel_ptsz(KVALS, params, extra));
}
GG_EXPORT CUresult cuLaunchCooperativeKernel(KARGS, void **params) {
    GG_LAUNCH(s, gg_real.cuLaunchCooperativeKernel(KVALS, params));
}
GG_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(KARGS, void **params) {
    GG_LAUNCH(s, gg_real.cuLaunchCooperativeKernel_ptsz(KVALS, params));
}
GG_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GG_LAUNCH(c ? c->hStream : NULL, gg_real.cuLaunchKernelEx(c, f, params, extra));
}
GG_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GG_LAUNCH(c ? c->hStream : NULL, gg_real.cuLaunchKernelEx_ptsz(c, f, params, extra));
}
GG_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    GG_LAUNCH(s, gg_real.cuGraphLaunch(g, s));
}
GG_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    GG_LAUNCH(s, gg_real.cuGraphLaunch_ptsz(g, s));
}

/* Legacy launches: the grid set by cuFuncSetBlockShape & co. is not visible here, so the key
 * is the function and the grid passed. */
static CUresult no_entry(void) { return CUDA_ERROR_NOT_FOUND; }
#define REAL_OR_MISSING(fn, call) (gg_real.fn ? gg_real.call : no_entry())

GG_EXPORT CUresult cuLaunch(CUfunction f) {
    GG_LAUNCH(NULL, REAL_OR_MISSING(cuLaunch, cuLaunch(f)));
}
GG_EXPORT CUresult cuLaunchGrid(CUfunction f, int w, int h) {
    GG_LAUNCH(NULL, REAL_OR_MISSING(cuLaunchGrid, cuLaunchGrid(f, w, h)));
}
GG_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s) {
    GG_LAUNCH(s, REAL_OR_MISSING(cuLaunchGridAsync, cuLaunchGridAsync(f, w, h, s)));
}
/* One cooperative launch over several devices: each device's part runs on its own stream's
 * device and is throttled and measured there, as a launch of its own. */
#define GG_MAX_MULTI 64
GG_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *l, unsigned int n, unsigned int fl) {
    CUresult rc = gg_ready();
    if (rc) return rc;
    if (!gg_real.cuLaunchCooperativeKernelMultiDevice) return CUDA_ERROR_NOT_FOUND;
    if (!throttling() || !l || !n) return gg_real.cuLaunchCooperativeKernelMultiDevice(l, n, fl);
    if (n > GG_MAX_MULTI) return CUDA_ERROR_INVALID_VALUE; /* more devices than any system has */
    int dev[GG_MAX_MULTI], rec[GG_MAX_MULTI];
    for (unsigned int i = 0; i < n; i++) {
        dev[i] = gg_stream_device_ord(l[i].hStream, NULL);
        rec[i] = dev[i] >= 0 ? gg_throttle_before(dev[i], l[i].hStream) : -1;
    }
    rc = gg_real.cuLaunchCooperativeKernelMultiDevice(l, n, fl);
    for (unsigned int i = 0; i < n; i++)
        if (dev[i] >= 0) gg_throttle_after(dev[i], rec[i], l[i].hStream, rc);
    return rc;
}
