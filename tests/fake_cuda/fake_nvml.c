/* A fake libnvidia-ml.so.1 that behaves like the documented NVML, refusals included.
 *
 * Without configuration (the enforcement tests): FAKECUDA_DEVICES devices of
 * FAKECUDA_MEM_BYTES each; "used" comes from the fake CUDA driver (fakegpu_used) when it is
 * loaded in the same process.
 *
 * With FAKE_NVML_CONFIG=<file> (read at nvmlInit), one statement per line, `#` comments:
 *   driver <version> <cuda-int>                     e.g. driver 550.107.02 12040
 *   device <uuid> <pci-device-id> <bus-id> <memory-MiB> <name...>   (index = order)
 *   numa <dev> <node>          cc <dev> <major> <minor>      temp <dev> <C>
 *   util <dev> <gpu%> <mem%>   power <dev> <mW> <limit-mW>    clocks <dev> <sm> <mem>
 *   throttle <dev> <mask>      nvlink <dev> <links> <group>   topo <a> <b> <level>
 *   mig-mode <dev> <0|1>       gi <dev> <profile-id> <start>  (a GPU instance with its CI)
 *   proc <dev> <pid> <bytes> [gi-id]   (bytes 0 removes the process)
 *   xid <dev> <code>           lost <dev> <0|1>
 *   unsupported <dev> <feature>  (utilization power temperature clocks throttle processes
 *                                 events nvlink topology numa)  -> NVML_ERROR_NOT_SUPPORTED
 *   events <file>              lines appended to it later are applied as they appear
 *   power-range <dev> <min-mW> <max-mW> [default-mW]   (see "power management" below)
 *   compute-mode <dev> default|exclusive-process|prohibited|unsupported   (see "compute mode")
 * MIG geometry comes from the PCI device id (A100-40GB, A100-80GB, H100 80GB, A30), with the
 * real profile IDs, placements, limits and refusals (busy GPU, invalid or taken placement).
 * Built with -DFAKE_NVML_LEGACY it lacks the symbols an older driver lacks. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../../native/cuda_types.h"

#define EXPORT __attribute__((visibility("default")))
#define E_UNINIT 1
#define E_INVAL 2
#define E_NOTSUP 3
#define E_NOTFOUND 6
#define E_SIZE 7
#define E_TIMEOUT 10
#define E_LOST 15
#define E_INUSE 19
#define E_RESOURCES 23
#define NOGI 0xFFFFFFFFu
#define MAXDEV 16
#define MAXGI 8
#define MAXPROC 128
#define MAXXID 256

enum kind { K_DEV = 1, K_MIG, K_GI, K_CI };
enum feat { F_UTIL = 1, F_POWER = 2, F_TEMP = 4, F_CLOCKS = 8, F_THROTTLE = 16, F_PROCS = 32,
            F_EVENTS = 64, F_NVLINK = 128, F_TOPO = 256, F_NUMA = 512 };
struct hdr { int kind, dev, gi; };

struct profile {  /* one GPU-instance profile: index constant, ID and geometry */
    unsigned index, id, mslices, cslices, sms, max, starts;  /* starts: bitmask */
    unsigned long long mib;
    const char *name;
};
struct model { unsigned pci, mslices, cslices, nprof; const struct profile *p; };

#define S07 0x7fu
static const struct profile a100_40[] = {
    {0, 19, 1, 1, 14, 7, S07, 4864, "1g.5gb"},  {7, 20, 1, 1, 14, 1, S07, 4864, "1g.5gb+me"},
    {9, 15, 2, 1, 14, 4, 0x55, 9856, "1g.10gb"}, {1, 14, 2, 2, 28, 3, 0x15, 9856, "2g.10gb"},
    {2, 9, 4, 3, 42, 2, 0x11, 19968, "3g.20gb"}, {3, 5, 4, 4, 56, 1, 0x1, 19968, "4g.20gb"},
    {4, 0, 8, 7, 98, 1, 0x1, 40192, "7g.40gb"}};
static const struct profile a100_80[] = {
    {0, 19, 1, 1, 14, 7, S07, 9728, "1g.10gb"},  {7, 20, 1, 1, 14, 1, S07, 9728, "1g.10gb+me"},
    {9, 15, 2, 1, 14, 4, 0x55, 19968, "1g.20gb"}, {1, 14, 2, 2, 28, 3, 0x15, 19968, "2g.20gb"},
    {2, 9, 4, 3, 42, 2, 0x11, 40192, "3g.40gb"}, {3, 5, 4, 4, 56, 1, 0x1, 40192, "4g.40gb"},
    {4, 0, 8, 7, 98, 1, 0x1, 80640, "7g.80gb"}};
static const struct profile h100_80[] = {
    {0, 19, 1, 1, 16, 7, S07, 9984, "1g.10gb"},  {7, 20, 1, 1, 16, 1, S07, 9984, "1g.10gb+me"},
    {9, 15, 2, 1, 26, 4, 0x55, 20096, "1g.20gb"}, {1, 14, 2, 2, 32, 3, 0x15, 20096, "2g.20gb"},
    {2, 9, 4, 3, 60, 2, 0x11, 40448, "3g.40gb"}, {3, 5, 4, 4, 64, 1, 0x1, 40448, "4g.40gb"},
    {4, 0, 8, 7, 132, 1, 0x1, 81152, "7g.80gb"}};
