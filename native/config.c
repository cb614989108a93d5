/* Environment configuration set by the device plugin. Anything malformed is an
 * error: the caller refuses GPU use rather than run unlimited. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gg.h"

#define MEM_PREFIX "GPUGOV_MEMORY_LIMIT"
#define CORE_PREFIX "GPUGOV_CORE_LIMIT"

static int parse_u64(const char *s, const char **end, uint64_t *out) {
    uint64_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *end = p;
    *out = v;
    return 0;
}

/* Bytes, or a number with a Ki/Mi/Gi suffix. Zero is refused: it would read as "no limit". */
int gg_parse_bytes(const char *s, uint64_t *out) {
    const char *end;
    uint64_t v, mul = 1;
    if (parse_u64(s, &end, &v) != 0) return -1;
    if (strcmp(end, "Ki") == 0) mul = 1ULL << 10;
    else if (strcmp(end, "Mi") == 0) mul = 1ULL << 20;
    else if (strcmp(end, "Gi") == 0) mul = 1ULL << 30;
    else if (*end != '\0') return -1;
    if (v == 0 || v > UINT64_MAX / mul) return -1;
    *out = v * mul;
    return 0;
}

static int parse_percent(const char *s, uint32_t *out) {
    const char *end;
    uint64_t v;
    if (parse_u64(s, &end, &v) != 0 || *end != '\0' || v < 1 || v > 100) return -1;
    *out = v == 100 ? 0 : (uint32_t)v;
    return 0;
}

static int parse_log_level(const char *s) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0 || (s[0] == '0' + i && s[1] == '\0')) return i;
    return -1;
}

/* Splits "PREFIX" / "PREFIX_<index>" (name of length n, not NUL-terminated at n): returns -1
 * for the global form, the index, or -2 if bad. Any number of leading zeros is allowed. */
static int suffix_index(const char *name, size_t n, size_t prefix_len) {
    uint64_t idx = 0;
    if (n == prefix_len) return -1;
    if (name[prefix_len] != '_' || n == prefix_len + 1) return -2;
    for (size_t i = prefix_len + 1; i < n; i++) {
        if (name[i] < '0' || name[i] > '9') return -2;
        idx = idx * 10 + (uint64_t)(name[i] - '0');
        if (idx >= GG_MAX_DEVICES) return -2;
    }
    return (int)idx;
}

static int name_is(const char *kv, size_t n, const char *want) {
    return n == strlen(want) && memcmp(kv, want, n) == 0;
}

static int has_prefix(const char *kv, size_t n, const char *prefix) {
    size_t p = strlen(prefix);
    return n >= p && memcmp(kv, prefix, p) == 0;
}

/* Shown names are cut at 160 bytes so that an error message always fits. */
#define SHOWN(n) (int)((n) > 160 ? 160 : (n))
#define MORE(n) ((n) > 160 ? "..." : "")

/* GPUGOV_DEVICE_UUIDS: the container's devices in index order, comma-separated, each
 * GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (or MIG-…); stored as 32 lowercase hex digits. */
static int parse_uuids(const char *val, struct gg_config *cfg) {
    const char *p = val;
    cfg->n_uuids = 0;
    while (*p) {
        if (cfg->n_uuids >= GG_MAX_DEVICES) return -1;
        if (strncmp(p, "GPU-", 4) != 0 && strncmp(p, "MIG-", 4) != 0) return -1;
        p += 4;
        char *out = cfg->uuids[cfg->n_uuids];
        int hex = 0;
        for (int k = 0; k < 36; k++, p++) {
            if (k == 8 || k == 13 || k == 18 || k == 23) {
                if (*p != '-') return -1;
                continue;
            }
            char c = *p;
            if (c >= 'A' && c <= 'F') c = (char)(c - 'A' + 'a');
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return -1;
            out[hex++] = c;
        }
        out[32] = '\0';
        cfg->n_uuids++;
        if (*p == ',') p++;
        else if (*p) return -1;
        else break;
    }
    return cfg->n_uuids ? 0 : -1;
}

