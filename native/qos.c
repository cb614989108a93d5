/* QoS floor and in-GPU priority between containers sharing one physical device.
 *
 * For each shared device the device plugin mounts a folder into every container on it
 * (GPUGOV_QOS_DIR/<device index>/), read-only, holding one board file per pod on the
 * device; the pod's own file (GPUGOV_QOS_SELF) is mounted writable over it. So a container
 * writes only its own pod's file and reads everyone's. A high-priority process
 * (GPUGOV_TASK_PRIORITY=0) claims an entry of its pod's file and publishes there: a
 * heartbeat, how many of its launches are in flight on the device, and when it will launch
 * next while it sleeps on its own compute quota. A low-priority process (1, or unset: HAMi's
 * default) reads all files before each launch and yields: it waits while a high-priority
 * process has work in flight; while one has announced its next launch, it launches only if
 * its kernel, run after all the low-priority work already on the device, ends before that
 * launch. For that every low-priority process publishes the device time of its own work in
 * flight (its launches not completed, each counted at its kernels' measured duration), and
 * readers age it by the device's time-slicing: the work of k processes runs at 1/k each. It
 * queues at most QUEUE_NS ahead of the device, so kernels run mostly alone and their measured
 * durations stay true; of processes that saw the same gap the first claimant goes, and one
 * waiting longer than FAIR_NS goes before younger ones. With no plan announced it keeps at
 * most two launches in flight (throttle.c), so a high-priority process that starts
 * unannounced finds little in front of it. When no high-priority process has work, low ones
 * use the device freely (work-conserving).
 *
 * Nothing read from the files is trusted: high-priority processes never read them (nothing
 * written there can slow them), every value read is bounded, an entry whose heartbeat is
 * stale or in the future counts for nothing, and a low-priority launch waits at most
 * HOLD_MAX_NS whatever the files say. A container can forge entries only in its own pod's
 * file: at worst it slows the best-effort work on its device. Files are read and written with
 * pread/pwrite, never mapped: a truncated file cannot fault (SIGBUS) anyone, a short read is
 * fewer entries. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_SETLK */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "gg.h"

#define PRESENT_NS 500000000ULL   /* an entry with an older heartbeat is gone */
#define BUSY_STALE_NS 100000000ULL /* high: "work in flight" older than this is not believed
                                     * (its process may get no CPU while its work runs) */
#define WAIT_STALE_NS 20000000ULL /* low: "waiting to launch" older than this is not believed */
#define FUTURE_NS 1000000ULL      /* heartbeats further ahead than this are garbage */
#define HOLD_MAX_NS 200000000ULL  /* a low-priority launch waits at most this long */
#define POLL_NS 100000LL          /* low-priority launches re-read the board this often */
#define FIT_MAX_NS 1000000000ULL  /* planned launches further ahead than this are garbage */
#define FIT_MARGIN_NS 500000ULL   /* and must end this long before it (a late start) */
#define QUEUE_NS 6000000ULL       /* low-priority work queued ahead of a planned launch, at most */
#define MAX_LOW 256               /* low-priority entries whose work is aged (more: counted whole) */
#define FAIR_NS 40000000ULL       /* a low-priority process waiting longer than this goes first */
#define WAKE_GRACE_NS 100000000ULL /* a planned launch this late is still about to happen */
#define MAX_INFLIGHT 4096u        /* larger in-flight counts are garbage */
#define WATCH_BUSY_NS 50000LL     /* the watcher polls completions this often while busy */
#define WATCH_IDLE_NS 100000000LL /* and refreshes the heartbeat this often while idle */
#define RESCAN_NS 100000000ULL    /* low priority: looks for new pods' files this often */
#define ABSENT_RECHECK_NS 10000000ULL /* no high priority seen: look again after this */
#define MAX_FILES 64              /* pods' files read per device (the freshest first found) */

enum { BOARD_UNKNOWN = 0, BOARD_NONE, BOARD_OPEN };

