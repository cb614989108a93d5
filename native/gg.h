/* Internal declarations shared by the libgpugov sources. */
#ifndef GPUGOV_GG_H
#define GPUGOV_GG_H

#include <stdint.h>
#include <stddef.h>
#include "cuda_types.h"
#include "region_layout.h"

#define GG_EXPORT __attribute__((visibility("default")))
/* dlsym runs inside sanitizer runtimes' own start-up, before shadow memory exists. */
#define GG_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

/* Driver entry points gpugov calls: name, return type, parameter list. */
#define GG_REAL_CUDA(X) \
    X(cuInit, CUresult, (unsigned int)) \
    X(cuCtxGetDevice, CUresult, (CUdevice *)) \
    X(cuDeviceGetCount, CUresult, (int *)) \
    X(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t)) \
    X(cuMemAllocPitch_v2, CUresult, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int)) \
    X(cuMemAllocManaged, CUresult, (CUdeviceptr *, size_t, unsigned int)) \
    X(cuMemFree_v2, CUresult, (CUdeviceptr)) \
    X(cuMemsetD8_v2, CUresult, (CUdeviceptr, unsigned char, size_t)) \
    X(cuMemsetD8Async, CUresult, (CUdeviceptr, unsigned char, size_t, CUstream)) \
    X(cuMemsetD8Async_ptsz, CUresult, (CUdeviceptr, unsigned char, size_t, CUstream)) \
    X(cuMemGetInfo_v2, CUresult, (size_t *, size_t *)) \
    X(cuDeviceTotalMem_v2, CUresult, (size_t *, CUdevice)) \
    X(cuMemGetAddressRange_v2, CUresult, (CUdeviceptr *, size_t *, CUdeviceptr)) \
    X(cuMemAllocAsync, CUresult, (CUdeviceptr *, size_t, CUstream)) \
    X(cuMemAllocAsync_ptsz, CUresult, (CUdeviceptr *, size_t, CUstream)) \
    X(cuMemAllocFromPoolAsync, CUresult, (CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
    X(cuMemAllocFromPoolAsync_ptsz, CUresult, (CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
    X(cuMemFreeAsync, CUresult, (CUdeviceptr, CUstream)) \
    X(cuMemFreeAsync_ptsz, CUresult, (CUdeviceptr, CUstream)) \
    X(cuMemPoolTrimTo, CUresult, (CUmemoryPool, size_t)) \
    X(cuMemPoolDestroy, CUresult, (CUmemoryPool)) \
    X(cuMemPoolCreate, CUresult, (CUmemoryPool *, const CUmemPoolProps *)) \
    X(cuMemPoolGetAttribute, CUresult, (CUmemoryPool, int, void *)) \
    X(cuDeviceGetMemPool, CUresult, (CUmemoryPool *, CUdevice)) \
    X(cuArrayCreate_v2, CUresult, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *)) \
    X(cuArray3DCreate_v2, CUresult, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *)) \
    X(cuArrayDestroy, CUresult, (CUarray)) \
    X(cuMipmappedArrayCreate, CUresult, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int)) \
    X(cuMipmappedArrayDestroy, CUresult, (CUmipmappedArray)) \
    X(cuMemCreate, CUresult, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
    X(cuMemRelease, CUresult, (CUmemGenericAllocationHandle)) \
    X(cuMemUnmap, CUresult, (CUdeviceptr, size_t)) \
    X(cuMemMap, CUresult, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
    X(cuMemAddressReserve, CUresult, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)) \
    X(cuMemAddressFree, CUresult, (CUdeviceptr, size_t)) \
    X(cuMemSetAccess, CUresult, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)) \
    X(cuMemImportFromShareableHandle, CUresult, (CUmemGenericAllocationHandle *, void *, int)) \
    X(cuMemRetainAllocationHandle, CUresult, (CUmemGenericAllocationHandle *, void *)) \
    X(cuMemGetAllocationPropertiesFromHandle, CUresult, (CUmemAllocationProp *, CUmemGenericAllocationHandle)) \
    X(cuMemExportToShareableHandle, CUresult, (void *, CUmemGenericAllocationHandle, int, unsigned long long)) \
    X(cuStreamSynchronize, CUresult, (CUstream)) \
    X(cuIpcGetMemHandle, CUresult, (CUipcMemHandle *, CUdeviceptr)) \
    X(cuMemPoolExportPointer, CUresult, (CUmemPoolPtrExportData *, CUdeviceptr)) \
    X(cuMemPoolImportPointer, CUresult, (CUdeviceptr *, CUmemoryPool, CUmemPoolPtrExportData *)) \
    X(cuArray3DGetDescriptor_v2, CUresult, (CUDA_ARRAY3D_DESCRIPTOR *, CUarray)) \
    X(cuMipmappedArrayGetLevel, CUresult, (CUarray *, CUmipmappedArray, unsigned int)) \
    X(cuMemcpy3D_v2, CUresult, (const CUDA_MEMCPY3D *)) \
    X(cuIpcOpenMemHandle_v2, CUresult, (CUdeviceptr *, CUipcMemHandle, unsigned int)) \
    X(cuIpcCloseMemHandle, CUresult, (CUdeviceptr)) \
    X(cuLaunchKernel, CUresult, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **)) \
    X(cuLaunchKernel_ptsz, CUresult, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **)) \
    X(cuLaunchKernelEx, CUresult, (const CUlaunchConfig *, CUfunction, void **, void **)) \
    X(cuLaunchKernelEx_ptsz, CUresult, (const CUlaunchConfig *, CUfunction, void **, void **)) \
    X(cuLaunchCooperativeKernel, CUresult, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **)) \
    X(cuLaunchCooperativeKernel_ptsz, CUresult, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **)) \
    X(cuGraphLaunch, CUresult, (CUgraphExec, CUstream)) \
    X(cuGraphLaunch_ptsz, CUresult, (CUgraphExec, CUstream)) \
    X(cuEventCreate, CUresult, (CUevent *, unsigned int)) \
    X(cuEventRecord, CUresult, (CUevent, CUstream)) \
    X(cuEventQuery, CUresult, (CUevent)) \
    X(cuEventElapsedTime, CUresult, (float *, CUevent, CUevent)) \
    X(cuEventDestroy_v2, CUresult, (CUevent)) \
    X(cuGetProcAddress, CUresult, (const char *, void **, int, cuuint64_t)) \
    X(cuGetProcAddress_v2, CUresult, (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *)) \
    X(cuDeviceGetUuid, CUresult, (CUuuid *, CUdevice)) \
    X(cuDeviceGetUuid_v2, CUresult, (CUuuid *, CUdevice)) \
    X(cuDeviceGetDefaultMemPool, CUresult, (CUmemoryPool *, CUdevice)) \
    X(cuDeviceGetAttribute, CUresult, (int *, int, CUdevice)) \
    X(cuCtxSetLimit, CUresult, (int, size_t)) \
    X(cuGraphAddMemAllocNode, CUresult, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *)) \
    X(cuGraphDestroy, CUresult, (CUgraph)) \
    X(cuGraphAddNode, CUresult, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *)) \
    X(cuGraphAddNode_v2, CUresult, (CUgraphNode *, CUgraph, const CUgraphNode *, const void *, size_t, CUgraphNodeParams *)) \
    X(cuGraphClone, CUresult, (CUgraph *, CUgraph)) \
    X(cuDeviceGraphMemTrim, CUresult, (CUdevice)) \
    X(cuDeviceGetGraphMemAttribute, CUresult, (CUdevice, int, void *)) \
    X(cuStreamEndCapture, CUresult, (CUstream, CUgraph *)) \
    X(cuStreamEndCapture_ptsz, CUresult, (CUstream, CUgraph *)) \
    X(cuStreamIsCapturing, CUresult, (CUstream, int *)) \
    X(cuStreamIsCapturing_ptsz, CUresult, (CUstream, int *)) \
    X(cuStreamGetDevice, CUresult, (CUstream, CUdevice *)) \
    X(cuStreamGetCtx, CUresult, (CUstream, CUcontext *)) \
    X(cuCtxPushCurrent_v2, CUresult, (CUcontext)) \
    X(cuCtxPopCurrent_v2, CUresult, (CUcontext *)) \
    X(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec *, CUgraph, unsigned long long)) \
    X(cuGraphInstantiateWithParams, CUresult, (CUgraphExec *, CUgraph, void *)) \
    X(cuGraphInstantiateWithParams_ptsz, CUresult, (CUgraphExec *, CUgraph, void *)) \
    X(cuGraphInstantiate_v2, CUresult, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t)) \
    X(cuGraphExecDestroy, CUresult, (CUgraphExec)) \
    X(cuMemPrefetchAsync, CUresult, (CUdeviceptr, size_t, CUdevice, CUstream)) \
    X(cuGraphAddMemFreeNode, CUresult, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr)) \
    X(cuGraphAddMemsetNode, CUresult, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_MEMSET_NODE_PARAMS *, CUcontext)) \
    X(cuCtxGetCurrent, CUresult, (CUcontext *)) \
    X(cuCtxDestroy_v2, CUresult, (CUcontext)) \
    X(cuDevicePrimaryCtxReset_v2, CUresult, (CUdevice)) \
    X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice)) \
    X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice)) \
    X(cuMemPrefetchAsync_ptsz, CUresult, (CUdeviceptr, size_t, CUdevice, CUstream)) \
    X(cuMemPrefetchAsync_v2, CUresult, (CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream)) \
    X(cuMemPrefetchAsync_v2_ptsz, CUresult, (CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream)) \
    X(cuMemAdvise, CUresult, (CUdeviceptr, size_t, int, CUdevice)) \
    X(cuMemAdvise_v2, CUresult, (CUdeviceptr, size_t, int, CUmemLocation)) \
    X(cuGraphInstantiate, CUresult, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t)) \
    X(cuLaunch, CUresult, (CUfunction)) \
    X(cuLaunchGrid, CUresult, (CUfunction, int, int)) \
    X(cuLaunchGridAsync, CUresult, (CUfunction, int, int, CUstream)) \
    X(cuLaunchCooperativeKernelMultiDevice, CUresult, (CUDA_LAUNCH_PARAMS *, unsigned int, unsigned int))