static const struct profile a30[] = {
    {0, 14, 1, 1, 14, 4, 0xf, 5949, "1g.6gb"}, {7, 21, 1, 1, 14, 1, 0xf, 5949, "1g.6gb+me"},
    {1, 5, 2, 2, 28, 2, 0x5, 11970, "2g.12gb"}, {8, 6, 2, 2, 28, 1, 0x5, 11970, "2g.12gb+me"},
    {3, 0, 4, 4, 56, 1, 0x1, 24003, "4g.24gb"}};
static const struct model models[] = {
    {0x20B010DEu, 8, 7, 7, a100_40}, {0x20B210DEu, 8, 7, 7, a100_80},
    {0x233010DEu, 8, 7, 7, h100_80}, {0x20B710DEu, 4, 4, 5, a30}};

struct gi {
    struct hdr h, mig_h, ci_h;  /* the GPU instance, its MIG device and its compute instance */
    int used, has_ci;
    unsigned id, start;
    const struct profile *p;
};
struct dev {
    struct hdr h;
    char uuid[80], name[96], bus[32];
    unsigned pci, numa, cc_major, cc_minor, util_gpu, util_mem, power, power_limit, temp;
    unsigned sm_clock, mem_clock, nvlinks, nvgroup, mig_mode, lost, unsupported;
    unsigned long long throttle, mem_bytes;
    const struct model *model;
    struct gi gis[MAXGI];
};
struct proc { int used, dev; unsigned pid, gi; unsigned long long bytes; };
struct xid { int dev; unsigned long long code; };
struct eventset { unsigned long long types[MAXDEV]; int cursor; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int configured, ndev, nxid, inits;
static struct dev devs[MAXDEV];
static struct proc procs[MAXPROC];
static struct xid xids[MAXXID];
static unsigned char topo[MAXDEV][MAXDEV];
static char driver[32] = "550.107.02", events_path[512];
static int cuda_version = 12040;
static long events_off;

static void apply_line(char *line);
static void power_range(int dev, const char *min, const char *max, const char *def);
static void power_reset(void);
static void cm_config(int dev, const char *mode);

/* ---- configuration ---- */
static const struct model *model_of(unsigned pci) {
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        if (models[i].pci == pci) return &models[i];
    return NULL;
}
static const struct profile *profile_by_id(const struct dev *d, unsigned id) {
    if (!d->model) return NULL;
    for (unsigned i = 0; i < d->model->nprof; i++)
        if (d->model->p[i].id == id) return &d->model->p[i];
    return NULL;
}
static int devarg(const char *s) {
    int i = atoi(s);
    return i >= 0 && i < ndev ? i : -1;
}
static int gi_create(struct dev *d, const struct profile *p, unsigned start, struct gi **out);

static void set_proc(int dev, unsigned pid, unsigned long long bytes, unsigned gi) {
    int free_slot = -1;
    for (int i = 0; i < MAXPROC; i++) {
        if (procs[i].used && procs[i].dev == dev && procs[i].pid == pid) {
            if (bytes) { procs[i].bytes = bytes; procs[i].gi = gi; } else procs[i].used = 0;
            return;
        }
        if (!procs[i].used && free_slot < 0) free_slot = i;
    }
    if (bytes && free_slot >= 0)
        procs[free_slot] = (struct proc){1, dev, pid, gi, bytes};
}

static void apply_line(char *line) {
    char kw[32], a[128], b[128], c[128], d4[128];
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    int n = sscanf(line, "%31s %127s %127s %127s %127s", kw, a, b, c, d4);
    if (n < 1) return;
    if (!strcmp(kw, "driver") && n >= 3) {
        snprintf(driver, sizeof driver, "%.31s", a);
        cuda_version = atoi(b);
    } else if (!strcmp(kw, "device") && n >= 5 && ndev < MAXDEV) {
        struct dev *d = &devs[ndev];
        int off = 0;
        unsigned mib = 0;
        memset(d, 0, sizeof *d);
        d->h = (struct hdr){K_DEV, ndev, -1};
        cm_config(ndev, "default");
        if (sscanf(line, "%*s %79s %x %31s %u %n", d->uuid, &d->pci, d->bus, &mib, &off) < 4)
            return;
        snprintf(d->name, sizeof d->name, "%s", line + off);
        d->name[strcspn(d->name, "\r\n")] = 0;
        d->mem_bytes = (unsigned long long)mib << 20;
        d->model = model_of(d->pci);
        d->cc_major = 8;
        d->util_gpu = d->util_mem = 0;
        d->power = 60000; d->power_limit = 400000; d->temp = 35;
        d->sm_clock = 1410; d->mem_clock = 1593;
        d->numa = 0;
        for (int g = 0; g < MAXGI; g++)
            d->gis[g] = (struct gi){{K_GI, ndev, g}, {K_MIG, ndev, g}, {K_CI, ndev, g}, 0, 0, 0, 0,
                                    NULL};
        ndev++;
    } else if (n >= 2) {
        int i = devarg(a);
        if (i < 0 && strcmp(kw, "events")) return;
        struct dev *d = i >= 0 ? &devs[i] : NULL;
        if (!strcmp(kw, "events")) snprintf(events_path, sizeof events_path, "%s", a);
        else if (!strcmp(kw, "numa") && n >= 3) d->numa = (unsigned)atoi(b);
        else if (!strcmp(kw, "cc") && n >= 4) { d->cc_major = atoi(b); d->cc_minor = atoi(c); }
        else if (!strcmp(kw, "temp") && n >= 3) d->temp = atoi(b);
        else if (!strcmp(kw, "util") && n >= 4) { d->util_gpu = atoi(b); d->util_mem = atoi(c); }
        else if (!strcmp(kw, "power") && n >= 4) { d->power = atoi(b); d->power_limit = atoi(c); }
        else if (!strcmp(kw, "clocks") && n >= 4) { d->sm_clock = atoi(b); d->mem_clock = atoi(c); }
        else if (!strcmp(kw, "throttle") && n >= 3) d->throttle = strtoull(b, NULL, 0);
        else if (!strcmp(kw, "power-range") && n >= 4) power_range(i, b, c, n >= 5 ? d4 : NULL);
        else if (!strcmp(kw, "nvlink") && n >= 4) { d->nvlinks = atoi(b); d->nvgroup = atoi(c); }
        else if (!strcmp(kw, "topo") && n >= 4 && devarg(b) >= 0)
            topo[i][devarg(b)] = topo[devarg(b)][i] = (unsigned char)atoi(c);
        else if (!strcmp(kw, "mig-mode") && n >= 3) d->mig_mode = atoi(b) && d->model;
        else if (!strcmp(kw, "compute-mode") && n >= 3) cm_config(i, b);
        else if (!strcmp(kw, "gi") && n >= 4) {
            struct gi *g = NULL;
            const struct profile *p = profile_by_id(d, (unsigned)atoi(b));
            if (p && gi_create(d, p, (unsigned)atoi(c), &g) == NVML_SUCCESS) g->has_ci = 1;
        } else if (!strcmp(kw, "proc") && n >= 4)
            set_proc(i, (unsigned)atoi(b), strtoull(c, NULL, 10),
                     n >= 5 ? (unsigned)atoi(d4) : NOGI);
        else if (!strcmp(kw, "xid") && n >= 3 && nxid < MAXXID)
            xids[nxid++] = (struct xid){i, strtoull(b, NULL, 10)};
        else if (!strcmp(kw, "lost") && n >= 3) d->lost = atoi(b) != 0;
        else if (!strcmp(kw, "unsupported") && n >= 3) {
            static const char *names[] = {"utilization", "power", "temperature", "clocks",
                                          "throttle", "processes", "events", "nvlink",
                                          "topology", "numa"};
            for (unsigned k = 0; k < sizeof names / sizeof *names; k++)
                if (!strcmp(b, names[k])) d->unsupported |= 1u << k;
        }
    }
}

static void load_file(const char *path) {
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f) return;
    while (fgets(line, sizeof line, f)) apply_line(line);
    fclose(f);
}

