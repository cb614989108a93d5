/* Process-local map from driver handles (pointers, arrays, VMM handles, pools) to
 * the bytes charged for them, so frees release exactly what allocation charged. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gg.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct gg_entry *tab;
static size_t cap, used_slots; /* used_slots counts live entries and tombstones */

static size_t hash(int kind, uint64_t key) {
    uint64_t h = (key ^ ((uint64_t)kind << 59)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 17);
}

static struct gg_entry *find(int kind, uint64_t key) {
    if (!cap) return NULL;
    for (size_t i = hash(kind, key) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        struct gg_entry *e = &tab[i];
        if (e->kind == 0) return NULL;
        if (e->kind == kind && e->key == key) return e;
    }
}

static void insert_raw(struct gg_entry *t, size_t c, const struct gg_entry *src) {
    for (size_t i = hash(src->kind, src->key) & (c - 1);; i = (i + 1) & (c - 1))
        if (t[i].kind <= 0) { t[i] = *src; return; }
}

static int grow(void) {
    size_t ncap = cap ? cap * 2 : 1024;
    struct gg_entry *n = calloc(ncap, sizeof(*n));
    if (!n) return -1;
    size_t live = 0;
    for (size_t i = 0; i < cap; i++)
        if (tab[i].kind > 0) { insert_raw(n, ncap, &tab[i]); live++; }
    free(tab);
    tab = n;
    cap = ncap;
    used_slots = live;
    return 0;
}

void gg_track_put(int kind, uint64_t key, uint64_t bytes, int dev, uint64_t aux) {
    struct gg_entry e = {key, bytes, aux, dev, kind};
    pthread_mutex_lock(&mu);
    struct gg_entry *old = find(kind, key);
    if (old) {
        *old = e;
    } else if ((used_slots + 1) * 2 <= cap || grow() == 0) {
        for (size_t i = hash(kind, key) & (cap - 1);; i = (i + 1) & (cap - 1)) {
            if (tab[i].kind <= 0) {
                if (tab[i].kind == 0) used_slots++;
                tab[i] = e;
                break;
            }
        }
    } else {
        gg_log(GG_LOG_ERROR, "out of host memory tracking allocations; a free will not be credited");
    }
    pthread_mutex_unlock(&mu);
}

int gg_track_take(int kind, uint64_t key, struct gg_entry *out) {
    pthread_mutex_lock(&mu);
    struct gg_entry *e = find(kind, key);
    if (e) { *out = *e; e->kind = -1; }
    pthread_mutex_unlock(&mu);
    return e != NULL;
}

int gg_track_get(int kind, uint64_t key, struct gg_entry *out) {
    pthread_mutex_lock(&mu);
    struct gg_entry *e = find(kind, key);
    if (e) *out = *e;
    pthread_mutex_unlock(&mu);
    return e != NULL;
}

void gg_track_update(int kind, uint64_t key, uint64_t bytes) {
    pthread_mutex_lock(&mu);
    struct gg_entry *e = find(kind, key);
    if (e) e->bytes = bytes;
    pthread_mutex_unlock(&mu);
}

/* Entries of a pool: bytes = charged, aux = live bytes. Kept in the same table. */
void gg_track_reset(void) {
    pthread_mutex_init(&mu, NULL);
    free(tab);
    tab = NULL;
    cap = used_slots = 0;
}
