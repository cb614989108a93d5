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

/* Splits "PREFIX" / "PREFIX_<index>"; returns -1 for the global form, the index, or -2 if bad. */
static int suffix_index(const char *name, size_t prefix_len) {
    const char *end;
    uint64_t idx;
    if (name[prefix_len] == '\0') return -1;
    if (name[prefix_len] != '_' || parse_u64(name + prefix_len + 1, &end, &idx) != 0 || *end != '\0'
        || idx >= GG_MAX_DEVICES)
        return -2;
    return (int)idx;
}

int gg_config_parse(char *const *envp, struct gg_config *cfg, char *err, size_t errlen) {
    uint64_t mem_all = 0, mem_dev[GG_MAX_DEVICES] = {0};
    uint32_t core_all = 0, core_dev[GG_MAX_DEVICES] = {0};
    int mem_set[GG_MAX_DEVICES] = {0}, core_set[GG_MAX_DEVICES] = {0};
    memset(cfg, 0, sizeof(*cfg));
    cfg->scrub = 1;
    cfg->log_level = GG_LOG_WARN;
    for (char *const *e = envp; e && *e; e++) {
        const char *kv = *e, *eq = strchr(kv, '=');
        char name[128];
        size_t n;
        if (strncmp(kv, "GPUGOV_", 7) != 0 || !eq) continue;
        n = (size_t)(eq - kv);
        if (n >= sizeof(name)) continue;
        memcpy(name, kv, n);
        name[n] = '\0';
        const char *val = eq + 1;
        if (strncmp(name, MEM_PREFIX, strlen(MEM_PREFIX)) == 0) {
            int idx = suffix_index(name, strlen(MEM_PREFIX));
            uint64_t bytes;
            if (idx == -2) {
                snprintf(err, errlen, "%s: unknown variable; expected %s or %s_<index> with index < %d",
                         name, MEM_PREFIX, MEM_PREFIX, GG_MAX_DEVICES);
                return -1;
            }
            if (gg_parse_bytes(val, &bytes) != 0) {
                snprintf(err, errlen, "%s='%s': expected a positive byte count, optionally with a "
                         "Ki, Mi or Gi suffix (e.g. 2048Mi)", name, val);
                return -1;
            }
            if (idx < 0) mem_all = bytes;
            else { mem_dev[idx] = bytes; mem_set[idx] = 1; }
        } else if (strncmp(name, CORE_PREFIX, strlen(CORE_PREFIX)) == 0) {
            int idx = suffix_index(name, strlen(CORE_PREFIX));
            uint32_t pct;
            if (idx == -2) {
                snprintf(err, errlen, "%s: unknown variable; expected %s or %s_<index> with index < %d",
                         name, CORE_PREFIX, CORE_PREFIX, GG_MAX_DEVICES);
                return -1;
            }
            if (parse_percent(val, &pct) != 0) {
                snprintf(err, errlen, "%s='%s': expected an integer percent from 1 to 100", name, val);
                return -1;
            }
            if (idx < 0) core_all = pct;
            else { core_dev[idx] = pct; core_set[idx] = 1; }
        } else if (strcmp(name, "GPUGOV_SCRUB") == 0) {
            if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
                snprintf(err, errlen, "GPUGOV_SCRUB='%s': expected 0 or 1", val);
                return -1;
            }
            cfg->scrub = val[0] == '1';
        } else if (strcmp(name, "GPUGOV_LOG_LEVEL") == 0) {
            int lvl = parse_log_level(val);
            if (lvl < 0) {
                snprintf(err, errlen, "GPUGOV_LOG_LEVEL='%s': expected error, warn, info, debug "
                         "or 0-3", val);
                return -1;
            }
            cfg->log_level = lvl;
        } else if (strcmp(name, "GPUGOV_SHARED_REGION") == 0) {
            if (val[0] != '/' || strlen(val) >= sizeof(cfg->region_path)) {
                snprintf(err, errlen, "GPUGOV_SHARED_REGION='%s': expected an absolute file path "
                         "shorter than %zu bytes", val, sizeof(cfg->region_path));
                return -1;
            }
            strcpy(cfg->region_path, val);
        }
    }
    for (int i = 0; i < GG_MAX_DEVICES; i++) {
        cfg->mem_limit[i] = mem_set[i] ? mem_dev[i] : mem_all;
        cfg->core_limit[i] = core_set[i] ? core_dev[i] : core_all;
    }
    return 0;
}