/* apply complete lines appended to the events file since the last look */
static void poll_events(void) {
    struct stat st;
    if (!events_path[0] || stat(events_path, &st) != 0 || st.st_size <= events_off) return;
    FILE *f = fopen(events_path, "r");
    char line[512];
    if (!f) return;
    fseek(f, events_off, SEEK_SET);
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') break;  /* half-written line: next time */
        events_off += (long)len;
        apply_line(line);
    }
    fclose(f);
}

static void configure(void) {
    const char *cfg = getenv("FAKE_NVML_CONFIG");
    memset(devs, 0, sizeof devs);
    memset(procs, 0, sizeof procs);
    memset(topo, 0, sizeof topo);
    ndev = nxid = 0;
    power_reset();
    events_off = 0;
    events_path[0] = 0;
    configured = cfg && *cfg;
    if (configured) {
        load_file(cfg);
        const char *ev = getenv("FAKE_NVML_EVENTS");
        if (ev && *ev) snprintf(events_path, sizeof events_path, "%s", ev);
        poll_events();
        return;
    }
    const char *e = getenv("FAKECUDA_DEVICES"), *m = getenv("FAKECUDA_MEM_BYTES");
    int n = e ? atoi(e) : 1;
    ndev = n < 1 || n > MAXDEV ? 1 : n;
    for (int i = 0; i < ndev; i++) {
        devs[i].h = (struct hdr){K_DEV, i, -1};
        devs[i].mem_bytes = m ? strtoull(m, NULL, 10) : (1ULL << 30);
        snprintf(devs[i].uuid, sizeof devs[i].uuid, "GPU-fake-%d", i);
        snprintf(devs[i].name, sizeof devs[i].name, "Fake GPU");
    }
}

/* ---- helpers ---- */
#define LOCK() pthread_mutex_lock(&mu)
#define UNLOCK() pthread_mutex_unlock(&mu)
#define RET(x) do { nvmlReturn_t r_ = (x); UNLOCK(); return r_; } while (0)

static struct hdr *H(const void *p) { return (struct hdr *)p; }
static int valid(const void *p, int kind) {
    const struct hdr *h = p;
    return h && h->kind == kind && h->dev >= 0 && h->dev < ndev;
}
/* common entry: lock, pick up appended events, check the handle; returns the device or NULL */
static nvmlReturn_t enter(const void *handle, int kind, struct dev **out) {
    LOCK();
    if (!inits) return E_UNINIT;
    poll_events();
    if (!valid(handle, kind)) return E_INVAL;
    *out = &devs[H(handle)->dev];
    return (*out)->lost ? E_LOST : NVML_SUCCESS;
}
#define ENTER(h, kind, d) do { nvmlReturn_t e_ = enter(h, kind, &d); if (e_) RET(e_); } while (0)
#define NEED(d, f) do { if ((d)->unsupported & (f)) RET(E_NOTSUP); } while (0)

