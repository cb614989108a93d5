/* The fake NVML (tests/fake_cuda/fake_nvml.c, included whole) plus the counters
 * dcgm-exporter's default set needs, each with the real NVML's support matrix:
 *
 *   GPM (nvmlGpmQueryDeviceSupport / SampleAlloc / SampleGet / MigSampleGet / MetricsGet /
 *   SampleFree): Hopper and later only (compute capability >= 9); older GPUs report
 *   isSupportedDevice 0 and refuse samples with NVML_ERROR_NOT_SUPPORTED. Metrics are averages
 *   between two samples of the same device (or GPU instance), sample2 taken after sample1.
 *   nvmlDeviceGetFieldValues: NVML_FI_DEV_MEMORY_TEMP (HBM parts: the MIG-capable models or
 *   cc >= 9; GDDR parts such as T4 refuse it per value), NVLink throughput TX/RX in KiB
 *   (Hopper+ with NVLinks); any other field id -> NOT_SUPPORTED in that value.
 *   nvmlDeviceGetTotalEnergyConsumption (mJ since init, grows with the power draw),
 *   nvmlDeviceGetPcieReplayCounter, nvmlDeviceGetPcieThroughput (KB/s),
 *   nvmlDeviceGetEncoderUtilization / DecoderUtilization, nvmlDeviceGetRemappedRows
 *   (Ampere+, cc >= 8; older: NOT_SUPPORTED).
 *
 * Extra statements in the same FAKE_NVML_CONFIG file (the base fake ignores them) and in the
 * events file:
 *   gpm <dev> <gr%> <sm%> <occupancy%> <tensor%> <dram%> <fp64%> <fp32%> <fp16%>
 *   gpm-gi <dev> <gi-id> <same eight values>      (one MIG GPU instance's activity)
 *   pcie-kbps <dev> <tx> <rx>     pcie-replay <dev> <n>     encdec <dev> <enc%> <dec%>
 *   mem-temp <dev> <C>            remapped-rows <dev> <corr> <unc> <pending> <failure>
 *   nvlink-kib <dev> <tx> <rx>
 * Built with -DFAKE_NVML_LEGACY it lacks GPM (drivers before R520) like the base fake lacks
 * its newer symbols. */
#include "../fake_cuda/fake_nvml.c"

#define E_VERSION 25 /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
#define NGPM 8
#define GPM_MAX 477  /* NVML_GPM_METRIC_MAX of nvml.h / nvidia-ml-py */

struct counters {
    double gpm[NGPM], gi_gpm[MAXGI][NGPM];
    unsigned gi_id[MAXGI], ngi;
    unsigned pcie_tx, pcie_rx, replay, enc, dec, mem_temp, has_mem_temp;
    unsigned remap[4];
    unsigned long long nvl_tx, nvl_rx;
};
static struct counters cnt[MAXDEV];
static long cfg_off, ev_off;
static struct timespec t0;
static struct stat seen;

static struct counters *counters_of(int dev) { return dev >= 0 && dev < MAXDEV ? &cnt[dev] : NULL; }

static void counter_line(char *line) {
    char kw[32];
    double v[10] = {0};
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    int n = sscanf(line, "%31s %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", kw, &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    if (n < 3) return;
    struct counters *c = counters_of((int)v[0]);
    if (!c) return;
    if (!strcmp(kw, "gpm") && n >= 10) {
        for (int k = 0; k < NGPM; k++) c->gpm[k] = v[1 + k];
    } else if (!strcmp(kw, "gpm-gi") && n >= 11) {
        unsigned slot = 0;
        while (slot < c->ngi && c->gi_id[slot] != (unsigned)v[1]) slot++;
        if (slot == MAXGI) return;
        if (slot == c->ngi) c->gi_id[c->ngi++] = (unsigned)v[1];
        for (int k = 0; k < NGPM; k++) c->gi_gpm[slot][k] = v[2 + k];
    } else if (!strcmp(kw, "pcie-kbps") && n >= 4) {
        c->pcie_tx = (unsigned)v[1]; c->pcie_rx = (unsigned)v[2];
    } else if (!strcmp(kw, "pcie-replay")) c->replay = (unsigned)v[1];
    else if (!strcmp(kw, "encdec") && n >= 4) { c->enc = (unsigned)v[1]; c->dec = (unsigned)v[2]; }
    else if (!strcmp(kw, "mem-temp")) { c->mem_temp = (unsigned)v[1]; c->has_mem_temp = 1; }
    else if (!strcmp(kw, "remapped-rows") && n >= 6)
        for (int k = 0; k < 4; k++) c->remap[k] = (unsigned)v[1 + k];
    else if (!strcmp(kw, "nvlink-kib") && n >= 4) {
        c->nvl_tx = (unsigned long long)v[1]; c->nvl_rx = (unsigned long long)v[2];
    }
}

/* read complete lines of `path` past *off (the config once, the events file as it grows) */
static void counter_file(const char *path, long *off) {
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    char line[512];
    if (!f) return;
    fseek(f, *off, SEEK_SET);
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') break;
        *off += (long)len;
        counter_line(line);
    }
    fclose(f);
}

