/* The shared accounting region: one file-backed mapping per container, a robust
 * process-shared mutex (a holder killed by SIGKILL is recovered, never waited on),
 * and one slot per process whose usage is released once the process is found dead.
 * A slot is alive while its process holds an open-file-description lock on the slot's
 * byte of the region file: the kernel drops it when the process exits or execs (the
 * descriptor is close-on-exec), whatever PID namespace the reader is in, and a zombie
 * holds none. Every index read from the file is checked before use: the file is writable
 * by every process of the container, so a corrupt one is refused, never trusted. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_*, memfd_create, dup3 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "gg.h"

_Static_assert(sizeof(pthread_mutex_t) <= GG_LOCK_BYTES, "mutex does not fit the lock area");
_Static_assert(sizeof(struct gg_header) % 8 == 0, "header must keep 8-byte alignment");

static struct gg_region *R;
static int my_slot = -1;
/* Set (under the region lock) once this process's slot was released at exit: later charges
 * (other libraries' destructors, threads still running) are refused and credits ignored,
 * never written through a released slot. */
static int slot_released;
static int lock_fd = -1; /* this process's own open file description of the region */

/* A new open file description of the file fd refers to. Liveness locks live on one that
 * nothing else refers to: a mapping holds its description until it is unmapped (and a
 * forked child inherits the mapping), so the lock must not be on the mapped one. */
static int own_description(int fd) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return open(path, O_RDWR | O_CLOEXEC);
}

struct gg_region *gg_region_ptr(void) { return R; }
static pthread_mutex_t *region_mutex(void) { return (pthread_mutex_t *)(void *)R->header.lock; }