static unsigned long long fakegpu_used(int i) {
    uint64_t (*used)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "fakegpu_used");
    return used ? used(i) : 0;
}
static unsigned long long proc_bytes(int dev, unsigned gi) {
    unsigned long long sum = 0;
    for (int i = 0; i < MAXPROC; i++)
        if (procs[i].used && procs[i].dev == dev && (gi == NOGI || procs[i].gi == gi))
            sum += procs[i].bytes;
    return sum;
}
static int busy(int dev, unsigned gi) {
    for (int i = 0; i < MAXPROC; i++)
        if (procs[i].used && procs[i].dev == dev && (gi == NOGI || procs[i].gi == gi)) return 1;
    return 0;
}
static int gi_count(const struct dev *d) {
    int n = 0;
    for (int g = 0; g < MAXGI; g++) n += d->gis[g].used;
    return n;
}

/* ---- init, system ---- */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    LOCK();
    if (inits++ == 0) configure();
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlShutdown(void) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    inits--;
    RET(NVML_SUCCESS);
}
EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case E_UNINIT: return "Uninitialized";
    case E_INVAL: return "Invalid Argument";
    case E_NOTSUP: return "Not Supported";
    case E_NOTFOUND: return "Not Found";
    case E_SIZE: return "Insufficient Size";
    case E_TIMEOUT: return "Timeout";
    case E_LOST: return "GPU is lost";
    case E_INUSE: return "In use by another client";
    case E_RESOURCES: return "Insufficient resources";
    default: return "Unknown Error";
    }
}
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
    if (!buf || len < strlen(driver) + 1) return E_SIZE;
    snprintf(buf, len, "%s", driver);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    if (!v) return E_INVAL;
    *v = cuda_version;
    return NVML_SUCCESS;
}
#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    return nvmlSystemGetCudaDriverVersion(v);
}
#endif

/* ---- devices ---- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    *n = (unsigned)ndev;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    if (i >= (unsigned)ndev || !d) RET(E_INVAL);
    *d = (nvmlDevice_t)&devs[i].h;
    RET(devs[i].lost ? E_LOST : NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    for (int i = 0; uuid && i < ndev; i++)
        if (!strcmp(devs[i].uuid, uuid)) { *out = (nvmlDevice_t)&devs[i].h; RET(NVML_SUCCESS); }
    /* --- MIG (on-demand MIG helper): as the real NVML, a MIG device's UUID gives the MIG
     * device handle (what the NVIDIA plugin resolves for an instance's capability nodes);
     * only instances with a compute instance have a MIG device, named as GetUUID names it */
    for (int i = 0; uuid && i < ndev; i++)
        for (int g = 0; devs[i].mig_mode && g < MAXGI; g++) {
            const struct gi *x = &devs[i].gis[g];
            char mig[96];
            if (!x->used || !x->has_ci) continue;
            snprintf(mig, sizeof mig, "MIG-%.36s-%02x%02x", devs[i].uuid + 4, x->id, 0);
            if (!strcmp(mig, uuid)) { *out = (nvmlDevice_t)&devs[i].gis[g].mig_h;
                                      RET(NVML_SUCCESS); }
        }
    RET(E_NOTFOUND);
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    *i = (unsigned)d->h.dev;
    RET(NVML_SUCCESS);
}
static nvmlReturn_t copy_str(char *buf, unsigned len, const char *s) {
    if (!buf || len < strlen(s) + 1) return E_SIZE;
    snprintf(buf, len, "%s", s);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned int len) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    poll_events();
    if (valid(h, K_MIG)) {
        char mig[96];
        struct gi *g = &devs[H(h)->dev].gis[H(h)->gi];
        snprintf(mig, sizeof mig, "MIG-%.36s-%02x%02x", devs[H(h)->dev].uuid + 4, g->id, 0);
        RET(copy_str(buf, len, mig));
    }
    if (!valid(h, K_DEV)) RET(E_INVAL);
    if (devs[H(h)->dev].lost) RET(E_LOST);
    RET(copy_str(buf, len, devs[H(h)->dev].uuid));
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *buf, unsigned int len) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    RET(copy_str(buf, len, d->name));
}
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} fake_pci_t;
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, fake_pci_t *p) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    memset(p, 0, sizeof *p);
    snprintf(p->busId, sizeof p->busId, "%s", d->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%.15s", d->bus);
    sscanf(d->bus, "%x:%x:%x", &p->domain, &p->bus, &p->device);
    p->pciDeviceId = d->pci;
    RET(NVML_SUCCESS);
}
static void mem_of(int dev, const struct gi *g, unsigned long long *total,
                   unsigned long long *used) {
    if (g) {
        *total = g->p->mib << 20;
        *used = proc_bytes(dev, g->id);
    } else {
        *total = devs[dev].mem_bytes;
        *used = configured ? proc_bytes(dev, NOGI) + fakegpu_used(dev) : fakegpu_used(dev);
    }
    if (*used > *total) *used = *total;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    poll_events();
    int mig = valid(h, K_MIG);
    if (!mig && !valid(h, K_DEV)) RET(E_INVAL);
    if (devs[H(h)->dev].lost) RET(E_LOST);
    mem_of(H(h)->dev, mig ? &devs[H(h)->dev].gis[H(h)->gi] : NULL, &m->total, &m->used);
    m->free = m->total - m->used;
    RET(NVML_SUCCESS);
}
#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    nvmlMemory_t v1;
    nvmlReturn_t r = nvmlDeviceGetMemoryInfo(h, &v1);
    if (r) return r;
    m->total = v1.total;
    m->reserved = 1ULL << 20;
    m->used = v1.used;
    m->free = v1.total > v1.used + m->reserved ? v1.total - v1.used - m->reserved : 0;
    return NVML_SUCCESS;
}
#endif
typedef struct { unsigned int gpu, memory; } fake_util_t;
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, fake_util_t *u) {
    struct dev *d;
    LOCK();
    if (inits && valid(h, K_MIG)) RET(E_NOTSUP);  /* documented: not on MIG devices */
    UNLOCK();
    ENTER(h, K_DEV, d);
    NEED(d, F_UTIL);
    if (d->mig_mode) RET(E_NOTSUP);
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_POWER);
    *mw = d->power < d->power_limit ? d->power : d->power_limit;  /* a GPU holds its limit */
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *mw) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_POWER);
    *mw = d->power_limit;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *mw) {
    return nvmlDeviceGetPowerManagementLimit(h, mw);
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned int *t) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_TEMP);
    if (sensor != 0) RET(E_INVAL);
    *t = d->temp;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_CLOCKS);
    if (type < 0 || type > 3) RET(E_INVAL);
    *mhz = type == 2 ? d->mem_clock : d->sm_clock;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h,
                                                              unsigned long long *mask) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_THROTTLE);
    *mask = d->throttle;
    RET(NVML_SUCCESS);
}
#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h,
                                                           unsigned long long *mask) {
    return nvmlDeviceGetCurrentClocksThrottleReasons(h, mask);
}
EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t h, int *node) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    (void)node;
    RET(E_NOTSUP);  /* only where the GPU itself is a NUMA node (Grace C2C) */
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t h, unsigned int size,
                                                unsigned long *set, int scope) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_NUMA);
    if (!set || size == 0 || scope != 0) RET(E_INVAL);
    memset(set, 0, size * sizeof *set);
    if (d->numa < size * 8 * sizeof *set)
        set[d->numa / (8 * sizeof *set)] |= 1UL << (d->numa % (8 * sizeof *set));
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    *major = (int)d->cc_major;
    *minor = (int)d->cc_minor;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
                                                        int *level) {
    struct dev *d;
    ENTER(a, K_DEV, d);
    NEED(d, F_TOPO);
    if (!valid(b, K_DEV)) RET(E_INVAL);
    int j = H(b)->dev, i = d->h.dev;
    if (i == j) *level = 0;
    else if (topo[i][j]) *level = topo[i][j];
    else *level = devs[i].numa == devs[j].numa ? 40 : 50;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned int link,
                                             unsigned int *active) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_NVLINK);
    if (!d->nvlinks) RET(E_NOTSUP);
    if (link >= d->nvlinks) RET(E_INVAL);
    *active = 1;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int index,
                                           int *status) {
    struct dev *d;
    ENTER(a, K_DEV, d);
    if (!valid(b, K_DEV)) RET(E_INVAL);
    const struct dev *e = &devs[H(b)->dev];
    if (index == 2)  /* NVML_P2P_CAPS_INDEX_NVLINK */
        *status = d->nvlinks && e->nvlinks && d->nvgroup == e->nvgroup ? 0 : 5;
    else
        *status = 0;
    RET(NVML_SUCCESS);
}