/* entry of the counter functions: the base fake's checks, then this file's statements */
static nvmlReturn_t centre(const void *h, struct dev **d) {
    nvmlReturn_t r = enter(h, K_DEV, d);
    if (r) return r;
    const char *cfg = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    if (cfg && stat(cfg, &st) == 0 && (st.st_ino != seen.st_ino || st.st_dev != seen.st_dev ||
                                       st.st_mtim.tv_sec != seen.st_mtim.tv_sec ||
                                       st.st_mtim.tv_nsec != seen.st_mtim.tv_nsec)) {
        seen = st;  /* another node described: start over */
        memset(cnt, 0, sizeof cnt);
        cfg_off = ev_off = 0;
    }
    counter_file(cfg, &cfg_off);
    counter_file(getenv("FAKE_NVML_EVENTS"), &ev_off);
    if (!t0.tv_sec) clock_gettime(CLOCK_MONOTONIC, &t0);
    return NVML_SUCCESS;
}
#define CENTER(h, d) do { nvmlReturn_t e_ = centre(h, &d); if (e_) RET(e_); } while (0)
static struct counters *C(const struct dev *d) { return &cnt[d->h.dev]; }
static int hbm(const struct dev *d) { return d->model != NULL || d->cc_major >= 9; }

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *mj) {
    struct dev *d;
    struct timespec now;
    CENTER(h, d);
    NEED(d, F_POWER);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double s = (double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    *mj = 1000000ULL + (unsigned long long)(d->power * s);  /* mW x s = mJ */
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t h, unsigned int *n) {
    struct dev *d;
    CENTER(h, d);
    *n = C(d)->replay;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t h, int counter, unsigned int *kbps) {
    struct dev *d;
    CENTER(h, d);
    if (counter != 0 && counter != 1) RET(E_INVAL);
    *kbps = counter == 0 ? C(d)->pcie_tx : C(d)->pcie_rx;
    RET(NVML_SUCCESS);
}
static nvmlReturn_t codec(nvmlDevice_t h, int enc, unsigned *util, unsigned *period) {
    struct dev *d;
    CENTER(h, d);
    NEED(d, F_UTIL);
    *util = enc ? C(d)->enc : C(d)->dec;
    *period = 167000;  /* us, as drivers report */
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t h, unsigned *u, unsigned *p) {
    return codec(h, 1, u, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t h, unsigned *u, unsigned *p) {
    return codec(h, 0, u, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned *corr, unsigned *unc,
                                               unsigned *pending, unsigned *failure) {
    struct dev *d;
    CENTER(h, d);
    if (d->cc_major < 8) RET(E_NOTSUP);  /* row remapping: Ampere and later */
    *corr = C(d)->remap[0]; *unc = C(d)->remap[1];
    *pending = C(d)->remap[2]; *failure = C(d)->remap[3];
    RET(NVML_SUCCESS);
}

typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType, nvmlReturn;
    union { double d; unsigned ui; unsigned long long ull; } value;
} fake_field_t;
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int count, fake_field_t *v) {
    struct dev *d;
    struct timespec now;
    CENTER(h, d);
    if (count < 0 || (count && !v)) RET(E_INVAL);
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < count; i++) {
        v[i].timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
        v[i].latencyUsec = 0;
        v[i].nvmlReturn = E_NOTSUP;
        if (v[i].fieldId == 82 && hbm(d)) {  /* NVML_FI_DEV_MEMORY_TEMP */
            v[i].valueType = 1;
            v[i].value.ui = C(d)->has_mem_temp ? C(d)->mem_temp : d->temp + 8;
            v[i].nvmlReturn = NVML_SUCCESS;
        } else if ((v[i].fieldId == 138 || v[i].fieldId == 139) && d->cc_major >= 9 &&
                   d->nvlinks) {  /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / RX, KiB */
            v[i].valueType = 3;
            v[i].value.ull = v[i].fieldId == 138 ? C(d)->nvl_tx : C(d)->nvl_rx;
            v[i].nvmlReturn = NVML_SUCCESS;
        }
    }
    RET(NVML_SUCCESS);
}