struct board {
    int state, fd, slot, role; /* fd, slot: this pod's file and our entry; role: GG_QOS_* */
    int nfiles, files[MAX_FILES]; /* low priority: the device's other pods' files */
    uint64_t scanned;
    uint64_t absent_since; /* low priority: when the boards last showed no high priority */
    uint32_t last_inflight;
    uint64_t last_next, last_publish; /* high: the plan; low: its work in flight (ns) */
    uint64_t last_claim_t, last_claim; /* low: when its newest kernel was claimed, how long */
    uint64_t waiting;                  /* low: published as waiting to launch since */
    pthread_mutex_t mu; /* serialises this process's writes of its entry */
};

static struct board boards[GG_MAX_DEVICES];
static pthread_once_t boards_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static int warned_open, warned_slot;

static void boards_init(void) {
    for (int i = 0; i < GG_MAX_DEVICES; i++) {
        boards[i].fd = -1;
        boards[i].nfiles = 0;
        boards[i].slot = -1;
        pthread_mutex_init(&boards[i].mu, NULL);
    }
}

int gg_qos_configured(void) { return gg_cfg.qos_dir[0] != '\0' && gg_cfg.qos_self[0] != '\0'; }

/* A process claims an entry of its pod's file by an open-file-description lock on its byte:
 * the kernel drops it when the process exits, so entries are reused without trusting the
 * file's contents. */
static int claim_slot(int fd) {
    for (int i = 0; i < GG_QOS_ENTRIES; i++) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = i, .l_len = 1};
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return i;
    }
    return -1;
}

static void open_board(int dev, struct board *b) {
    char path[sizeof(gg_cfg.qos_dir) + sizeof(gg_cfg.qos_self) + 16];
    snprintf(path, sizeof(path), "%s/%d/%s", gg_cfg.qos_dir, dev, gg_cfg.qos_self);
    /* O_NONBLOCK: a FIFO put there cannot hang the open; only a regular file is used */
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
        errno = EINVAL;
    }
    if (fd < 0) {
        if (errno != ENOENT && !__atomic_exchange_n(&warned_open, 1, __ATOMIC_RELAXED))
            gg_log(GG_LOG_WARN, "QoS board %s unusable (%s): device %d runs without priority",
                   path, errno == EINVAL ? "not a regular file" : strerror(errno), dev);
        b->state = BOARD_NONE;
        return;
    }
    int role = gg_cfg.priority == 0 ? GG_QOS_HIGH : GG_QOS_LOW;
    b->slot = claim_slot(fd);
    if (b->slot < 0 && role == GG_QOS_HIGH) {
        if (!__atomic_exchange_n(&warned_slot, 1, __ATOMIC_RELAXED))
            gg_log(GG_LOG_WARN, "QoS board %s has no free entry (%d processes per pod at "
                   "most): this process's priority is not published", path, GG_QOS_ENTRIES);
        close(fd);
        b->state = BOARD_NONE;
        return;
    } /* a low-priority process without an entry still yields, it just cannot announce */
    b->fd = fd;
    b->role = role;
    b->state = BOARD_OPEN;
}

int gg_qos_role(int dev) {
    if (!gg_qos_configured() || dev < 0 || dev >= GG_MAX_DEVICES) return GG_QOS_NONE;
    pthread_once(&boards_once, boards_init);
    struct board *b = &boards[dev];
    int s = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
    if (s == BOARD_UNKNOWN) {
        pthread_mutex_lock(&open_mu);
        if (b->state == BOARD_UNKNOWN) open_board(dev, b);
        s = b->state;
        pthread_mutex_unlock(&open_mu);
    }
    return s == BOARD_OPEN ? b->role : GG_QOS_NONE;
}

/* ---- high priority: publish ---- */

static void write_entry(struct board *b, const struct gg_qos_entry *e) {
    if (b->slot >= 0)
        (void)!pwrite(b->fd, e, sizeof(*e), (off_t)b->slot * (off_t)sizeof(*e));
}

static void write_high(struct board *b, uint32_t inflight, uint64_t next_ns, uint64_t now) {
    struct gg_qos_entry e = {
        .magic = GG_QOS_MAGIC, .kind = GG_QOS_HIGH, .pid = (uint32_t)getpid(),
        .heartbeat_ns = now, .inflight = inflight, .next_ns = next_ns,
    };
    write_entry(b, &e);
    b->last_inflight = inflight;
    b->last_next = next_ns;
    b->last_publish = now;
}

