/* Compute quota: a token bucket of device time shared by the container's
 * processes (in the region). Each launch is debited its estimated device time;
 * the estimate is learned by timing a sample of launches with driver events, so
 * the rate is in time units and does not depend on SM count or grid shape. */
#include <pthread.h>
#include <time.h>
#include "gg.h"

#define BURST_NS 10000000LL      /* idle credit is capped at 10 ms of device time */
#define SAMPLE_EVERY 16          /* time one launch in 16 */
#define FIRST_SAMPLE_WAIT_NS 100000000ULL

struct sample {
    CUevent start, stop;
    int kind;
    int pending;
};

struct dev_state {
    int64_t cost_ns[2];        /* EWMA device time per launch, by launch kind */
    uint64_t launches;
    struct sample s;
    pthread_mutex_t mu;        /* guards s; taken with trylock off the hot path */
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

static void refill(struct gg_header *h, int dev, uint32_t pct) {
    uint64_t now = gg_now_ns();
    uint64_t last = __atomic_load_n(&h->refill_ns[dev], __ATOMIC_ACQUIRE);
    if (now <= last || !__atomic_compare_exchange_n(&h->refill_ns[dev], &last, now, 0,
                                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    if (last == 0) return; /* first launch ever: start the clock with an empty bucket */
    int64_t add = (int64_t)((now - last) * pct / 100);
    int64_t t = __atomic_add_fetch(&h->tokens_ns[dev], add, __ATOMIC_ACQ_REL);
    while (t > BURST_NS
           && !__atomic_compare_exchange_n(&h->tokens_ns[dev], &t, BURST_NS, 0, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE)) {
    }
}

/* Folds a finished sample into the estimate. Caller holds d->mu. */
static int collect(struct dev_state *d, int wait) {
    if (!d->s.pending) return 1;
    uint64_t deadline = gg_now_ns() + FIRST_SAMPLE_WAIT_NS;
    CUresult q;
    while ((q = gg_real.cuEventQuery(d->s.stop)) == CUDA_ERROR_NOT_READY && wait
           && gg_now_ns() < deadline)
        sleep_ns(20000);
    if (q == CUDA_ERROR_NOT_READY) return 0;
    float ms = 0;
    if (q == CUDA_SUCCESS && gg_real.cuEventElapsedTime(&ms, d->s.start, d->s.stop) == CUDA_SUCCESS
        && ms >= 0) {
        int64_t ns = (int64_t)((double)ms * 1e6), *c = &d->cost_ns[d->s.kind];
        int64_t old = __atomic_load_n(c, __ATOMIC_RELAXED);
        __atomic_store_n(c, old ? old + (ns - old) / 8 : (ns ? ns : 1), __ATOMIC_RELAXED);
    }
    gg_real.cuEventDestroy_v2(d->s.start);
    gg_real.cuEventDestroy_v2(d->s.stop);
    d->s.pending = 0;
    return 1;
}

int gg_throttle_before(int dev, int kind, CUstream stream, int ptsz) {
    (void)ptsz;
    struct gg_header *h = &gg_region_ptr()->header;
    uint32_t pct = gg_device_core_limit(dev);
    if (!pct) return -1;
    pthread_once(&st_once, st_init);
    struct dev_state *d = &st[dev];
    gg_count_launch(dev);
    int sample = -1;
    /* the start event goes in after any wait, so a sample times the kernel, not our sleep */
    int64_t cost = __atomic_load_n(&d->cost_ns[kind], __ATOMIC_RELAXED);
    refill(h, dev, pct);
    int64_t t = __atomic_sub_fetch(&h->tokens_ns[dev], cost, __ATOMIC_ACQ_REL);
    if (t < 0) sleep_ns(-t * 100 / (int64_t)pct); /* until refills repay the debt */
    uint64_t n = __atomic_fetch_add(&d->launches, 1, __ATOMIC_RELAXED);
    int unknown = __atomic_load_n(&d->cost_ns[kind], __ATOMIC_RELAXED) == 0;
    if ((unknown || n % SAMPLE_EVERY == 0) && pthread_mutex_trylock(&d->mu) == 0) {
        /* With no estimate yet, wait for the first sample instead of launching for free. */
        if (collect(d, unknown && d->s.kind == kind) && !d->s.pending
            && gg_real.cuEventCreate(&d->s.start, 0) == CUDA_SUCCESS) {
            if (gg_real.cuEventCreate(&d->s.stop, 0) == CUDA_SUCCESS
                && gg_real.cuEventRecord(d->s.start, stream) == CUDA_SUCCESS) {
                d->s.kind = kind;
                sample = dev;
            } else {
                gg_real.cuEventDestroy_v2(d->s.start);
            }
        }
        if (sample < 0) pthread_mutex_unlock(&d->mu);
    }
    return sample;
}

void gg_throttle_after(int dev, int sample, CUstream stream, int ptsz, CUresult rc) {
    (void)ptsz;
    if (sample < 0) return;
    struct dev_state *d = &st[dev];
    if (rc == CUDA_SUCCESS && gg_real.cuEventRecord(d->s.stop, stream) == CUDA_SUCCESS) {
        d->s.pending = 1;
    } else {
        gg_real.cuEventDestroy_v2(d->s.start);
        gg_real.cuEventDestroy_v2(d->s.stop);
    }
    pthread_mutex_unlock(&d->mu);
}