#define GG_REAL_NVML(X) \
    X(nvmlDeviceGetIndex, nvmlReturn_t, (nvmlDevice_t, unsigned int *)) \
    X(nvmlDeviceGetUUID, nvmlReturn_t, (nvmlDevice_t, char *, unsigned int)) \
    X(nvmlDeviceGetComputeRunningProcesses, nvmlReturn_t, (nvmlDevice_t, unsigned int *, void *)) \
    X(nvmlDeviceGetComputeRunningProcesses_v2, nvmlReturn_t, (nvmlDevice_t, unsigned int *, void *)) \
    X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t, (nvmlDevice_t, unsigned int *, void *)) \
    X(nvmlDeviceGetGraphicsRunningProcesses, nvmlReturn_t, (nvmlDevice_t, unsigned int *, void *)) \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlReturn_t, (nvmlDevice_t, unsigned int *, void *)) \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlReturn_t, (nvmlDevice_t, unsigned int *, void *)) \
    X(nvmlDeviceGetMemoryInfo, nvmlReturn_t, (nvmlDevice_t, nvmlMemory_t *)) \
    X(nvmlDeviceGetMemoryInfo_v2, nvmlReturn_t, (nvmlDevice_t, nvmlMemory_v2_t *))

#define GG_DECLARE_PTR(name, ret, args) ret(*name) args;
struct gg_real {
    GG_REAL_CUDA(GG_DECLARE_PTR)
    GG_REAL_NVML(GG_DECLARE_PTR)
};
#undef GG_DECLARE_PTR
extern struct gg_real gg_real;