/* ---- processes ---- */
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gi, ci; }
    fake_proc_v2_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } fake_proc_v1_t;
static nvmlReturn_t list_procs(nvmlDevice_t h, unsigned int *count, void *out, int v2) {
    struct dev *d;
    unsigned gi = NOGI;
    LOCK();
    if (!inits) RET(E_UNINIT);
    poll_events();
    if (valid(h, K_MIG)) gi = devs[H(h)->dev].gis[H(h)->gi].id;
    else if (!valid(h, K_DEV)) RET(E_INVAL);
    d = &devs[H(h)->dev];
    if (d->lost) RET(E_LOST);
    NEED(d, F_PROCS);
    unsigned n = 0, cap = *count;
    for (int i = 0; i < MAXPROC; i++) {
        const struct proc *p = &procs[i];
        if (!p->used || p->dev != d->h.dev || (gi != NOGI && p->gi != gi)) continue;
        if (out && n < cap) {
            if (v2)
                ((fake_proc_v2_t *)out)[n] = (fake_proc_v2_t){p->pid, p->bytes, p->gi,
                                                              p->gi == NOGI ? NOGI : 0};
            else
                ((fake_proc_v1_t *)out)[n] = (fake_proc_v1_t){p->pid, p->bytes};
        }
        n++;
    }
    *count = n;
    RET(n > cap || (n && !out) ? E_SIZE : NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *c,
                                                            fake_proc_v2_t *out) {
    return list_procs(h, c, out, 1);
}
#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *c,
                                                            fake_proc_v2_t *out) {
    return list_procs(h, c, out, 1);
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *c,
                                                         fake_proc_v1_t *out) {
    return list_procs(h, c, out, 0);
}