static void start_watcher(void);

void gg_qos_publish(int dev, uint32_t inflight, uint64_t next_ns) {
    struct board *b = &boards[dev];
    if (b->state != BOARD_OPEN || b->role != GG_QOS_HIGH) return;
    uint64_t now = gg_now_ns();
    pthread_mutex_lock(&b->mu);
    if (next_ns == GG_QOS_KEEP) next_ns = b->last_next; /* the watcher keeps the plan */
    /* a write when something a reader decides on changed, else a heartbeat now and then */
    if (inflight != b->last_inflight || next_ns != b->last_next
        || now - b->last_publish > (inflight ? 1000000ULL : (uint64_t)WATCH_IDLE_NS / 2))
        write_high(b, inflight, next_ns, now);
    pthread_mutex_unlock(&b->mu);
    if (inflight) start_watcher();
}

/* The watcher thread: while the process has launches in flight on a board device, it
 * polls their completion every WATCH_BUSY_NS and publishes the count, so that low-priority
 * processes see the device free soon after the work is done, whether or not this process
 * calls the driver again (it may be sleeping on its quota or doing host work). */
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cv = PTHREAD_COND_INITIALIZER;
static int watch_started, watch_stop, watch_kick;
static pthread_t watch_thread;

static void *watch(void *arg) {
    (void)arg;
    for (;;) {
        int busy = 0;
        for (int dev = 0; dev < GG_MAX_DEVICES; dev++) {
            struct board *b = &boards[dev];
            if (__atomic_load_n(&b->state, __ATOMIC_ACQUIRE) != BOARD_OPEN || b->role != GG_QOS_HIGH)
                continue;
            int n = gg_throttle_poll(dev);
            if (n < 0) { busy = 1; continue; } /* a launcher holds the device: look again soon */
            gg_qos_publish(dev, (uint32_t)n, GG_QOS_KEEP);
            busy |= n > 0;
        }
        pthread_mutex_lock(&watch_mu);
        if (watch_stop) {
            pthread_mutex_unlock(&watch_mu);
            return NULL;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long add = busy || watch_kick ? WATCH_BUSY_NS : WATCH_IDLE_NS;
        watch_kick = 0; /* a launch since the poll above: poll again soon */
        ts.tv_nsec += add % 1000000000LL;
        ts.tv_sec += add / 1000000000LL + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&watch_cv, &watch_mu, &ts);
        pthread_mutex_unlock(&watch_mu);
    }
}

static void start_watcher(void) {
    if (__atomic_load_n(&watch_started, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&watch_mu); /* no lost wake-up: the watcher checks the kick */
        watch_kick = 1;
        pthread_cond_signal(&watch_cv);
        pthread_mutex_unlock(&watch_mu);
        return;
    }
    pthread_mutex_lock(&watch_mu);
    if (!watch_started && !watch_stop) {
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(&watch_cv, &a);
        if (pthread_create(&watch_thread, NULL, watch, NULL) == 0)
            __atomic_store_n(&watch_started, 1, __ATOMIC_RELEASE);
        else
            watch_stop = 1; /* no thread: completions are published at the next launch */
    }
    pthread_mutex_unlock(&watch_mu);
}

/* ---- low priority: read and yield ---- */

struct verdict {
    int present;       /* a live high-priority process is registered on the device */
    int busy;          /* one has work in flight */
    uint64_t next_min; /* earliest announced next launch after now (0: none) */
    uint64_t backlog;  /* low-priority work in flight or claimed (ns of device time), ours
                        * included: the device runs it all before it is idle */
    int older;         /* other low-priority processes waiting to launch for longer than us */
    int nlow;          /* low-priority entries with work: their work and its age (ns) */
    uint64_t low_work[MAX_LOW], low_age[MAX_LOW];
};

/* Opens the device's other pods' files again (every RESCAN_NS): pods come and go. Only
 * regular files written within PRESENT_NS count; at most MAX_FILES. Caller holds b->mu. */