/* ---- configuration (config.c) ---- */
struct gg_config {
    uint64_t mem_limit[GG_MAX_DEVICES];  /* 0 = unlimited */
    uint32_t core_limit[GG_MAX_DEVICES]; /* 0 = unlimited (unset or 100) */
    int scrub;
    int log_level;
    char region_path[4096];
    int priority;                          /* GPUGOV_TASK_PRIORITY: 0 high, 1 low (default) */
    char qos_dir[4096];                    /* GPUGOV_QOS_DIR: the devices' QoS boards, or "" */
    char qos_self[256];                    /* GPUGOV_QOS_SELF: this pod's file in each */
    int n_uuids;                           /* 0: device index = CUDA ordinal */
    char uuids[GG_MAX_DEVICES][33];        /* GPUGOV_DEVICE_UUIDS, 32 lowercase hex digits */
};
/* Parses env into cfg; on error writes a message into err and returns -1. */
int gg_config_parse(char *const *envp, struct gg_config *cfg, char *err, size_t errlen);
int gg_parse_bytes(const char *s, uint64_t *out);

/* ---- logging (log.c) ---- */
enum { GG_LOG_ERROR = 0, GG_LOG_WARN = 1, GG_LOG_INFO = 2, GG_LOG_DEBUG = 3 };
extern int gg_log_level;
void gg_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- lifecycle (init.c) ---- */
/* Returns CUDA_SUCCESS when the library is usable; the fail-closed error otherwise. */
CUresult gg_ready(void);
int gg_nvml_ready(void);
extern struct gg_config gg_cfg;
void gg_load_real_nvml(void);
void *gg_real_dlsym(void *handle, const char *name);
/* A symbol of the C library (libc.so.6 / libdl.so.2) found in its ELF tables (elfsym.c). */
void *gg_libc_symbol(const char *name);
void *gg_hook_for_symbol(const char *name);
uint64_t gg_now_ns(void);