/* ---- MIG ---- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *cur, unsigned int *pend) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (!d->model) RET(E_NOTSUP);
    *cur = *pend = d->mig_mode;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t h, unsigned int mode, nvmlReturn_t *act) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (!d->model) RET(E_NOTSUP);
    if (mode > 1) RET(E_INVAL);
    if (mode == d->mig_mode) { *act = NVML_SUCCESS; RET(NVML_SUCCESS); }
    if (busy(d->h.dev, NOGI) || gi_count(d)) RET(E_INUSE);  /* the GPU must be idle */
    d->mig_mode = mode;
    *act = NVML_SUCCESS;
    RET(NVML_SUCCESS);
}
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} fake_gip_v2_t;
typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} fake_gip_v1_t;
static nvmlReturn_t profile_info(nvmlDevice_t h, unsigned index, fake_gip_v2_t *o) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (!d->model || !d->mig_mode) RET(E_NOTSUP);
    for (unsigned i = 0; i < d->model->nprof; i++) {
        const struct profile *p = &d->model->p[i];
        if (p->index != index) continue;
        memset(o, 0, sizeof *o);
        o->id = p->id;
        o->sliceCount = p->cslices;
        o->instanceCount = p->max;
        o->multiprocessorCount = p->sms;
        o->copyEngineCount = p->cslices;
        o->decoderCount = p->mslices / 2;
        o->memorySizeMB = p->mib;
        snprintf(o->name, sizeof o->name, "MIG %s", p->name);
        RET(NVML_SUCCESS);
    }
    RET(index < 18 ? E_NOTSUP : E_INVAL);
}
#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t h, unsigned int index,
                                                         fake_gip_v2_t *o) {
    return profile_info(h, index, o);
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t h, unsigned int index,
                                                        fake_gip_v1_t *o) {
    fake_gip_v2_t v2;
    nvmlReturn_t r = profile_info(h, index, &v2);
    if (r) return r;
    memcpy(o, &v2.id, sizeof *o);
    return NVML_SUCCESS;
}
typedef struct { unsigned int start, size; } fake_place_t;
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t h, unsigned id,
                                                                  fake_place_t *out,
                                                                  unsigned int *count) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (!d->model || !d->mig_mode) RET(E_NOTSUP);
    const struct profile *p = profile_by_id(d, id);
    if (!p) RET(E_INVAL);
    unsigned n = 0;
    for (unsigned s = 0; s < 8; s++) {
        if (!(p->starts >> s & 1)) continue;
        if (out && n < *count) out[n] = (fake_place_t){s, p->mslices};
        n++;
    }
    if (out && n > *count) { *count = n; RET(E_SIZE); }
    *count = n;
    RET(NVML_SUCCESS);
}
/* what blocks `p` at `start`: 0 = free, else an NVML error */
static nvmlReturn_t blocked(const struct dev *d, const struct profile *p, unsigned start) {
    unsigned compute = 0, same = 0, media = 0;
    if (start >= 8 || !(p->starts >> start & 1)) return E_INVAL;
    for (int g = 0; g < MAXGI; g++) {
        const struct gi *x = &d->gis[g];
        if (!x->used) continue;
        compute += x->p->cslices;
        same += x->p == p;
        media += strchr(x->p->name, '+') != NULL;
        if (start < x->start + x->p->mslices && x->start < start + p->mslices) return E_RESOURCES;
    }
    if (compute + p->cslices > d->model->cslices || same >= p->max) return E_RESOURCES;
    if (strchr(p->name, '+') && media) return E_RESOURCES;
    return NVML_SUCCESS;
}
static int gi_create(struct dev *d, const struct profile *p, unsigned start, struct gi **out) {
    nvmlReturn_t r = blocked(d, p, start);
    if (r) return r;
    int slot = -1;
    unsigned id = p->mslices == d->model->mslices ? 0 : 1;
    for (int again = 1; again;) {  /* lowest free GI id (the whole-GPU instance gets 0) */
        again = 0;
        for (int g = 0; g < MAXGI; g++)
            if (d->gis[g].used && d->gis[g].id == id) { id++; again = 1; }
    }
    for (int g = 0; g < MAXGI && slot < 0; g++)
        if (!d->gis[g].used) slot = g;
    if (slot < 0) return E_RESOURCES;
    struct gi *x = &d->gis[slot];
    x->used = 1; x->has_ci = 0; x->id = id; x->start = start; x->p = p;
    *out = x;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t h, unsigned id,
                                                             const fake_place_t *pl,
                                                             void **gi) {
    struct dev *d;
    struct gi *x;
    ENTER(h, K_DEV, d);
    if (!d->model || !d->mig_mode) RET(E_NOTSUP);
    const struct profile *p = profile_by_id(d, id);
    if (!p || !pl || pl->size != p->mslices) RET(E_INVAL);
    nvmlReturn_t r = gi_create(d, p, pl->start, &x);
    if (r) RET(r);
    *gi = &x->h;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t h, unsigned id, void **gi) {
    struct dev *d;
    struct gi *x;
    ENTER(h, K_DEV, d);
    if (!d->model || !d->mig_mode) RET(E_NOTSUP);
    const struct profile *p = profile_by_id(d, id);
    if (!p) RET(E_INVAL);
    for (unsigned s = 0; s < 8; s++)  /* the driver picks the first free allowed start */
        if ((p->starts >> s & 1) && gi_create(d, p, s, &x) == NVML_SUCCESS) {
            *gi = &x->h;
            RET(NVML_SUCCESS);
        }
    RET(E_RESOURCES);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t h, unsigned id,
                                                              unsigned int *count) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (!d->model || !d->mig_mode) RET(E_NOTSUP);
    const struct profile *p = profile_by_id(d, id);
    if (!p) RET(E_INVAL);
    /* greedy: how many more fit, placing each at its first free start */
    struct gi saved[MAXGI];
    memcpy(saved, d->gis, sizeof saved);
    unsigned n = 0;
    struct gi *x;
    for (int more = 1; more;) {
        more = 0;
        for (unsigned s = 0; s < 8 && !more; s++)
            if ((p->starts >> s & 1) && gi_create(d, p, s, &x) == NVML_SUCCESS) { n++; more = 1; }
    }
    memcpy(d->gis, saved, sizeof saved);
    *count = n;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t h, unsigned id, void **out,
                                              unsigned int *count) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (!d->model || !d->mig_mode) RET(E_NOTSUP);
    const struct profile *p = profile_by_id(d, id);
    if (!p || !count) RET(E_INVAL);
    unsigned n = 0;
    for (int g = 0; g < MAXGI; g++)
        if (d->gis[g].used && d->gis[g].p == p) {
            if (out && n < *count) out[n] = &d->gis[g].h;
            n++;
        }
    if (out && n > *count) { *count = n; RET(E_SIZE); }
    *count = n;
    RET(NVML_SUCCESS);
}
typedef struct { void *device; unsigned int id, profileId; fake_place_t placement; } fake_gi_info_t;
EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(void *gi, fake_gi_info_t *info) {
    struct dev *d;
    ENTER(gi, K_GI, d);
    struct gi *x = &d->gis[H(gi)->gi];
    if (!x->used) RET(E_INVAL);
    info->device = &d->h;
    info->id = x->id;
    info->profileId = x->p->id;
    info->placement = (fake_place_t){x->start, x->p->mslices};
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(void *gi) {
    struct dev *d;
    ENTER(gi, K_GI, d);
    struct gi *x = &d->gis[H(gi)->gi];
    if (!x->used) RET(E_INVAL);
    if (x->has_ci || busy(d->h.dev, x->id)) RET(E_INUSE);
    x->used = 0;
    RET(NVML_SUCCESS);
}
static unsigned ci_index(unsigned cslices) {  /* whole-GI compute-instance profile index */
    static const unsigned by_slices[9] = {0, 0, 1, 2, 3, 0, 6, 4, 5};
    return by_slices[cslices];
}
EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(void *gi, unsigned id, void **ci) {
    struct dev *d;
    ENTER(gi, K_GI, d);
    struct gi *x = &d->gis[H(gi)->gi];
    if (!x->used) RET(E_INVAL);
    if (id != ci_index(x->p->cslices)) RET(E_NOTSUP);  /* this fake: whole-GI CIs only */
    if (x->has_ci) RET(E_RESOURCES);
    x->has_ci = 1;
    *ci = &x->ci_h;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(void *gi, unsigned id, void **out,
                                                       unsigned int *count) {
    struct dev *d;
    ENTER(gi, K_GI, d);
    struct gi *x = &d->gis[H(gi)->gi];
    if (!x->used || !count) RET(E_INVAL);
    unsigned n = x->has_ci && id == ci_index(x->p->cslices);
    if (n && out && *count >= 1) out[0] = &x->ci_h;
    else if (n && out) { *count = n; RET(E_SIZE); }
    *count = n;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(void *ci) {
    struct dev *d;
    ENTER(ci, K_CI, d);
    struct gi *x = &d->gis[H(ci)->gi];
    if (!x->used || !x->has_ci) RET(E_INVAL);
    if (busy(d->h.dev, x->id)) RET(E_INUSE);
    x->has_ci = 0;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *n) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    *n = d->model ? d->model->cslices : 0;
    RET(NVML_SUCCESS);
}
/* the i-th MIG device (a GI with its compute instance), in GI id order */
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int i,
                                                        nvmlDevice_t *out) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (!d->model || !d->mig_mode) RET(E_NOTSUP);
    struct gi *order[MAXGI];
    unsigned n = 0;
    for (int g = 0; g < MAXGI; g++)
        if (d->gis[g].used && d->gis[g].has_ci) order[n++] = &d->gis[g];
    for (unsigned a = 1; a < n; a++)
        for (unsigned b = a; b > 0 && order[b - 1]->id > order[b]->id; b--) {
            struct gi *t = order[b]; order[b] = order[b - 1]; order[b - 1] = t;
        }
    if (i >= n) RET(E_NOTFOUND);
    *out = (nvmlDevice_t)&order[i]->mig_h;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t h, unsigned int *is) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    *is = valid(h, K_MIG);
    RET(valid(h, K_MIG) || valid(h, K_DEV) ? NVML_SUCCESS : E_INVAL);
}
EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t h,
                                                                 nvmlDevice_t *out) {
    struct dev *d;
    ENTER(h, K_MIG, d);
    *out = (nvmlDevice_t)&d->h;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id) {
    struct dev *d;
    ENTER(h, K_MIG, d);
    *id = d->gis[H(h)->gi].id;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned int *id) {
    struct dev *d;
    ENTER(h, K_MIG, d);
    *id = 0;
    RET(NVML_SUCCESS);
}
typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} fake_attrs_t;
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t h, fake_attrs_t *a) {
    struct dev *d;
    ENTER(h, K_MIG, d);
    const struct profile *p = d->gis[H(h)->gi].p;
    memset(a, 0, sizeof *a);
    a->multiprocessorCount = p->sms;
    a->sharedCopyEngineCount = p->cslices;
    a->gpuInstanceSliceCount = p->cslices;
    a->computeInstanceSliceCount = p->cslices;
    a->memorySizeMB = p->mib;
    RET(NVML_SUCCESS);
}