static uint64_t start_ticks_of(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may contain spaces; fields resume after ')' */
    if (!p) return 0;
    /* after ") " comes field 3; starttime is field 22 */
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Takes (F_OFD_SETLK) or tests (F_OFD_GETLK) the liveness lock of slot i. */
static int slot_lock(int i, int cmd, struct flock *fl) {
    memset(fl, 0, sizeof(*fl));
    fl->l_type = F_WRLCK;
    fl->l_whence = SEEK_SET;
    fl->l_start = i;
    fl->l_len = 1;
    return fcntl(lock_fd, cmd, fl);
}

/* Alive while some open file description holds the slot's lock. */
static int slot_alive(int i) {
    struct flock fl;
    if (lock_fd < 0 || slot_lock(i, F_OFD_GETLK, &fl) != 0) return 1; /* cannot tell: keep it */
    return fl.l_type != F_UNLCK;
}

static void slot_begin(struct gg_slot *s) {
    __atomic_add_fetch(&s->seq, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}
static void slot_end(struct gg_slot *s) {
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_add_fetch(&s->seq, 1, __ATOMIC_RELAXED);
}

static void clear_slot(struct gg_slot *s) {
    slot_begin(s);
    memset(s->used, 0, sizeof(s->used));
    memset(s->launches, 0, sizeof(s->launches));
    s->pid = 0;
    s->host_pid = 0;
    s->start_ticks = 0;
    s->state = GG_SLOT_FREE;
    slot_end(s);
}

static void bit_set(uint64_t *bits, int i) { bits[i >> 6] |= 1ULL << (i & 63); }
static void bit_clear(uint64_t *bits, int i) { bits[i >> 6] &= ~(1ULL << (i & 63)); }
static int bits_any(const uint64_t *bits) { return (bits[0] | bits[1] | bits[2] | bits[3]) != 0; }

static void clear_export(struct gg_export *x) {
    uint64_t gen = x->gen + 1;
    memset(x, 0, sizeof(*x));
    x->gen = gen;
}

/* Every field used as an index or a state, as read from the (writable) file, is in range. */
static int export_sane(const struct gg_export *x) {
    if (x->state == GG_EXPORT_FREE) return 1;
    return (x->state == GG_EXPORT_LIVE || x->state == GG_EXPORT_ORPHAN) && x->slot < GG_MAX_SLOTS
           && x->dev < GG_MAX_DEVICES
           && (x->kind == GG_EXPORT_KIND_IPC || x->kind == GG_EXPORT_KIND_POOL_PTR);
}
static int live_export(const struct gg_export *x) { return x->state != GG_EXPORT_FREE && export_sane(x); }

/* A region whose header, slots or exports hold values no gpugov process writes is refused:
 * one message, fail closed. Caller holds the lock. */
static int region_sane_locked(char *err, size_t errlen, const char *path) {
    const struct gg_header *h = &R->header;
    if (h->header_bytes != sizeof(struct gg_header) || h->slot_bytes != sizeof(struct gg_slot)
        || h->max_slots != GG_MAX_SLOTS || h->max_devices != GG_MAX_DEVICES) {
        snprintf(err, errlen, "shared region %s is corrupt: header sizes %u/%u/%u/%u, expected "
                 "%zu/%zu/%d/%d", path, h->header_bytes, h->slot_bytes, h->max_slots,
                 h->max_devices, sizeof(struct gg_header), sizeof(struct gg_slot), GG_MAX_SLOTS,
                 GG_MAX_DEVICES);
        return -1;
    }
    for (int d = 0; d < GG_MAX_DEVICES; d++)
        if (h->core_limit[d] > 100) {
            snprintf(err, errlen, "shared region %s is corrupt: device %d core limit %llu, "
                     "allowed 0..100", path, d, (unsigned long long)h->core_limit[d]);
            return -1;
        }
    for (int i = 0; i < GG_MAX_SLOTS; i++)
        if (R->slots[i].state != GG_SLOT_FREE && R->slots[i].state != GG_SLOT_ACTIVE) {
            snprintf(err, errlen, "shared region %s is corrupt: slot %d has state %u, allowed 0 "
                     "or 1", path, i, R->slots[i].state);
            return -1;
        }
    for (int k = 0; k < GG_MAX_EXPORTS; k++) {
        const struct gg_export *x = &R->exports[k];
        if (!export_sane(x)) {
            snprintf(err, errlen, "shared region %s is corrupt: export %d has state %u, slot %u, "
                     "device %u, kind %u (allowed: state 0-2, slot < %d, device < %d, kind 1-2)",
                     path, k, x->state, x->slot, x->dev, x->kind, GG_MAX_SLOTS, GG_MAX_DEVICES);
            return -1;
        }
    }
    return 0;
}

/* An orphan holds its bytes in header.used without a slot; the last import closing frees them. */
static void release_orphan_if_unused(struct gg_export *x) {
    if (x->state != GG_EXPORT_ORPHAN || bits_any(x->importers)) return;
    uint32_t d = x->dev;
    R->header.used[d] = R->header.used[d] > x->bytes ? R->header.used[d] - x->bytes : 0;
    clear_export(x);
}

/* Slot i is going away (exit or death) after its usage was subtracted from header.used:
 * its exports that others still import become orphans (their bytes stay charged), and
 * its uncharged imports stop holding others' exports. Caller holds the lock. */
static void slot_gone_locked(int i) {
    for (int k = 0; k < GG_MAX_EXPORTS; k++) {
        struct gg_export *x = &R->exports[k];
        if (!live_export(x)) continue;
        bit_clear(x->importers, i);
        if (x->state == GG_EXPORT_LIVE && x->slot == (uint32_t)i) {
            if (x->kind == GG_EXPORT_KIND_IPC && bits_any(x->importers)) {
                x->state = GG_EXPORT_ORPHAN;
                R->header.used[x->dev] += x->bytes;
            } else {
                clear_export(x);
            }
        }
        release_orphan_if_unused(x);
    }
}

/* Releases slots of dead processes. Caller holds the lock. */
static void reap_dead_locked(void) {
    for (int i = 0; i < GG_MAX_SLOTS; i++) {
        struct gg_slot *s = &R->slots[i];
        if (s->state != GG_SLOT_ACTIVE || i == my_slot) continue;
        if (slot_alive(i)) continue;
        for (int d = 0; d < GG_MAX_DEVICES; d++)
            R->header.used[d] = R->header.used[d] > s->used[d] ? R->header.used[d] - s->used[d] : 0;
        gg_log(GG_LOG_INFO, "released slot %d of dead process %u", i, s->pid);
        clear_slot(s);
        slot_gone_locked(i);
        R->header.reaped++;
    }
}

/* After a holder died mid-update the totals may disagree with the slots: recompute them. */
static void rebuild_locked(void) {
    reap_dead_locked();
    for (int d = 0; d < GG_MAX_DEVICES; d++) {
        uint64_t sum = 0;
        for (int i = 0; i < GG_MAX_SLOTS; i++)
            if (R->slots[i].state == GG_SLOT_ACTIVE) sum += R->slots[i].used[d];
        for (int k = 0; k < GG_MAX_EXPORTS; k++)
            if (live_export(&R->exports[k]) && R->exports[k].state == GG_EXPORT_ORPHAN
                && R->exports[k].dev == (uint32_t)d)
                sum += R->exports[k].bytes;
        R->header.used[d] = sum;
    }
    for (int i = 0; i < GG_MAX_SLOTS; i++) /* an odd seqlock left by the dead writer */
        if (R->slots[i].seq & 1) R->slots[i].seq++;
}

static void lock_region(void) {
    int rc = pthread_mutex_lock(region_mutex());
    if (rc == EOWNERDEAD) {
        gg_log(GG_LOG_WARN, "shared region lock owner died; recovering");
        R->header.recoveries++;
        rebuild_locked();
        pthread_mutex_consistent(region_mutex());
    } else if (rc != 0) {
        gg_log(GG_LOG_ERROR, "shared region lock failed: %s", strerror(rc));
        abort(); /* an unusable lock would silently disable accounting */
    }
}
static void unlock_region(void) { pthread_mutex_unlock(region_mutex()); }

static int init_mutex(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(region_mutex(), &a);
    pthread_mutexattr_destroy(&a);
    return rc;
}

static void init_header(const struct gg_config *cfg) {
    memset(R, 0, sizeof(*R));
    R->header.version = GG_REGION_VERSION;
    R->header.header_bytes = sizeof(struct gg_header);
    R->header.slot_bytes = sizeof(struct gg_slot);
    R->header.max_slots = GG_MAX_SLOTS;
    R->header.max_devices = GG_MAX_DEVICES;
    for (int d = 0; d < GG_MAX_DEVICES; d++) {
        R->header.mem_limit[d] = cfg->mem_limit[d];
        R->header.core_limit[d] = cfg->core_limit[d];
    }
    init_mutex();
    __atomic_store_n(&R->header.initialized, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&R->header.magic, (uint64_t)GG_REGION_MAGIC, __ATOMIC_RELEASE);
}

static int map_file(const struct gg_config *cfg, char *err, size_t errlen) {
    const char *path = cfg->region_path;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    struct stat st;
    if (fd < 0) {
        snprintf(err, errlen, "cannot open shared region %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) { /* flock dies with its holder */
        snprintf(err, errlen, "cannot lock shared region %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    int fresh = st.st_size == 0;
    if (!fresh && (size_t)st.st_size != sizeof(struct gg_region)) {
        snprintf(err, errlen, "shared region %s has %lld bytes, layout v%d needs %zu: "
                 "written by another gpugov version?", path, (long long)st.st_size,
                 GG_REGION_VERSION, sizeof(struct gg_region));
        close(fd);
        return -1;
    }
    if (fresh && ftruncate(fd, sizeof(struct gg_region)) != 0) {
        snprintf(err, errlen, "cannot size shared region %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, sizeof(struct gg_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map shared region %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    R = p;
    if (fresh || R->header.magic != GG_REGION_MAGIC || !R->header.initialized) {
        if (!fresh && R->header.magic != GG_REGION_MAGIC && R->header.magic != 0) {
            snprintf(err, errlen, "shared region %s has a foreign magic number", path);
            munmap(p, sizeof(struct gg_region));
            close(fd);
            R = NULL;
            return -1;
        }
        init_header(cfg); /* fresh, or its creator was killed before finishing */
    } else if (R->header.version != GG_REGION_VERSION) {
        snprintf(err, errlen, "shared region %s has layout v%u, this library speaks v%d", path,
                 R->header.version, GG_REGION_VERSION);
        munmap(p, sizeof(struct gg_region));
        close(fd);
        R = NULL;
        return -1;
    }
    flock(fd, LOCK_UN);
    /* kept open (close-on-exec): its slot lock is this process's liveness */
    lock_fd = own_description(fd);
    if (lock_fd < 0) lock_fd = open(path, O_RDWR | O_CLOEXEC);
    close(fd);
    if (lock_fd < 0) {
        snprintf(err, errlen, "cannot reopen shared region %s: %s", path, strerror(errno));
        munmap(p, sizeof(struct gg_region));
        R = NULL;
        return -1;
    }
    return 0;
}

static void fmt_limit(char *buf, size_t n, uint64_t v, int core) {
    if (!v) snprintf(buf, n, "unlimited");
    else snprintf(buf, n, core ? "%llu%%" : "%llu bytes", (unsigned long long)v);
}

/* The region's limits against this process's environment. A region no live process uses
 * (a restarted or resized container) takes the environment's limits; one in use keeps its
 * own, and a process whose environment disagrees is refused: the processes of one
 * container must agree on its quota. Caller holds the lock. Returns -1 on a mismatch. */
static int reconcile_limits_locked(const struct gg_config *cfg, char *err, size_t errlen) {
    int live = 0;
    for (int i = 0; i < GG_MAX_SLOTS; i++) live += R->slots[i].state == GG_SLOT_ACTIVE;
    for (int d = 0; d < GG_MAX_DEVICES; d++) {
        int mem = R->header.mem_limit[d] != cfg->mem_limit[d];
        int core = R->header.core_limit[d] != cfg->core_limit[d];
        if (!mem && !core) continue;
        char have[48], want[48];
        fmt_limit(have, sizeof(have), mem ? R->header.mem_limit[d] : R->header.core_limit[d], !mem);
        fmt_limit(want, sizeof(want), mem ? cfg->mem_limit[d] : cfg->core_limit[d], !mem);
        const char *what = mem ? "memory limit" : "core limit";
        if (live) {
            snprintf(err, errlen, "device %d: %s in the environment (%s) differs from the shared "
                     "region %s (%s), which %d running process%s of this container use%s; the "
                     "region's limit stays and this process is refused", d, what, want,
                     cfg->region_path, have, live, live == 1 ? "" : "es", live == 1 ? "s" : "");
            return -1;
        }
        gg_log(GG_LOG_WARN, "device %d: %s in the shared region %s was %s, the environment says "
               "%s; no process uses the region, so the environment's limit applies", d, what,
               cfg->region_path, have, want);
        R->header.mem_limit[d] = cfg->mem_limit[d];
        R->header.core_limit[d] = cfg->core_limit[d];
        R->header.tokens_ns[d] = 0;
        R->header.refill_ns[d] = 0;
    }
    return 0;
}

static int claim_slot(const struct gg_config *cfg, char *err, size_t errlen) {
    uint32_t pid = (uint32_t)getpid();
    uint64_t ticks = start_ticks_of((pid_t)pid);
    lock_region();
    my_slot = -1;
    if (region_sane_locked(err, errlen, cfg->region_path[0] ? cfg->region_path : "(private)") != 0) {
        unlock_region();
        return -1;
    }
    reap_dead_locked();
    if (cfg->region_path[0] && reconcile_limits_locked(cfg, err, errlen) != 0) {
        unlock_region();
        return -1;
    }
    for (int i = 0; i < GG_MAX_SLOTS; i++) {
        struct gg_slot *s = &R->slots[i];
        struct flock fl;
        if (s->state != GG_SLOT_FREE || slot_lock(i, F_OFD_SETLK, &fl) != 0) continue;
        slot_begin(s);
        memset(s->used, 0, sizeof(s->used));
        memset(s->launches, 0, sizeof(s->launches));
        s->pid = pid;
        s->host_pid = 0;
        s->start_ticks = ticks;
        s->state = GG_SLOT_ACTIVE;
        slot_end(s);
        my_slot = i;
        break;
    }
    unlock_region();
    if (my_slot < 0) {
        snprintf(err, errlen, "shared region is full: %d processes already registered", GG_MAX_SLOTS);
        return -1;
    }
    return 0;
}

int gg_region_open(const struct gg_config *cfg, char *err, size_t errlen) {
    if (!R) {
        if (cfg->region_path[0]) {
            if (map_file(cfg, err, errlen) != 0) return -1;
        } else {
            int fd = memfd_create("gpugov-region", MFD_CLOEXEC); /* a file, for the slot locks */
            void *p = fd < 0 || ftruncate(fd, sizeof(struct gg_region)) != 0 ? MAP_FAILED
                      : mmap(NULL, sizeof(struct gg_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED) {
                snprintf(err, errlen, "cannot map a private region: %s", strerror(errno));
                if (fd >= 0) close(fd);
                return -1;
            }
            lock_fd = own_description(fd);
            close(fd);
            if (lock_fd < 0) {
                snprintf(err, errlen, "cannot reopen a private region: %s", strerror(errno));
                munmap(p, sizeof(struct gg_region));
                return -1;
            }
            R = p;
            init_header(cfg);
            static int warned;
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                gg_log(GG_LOG_WARN, "GPUGOV_SHARED_REGION is unset: using a private region, so "
                       "the limits apply to each process separately (a container running N "
                       "processes can use N times its quota)");
        }
    }
    return claim_slot(cfg, err, errlen);
}

int gg_charge(int dev, uint64_t bytes, int force, uint64_t *limit, uint64_t *in_use) {
    lock_region();
    uint64_t lim = R->header.mem_limit[dev];
    if (my_slot < 0 || slot_released) { /* after exit released the slot: nothing to charge to */
        *limit = lim;
        *in_use = R->header.used[dev];
        unlock_region();
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            gg_log(GG_LOG_ERROR, "device %d: refusing %llu bytes requested after this process "
                   "released its accounting at exit", dev, (unsigned long long)bytes);
        return -1;
    }
    struct gg_slot *s = &R->slots[my_slot];
    /* used + bytes > lim, written so that no operand can wrap */
#define GG_OVER(used) ((bytes) > UINT64_MAX - (used) || (lim && (!force) && ((bytes) > lim || (used) > lim - (bytes))))
    if (GG_OVER(R->header.used[dev])) {
        reap_dead_locked();
        if (GG_OVER(R->header.used[dev])) {
            *limit = lim;
            *in_use = R->header.used[dev];
            unlock_region();
            return -1;
        }
    }
#undef GG_OVER
    slot_begin(s);
    s->used[dev] += bytes;
    R->header.used[dev] += bytes;
    slot_end(s);
    gg_test_hold_lock();
    unlock_region();
    return 0;
}

void gg_uncharge(int dev, uint64_t bytes) {
    lock_region();
    if (my_slot < 0 || slot_released) { /* the exit already credited everything this process held */
        unlock_region();
        return;
    }
    struct gg_slot *s = &R->slots[my_slot];
    uint64_t b = s->used[dev] < bytes ? s->used[dev] : bytes;
    slot_begin(s);
    s->used[dev] -= b;
    R->header.used[dev] = R->header.used[dev] > b ? R->header.used[dev] - b : 0;
    slot_end(s);
    unlock_region();
}

uint64_t gg_device_used(int dev) { return __atomic_load_n(&R->header.used[dev], __ATOMIC_RELAXED); }
uint64_t gg_device_limit(int dev) { return R->header.mem_limit[dev]; }
uint32_t gg_device_core_limit(int dev) { return (uint32_t)R->header.core_limit[dev]; }

int gg_region_has_pid(uint32_t pid) {
    if (!R || !pid) return 0;
    for (int i = 0; i < GG_MAX_SLOTS; i++)
        if (__atomic_load_n(&R->slots[i].state, __ATOMIC_ACQUIRE) == GG_SLOT_ACTIVE
            && __atomic_load_n(&R->slots[i].pid, __ATOMIC_RELAXED) == pid)
            return 1;
    return 0;
}

void gg_count_launch(int dev) {
    int i = __atomic_load_n(&my_slot, __ATOMIC_ACQUIRE);
    if (i >= 0 && !__atomic_load_n(&slot_released, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&R->slots[i].launches[dev], 1, __ATOMIC_RELAXED);
}

void gg_count_device_ns(int dev, int64_t ns) {
    if (ns > 0) __atomic_add_fetch(&R->header.device_ns[dev], (uint64_t)ns, __ATOMIC_RELAXED);
}

void gg_count_throttled_ns(int dev, int64_t ns) {
    if (ns > 0) __atomic_add_fetch(&R->header.throttled_ns[dev], (uint64_t)ns, __ATOMIC_RELAXED);
}

void gg_count_refused(int dev) { __atomic_add_fetch(&R->header.refused[dev], 1, __ATOMIC_RELAXED); }

/* A forked child owns no device memory; it registers its own slot on first use. Its copy of
 * the parent's descriptor shares the parent's open file description (and so its slot
 * lock): the child reopens the file to get its own, so the parent's death is still seen. */
void gg_region_after_fork(void) {
    my_slot = -1;
    slot_released = 0;
    if (lock_fd < 0) return;
    int fd = own_description(lock_fd);
    if (fd >= 0) {
        dup3(fd, lock_fd, O_CLOEXEC); /* lock_fd now names the child's own description */
        close(fd);
    }
}

__attribute__((destructor)) static void release_slot(void) {
    if (!R || my_slot < 0 || R->slots[my_slot].pid != (uint32_t)getpid()) return;
    lock_region();
    struct gg_slot *s = &R->slots[my_slot];
    for (int d = 0; d < GG_MAX_DEVICES; d++)
        R->header.used[d] = R->header.used[d] > s->used[d] ? R->header.used[d] - s->used[d] : 0;
    clear_slot(s);
    slot_gone_locked(my_slot);
    __atomic_store_n(&slot_released, 1, __ATOMIC_RELEASE);
    my_slot = -1;
    unlock_region();
}

/* ---- exports: one charge per container for memory shared between its processes ---- */

static struct gg_export *find_export(int kind, const void *handle) {
    for (int k = 0; k < GG_MAX_EXPORTS; k++) {
        struct gg_export *x = &R->exports[k];
        if (live_export(x) && x->kind == (uint32_t)kind
            && memcmp(x->handle, handle, sizeof(x->handle)) == 0)
            return x;
    }
    return NULL;
}

int gg_export_record(int kind, const void *handle, uint64_t ptr, uint64_t bytes, int dev) {
    if (my_slot < 0) return -1;
    lock_region();
    if (my_slot < 0) { /* released at exit meanwhile */
        unlock_region();
        return -1;
    }
    struct gg_export *x = find_export(kind, handle), *slot = NULL;
    if (x && x->state == GG_EXPORT_LIVE && x->slot == (uint32_t)my_slot) {
        unlock_region();
        return 0; /* exported again: same handle, same allocation */
    }
    for (int k = 0; k < GG_MAX_EXPORTS && !slot; k++)
        if (R->exports[k].state == GG_EXPORT_FREE) slot = &R->exports[k];
    if (slot) {
        memcpy(slot->handle, handle, sizeof(slot->handle));
        slot->ptr = ptr;
        slot->bytes = bytes;
        memset(slot->importers, 0, sizeof(slot->importers));
        slot->slot = (uint32_t)my_slot;
        slot->dev = (uint32_t)dev;
        slot->kind = (uint32_t)kind;
        __atomic_store_n(&slot->state, GG_EXPORT_LIVE, __ATOMIC_RELEASE);
    }
    unlock_region();
    if (!slot)
        gg_log(GG_LOG_WARN, "more than %d exported allocations: imports of this one by processes "
               "of the same container are charged again", GG_MAX_EXPORTS);
    return slot ? 0 : -1;
}

int gg_export_cover(int kind, const void *handle, uint64_t *ref) {
    if (my_slot < 0) return 0;
    lock_region();
    if (my_slot < 0) {
        unlock_region();
        return 0;
    }
    struct gg_export *x = find_export(kind, handle);
    int covered = x && x->state == GG_EXPORT_LIVE && R->slots[x->slot].state == GG_SLOT_ACTIVE;
    if (covered) {
        bit_set(x->importers, my_slot);
        *ref = ((uint64_t)(x - R->exports) << 48) | (x->gen & 0xFFFFFFFFFFFFULL);
    }
    unlock_region();
    return covered;
}

void gg_export_uncover(uint64_t ref) {
    uint32_t k = (uint32_t)(ref >> 48);
    if (my_slot < 0 || k >= GG_MAX_EXPORTS) return;
    lock_region();
    struct gg_export *x = &R->exports[k];
    if (my_slot >= 0 && live_export(x) && (x->gen & 0xFFFFFFFFFFFFULL) == (ref & 0xFFFFFFFFFFFFULL)) {
        bit_clear(x->importers, my_slot);
        release_orphan_if_unused(x);
    }
    unlock_region();
}

uint64_t gg_export_drop(uint64_t ptr) {
    uint64_t kept = 0;
    if (my_slot < 0) return 0;
    lock_region();
    for (int k = 0; k < GG_MAX_EXPORTS && my_slot >= 0; k++) {
        struct gg_export *x = &R->exports[k];
        if (!live_export(x) || x->state != GG_EXPORT_LIVE || x->slot != (uint32_t)my_slot || x->ptr != ptr)
            continue;
        if (x->kind == GG_EXPORT_KIND_IPC && bits_any(x->importers) && !kept) {
            /* imports still map it: its bytes stay charged, now held by the orphan */
            struct gg_slot *s = &R->slots[my_slot];
            uint64_t b = s->used[x->dev] < x->bytes ? s->used[x->dev] : x->bytes;
            slot_begin(s);
            s->used[x->dev] -= b;
            slot_end(s);
            x->bytes = b;
            x->state = GG_EXPORT_ORPHAN;
            kept = b;
        } else {
            clear_export(x);
        }
    }
    unlock_region();
    return kept;
}

#ifdef GPUGOV_TEST_HOOKS
/* Test builds only: hold the region lock so a test can SIGKILL the holder. */
void gg_test_hold_lock(void) {
    const char *ms = getenv("GPUGOV_TEST_HOLD_LOCK_MS");
    if (!ms) return;
    ssize_t w = write(2, "gpugov-test: holding lock\n", 26);
    (void)w;
    struct timespec ts = {atoi(ms) / 1000, (long)(atoi(ms) % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
#else
void gg_test_hold_lock(void) {}
#endif
