/* Compute quota: a token bucket of device time per device, shared by the container's
 * processes (in the region), debited with the *measured* device time of every launch.
 *
 * Every launch on a throttled device is bracketed by two driver events on its stream; when
 * the stop event has completed, the launch is debited exactly the time between them (the
 * time the device spent on it). Nothing is estimated per kernel, launch shape or argument,
 * so rotating functions or shapes, kernels whose duration depends on their arguments, and
 * periodic patterns all pay what they used. Until its measurement arrives a launch is
 * debited the process's running mean (settled to the measurement later), and how much work
 * may be in flight unmeasured is bounded: at most INFLIGHT_NS of device time by the largest
 * recent measurement (one launch at a time until the first measurement, or after a long
 * kernel), at most RING launches. The first launch of a process is waited for and paid
 * before it returns, and a process that exits settles what it still has in flight, so a
 * short-lived process gets no free ride. Launches go to the device of their stream. */
#include <pthread.h>
#include <time.h>
#include "gg.h"

#define BURST_NS 10000000LL     /* idle credit is capped at 10 ms of device time */
#define RING 64                 /* launches in flight per device and process */
#define INFLIGHT_NS 20000000LL  /* device time that may be in flight before it is measured */
#define EXIT_WAIT_NS 2000000000LL /* at exit, wait at most this long for launches in flight */
#define LOW_INFLIGHT_NS 2000000LL /* low priority, a high-priority process present: in flight */
#define QUANTUM_NS 32000000LL     /* high priority: debt run up before sleeping it off */

enum { REC_FREE = 0, REC_STARTED, REC_PENDING };
struct rec {
    CUevent start, stop; /* created once, re-recorded */
    int64_t debited;     /* what the launch was debited before it ran */
    uint64_t seq;        /* launch order, to wait for the oldest first */
    int state;
};

struct dev_state {
    struct rec ring[RING];
    int64_t mean;        /* running mean of measured launches (ns): the advance debit */
    int64_t alone;       /* lower envelope of the measurements: a launch's time on an unshared
                          * device (others' time slices inflate a measurement, never shrink it) */
    int64_t peak;        /* largest recent measurement, decaying: bounds the work in flight */
    int pending;         /* launches started or pending */
    int launched;        /* of which pending: on the device, not yet settled */
    uint64_t seq;
    pthread_mutex_t mu;
};

static struct dev_state st[GG_MAX_DEVICES];
static pthread_once_t st_once = PTHREAD_ONCE_INIT;
static void st_init(void) {
    for (int i = 0; i < GG_MAX_DEVICES; i++) pthread_mutex_init(&st[i].mu, NULL);
}

static void sleep_ns(int64_t ns) {
    if (ns <= 0) return;
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    nanosleep(&ts, NULL);
}

/* Waits for tokens, counting the time waited in the region (throttled_ns). */
static void wait_tokens(int dev, int64_t ns) {
    if (ns <= 0) return;
    uint64_t t0 = gg_now_ns();
    sleep_ns(ns);
    gg_count_throttled_ns(dev, (int64_t)(gg_now_ns() - t0));
}

/* Credit for elapsed time, capped at the burst: 10 ms, or the longest launch seen (credit
 * earned while a launch call blocks behind our own long kernel is not idle hoarding). */
