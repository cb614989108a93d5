/* The table of exported wrappers, used to answer dlsym and cuGetProcAddress. */
#include <string.h>
#include "gg.h"

#define GG_HOOKED(X) \
    X(cuInit) X(cuGetProcAddress) X(cuGetProcAddress_v2) \
    X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemFree_v2) \
    X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync) \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) \
    X(cuMemPoolTrimTo) X(cuMemPoolDestroy) X(cuArrayCreate_v2) X(cuArray3DCreate_v2) \
    X(cuArrayDestroy) X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy) X(cuMemCreate) \
    X(cuMemRelease) X(cuMemUnmap) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle) \
    X(cuMemMap) X(cuMemImportFromShareableHandle) X(cuMemRetainAllocationHandle) X(cuIpcGetMemHandle) \
    X(cuMemPoolExportPointer) X(cuMemPoolImportPointer) \
    X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2) \
    X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) \
    X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch) \
    X(cuGraphLaunch_ptsz) X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2) \
    X(cuMemPoolCreate) X(cuGraphAddMemAllocNode) X(cuGraphDestroy) X(cuStreamEndCapture) \
    X(cuStreamEndCapture_ptsz) X(cuCtxSetLimit) X(cuLaunch) X(cuLaunchGrid) X(cuLaunchGridAsync) \
    X(cuLaunchCooperativeKernelMultiDevice) X(cuMemAlloc) X(cuMemAllocPitch) X(cuArrayCreate) \
    X(cuArray3DCreate) X(cuIpcOpenMemHandle) X(cuMemGetInfo) X(cuDeviceTotalMem) X(cuGraphAddNode) \
    X(cuGraphAddNode_v2) X(cuGraphClone) X(cuDeviceGraphMemTrim) X(cuMemExportToShareableHandle) \
    X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams) X(cuGraphInstantiateWithParams_ptsz) \
    X(cuGraphInstantiate_v2) X(cuGraphExecDestroy) X(cuGraphInstantiate) \
    X(nvmlDeviceGetComputeRunningProcesses) X(nvmlDeviceGetComputeRunningProcesses_v2) \
    X(nvmlDeviceGetComputeRunningProcesses_v3) X(nvmlDeviceGetGraphicsRunningProcesses) \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2) X(nvmlDeviceGetGraphicsRunningProcesses_v3) \
    X(cuMemPrefetchAsync) X(cuMemPrefetchAsync_ptsz) X(cuMemPrefetchAsync_v2) X(cuMemPrefetchAsync_v2_ptsz) \
    X(cuMemAdvise) X(cuMemAdvise_v2) X(cuGraphAddMemFreeNode) \
    X(cuCtxDestroy_v2) X(cuDevicePrimaryCtxReset_v2)

struct hook { const char *name; void *fn; };

/* Prototypes are in the defining files; here only addresses are needed. */
#define GG_PROTO(name) void name(void);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wbuiltin-declaration-mismatch"
GG_HOOKED(GG_PROTO)
#pragma GCC diagnostic pop

#define GG_ENTRY(name) {#name, (void *)name},
static const struct hook hooks[] = {GG_HOOKED(GG_ENTRY)};

GG_NO_SANITIZE void *gg_hook_for_symbol(const char *name) {
    for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++)
        if (strcmp(hooks[i].name, name) == 0) return hooks[i].fn;
    return NULL;
}
