/* FGD's per-node score on the study's fast path, over the numpy arrays of
 * gpugov.placement (ClusterState, FragmentationModel): the same exact integers as the
 * Python path (FragmentationModel.parts_of / frag_after_one, FgdPolicy._score_one).
 *
 * Every array is int64, C-contiguous, and its size was checked by the Python caller when it
 * built the context (gpugov/placement/native_fgd.py); indexes are checked again here so a
 * wrong caller gets -1, never a read out of bounds. Not part of the enforcement library
 * (libgpugov.so): it is built as its own libgpugov_placement.so. */

#include <stddef.h>
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

/* ---- a whole trace run: Placer.place + FragmentationMeter.update per pod ----------------
 * sim/experiment.py's loop for the pods on the study's fast path, in one call
 * (gpugov/placement/fgd_run.py packs the pods and owns every array): per pod the engine's
 * filter (ClusterState.feasible), Placer._ranked with FGD's score, the devices
 * (FgdPolicy.choose_devices), ClusterState.allocate's plain update and the meter's update,
 * or ClusterState's reason when no node fits. The same integers and picks as the Python
 * path; tests/placement/test_fgd_run.py compares every series. */

enum { P_CPU, P_MEM, P_COUNT, P_MILLI, P_SHAPE, P_SPEC, P_FIELDS };
/* outcome codes: 0 placed; ClusterState._fast_failure_reason's reasons (fgd_run.REASONS) */
enum { O_PLACED, O_GPU_MODEL, O_GPU, O_CPU, O_MEMORY };

struct gg_fgd_run {
    int64_t *gpu_free;        /* the context's, written here: [n, width] */
    int64_t *cpu_free;        /* the context's: [n] */
    int64_t *full_gpus;       /* the context's: [n] */
    int64_t *version;         /* the context's: [n] */
    int64_t *mem_free;        /* [n] */
    int64_t *gpu_mem_free;    /* [n, width] */
    const int64_t *gpu_count; /* [n] devices per node */
    int64_t *kind_count;      /* [n, width + 1] */
    int64_t *dev_pods;        /* [n, width] */
    int64_t *pod_count;       /* [n] */
    int64_t *gpu_free_total;  /* [n] */
    int64_t *max_gpu_free;    /* [n] */
    const int64_t *tiebreak;  /* [n] the engine's tie-break key */
    int64_t n_shapes;
    int64_t *cache;           /* [n_shapes, 5, n]: score version, score, key, device version,
                                 device (per pod shape: CPU, milli, GPU count) */
    int64_t n_specs;
    const uint8_t *model_ok;  /* [n_specs, n]: ClusterState.model_mask per GPU model list */
    int64_t n_pods;
    const int64_t *pods;      /* [n_pods, P_FIELDS]; shape -1: not for this path */
    int64_t *per_node;        /* [n] the meter's fragmentation per node */
    int64_t *scratch;         /* [n] room for the fitting nodes of one pod */
    int64_t frag_total, arrived_total, used_total, placed;
    int64_t *arrived, *used, *frag, *outcome; /* [n_pods] the series */
};

/* ClusterState._fast_failure_reason (no GPU memory asked) */
static int64_t failure_reason(const struct gg_fgd_ctx *c, const struct gg_fgd_run *r,
                              const uint8_t *ok, int64_t cpu, int64_t count, int64_t milli)
{
    int any_model = 0, any_gpu = 0, any_cpu = 0;
    for (int64_t n = 0; n < c->n_nodes; n++) {
        int gpu_ok = 1;
        if (count > 0) {
            if (!ok[n])
                continue;
            any_model = 1;
            gpu_ok = count == 1 ? r->max_gpu_free[n] >= milli : r->full_gpus[n] >= count;
            if (!gpu_ok)
                continue;
            any_gpu = 1;
        }
        if (r->cpu_free[n] >= cpu)
            any_cpu = 1;
    }
    if (count > 0 && !any_model)
        return O_GPU_MODEL;
    if (count > 0 && !any_gpu)
        return O_GPU;
    return any_cpu ? O_MEMORY : O_CPU;
}

/* Runs pods start.. until one this path does not serve (shape -1, or anything unexpected:
 * that pod is left untouched for the Python path); returns its index, n_pods when all ran,
 * -1 when the run does not point at the context's arrays. */