int gg_config_parse(char *const *envp, struct gg_config *cfg, char *err, size_t errlen) {
    uint64_t mem_all = 0, mem_dev[GG_MAX_DEVICES] = {0};
    uint32_t core_all = 0, core_dev[GG_MAX_DEVICES] = {0};
    int mem_set[GG_MAX_DEVICES] = {0}, core_set[GG_MAX_DEVICES] = {0};
    memset(cfg, 0, sizeof(*cfg));
    cfg->scrub = 1;
    cfg->priority = 1; /* HAMi's default: low */
    cfg->log_level = GG_LOG_WARN;
    for (char *const *e = envp; e && *e; e++) {
        const char *kv = *e, *eq = strchr(kv, '=');
        if (strncmp(kv, "GPUGOV_", 7) != 0 || !eq) continue;
        size_t n = (size_t)(eq - kv);
        const char *val = eq + 1;
        /* getenv would answer the first of several entries, other readers the last: a name
         * given twice with different values is ambiguous, so it is refused. */
        int dup = 0;
        for (char *const *o = envp; o < e && !dup; o++)
            if (strncmp(*o, kv, n + 1) == 0) {
                if (strcmp(*o + n + 1, val) != 0) {
                    snprintf(err, errlen, "%.*s%s appears more than once in the environment, with "
                             "values '%s' and '%s'; give it once", SHOWN(n), kv, MORE(n), *o + n + 1, val);
                    return -1;
                }
                dup = 1;
            }
        if (dup) continue;
        if (has_prefix(kv, n, MEM_PREFIX)) {
            int idx = suffix_index(kv, n, strlen(MEM_PREFIX));
            uint64_t bytes;
            if (idx == -2) {
                snprintf(err, errlen, "%.*s%s: unknown variable; expected %s or %s_<index> with index < %d",
                         SHOWN(n), kv, MORE(n), MEM_PREFIX, MEM_PREFIX, GG_MAX_DEVICES);
                return -1;
            }
            if (gg_parse_bytes(val, &bytes) != 0) {
                snprintf(err, errlen, "%.*s%s='%s': expected a positive byte count, optionally with a "
                         "Ki, Mi or Gi suffix (e.g. 2048Mi)", SHOWN(n), kv, MORE(n), val);
                return -1;
            }
            if (idx < 0) mem_all = bytes;
            else { mem_dev[idx] = bytes; mem_set[idx] = 1; }
        } else if (has_prefix(kv, n, CORE_PREFIX)) {
            int idx = suffix_index(kv, n, strlen(CORE_PREFIX));
            uint32_t pct;
            if (idx == -2) {
                snprintf(err, errlen, "%.*s%s: unknown variable; expected %s or %s_<index> with index < %d",
                         SHOWN(n), kv, MORE(n), CORE_PREFIX, CORE_PREFIX, GG_MAX_DEVICES);
                return -1;
            }
            if (parse_percent(val, &pct) != 0) {
                snprintf(err, errlen, "%.*s%s='%s': expected an integer percent from 1 to 100",
                         SHOWN(n), kv, MORE(n), val);
                return -1;
            }
            if (idx < 0) core_all = pct;
            else { core_dev[idx] = pct; core_set[idx] = 1; }
        } else if (name_is(kv, n, "GPUGOV_SCRUB")) {
            if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
                snprintf(err, errlen, "GPUGOV_SCRUB='%s': expected 0 or 1", val);
                return -1;
            }
            cfg->scrub = val[0] == '1';
        } else if (name_is(kv, n, "GPUGOV_LOG_LEVEL")) {
            int lvl = parse_log_level(val);
            if (lvl < 0) {
                snprintf(err, errlen, "GPUGOV_LOG_LEVEL='%s': expected error, warn, info, debug "
                         "or 0-3", val);
                return -1;
            }
            cfg->log_level = lvl;
        } else if (name_is(kv, n, "GPUGOV_SHARED_REGION")) {
            if (val[0] != '/' || strlen(val) >= sizeof(cfg->region_path)) {
                snprintf(err, errlen, "GPUGOV_SHARED_REGION='%.200s': expected an absolute file path "
                         "shorter than %zu bytes", val, sizeof(cfg->region_path));
                return -1;
            }
            strcpy(cfg->region_path, val);
        } else if (name_is(kv, n, "GPUGOV_TASK_PRIORITY")) {
            if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
                snprintf(err, errlen, "GPUGOV_TASK_PRIORITY='%.40s': expected 0 (high) or 1 (low)", val);
                return -1;
            }
            cfg->priority = val[0] - '0';
        } else if (name_is(kv, n, "GPUGOV_QOS_DIR")) {
            if (val[0] != '/' || strlen(val) >= sizeof(cfg->qos_dir) - 16) {
                snprintf(err, errlen, "GPUGOV_QOS_DIR='%.200s': expected an absolute folder path "
                         "shorter than %zu bytes", val, sizeof(cfg->qos_dir) - 16);
                return -1;
            }
            strcpy(cfg->qos_dir, val);
        } else if (name_is(kv, n, "GPUGOV_QOS_SELF")) {
            int ok = val[0] && val[0] != '.' && strlen(val) < sizeof(cfg->qos_self);
            for (const char *c = val; ok && *c; c++)
                ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')
                     || *c == '-' || *c == '_' || *c == '.';
            if (!ok) {
                snprintf(err, errlen, "GPUGOV_QOS_SELF='%.300s': expected a file name (letters, "
                         "digits, '-', '_', '.', not starting with '.') shorter than %zu bytes",
                         val, sizeof(cfg->qos_self));
                return -1;
            }
            strcpy(cfg->qos_self, val);
        } else if (name_is(kv, n, "GPUGOV_DEVICE_UUIDS")) {
            if (parse_uuids(val, cfg) != 0) {
                snprintf(err, errlen, "GPUGOV_DEVICE_UUIDS='%.300s': expected at most %d comma-separated "
                         "device UUIDs like GPU-5e1c0a6b-93f4-4c3d-9a7e-0123456789ab, in device index "
                         "order", val, GG_MAX_DEVICES);
                return -1;
            }
        }
    }
    for (int i = 0; i < GG_MAX_DEVICES; i++) {
        cfg->mem_limit[i] = mem_set[i] ? mem_dev[i] : mem_all;
        cfg->core_limit[i] = core_set[i] ? core_dev[i] : core_all;
    }
    return 0;
}
