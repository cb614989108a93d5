/* Compute quota: a token bucket of device time shared by the container's processes (in the
 * region). Each launch is debited its estimated device time before it runs.
 *
 * Estimates are kept per launch key (function and launch shape, or graph), so a training
 * loop of different kernels is not one blended average whose value depends on which kernel
 * happened to be timed. They are learned by timing launches with driver events:
 * - the first launch of a key is always timed, and the launcher waits for its result and
 *   is debited its measured time before it launches again (no free ride before the first
 *   measurement, however long the kernel);
 * - afterwards each launch is timed with probability 1/16 (1/2 for a key whose timings vary
 *   by more than a quarter of their mean: data-dependent kernels), drawn at random per
 *   launch, so no periodic pattern can line its cheap launches up with the timed ones;
 * - a timed launch is debited exactly: the difference between its measured and its
 *   estimated time is settled when the measurement arrives.
 * Several timings may be in flight (a ring per device), so a deep launch queue does not
 * bias which launches get timed. */
#include <pthread.h>
#include <time.h>
#include "gg.h"

#define BURST_NS 10000000LL /* idle credit is capped at 10 ms of device time */
#define SAMPLE_ONE_IN 16
#define SAMPLE_ONE_IN_VARIED 2
#define RING 16              /* timings in flight per device */
#define EST_SLOTS 1024       /* cost estimates per device (a direct-mapped cache of keys) */
#define SYNC_FLAG 0x10000

struct est {
    uint64_t key; /* 0 = empty */
    int64_t cost; /* device ns per launch: mean of the last ~32 timed launches */
    int64_t n;    /* timed launches folded in */
    int64_t dev;  /* mean absolute deviation of the timings, same averaging */
};

enum { SAMPLE_FREE = 0, SAMPLE_STARTED, SAMPLE_PENDING };
struct sample {
    CUevent start, stop; /* created once, re-recorded */
    uint64_t key;
    int64_t debited;     /* what the launch was debited before it ran */
    int state;
};

struct dev_state {
    struct est est[EST_SLOTS];
    struct sample ring[RING];
    int64_t max_cost;    /* the largest cost seen: the debit when a key cannot be timed */
    pthread_mutex_t mu;  /* guards ring and est writes */
};

static struct dev_state st[GG_MAX_DEVICES];
static void refill(struct gg_header *h, int dev, uint32_t pct, int64_t burst);
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

static uint32_t rand32(void) {
    static __thread uint64_t x;
    if (!x) x = gg_now_ns() ^ (uint64_t)(uintptr_t)&x ^ 0x9E3779B97F4A7C15ULL;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (uint32_t)(x >> 32);
}

/* Credit for elapsed time, capped at the burst: 10 ms, or the longest kernel seen (credit
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

static struct est *slot_of(struct dev_state *d, uint64_t key) {
    return &d->est[(key * 0x9E3779B97F4A7C15ULL) >> 54 & (EST_SLOTS - 1)];
}

/* The estimate for key, or 0 if it has none (never timed, or evicted by another key);
 * *varied is set when its timings vary widely. */
static int64_t estimate(struct dev_state *d, uint64_t key, int *varied) {
    struct est *e = slot_of(d, key);
    if (__atomic_load_n(&e->key, __ATOMIC_ACQUIRE) != key) return 0;
    int64_t c = __atomic_load_n(&e->cost, __ATOMIC_RELAXED);
    *varied = __atomic_load_n(&e->dev, __ATOMIC_RELAXED) * 4 > c;
    return __atomic_load_n(&e->key, __ATOMIC_ACQUIRE) == key ? c : 0;
}

static void debit(int dev, int64_t ns) {
    __atomic_sub_fetch(&gg_region_ptr()->header.tokens_ns[dev], ns, __ATOMIC_ACQ_REL);
}

/* Folds a finished timing into its key's estimate and settles its debit. Caller holds d->mu.
 * Returns 1 if the sample is free again. */
static int collect(int dev, struct dev_state *d, struct sample *s, int wait) {
    if (s->state != SAMPLE_PENDING) return s->state == SAMPLE_FREE;
    CUresult q;
    while ((q = gg_real.cuEventQuery(s->stop)) == CUDA_ERROR_NOT_READY && wait) sleep_ns(20000);
    if (q == CUDA_ERROR_NOT_READY) return 0;
    float ms = 0;
    if (q == CUDA_SUCCESS && gg_real.cuEventElapsedTime(&ms, s->start, s->stop) == CUDA_SUCCESS && ms >= 0) {
        int64_t ns = (int64_t)((double)ms * 1e6);
        if (ns < 1) ns = 1;
        struct est *e = slot_of(d, s->key);
        if (__atomic_load_n(&e->key, __ATOMIC_RELAXED) == s->key) {
            /* a running mean that becomes an average over the last ~32 timings: varying
             * kernels of one key are debited their mean, not a noisy recent value (the
             * launch rate follows 1/estimate, so noise alone would overshoot the quota) */
            int64_t old = e->cost, n = e->n < 32 ? e->n + 1 : 32, diff = ns > old ? ns - old : old - ns;
            e->n = n;
            __atomic_store_n(&e->dev, e->dev + (diff - e->dev) / n, __ATOMIC_RELAXED);
            __atomic_store_n(&e->cost, old + (ns - old) / n, __ATOMIC_RELAXED);
        } else { /* new key (or evicting another): its first measurement */
            __atomic_store_n(&e->key, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&e->cost, ns, __ATOMIC_RELAXED);
            __atomic_store_n(&e->dev, 0, __ATOMIC_RELAXED);
            e->n = 1;
            __atomic_store_n(&e->key, s->key, __ATOMIC_RELEASE);
        }
        if (ns > d->max_cost) d->max_cost = ns;
        debit(dev, ns - s->debited); /* the timed launch pays exactly what it used */
        gg_count_device_ns(dev, ns);
    } else {
        gg_count_device_ns(dev, s->debited); /* no timing: it keeps its estimate */
    }
    s->state = SAMPLE_FREE;
    return 1;
}

