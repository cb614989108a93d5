/* FGD's per-node score on the study's fast path, over the numpy arrays of
 * gpugov.placement (ClusterState, FragmentationModel): the same exact integers as the
 * Python path (FragmentationModel.parts_of / frag_after_one, FgdPolicy._score_one).
 *
 * Every array is int64, C-contiguous, and its size was checked by the Python caller when it
 * built the context (gpugov/placement/native_fgd.py); indexes are checked again here so a
 * wrong caller gets -1, never a read out of bounds. Not part of the enforcement library
 * (libgpugov.so): it is built as its own libgpugov_placement.so. */

#include <stdint.h>

#define GG_EXPORT __attribute__((visibility("default")))

struct gg_fgd_ctx {
    int64_t n_nodes, width, m;           /* nodes, device columns, typical shapes */
    const int64_t *gpu_free;             /* [n_nodes, width] */
    const int64_t *cpu_free;             /* [n_nodes] */
    const int64_t *model_idx;            /* [n_nodes], -1 .. need_rows - 2 */
    const int64_t *full_gpus;            /* [n_nodes] */
    const int64_t *version;              /* [n_nodes] */
    int64_t *parts_version;              /* [n_nodes] */
    int64_t *free_total;                 /* [n_nodes] */
    int64_t *both;                       /* [n_nodes, 2m]: fit count | big sum */
    int64_t *frag;                       /* [n_nodes] */
    const int64_t *milli;                /* [m] (0 replaced by 1) */
    const int64_t *weight;               /* [m] */
    int64_t total_weight;
    const int64_t *need;                 /* [need_rows, n_levels + 1, m] */
    int64_t need_rows;
    const int64_t *cpu_levels;           /* [n_levels], sorted, distinct */
    int64_t n_levels;
    const int64_t *thresholds;           /* [101]: score >= k iff gain >= thresholds[k] */
};