/* ---- power management: limits, their allowed range, refusals ----
 * A device's limit may be set within [min, max] (`power-range`; default: limit/4 .. the
 * limit the `power` statement gave, which is also the default limit). As the real NVML:
 * setting needs root (NVML_ERROR_NO_PERMISSION otherwise; FAKE_NVML_ROOT=0/1 overrides the
 * euid test), a value outside the range is NVML_ERROR_INVALID_ARGUMENT, a device without
 * power management (`unsupported <dev> power`) NVML_ERROR_NOT_SUPPORTED. The reported draw
 * never exceeds the limit in force. */
#define E_NOPERM 4
static unsigned pw_min[MAXDEV], pw_max[MAXDEV], pw_def[MAXDEV];
static void power_reset(void) {
    memset(pw_min, 0, sizeof pw_min);
    memset(pw_max, 0, sizeof pw_max);
    memset(pw_def, 0, sizeof pw_def);
}
static void power_range(int dev, const char *min, const char *max, const char *def) {
    pw_min[dev] = (unsigned)strtoul(min, NULL, 10);
    pw_max[dev] = (unsigned)strtoul(max, NULL, 10);
    pw_def[dev] = def ? (unsigned)strtoul(def, NULL, 10) : pw_max[dev];
}
static void power_bounds(struct dev *d, unsigned *min, unsigned *max, unsigned *def) {
    int i = d->h.dev;
    if (!pw_max[i]) {  /* first use: the range around the configured limit */
        pw_max[i] = pw_def[i] = d->power_limit;
        pw_min[i] = d->power_limit / 4;
    }
    *min = pw_min[i]; *max = pw_max[i]; *def = pw_def[i];
}
static int as_root(void) {
    const char *r = getenv("FAKE_NVML_ROOT");
    if (r && *r) return atoi(r) != 0;
    return geteuid() == 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t h,
                                                                 unsigned int *min,
                                                                 unsigned int *max) {
    struct dev *d;
    unsigned def;
    ENTER(h, K_DEV, d);
    NEED(d, F_POWER);
    power_bounds(d, min, max, &def);
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t h, unsigned int *mw) {
    struct dev *d;
    unsigned min, max;
    ENTER(h, K_DEV, d);
    NEED(d, F_POWER);
    power_bounds(d, &min, &max, mw);
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t h, unsigned int mw) {
    struct dev *d;
    unsigned min, max, def;
    ENTER(h, K_DEV, d);
    NEED(d, F_POWER);
    if (!as_root()) RET(E_NOPERM);
    power_bounds(d, &min, &max, &def);
    if (mw < min || mw > max) RET(E_INVAL);
    d->power_limit = mw;
    RET(NVML_SUCCESS);
}