static void collect_ready(int dev, struct dev_state *d) {
    for (int i = 0; i < RING; i++) collect(dev, d, &d->ring[i], 0);
}

/* A free ring entry with events, or NULL; waits for the oldest pending one when must. */
static struct sample *take_sample(int dev, struct dev_state *d, int must) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < RING; i++) {
            struct sample *s = &d->ring[i];
            if (s->state == SAMPLE_PENDING) collect(dev, d, s, pass == 1 && must);
            if (s->state != SAMPLE_FREE) continue;
            if (!s->start && gg_real.cuEventCreate(&s->start, 0) != CUDA_SUCCESS) s->start = NULL;
            if (s->start && !s->stop && gg_real.cuEventCreate(&s->stop, 0) != CUDA_SUCCESS) s->stop = NULL;
            if (s->start && s->stop) return s;
        }
        if (!must) break;
    }
    return NULL;
}

int gg_throttle_before(int dev, uint64_t key, CUstream stream) {
    struct gg_header *h = &gg_region_ptr()->header;
    uint32_t pct = gg_device_core_limit(dev);
    if (!pct) return -1;
    pthread_once(&st_once, st_init);
    struct dev_state *d = &st[dev];
    gg_count_launch(dev);
    refill(h, dev, pct, __atomic_load_n(&d->max_cost, __ATOMIC_RELAXED));
    int varied = 0;
    int64_t cost = estimate(d, key, &varied);
    int unknown = cost == 0, sample = -1;
    if (unknown || rand32() % (varied ? SAMPLE_ONE_IN_VARIED : SAMPLE_ONE_IN) == 0) {
        /* an unknown key must be timed: wait for the lock and for a free timing slot */
        if (unknown ? pthread_mutex_lock(&d->mu) == 0 : pthread_mutex_trylock(&d->mu) == 0) {
            struct sample *s = take_sample(dev, d, unknown);
            if (s) {
                s->state = SAMPLE_STARTED;
                s->key = key;
                sample = (int)(s - d->ring) | (unknown ? SYNC_FLAG : 0);
            }
            pthread_mutex_unlock(&d->mu);
        }
        if (unknown && sample < 0) cost = d->max_cost ? d->max_cost : BURST_NS; /* cannot time it */
    } else if (pthread_mutex_trylock(&d->mu) == 0) {
        collect_ready(dev, d);
        pthread_mutex_unlock(&d->mu);
    }
    if (cost) {
        debit(dev, cost);
        int64_t t = __atomic_load_n(&h->tokens_ns[dev], __ATOMIC_ACQUIRE);
        if (sample < 0) gg_count_device_ns(dev, cost); /* untimed: charged its estimate */
        if (t < 0) wait_tokens(dev, -t * 100 / (int64_t)pct); /* until refills repay the debt */
    }
    if (sample >= 0) {
        struct sample *s = &d->ring[sample & (SYNC_FLAG - 1)];
        s->debited = cost;
        /* the start event goes in after any wait, so a timing measures the kernel, not our sleep */
        if (gg_real.cuEventRecord(s->start, stream) != CUDA_SUCCESS) {
            __atomic_store_n(&s->state, SAMPLE_FREE, __ATOMIC_RELEASE);
            gg_count_device_ns(dev, cost);
            if (unknown) {
                debit(dev, d->max_cost ? d->max_cost : BURST_NS);
                gg_count_device_ns(dev, d->max_cost ? d->max_cost : BURST_NS);
            }
            return -1;
        }
    }
    return sample;
}

void gg_throttle_after(int dev, int sample, CUstream stream, CUresult rc) {
    if (sample < 0) return;
    struct dev_state *d = &st[dev];
    struct sample *s = &d->ring[sample & (SYNC_FLAG - 1)];
    int ok = rc == CUDA_SUCCESS && gg_real.cuEventRecord(s->stop, stream) == CUDA_SUCCESS;
    pthread_mutex_lock(&d->mu);
    if (!ok) gg_count_device_ns(dev, s->debited); /* not timed: it keeps its estimate */
    s->state = ok ? SAMPLE_PENDING : SAMPLE_FREE;
    if (ok && (sample & SYNC_FLAG)) collect(dev, d, s, 1); /* first of its key: settle before returning */
    pthread_mutex_unlock(&d->mu);
    if (ok && (sample & SYNC_FLAG)) {
        uint32_t pct = gg_device_core_limit(dev);
        if (pct) refill(&gg_region_ptr()->header, dev, pct, d->max_cost); /* credit the wait */
        int64_t t = __atomic_load_n(&gg_region_ptr()->header.tokens_ns[dev], __ATOMIC_ACQUIRE);
        if (pct && t < 0) wait_tokens(dev, -t * 100 / (int64_t)pct);
    }
}