/* bisect_right: how many CPU levels are <= cpu */
static int64_t level_of(const struct gg_fgd_ctx *c, int64_t cpu)
{
    int64_t lo = 0, hi = c->n_levels;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cpu < c->cpu_levels[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static const int64_t *need_row(const struct gg_fgd_ctx *c, int64_t node, int64_t cpu)
{
    int64_t row = c->model_idx[node];
    if (row < 0)
        row += c->need_rows; /* numpy's index -1: the row of nodes without a model */
    return c->need + (row * (c->n_levels + 1) + level_of(c, cpu)) * c->m;
}

/* The node's parts and current fragmentation, recomputed when its version moved. */
static int64_t refresh(const struct gg_fgd_ctx *c, int64_t node)
{
    if (c->parts_version[node] == c->version[node])
        return c->frag[node];
    const int64_t m = c->m;
    const int64_t *free = c->gpu_free + node * c->width;
    int64_t *both = c->both + node * 2 * m;
    int64_t total = 0;
    for (int64_t j = 0; j < 2 * m; j++)
        both[j] = 0;
    for (int64_t g = 0; g < c->width; g++) {
        int64_t f = free[g];
        total += f;
        for (int64_t j = 0; j < m; j++) {
            if (f >= c->milli[j]) {
                both[j] += 1;
                both[m + j] += f;
            }
        }
    }
    int64_t frag = 0;
    if (c->total_weight) {
        const int64_t *need = need_row(c, node, c->cpu_free[node]);
        int64_t usable = 0;
        for (int64_t j = 0; j < m; j++)
            if (both[j] >= need[j])
                usable += both[m + j] * c->weight[j];
        frag = c->total_weight * total - usable;
    }
    c->free_total[node] = total;
    c->frag[node] = frag;
    c->parts_version[node] = c->version[node];
    return frag;
}

/* Fragmentation after `taken` GPUs with `f` milli free each lose `milli`. */
static int64_t frag_after(const struct gg_fgd_ctx *c, int64_t node, const int64_t *need,
                          int64_t f, int64_t taken, int64_t milli)
{
    const int64_t m = c->m;
    const int64_t *both = c->both + node * 2 * m;
    if (!c->total_weight)
        return 0;
    int64_t after_f = f - milli, usable = 0;
    for (int64_t j = 0; j < m; j++) {
        int64_t was = c->milli[j] <= f, still = c->milli[j] <= after_f;
        int64_t count = both[j] - taken * (was ^ still);
        int64_t sum = both[m + j] - taken * (was * f - still * after_f);
        if (count >= need[j])
            usable += sum * c->weight[j];
    }
    return c->total_weight * (c->free_total[node] - taken * milli) - usable;
}

/* How many of thresholds[1..100] (ascending) the gain reaches: bisection. */
static int64_t score_of(const struct gg_fgd_ctx *c, int64_t gain)
{
    int64_t lo = 0, hi = 100; /* the score lies in lo..hi */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (gain >= c->thresholds[mid])
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The node's fragmentation (its parts refreshed); -1 for a node out of range. */
GG_EXPORT int64_t gg_fgd_refresh(const struct gg_fgd_ctx *c, int64_t node)
{
    if (node < 0 || node >= c->n_nodes)
        return -1;
    return refresh(c, node);
}

/* FgdPolicy._score_one: score * 1024 + (device + 1), device -1 when not sharing;
 * -1 for arguments out of range. */
GG_EXPORT int64_t gg_fgd_score_one(const struct gg_fgd_ctx *c, int64_t node, int64_t cpu_milli,
                                   int64_t gpu_milli, int64_t gpu_count, int sharing, int is_gpu)
{
    if (node < 0 || node >= c->n_nodes || c->width > 1022)
        return -1;
    int64_t before = refresh(c, node);
    const int64_t *need = need_row(c, node, c->cpu_free[node] - cpu_milli);
    if (!sharing) {
        int64_t taken = 0;
        if (is_gpu)
            taken = c->full_gpus[node] < gpu_count ? c->full_gpus[node] : gpu_count;
        int64_t after = frag_after(c, node, need, 1000, taken, gpu_milli);
        return score_of(c, before - after) * 1024;
    }
    const int64_t *free = c->gpu_free + node * c->width;
    int64_t best = -1, dev = -1;
    for (int64_t d = 0; d < c->width; d++) {
        int64_t f = free[d], seen = 0;
        if (f < gpu_milli)
            continue;
        for (int64_t e = 0; e < d && !seen; e++) /* the first device of each free value */
            seen = free[e] == f && free[e] >= gpu_milli;
        if (seen)
            continue;
        int64_t s = score_of(c, before - frag_after(c, node, need, f, 1, gpu_milli));
        if (s > best) {
            best = s;
            dev = d;
        }
    }
    if (dev < 0)
        return 0;
    return best * 1024 + dev + 1;
}

/* Placer._ranked with FGD's score: the masked node with the highest cached key, after
 * scoring (and caching, with the device found for sharing pods) every masked node whose
 * version moved; returned as node * 1024 + (its device for a sharing pod, else -1) + 1.
 * -1 when the mask is empty. Arrays: [n_nodes] each; dev_* NULL when the pod does not share
 * a GPU. */
GG_EXPORT int64_t gg_fgd_ranked(const struct gg_fgd_ctx *c, const uint8_t *mask,
                                int64_t *cache_version, int64_t *cache_score,
                                int64_t *cache_key, const int64_t *tiebreak,
                                int64_t *dev_version, int64_t *dev_device, int64_t cpu_milli,
                                int64_t gpu_milli, int64_t gpu_count, int sharing, int is_gpu)
{
    int64_t best = -1, best_key = 0;
    for (int64_t n = 0; n < c->n_nodes; n++) {
        if (!mask[n])
            continue;
        if (cache_version[n] != c->version[n]) {
            int64_t packed = gg_fgd_score_one(c, n, cpu_milli, gpu_milli, gpu_count, sharing,
                                              is_gpu);
            if (packed < 0)
                return -1;
            int64_t score = packed / 1024;
            cache_score[n] = score;
            cache_key[n] = score * c->n_nodes + tiebreak[n];
            cache_version[n] = c->version[n];
            if (sharing && dev_version && dev_device) {
                dev_version[n] = c->version[n];
                dev_device[n] = packed % 1024 - 1;
            }
        }
        if (best < 0 || cache_key[n] > best_key) {
            best = n;
            best_key = cache_key[n];
        }
    }
    if (best < 0 || !sharing || !dev_version || !dev_device)
        return best < 0 ? -1 : best * 1024;
    if (dev_version[best] != c->version[best]) { /* scored under another engine shape */
        int64_t packed = gg_fgd_score_one(c, best, cpu_milli, gpu_milli, gpu_count, sharing,
                                          is_gpu);
        if (packed < 0)
            return -1;
        dev_version[best] = c->version[best];
        dev_device[best] = packed % 1024 - 1;
    }
    return best * 1024 + dev_device[best] + 1;
}