static void rescan(int dev, struct board *b, uint64_t now) {
    if (b->scanned && now - b->scanned < RESCAN_NS) return;
    b->scanned = now;
    for (int i = 0; i < b->nfiles; i++) close(b->files[i]);
    b->nfiles = 0;
    char path[sizeof(gg_cfg.qos_dir) + 16];
    snprintf(path, sizeof(path), "%s/%d", gg_cfg.qos_dir, dev);
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dir) {
        if (dfd >= 0) close(dfd);
        return;
    }
    struct stat own;
    int have_own = fstat(b->fd, &own) == 0;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    struct dirent *de;
    int seen = 0;
    while ((de = readdir(dir)) && b->nfiles < MAX_FILES && seen++ < 4 * MAX_FILES) {
        if (de->d_name[0] == '.') continue;
        int fd = openat(dfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        struct stat st;
        if (fd < 0) continue;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)
            || (have_own && st.st_ino == own.st_ino && st.st_dev == own.st_dev)
            || wall.tv_sec - st.st_mtim.tv_sec > 2) { /* our own, or a gone pod's */
            close(fd);
            continue;
        }
        b->files[b->nfiles++] = fd;
    }
    closedir(dir);
}

/* Adds one file's entries to the verdict; every value is bounded. */
/* `first`: a claim made after ours (a later claim time, or the same and a higher pid) does
 * not count (the work its process had before does): of processes that saw the same gap, the
 * first claimant goes. */
struct cutoff { uint64_t t; uint32_t pid; };

/* 1 if (t, pid) comes before the cutoff (ties broken by pid). */
static int before_cut(uint64_t t, uint32_t pid, const struct cutoff *c) {
    return t < c->t || (t == c->t && pid < c->pid);
}

/* `me`: count the fresh entries of other processes waiting since before me->t and for longer
 * than FAIR_NS. */
static void read_file(int fd, uint64_t now, struct verdict *v, const struct cutoff *first,
                      const struct cutoff *me) {
    struct gg_qos_entry e[GG_QOS_ENTRIES];
    ssize_t n = pread(fd, e, sizeof(e), 0);
    if (n <= 0) return;
    int count = (int)((size_t)n / sizeof(e[0]));
    for (int i = 0; i < count; i++) {
        uint64_t age = e[i].heartbeat_ns < now ? now - e[i].heartbeat_ns : 0;
        if (e[i].magic != GG_QOS_MAGIC || e[i].heartbeat_ns > now + FUTURE_NS || age > PRESENT_NS)
            continue;
        if (e[i].kind == GG_QOS_LOW) { /* a low-priority process's work on the device */
            uint64_t work = e[i].until_ns > e[i].heartbeat_ns ? e[i].until_ns - e[i].heartbeat_ns : 0;
            if (work > FIT_MAX_NS) continue;
            if (me && e[i].wait_ns && age <= WAIT_STALE_NS && e[i].pid != me->pid
                && e[i].wait_ns + FAIR_NS < now && before_cut(e[i].wait_ns, e[i].pid, me))
                v->older++;
            if (first && (e[i].next_ns > first->t
                          || (e[i].next_ns == first->t && e[i].pid > first->pid))) {
                uint64_t claim = (uint64_t)e[i].inflight * 1000ULL;
                work = work > claim ? work - claim : 0;
            }
            if (!work) continue;
            if (v->nlow < MAX_LOW) {
                v->low_work[v->nlow] = work;
                v->low_age[v->nlow++] = age;
            } else {
                v->backlog += work;
            }
            continue;
        }
        if (e[i].kind != GG_QOS_HIGH) continue;
        v->present = 1;
        if (e[i].inflight && e[i].inflight <= MAX_INFLIGHT && age <= BUSY_STALE_NS) v->busy = 1;
        /* it planned to launch by now and has not said it did: it is waking up (a loaded
         * host delays the wake-up), so it counts as busy for a short grace */
        if (e[i].next_ns && e[i].next_ns <= now && now - e[i].next_ns <= WAKE_GRACE_NS) v->busy = 1;
        if (e[i].next_ns > now && e[i].next_ns - now <= FIT_MAX_NS
            && (!v->next_min || e[i].next_ns < v->next_min))
            v->next_min = e[i].next_ns;
    }
}

/* The low-priority work still to run: the device shares its time between the processes with
 * work (the driver's time-slicing), so each entry's work has run for about its age divided by
 * their number since it was published. Work that ended early frees time for the others, which
 * this does not count: the backlog errs long. */