/* ---- shared region (region.c) ---- */
int gg_region_open(const struct gg_config *cfg, char *err, size_t errlen);
/* Reserves bytes on dev for this process; 0 on success, -1 if over the limit. */
int gg_charge(int dev, uint64_t bytes, int force, uint64_t *limit, uint64_t *in_use);
void gg_uncharge(int dev, uint64_t bytes);
uint64_t gg_device_used(int dev);
uint64_t gg_device_limit(int dev);
uint32_t gg_device_core_limit(int dev);
struct gg_region *gg_region_ptr(void);
void gg_count_launch(int dev);
/* 1 if pid (in the container's namespace) is a live process of this region. */
int gg_region_has_pid(uint32_t pid);
/* The region's monotonic per-device counters (layout v3): device time charged, time waited
 * for tokens, allocations refused at the memory cap. */
void gg_count_device_ns(int dev, int64_t ns);
void gg_count_throttled_ns(int dev, int64_t ns);
void gg_count_refused(int dev);
void gg_region_after_fork(void);
/* Exports (region.c): memory shared between processes of one region is charged once. */
int gg_export_record(int kind, const void *handle, uint64_t ptr, uint64_t bytes, int dev);
/* 1 if a live export by a process of this region covers the handle; ref identifies it. */
int gg_export_cover(int kind, const void *handle, uint64_t *ref);
void gg_export_uncover(uint64_t ref);
/* The exporter frees ptr: returns the bytes now held by an orphan (not to be uncharged). */
uint64_t gg_export_drop(uint64_t ptr);

/* ---- memory (mem.c, vmm.c) ---- */
int gg_charge_or_oom(int dev, uint64_t bytes, const char *api);
/* Region device index of the current context (-1: no context, -2: not accountable). */
int gg_current_device(void);
/* Region device index of the device a stream belongs to (the current context's for the NULL,
 * legacy and per-thread streams); ord gets its CUDA ordinal. -1 unknown, -2 not accountable. */
int gg_stream_device_ord(CUstream s, CUdevice *ord);
int gg_current_device_ord(CUdevice *ord);
/* CUDA ordinal <-> region device index (by UUID when GPUGOV_DEVICE_UUIDS is set). */
int gg_device_index(CUdevice ord);
int gg_device_ordinal(int idx);
void gg_vmm_after_fork(void);

/* ---- allocation tracking (track.c) ---- */
enum { GG_KIND_LINEAR = 1, GG_KIND_ASYNC, GG_KIND_ARRAY, GG_KIND_MIPMAP, GG_KIND_VMM, GG_KIND_IPC, GG_KIND_POOL,
       GG_KIND_VMM_IMPORT, /* imported VMM handle: bytes = charged so far (largest mapped extent) */
       GG_KIND_VMAP,       /* a VMM mapping: key = address, bytes = size, aux = handle */
       GG_KIND_IPC_SHARED, /* an import covered by a same-region export: aux = export ref */
       GG_KIND_IPC_REF,    /* key = export ref: bytes = imports of it open in this process */
       GG_KIND_CAPTURE,    /* memory nodes captured on a stream: key = stream ^ device, bytes */
       GG_KIND_GRAPH,      /* memory nodes of a graph: key = graph ^ device, bytes */
       GG_KIND_VMM_EXPORTED, /* a VMM handle exported to a shareable handle (key = handle) */
       GG_KIND_EXEC,       /* memory nodes of an executable graph: key = exec ^ device, bytes */
       GG_KIND_GRAPHPTR,   /* the address of a graph allocation (memory node): key = address */
       GG_KIND_CTXLIMIT }; /* a context's cuCtxSetLimit memory: key = context ^ limit << 60 */