static void refill(struct gg_header *h, int dev, uint32_t pct, int64_t burst) {
    uint64_t now = gg_now_ns();
    uint64_t last = __atomic_load_n(&h->refill_ns[dev], __ATOMIC_ACQUIRE);
    if (now <= last || !__atomic_compare_exchange_n(&h->refill_ns[dev], &last, now, 0,
                                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    if (last == 0) return; /* first launch ever: start the clock with an empty bucket */
    int64_t add = (int64_t)((now - last) * pct / 100);
    int64_t t = __atomic_add_fetch(&h->tokens_ns[dev], add, __ATOMIC_ACQ_REL);
    if (burst < BURST_NS) burst = BURST_NS;
    while (t > burst
           && !__atomic_compare_exchange_n(&h->tokens_ns[dev], &t, burst, 0, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE)) {
    }
}

static void debit(int dev, int64_t ns) {
    __atomic_sub_fetch(&gg_region_ptr()->header.tokens_ns[dev], ns, __ATOMIC_ACQ_REL);
}

/* Settles a pending launch whose stop event completed (or waits for it when wait). Caller
 * holds d->mu. Returns 1 if the record is free again. */
static int collect(int dev, struct dev_state *d, struct rec *r, int wait, uint64_t deadline) {
    if (r->state != REC_PENDING) return r->state == REC_FREE;
    int limited = gg_device_core_limit(dev) != 0; /* else metered for QoS only: no debits */
    CUresult q;
    while ((q = gg_real.cuEventQuery(r->stop)) == CUDA_ERROR_NOT_READY && wait
           && (!deadline || gg_now_ns() < deadline))
        sleep_ns(20000);
    if (q == CUDA_ERROR_NOT_READY) return 0;
    float ms = 0;
    if (q == CUDA_SUCCESS && gg_real.cuEventElapsedTime(&ms, r->start, r->stop) == CUDA_SUCCESS && ms >= 0) {
        int64_t ns = (int64_t)((double)ms * 1e6);
        if (limited) {
            debit(dev, ns - r->debited); /* the launch pays exactly what it used */
            gg_count_device_ns(dev, ns);
        }
        d->mean = d->mean ? d->mean + (ns - d->mean) / 8 : (ns ? ns : 1);
        d->alone = !d->alone || ns < d->alone ? (ns ? ns : 1) : d->alone + (ns - d->alone) / 32;
        int64_t decayed = d->peak - d->peak / 64;
        d->peak = ns > decayed ? ns : decayed;
        if (d->peak < 1) d->peak = 1;
    } else if (limited) {
        gg_count_device_ns(dev, r->debited); /* no timing: it keeps its advance debit */
    }
    r->state = REC_FREE;
    d->pending--;
    d->launched--;
    return 1;
}

static void collect_ready(int dev, struct dev_state *d) {
    for (int i = 0; i < RING && d->pending; i++) collect(dev, d, &d->ring[i], 0, 0);
}

/* Waits for the oldest launch in flight to complete and settles it. Caller holds d->mu. */
static void wait_oldest(int dev, struct dev_state *d) {
    struct rec *old = NULL;
    for (int i = 0; i < RING; i++)
        if (d->ring[i].state == REC_PENDING && (!old || d->ring[i].seq < old->seq)) old = &d->ring[i];
    if (old) collect(dev, d, old, 1, 0);
}

static int allowed_in_flight(const struct dev_state *d) {
    if (!d->peak) return 1; /* nothing measured yet: one at a time */
    int64_t n = INFLIGHT_NS / d->peak;
    return n < 1 ? 1 : n > RING ? RING : (int)n;
}

/* Makes a record's events again in the context of stream (where a record on it must be
 * made); 0 on success. */
static int remake_events(struct rec *r, CUstream stream) {
    CUcontext c = NULL, popped = NULL;
    CUresult rc = (uintptr_t)stream > 2 && gg_real.cuStreamGetCtx ? gg_real.cuStreamGetCtx(stream, &c)
                  : gg_real.cuCtxGetCurrent ? gg_real.cuCtxGetCurrent(&c) : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS || !c || !gg_real.cuCtxPushCurrent_v2 || !gg_real.cuCtxPopCurrent_v2
        || gg_real.cuCtxPushCurrent_v2(c) != CUDA_SUCCESS)
        return -1;
    CUevent start = NULL, stop = NULL;
    rc = gg_real.cuEventCreate(&start, 0);
    if (rc == CUDA_SUCCESS) rc = gg_real.cuEventCreate(&stop, 0);
    gg_real.cuCtxPopCurrent_v2(&popped);
    if (rc != CUDA_SUCCESS) {
        if (start && gg_real.cuEventDestroy_v2) gg_real.cuEventDestroy_v2(start);
        return -1;
    }
    if (gg_real.cuEventDestroy_v2) {
        gg_real.cuEventDestroy_v2(r->start);
        gg_real.cuEventDestroy_v2(r->stop);
    }
    r->start = start;
    r->stop = stop;
    return 0;
}

/* Low priority while a high-priority process is present: two launches in flight, or
 * LOW_INFLIGHT_NS of device time if that is more (short kernels), so the high one finds
 * little in front of it while the second hides the first's completion. */
static int low_in_flight(const struct dev_state *d) {
    int64_t n = d->peak ? LOW_INFLIGHT_NS / d->peak : 1;
    return n < 2 ? 2 : n > RING ? RING : (int)n;
}

int gg_throttle_poll(int dev) {
    pthread_once(&st_once, st_init);
    struct dev_state *d = &st[dev];
    if (pthread_mutex_trylock(&d->mu) != 0) return -1;
    collect_ready(dev, d);
    int n = d->launched;
    pthread_mutex_unlock(&d->mu);
    return n;
}

int gg_throttle_before(int dev, CUstream stream) {
    struct gg_header *h = &gg_region_ptr()->header;
    uint32_t pct = gg_device_core_limit(dev);
    int role = gg_qos_role(dev);
    if (!pct && !role) return -1;
    int yield = role == GG_QOS_LOW ? gg_qos_present(dev) : 0;
    /* low priority with no high-priority process on the device: nothing to meter for */
    if (!pct && role == GG_QOS_LOW && !yield) return -1;
    pthread_once(&st_once, st_init);
    struct dev_state *d = &st[dev];
    if (pct) gg_count_launch(dev);
    pthread_mutex_lock(&d->mu);
    collect_ready(dev, d);
    int cap = allowed_in_flight(d);
    /* two more when the high-priority process announced its next launch: every launch is
     * then checked to end before it, and the slack covers a launcher that gets no CPU */
    int low_cap = low_in_flight(d) + (yield == 2 ? 2 : 0);
    if (yield && low_cap < cap) cap = low_cap;
    while (d->pending >= cap) {
        int before = d->pending;
        wait_oldest(dev, d);
        if (d->pending >= before) break; /* only launches still being started: go on */
    }
    struct rec *r = NULL;
    for (int i = 0; i < RING && !r; i++) {
        struct rec *c = &d->ring[i];
        if (c->state != REC_FREE) continue;
        if (!c->start && gg_real.cuEventCreate(&c->start, 0) != CUDA_SUCCESS) c->start = NULL;
        if (c->start && !c->stop && gg_real.cuEventCreate(&c->stop, 0) != CUDA_SUCCESS) c->stop = NULL;
        if (c->start && c->stop) r = c;
    }
    int64_t cost = d->mean;
    if (!cost && !r) cost = d->peak ? d->peak : BURST_NS; /* cannot time it: the most it could be */
    if (r) {
        r->state = REC_STARTED;
        r->seq = ++d->seq;
        r->debited = cost;
        d->pending++;
    }
    int64_t burst = d->peak, expect = d->alone ? d->alone : d->peak;
    pthread_mutex_unlock(&d->mu);
    /* low priority: wait while high-priority work is in flight or about to start */
    if (yield) gg_qos_yield(dev, expect);
    if (pct) {
        refill(h, dev, pct, burst);
        if (cost) debit(dev, cost);
        if (!r) gg_count_device_ns(dev, cost);
        int64_t t = __atomic_load_n(&h->tokens_ns[dev], __ATOMIC_ACQUIRE);
        if (t < 0 && role == GG_QOS_HIGH) {
            /* high priority: run up a quantum of debt, then sleep it off in one piece and
             * say when it launches again, so low-priority work can fill the gap */
            if (-t >= QUANTUM_NS) {
                int64_t ns = -t * 100 / (int64_t)pct;
                gg_qos_publish(dev, (uint32_t)__atomic_load_n(&d->launched, __ATOMIC_RELAXED),
                               gg_now_ns() + (uint64_t)ns);
                wait_tokens(dev, ns);
            }
        } else if (t < 0) {
            wait_tokens(dev, -t * 100 / (int64_t)pct); /* until refills repay the debt */
        }
    }
    if (!r) return -1;
    /* the start event goes in after any wait, so a timing measures the work, not our sleep;
     * events belong to a context: if the stream's is another, make them again in it */
    if (gg_real.cuEventRecord(r->start, stream) != CUDA_SUCCESS
        && (remake_events(r, stream) || gg_real.cuEventRecord(r->start, stream) != CUDA_SUCCESS)) {
        pthread_mutex_lock(&d->mu);
        r->state = REC_FREE;
        d->pending--;
        int64_t worst = d->peak ? d->peak : BURST_NS;
        pthread_mutex_unlock(&d->mu);
        if (pct && worst > cost) debit(dev, worst - cost); /* untimed: the most it could be */
        if (pct) gg_count_device_ns(dev, worst > cost ? worst : cost);
        return -1;
    }
    return (int)(r - d->ring);
}

void gg_throttle_after(int dev, int rec, CUstream stream, CUresult rc) {
    if (rec < 0) return;
    struct dev_state *d = &st[dev];
    struct rec *r = &d->ring[rec];
    int ok = rc == CUDA_SUCCESS && gg_real.cuEventRecord(r->stop, stream) == CUDA_SUCCESS;
    uint32_t limit = gg_device_core_limit(dev);
    pthread_mutex_lock(&d->mu);
    int first = !d->peak && limit;
    if (!ok) {
        if (limit) gg_count_device_ns(dev, rc == CUDA_SUCCESS ? r->debited : 0);
        if (limit && rc != CUDA_SUCCESS) debit(dev, -r->debited); /* nothing ran: give it back */
        r->state = REC_FREE;
        d->pending--;
    } else {
        r->state = REC_PENDING;
        d->launched++;
        if (first) collect(dev, d, r, 1, 0); /* the process's first: settled before returning */
    }
    int64_t burst = d->peak;
    int launched = d->launched;
    pthread_mutex_unlock(&d->mu);
    if (gg_qos_role(dev) == GG_QOS_HIGH) gg_qos_publish(dev, (uint32_t)launched, 0);
    if (ok && first) {
        uint32_t pct = gg_device_core_limit(dev);
        if (pct) refill(&gg_region_ptr()->header, dev, pct, burst); /* credit the wait */
        int64_t t = __atomic_load_n(&gg_region_ptr()->header.tokens_ns[dev], __ATOMIC_ACQUIRE);
        if (pct && t < 0) wait_tokens(dev, -t * 100 / (int64_t)pct);
    }
}

/* A forked child has no launches in flight and none of its parent's events (CUDA contexts do
 * not survive fork): it starts with nothing pending, so its exit waits for nothing. */
void gg_throttle_after_fork(void) {
    for (int dev = 0; dev < GG_MAX_DEVICES; dev++) {
        struct dev_state *d = &st[dev];
        pthread_mutex_init(&d->mu, NULL);
        for (int i = 0; i < RING; i++) {
            d->ring[i].state = REC_FREE;
            d->ring[i].start = d->ring[i].stop = NULL;
        }
        d->pending = d->launched = 0;
        d->mean = d->peak = d->alone = 0;
    }
}

/* A process that exits settles the launches it still has in flight (the driver finishes
 * them anyway before it tears the context down), so exiting early saves nothing. */
__attribute__((destructor)) static void settle_at_exit(void) {
    if (!gg_region_ptr() || !gg_real.cuEventQuery) return;
    uint64_t deadline = gg_now_ns() + EXIT_WAIT_NS;
    for (int dev = 0; dev < GG_MAX_DEVICES; dev++) {
        struct dev_state *d = &st[dev];
        /* devices metered only for QoS have no debt to settle */
        if (!d->pending || !gg_device_core_limit(dev) || pthread_mutex_trylock(&d->mu) != 0) continue;
        for (int i = 0; i < RING; i++) collect(dev, d, &d->ring[i], 1, deadline);
        pthread_mutex_unlock(&d->mu);
    }
}