/* ---- events ---- */
EXPORT nvmlReturn_t nvmlEventSetCreate(struct eventset **set) {
    LOCK();
    if (!inits) RET(E_UNINIT);
    *set = calloc(1, sizeof **set);
    if (!*set) RET(20);
    (*set)->cursor = nxid;  /* only events after creation */
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *t) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    *t = d->unsupported & F_EVENTS ? 0 : 0x8;
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types,
                                             struct eventset *set) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    NEED(d, F_EVENTS);
    if (!set || (types & ~0x8ULL)) RET(types & ~0x8ULL ? E_NOTSUP : E_INVAL);
    set->types[d->h.dev] |= types;
    RET(NVML_SUCCESS);
}
typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} fake_event_t;
EXPORT nvmlReturn_t nvmlEventSetWait_v2(struct eventset *set, fake_event_t *out,
                                        unsigned int timeout_ms) {
    struct timespec step = {0, 5 * 1000 * 1000};
    for (unsigned waited = 0;; waited += 5) {
        LOCK();
        if (!inits) RET(E_UNINIT);
        poll_events();
        while (set->cursor < nxid) {
            const struct xid *x = &xids[set->cursor++];
            if (set->types[x->dev] & 0x8) {
                *out = (fake_event_t){&devs[x->dev].h, 0x8, x->code, NOGI, NOGI};
                RET(NVML_SUCCESS);
            }
        }
        UNLOCK();
        if (waited >= timeout_ms) return E_TIMEOUT;
        nanosleep(&step, NULL);
    }
}
EXPORT nvmlReturn_t nvmlEventSetFree(struct eventset *set) {
    free(set);
    return NVML_SUCCESS;
}

/* ---- compute mode (what NVIDIA's MPS daemon sets to EXCLUSIVE_PROCESS) ----
 * As the real NVML documents nvmlDeviceSetComputeMode: root only (NVML_ERROR_NO_PERMISSION
 * otherwise; FAKE_NVML_ROOT=0/1 overrides the euid test), NVML_ERROR_INVALID_ARGUMENT for a
 * mode outside DEFAULT(0)/EXCLUSIVE_THREAD(1)/PROHIBITED(2)/EXCLUSIVE_PROCESS(3) and for the
 * physical handle of a GPU in MIG mode (it takes the MIG device's handle),
 * NVML_ERROR_NOT_SUPPORTED where the GPU has no compute modes (`compute-mode <dev>
 * unsupported`); it takes effect at once, contexts already open keep running. */
#include <unistd.h>
static int cmode[MAXDEV], cm_unsup[MAXDEV];
static void cm_config(int dev, const char *mode) {
    if (dev < 0 || dev >= MAXDEV) return;
    cm_unsup[dev] = !strcmp(mode, "unsupported");
    cmode[dev] = !strcmp(mode, "exclusive-process") ? 3 : !strcmp(mode, "prohibited") ? 2 : 0;
}
static int cm_root(void) {
    const char *r = getenv("FAKE_NVML_ROOT");
    if (r && *r) return atoi(r) != 0;
    return geteuid() == 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t h, int *mode) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (cm_unsup[d->h.dev]) RET(E_NOTSUP);
    if (!mode) RET(E_INVAL);
    *mode = cmode[d->h.dev];
    RET(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t h, int mode) {
    struct dev *d;
    ENTER(h, K_DEV, d);
    if (cm_unsup[d->h.dev]) RET(E_NOTSUP);
    if (mode < 0 || mode > 3 || d->mig_mode) RET(E_INVAL);
    if (!cm_root()) RET(4);  /* NVML_ERROR_NO_PERMISSION */
    cmode[d->h.dev] = mode;
    RET(NVML_SUCCESS);
}