struct gg_entry {
    uint64_t key;
    uint64_t bytes;
    uint64_t aux; /* pool handle for async allocations */
    int32_t dev;
    int32_t kind; /* 0 = empty, -1 = tombstone */
};
void gg_track_put(int kind, uint64_t key, uint64_t bytes, int dev, uint64_t aux);
/* Removes and returns the entry; returns 0 if unknown. */
int gg_track_take(int kind, uint64_t key, struct gg_entry *out);
int gg_track_get(int kind, uint64_t key, struct gg_entry *out);
void gg_track_update(int kind, uint64_t key, uint64_t bytes);
void gg_track_reset(void);

/* ---- compute throttle (throttle.c) ---- */
/* Called before a launch on stream (of region device dev): waits for tokens and for room in
 * flight, starts timing the launch. Returns a record id (>= 0) for gg_throttle_after, or -1. */
int gg_throttle_before(int dev, CUstream stream);
void gg_throttle_after(int dev, int rec, CUstream stream, CUresult rc);
void gg_throttle_after_fork(void);

/* Settles this process's completed launches on dev without waiting; returns how many are
 * still in flight on the device, or -1 if another thread holds its state (qos watcher). */
int gg_throttle_poll(int dev);

/* ---- QoS floor and in-GPU priority (qos.c) ---- */
/* One entry of a pod's QoS board file (GPUGOV_QOS_DIR/<device index>/<pod>): up to
 * GG_QOS_ENTRIES of 64 bytes, one per process of the pod (claimed by an OFD lock on its byte). */
#define GG_QOS_MAGIC 0x31534f51474755ULL /* "UGGQOS1" */
#define GG_QOS_ENTRIES 64
struct gg_qos_entry {
    uint64_t magic;
    uint64_t heartbeat_ns;  /* CLOCK_MONOTONIC of the last write */
    uint64_t next_ns;       /* high: when it launches next (sleeping on its quota), or 0;
                             * low: when it claimed its newest kernel */
    uint32_t inflight;      /* high: its launches in flight on the device;
                             * low: that kernel's device time (us) */
    uint32_t kind;          /* GG_QOS_HIGH or GG_QOS_LOW */
    uint64_t until_ns;      /* low: heartbeat + device time of its work in flight */
    uint32_t pid;           /* informative only */
    uint32_t reserved0;
    uint64_t wait_ns;       /* low: waiting to launch since (0: not waiting) */
    uint64_t reserved;
};
_Static_assert(sizeof(struct gg_qos_entry) == 64, "QoS entry is 64 bytes");
enum { GG_QOS_NONE = 0, GG_QOS_HIGH = 1, GG_QOS_LOW = 2 };
int gg_qos_configured(void);
/* This process's role on dev (opens the device's board at first use). */
int gg_qos_role(int dev);
/* High priority: publishes launches in flight and the next planned launch (0: none,
 * GG_QOS_KEEP: the one published before). */
#define GG_QOS_KEEP UINT64_MAX
void gg_qos_publish(int dev, uint32_t inflight, uint64_t next_ns);
/* Low priority: 1 while a high-priority process is registered on dev. */
int gg_qos_present(int dev); /* 0 absent, 1 present, 2 present with a planned launch */
/* Low priority: waits (bounded) while high-priority work is in flight or about to start. */
uint64_t gg_qos_yield(int dev, int64_t expect_ns);
void gg_qos_after_fork(void);

/* ---- test-only hooks, compiled in with -DGPUGOV_TEST_HOOKS ---- */
void gg_test_hold_lock(void);

#endif