static void age_backlog(struct verdict *v) {
    for (int i = 0; i < v->nlow; i++) {
        uint64_t ran = v->low_age[i] / (uint64_t)v->nlow;
        v->backlog += v->low_work[i] > ran ? v->low_work[i] - ran : 0;
    }
    if (v->backlog > FIT_MAX_NS) v->backlog = FIT_MAX_NS;
}

/* Reads this pod's file and the device's other pods' files. */
static void read_board(struct board *b, uint64_t now, struct verdict *v, const struct cutoff *first,
                       const struct cutoff *me) {
    memset(v, 0, sizeof(*v));
    pthread_mutex_lock(&b->mu);
    rescan((int)(b - boards), b, now);
    read_file(b->fd, now, v, first, me);
    for (int i = 0; i < b->nfiles; i++) read_file(b->files[i], now, v, first, me);
    age_backlog(v);
    pthread_mutex_unlock(&b->mu);
}

int gg_qos_present(int dev) {
    struct board *b = &boards[dev];
    uint64_t now = gg_now_ns(), seen = __atomic_load_n(&b->absent_since, __ATOMIC_RELAXED);
    /* nobody to yield to: look again only every ABSENT_RECHECK_NS (launches stay cheap) */
    if (seen && now - seen < ABSENT_RECHECK_NS) return 0;
    struct verdict v;
    read_board(b, now, &v, NULL, NULL);
    __atomic_store_n(&b->absent_since, v.present ? 0 : now, __ATOMIC_RELAXED);
    return !v.present ? 0 : v.next_min ? 2 : 1;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    nanosleep(&ts, NULL);
}

/* Low priority: publishes the device time of this process's work in flight (`work` ns, as
 * if from now), and when its newest kernel (`claim` ns of it) was claimed. */
static void announce(struct board *b, uint64_t work, uint64_t claim_t, uint64_t claim, uint64_t now) {
    pthread_mutex_lock(&b->mu); /* launching threads of one process share its entry */
    uint64_t us = (claim + 999) / 1000;
    struct gg_qos_entry e = {.magic = GG_QOS_MAGIC, .kind = GG_QOS_LOW, .pid = (uint32_t)getpid(),
                             .heartbeat_ns = now, .until_ns = now + work, .next_ns = claim_t,
                             .inflight = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us,
                             .wait_ns = b->waiting};
    write_entry(b, &e);
    b->last_next = work;
    b->last_publish = now;
    b->last_claim_t = claim_t;
    b->last_claim = claim;
    pthread_mutex_unlock(&b->mu);
}

/* Low priority: refreshes this process's entry with its work still in flight (launches not
 * completed, each counted `expect` ns). Others count an entry fully only while it is fresh. */
static void refresh(struct board *b, int dev, int64_t expect, uint64_t now) {
    if (b->slot < 0) return;
    int n = gg_throttle_poll(dev);
    if (n < 0) return;
    uint64_t work = (uint64_t)n * (uint64_t)expect;
    if (work != b->last_next || ((work || b->waiting) && now - b->last_publish > WAIT_STALE_NS / 4))
        announce(b, work, b->last_claim_t, work ? b->last_claim : 0, now);
}

/* 1 if a backlog of low-priority work started now ends FIT_MARGIN_NS before the next
 * announced high-priority launch (or none is announced). */
static int fits(const struct verdict *v, uint64_t now, uint64_t backlog) {
    return !v->next_min || now + backlog + FIT_MARGIN_NS <= v->next_min;
}

/* Waits (at most HOLD_MAX_NS) while a high-priority process has work in flight or will
 * launch before a kernel of `expect` ns, run after the low-priority work in flight, would
 * end. Returns the time waited. */