#ifndef FAKE_NVML_LEGACY
/* ---- GPM ---- */
struct gpm_sample { unsigned magic; int dev, slot; long long ns; };
#define GPM_MAGIC 0x67706d31u
typedef struct { char *shortName, *longName, *unit; } fake_metric_info_t;
typedef struct {
    unsigned int metricId;
    int nvmlReturn;
    double value;
    fake_metric_info_t info;
} fake_gpm_metric_t;
typedef struct {
    unsigned int version, numMetrics;
    struct gpm_sample *sample1, *sample2;
    fake_gpm_metric_t metrics[GPM_MAX];
} fake_gpm_get_t;
typedef struct { unsigned int version, isSupportedDevice; } fake_gpm_support_t;

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t h, fake_gpm_support_t *s) {
    struct dev *d;
    CENTER(h, d);
    if (!s) RET(E_INVAL);
    if (s->version != 1) RET(E_VERSION);
    s->isSupportedDevice = d->cc_major >= 9;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpmSampleAlloc(struct gpm_sample **out) {
    if (!out) return E_INVAL;
    *out = calloc(1, sizeof **out);
    if (!*out) return E_RESOURCES;
    (*out)->magic = GPM_MAGIC;
    (*out)->dev = -1;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleFree(struct gpm_sample *s) {
    if (!s || s->magic != GPM_MAGIC) return E_INVAL;
    s->magic = 0;
    free(s);
    return NVML_SUCCESS;
}
static nvmlReturn_t take(nvmlDevice_t h, int gi_id, struct gpm_sample *s) {
    struct dev *d;
    struct timespec now;
    CENTER(h, d);
    if (!s || s->magic != GPM_MAGIC) RET(E_INVAL);
    if (d->cc_major < 9) RET(E_NOTSUP);  /* GPM: Hopper and later */
    int slot = -1;
    if (gi_id >= 0) {  /* a GPU instance of a MIG-enabled GPU */
        if (!d->mig_mode) RET(E_NOTSUP);
        for (int g = 0; g < MAXGI; g++)
            if (d->gis[g].used && d->gis[g].id == (unsigned)gi_id) slot = g;
        if (slot < 0) RET(E_NOTFOUND);
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    s->dev = d->h.dev;
    s->slot = slot;
    s->ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t h, struct gpm_sample *s) {
    return take(h, -1, s);
}
EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t h, unsigned int gi, struct gpm_sample *s) {
    return take(h, (int)gi, s);
}
static double gpm_value(const struct counters *c, const struct dev *d, int slot, unsigned id,
                        int *ok) {
    static const unsigned ids[NGPM] = {1, 2, 3, 5, 10, 11, 12, 13};
    *ok = 1;
    for (int k = 0; k < NGPM; k++) {
        if (ids[k] != id) continue;
        if (slot < 0) return c->gpm[k];
        for (unsigned j = 0; j < c->ngi; j++)
            if (c->gi_id[j] == d->gis[slot].id) return c->gi_gpm[j][k];
        return 0;
    }
    if ((id == 20 || id == 21) && slot < 0)  /* PCIe MiB/s: the whole device only */
        return (id == 20 ? c->pcie_tx : c->pcie_rx) / 1024.0;
    *ok = 0;
    return 0;
}
EXPORT nvmlReturn_t nvmlGpmMetricsGet(fake_gpm_get_t *m) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    if (!m) RET(E_INVAL);
    if (m->version != 1) RET(E_VERSION);
    struct gpm_sample *a = m->sample1, *b = m->sample2;
    if (!a || !b || a->magic != GPM_MAGIC || b->magic != GPM_MAGIC || a->dev < 0 ||
        a->dev != b->dev || a->slot != b->slot || b->ns <= a->ns || m->numMetrics > GPM_MAX)
        RET(E_INVAL);
    const struct dev *d = &devs[a->dev];
    for (unsigned i = 0; i < m->numMetrics; i++) {
        int ok;
        double v = gpm_value(&cnt[a->dev], d, a->slot, m->metrics[i].metricId, &ok);
        m->metrics[i].nvmlReturn = ok ? NVML_SUCCESS : E_NOTSUP;
        m->metrics[i].value = ok ? v : 0;
    }
    RET(NVML_SUCCESS);
}
#endif
