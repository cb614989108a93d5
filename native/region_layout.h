/* gpugov shared accounting region: the single source of truth for its binary
 * layout. C includes this file; gpugov/node/region.py parses it. Keep to the
 * restricted grammar the parser understands: `#define NAME number` and structs
 * of fixed-width fields `uintN_t name;` / `uintN_t name[CONST];` / nested
 * `struct gg_x name[CONST];`, every field naturally aligned (no implicit padding).
 * Any layout change must bump GG_REGION_VERSION. */
#ifndef GPUGOV_REGION_LAYOUT_H
#define GPUGOV_REGION_LAYOUT_H

#include <stdint.h>

#define GG_REGION_MAGIC 0x3152564f47555047 /* "GPUGOVR1" little-endian */
#define GG_REGION_VERSION 3
#define GG_MAX_DEVICES 16
#define GG_MAX_SLOTS 256
#define GG_LOCK_BYTES 64

#define GG_SLOT_FREE 0
#define GG_SLOT_ACTIVE 1
#define GG_MAX_EXPORTS 256

#define GG_EXPORT_FREE 0
#define GG_EXPORT_LIVE 1                /* the exporter (a slot of this region) holds the charge */
#define GG_EXPORT_ORPHAN 2              /* the exporter freed or died while imports were open */
#define GG_EXPORT_KIND_IPC 1            /* cuIpcGetMemHandle */
#define GG_EXPORT_KIND_POOL_PTR 2       /* cuMemPoolExportPointer */

struct gg_slot {
    uint64_t seq;                      /* seqlock: odd while the slot is being written */
    uint32_t state;                    /* GG_SLOT_FREE or GG_SLOT_ACTIVE */
    uint32_t pid;                      /* pid in the container's namespace */
    uint32_t host_pid;                 /* unused (0); detection never reads it: container-writable */
    uint32_t reserved0;
    uint64_t start_ticks;              /* /proc/<pid>/stat starttime, detects pid reuse */
    uint64_t used[GG_MAX_DEVICES];     /* device bytes charged to this process */
    uint64_t launches[GG_MAX_DEVICES]; /* kernel and graph launches seen */
};

/* An allocation exported by a process of this region: imports of the same handle by
 * processes of this region are not charged again (one charge per container). */
struct gg_export {
    uint8_t handle[64];                /* the exported handle's bytes, as the importer sees them */
    uint64_t gen;                      /* bumped each time the entry is reused */
    uint64_t ptr;                      /* exporter's device address of the allocation */
    uint64_t bytes;                    /* bytes charged for it (to the exporter, or the orphan) */
    uint64_t importers[4];             /* bitmap of slot indexes holding an uncharged import */
    uint32_t state;                    /* GG_EXPORT_FREE, _LIVE or _ORPHAN */
    uint32_t slot;                     /* exporter's slot index */
    uint32_t dev;
    uint32_t kind;                     /* GG_EXPORT_KIND_* */
};

struct gg_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_bytes;
    uint32_t slot_bytes;
    uint32_t max_slots;
    uint32_t max_devices;
    uint32_t initialized;              /* 1 once the creator finished */
    uint8_t lock[GG_LOCK_BYTES];       /* process-shared robust pthread mutex */
    uint64_t mem_limit[GG_MAX_DEVICES];  /* bytes; 0 = unlimited */
    uint64_t core_limit[GG_MAX_DEVICES]; /* percent 1..100; 0 = unlimited */
    uint64_t used[GG_MAX_DEVICES];       /* sum of live slots' used, kept under lock */
    int64_t tokens_ns[GG_MAX_DEVICES];   /* compute throttle bucket, device-ns */
    uint64_t refill_ns[GG_MAX_DEVICES];  /* CLOCK_MONOTONIC of last refill */
    uint64_t recoveries;               /* times a dead lock owner was recovered */
    uint64_t reaped;                   /* slots of dead processes released */
    /* monotonic counters per device, added to atomically, never reset (layout v3) */
    uint64_t device_ns[GG_MAX_DEVICES];    /* device time charged by the compute throttle, ns */
    uint64_t throttled_ns[GG_MAX_DEVICES]; /* time launches waited for tokens, ns */
    uint64_t refused[GG_MAX_DEVICES];      /* allocations refused at the memory cap */
};

struct gg_region {
    struct gg_header header;
    struct gg_slot slots[GG_MAX_SLOTS];
    struct gg_export exports[GG_MAX_EXPORTS];
};

#endif