uint64_t gg_qos_yield(int dev, int64_t expect) {
    struct board *b = &boards[dev];
    uint64_t t0 = gg_now_ns(), now = t0;
    unsigned int seed = (unsigned int)(t0 ^ (uint64_t)getpid());
    struct cutoff me = {t0, (uint32_t)getpid()};
    int busy_polls = 0, go = 0;
    if (expect <= 0) expect = 1000000;
    for (;;) {
        struct verdict v;
        refresh(b, dev, expect, now);
        read_board(b, now, &v, NULL, &me);
        if (now - t0 >= HOLD_MAX_NS) break;
        /* before a planned high-priority launch, low-priority work is queued only a little
         * ahead of the device: kernels then run mostly alone, so their measured durations
         * stay true, and a mistaken estimate costs little. Processes waiting longer than this
         * one go first (room is left for their kernels): no process starves in the gaps. */
        if (!v.busy && fits(&v, now, v.backlog + (uint64_t)expect)
            && (!v.next_min || v.backlog + (uint64_t)v.older * (uint64_t)expect <= QUEUE_NS)) {
            if (!v.next_min || b->slot < 0) break;
            /* claim the kernel, then look again counting only claims made before: of
             * processes that saw the same gap, the first one goes, the others back off */
            uint64_t mine = b->last_next;
            b->waiting = 0;
            announce(b, mine + (uint64_t)expect, now, (uint64_t)expect, now);
            struct cutoff first = {now, (uint32_t)getpid()};
            struct verdict w;
            read_board(b, now, &w, &first, NULL);
            if (!w.busy && fits(&w, now, w.backlog)) {
                go = 1;
                break;
            }
            b->waiting = t0;
            announce(b, mine, 0, 0, now);
        } else if (!b->waiting && b->slot >= 0) {
            b->waiting = t0; /* others see how long this process waits */
            announce(b, b->last_next, b->last_claim_t, b->last_claim, now);
        }
        /* while high-priority work runs, look less and less often (up to 4x POLL_NS): a
         * held process should not spin on the files. Not while the work drains before a
         * planned sleep: the device is handed over soon, and it should not idle long */
        busy_polls = v.busy && !v.next_min ? busy_polls + 1 : 0;
        int64_t poll = POLL_NS << (busy_polls < 8 ? 0 : busy_polls < 16 ? 1 : 2);
        int64_t nap = poll / 2 + (int64_t)(rand_r(&seed) % (poll / 2));
        if (!v.busy && v.next_min > now) {
            /* no kernel of ours fits before the planned launch any more: nothing changes until
             * it starts (or its plan changes), so look again only every 1 ms, leaving the CPU
             * to the processes that do work */
            if (!fits(&v, now, (uint64_t)expect)) nap = 1000000;
            if ((int64_t)(v.next_min - now) < nap) nap = (int64_t)(v.next_min - now);
        }
        sleep_ns(nap);
        now = gg_now_ns();
    }
    if (b->waiting && !go) { /* launches unclaimed (nothing planned, or the hold ran out) */
        b->waiting = 0;
        announce(b, b->last_next, b->last_claim_t, b->last_claim, now);
    }
    return now - t0;
}

/* ---- lifecycle ---- */

/* A forked child has no watcher and must not share its parent's entries (the OFD locks
 * belong to the parent's open file descriptions): it opens the boards again when it uses
 * the device. */
void gg_qos_after_fork(void) {
    for (int i = 0; i < GG_MAX_DEVICES; i++) {
        if (boards[i].fd >= 0) close(boards[i].fd);
        for (int f = 0; f < boards[i].nfiles; f++) close(boards[i].files[f]);
        boards[i] = (struct board){.fd = -1, .slot = -1};
        pthread_mutex_init(&boards[i].mu, NULL);
    }
    pthread_mutex_init(&open_mu, NULL);
    pthread_mutex_init(&watch_mu, NULL);
    watch_started = watch_stop = watch_kick = 0;
}

/* At exit the watcher stops (before the driver is torn down) and the entries are cleared, so
 * low-priority processes do not wait for the heartbeat to go stale. */
__attribute__((destructor)) static void qos_at_exit(void) {
    pthread_mutex_lock(&watch_mu);
    int started = watch_started;
    watch_stop = 1;
    pthread_cond_signal(&watch_cv);
    pthread_mutex_unlock(&watch_mu);
    if (started) pthread_join(watch_thread, NULL);
    for (int i = 0; i < GG_MAX_DEVICES; i++) {
        struct board *b = &boards[i];
        if (b->state != BOARD_OPEN) continue;
        struct gg_qos_entry e;
        memset(&e, 0, sizeof(e));
        write_entry(b, &e);
    }
}