GG_EXPORT int64_t gg_fgd_run(const struct gg_fgd_ctx *c, struct gg_fgd_run *r, int64_t start)
{
    const int64_t n = c->n_nodes, w = c->width;
    if (r->gpu_free != c->gpu_free || r->cpu_free != c->cpu_free ||
        r->full_gpus != c->full_gpus || r->version != c->version || w > 1022 || start < 0)
        return -1;
    for (int64_t i = start; i < r->n_pods; i++) {
        const int64_t *p = r->pods + i * P_FIELDS;
        const int64_t cpu = p[P_CPU], mem = p[P_MEM], count = p[P_COUNT], milli = p[P_MILLI];
        const int64_t shape = p[P_SHAPE], spec = p[P_SPEC];
        if (shape < 0 || shape >= r->n_shapes || count < 0 || milli < 0 ||
            milli > 1000 || (count > 0) != (milli > 0) ||
            (count > 0 && (spec < 0 || spec >= r->n_specs)))
            return i;
        const int sharing = count == 1 && milli < 1000, is_gpu = count > 0;
        const uint8_t *ok = is_gpu ? r->model_ok + spec * n : NULL;
        int64_t *cv = r->cache + shape * 5 * n, *cs = cv + n, *ck = cs + n, *dv = ck + n,
                *dd = dv + n;
        /* ClusterState.feasible: the fitting nodes listed in `fit`, in index order, without
         * a branch per node */
        int64_t *fit = r->scratch, nfit = 0;
        if (is_gpu) {
            const int64_t *room = count == 1 ? r->max_gpu_free : r->full_gpus;
            const int64_t want = count == 1 ? milli : count;
            for (int64_t k = 0; k < n; k++) {
                fit[nfit] = k;
                nfit += (r->cpu_free[k] >= cpu) & (r->mem_free[k] >= mem) & (ok[k] != 0) &
                        (room[k] >= want);
            }
        } else {
            for (int64_t k = 0; k < n; k++) {
                fit[nfit] = k;
                nfit += (r->cpu_free[k] >= cpu) & (r->mem_free[k] >= mem);
            }
        }
        int64_t best = -1, best_key = 0;
        for (int64_t j = 0; j < nfit; j++) { /* Placer._ranked */
            const int64_t k = fit[j];
            if (cv[k] != r->version[k]) {
                int64_t packed = gg_fgd_score_one(c, k, cpu, milli, count, sharing, is_gpu);
                if (packed < 0)
                    return i;
                cs[k] = packed / 1024;
                ck[k] = cs[k] * n + r->tiebreak[k];
                cv[k] = r->version[k];
                if (sharing) {
                    dv[k] = r->version[k];
                    dd[k] = packed % 1024 - 1;
                }
            }
            if (best < 0 || ck[k] > best_key) {
                best = k;
                best_key = ck[k];
            }
        }
        const int64_t total_milli = count * milli;
        if (best < 0) {
            r->outcome[i] = failure_reason(c, r, ok, cpu, count, milli);
        } else {
            /* FgdPolicy.choose_devices: the device found while scoring; whole GPUs the
             * lowest-index fully free ones */
            int64_t devs[1024], nd = 0;
            int64_t *free = r->gpu_free + best * w;
            if (sharing) {
                if (dv[best] != r->version[best]) {
                    int64_t packed = gg_fgd_score_one(c, best, cpu, milli, count, sharing,
                                                      is_gpu);
                    if (packed < 0)
                        return i;
                    dv[best] = r->version[best];
                    dd[best] = packed % 1024 - 1;
                }
                devs[nd++] = dd[best];
            } else {
                for (int64_t d = 0; d < w && nd < count; d++)
                    if (free[d] == 1000)
                        devs[nd++] = d;
            }
            if (nd != count)
                return i;
            for (int64_t j = 0; j < nd; j++)  /* ClusterState.allocate's checks */
                if (devs[j] < 0 || devs[j] >= r->gpu_count[best] || free[devs[j]] < milli)
                    return i;
            if (r->cpu_free[best] < cpu || r->mem_free[best] < mem)
                return i;
            /* ClusterState.allocate's plain update */
            for (int64_t j = 0; j < nd; j++) {
                if (!sharing)
                    r->gpu_mem_free[best * w + devs[j]] = 0;
                free[devs[j]] -= milli;
                r->dev_pods[best * w + devs[j]] += 1;
            }
            if (nd)
                r->kind_count[best * (w + 1) + (sharing ? 0 : count)] += 1;
            r->cpu_free[best] -= cpu;
            r->mem_free[best] -= mem;
            r->pod_count[best] += 1;
            int64_t sum = 0, full = 0, top = free[0];
            for (int64_t d = 0; d < w; d++) {
                sum += free[d];
                full += free[d] == 1000;
                top = free[d] > top ? free[d] : top;
            }
            r->gpu_free_total[best] = sum;
            r->full_gpus[best] = full;
            r->max_gpu_free[best] = top;
            r->version[best] += 1;
            /* FragmentationMeter.update */
            int64_t now = refresh(c, best);
            r->frag_total += now - r->per_node[best];
            r->per_node[best] = now;
            r->used_total += total_milli;
            r->placed += 1;
            r->outcome[i] = O_PLACED;
        }
        r->arrived_total += total_milli;
        r->arrived[i] = r->arrived_total;
        r->used[i] = r->used_total;
        r->frag[i] = r->frag_total;
    }
    return r->n_pods;
}
