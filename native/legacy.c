/* Entry points that would reach the driver around the wrappers, refused consistently on
 * every path (direct linking, dlsym, cuGetProcAddress):
 * - the pre-3.2 / pre-11.0 exports the driver still has (32-bit cuMemAlloc, cuArrayCreate
 *   with a 32-bit descriptor, cuIpcOpenMemHandle v1, …): cuGetProcAddress refuses them for
 *   old versions, so the same names are refused here for linkers and dlsym;
 * - dlmopen of the driver or NVML into a new link-map namespace: that copy would not see
 *   the preloaded wrappers at all. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dlmopen, Lmid_t */
#endif
#include <dlfcn.h>
#include <string.h>
#include "gg.h"

static void refuse(const char *name) {
    gg_log(GG_LOG_ERROR, "refusing %s: a legacy driver entry point gpugov does not enforce; "
           "use its current (_v2) variant", name);
}

#define GG_LEGACY(name)                            \
    GG_EXPORT CUresult name(void) {                \
        CUresult rc_ = gg_ready();                 \
        if (rc_) return rc_;                       \
        refuse(#name);                             \
        return CUDA_ERROR_NOT_SUPPORTED;           \
    }

/* Called with their real arguments by old callers; refusing reads none of them. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wbuiltin-declaration-mismatch"
GG_LEGACY(cuMemAlloc)
GG_LEGACY(cuMemAllocPitch)
GG_LEGACY(cuArrayCreate)
GG_LEGACY(cuArray3DCreate)
GG_LEGACY(cuIpcOpenMemHandle)
GG_LEGACY(cuMemGetInfo)
GG_LEGACY(cuDeviceTotalMem)
#pragma GCC diagnostic pop

static int is_governed_library(const char *file) {
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file;
    return base && (strncmp(base, "libcuda.so", 10) == 0 || strncmp(base, "libnvidia-ml.so", 15) == 0);
}

GG_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int flags) {
    static void *(*real)(Lmid_t, const char *, int);
    if (lmid != LM_ID_BASE && is_governed_library(file)) {
        gg_log(GG_LOG_ERROR, "refusing dlmopen of %s into a new namespace: that copy of the driver "
               "would not be governed", file);
        return NULL;
    }
    if (!real) *(void **)&real = gg_real_dlsym(RTLD_NEXT, "dlmopen");
    return real ? real(lmid, file, flags) : NULL;
}
