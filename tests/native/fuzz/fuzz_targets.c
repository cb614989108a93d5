/* libFuzzer targets for the two parsers of untrusted input in libgpugov:
 * - FUZZ_CONFIG: the environment parser (gg_config_parse): input = newline-separated
 *   environment entries. Checks: no crash, no sanitizer report, an accepted configuration
 *   holds only values the parser documents, a refusal always says why.
 * - FUZZ_REGION: the region loader (gg_region_open on a file holding the input, then
 *   charges, exports and release driven by the input's tail). Checks: no crash, no
 *   out-of-bounds access, however the file was forged. The lock bytes are zeroed (a forged
 *   lock word can make the robust mutex wait forever; see docs/threat-model.md).
 * Build and run: python tests/native/fuzz/run_fuzz.py [seconds]. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../native/config.c"
#include "../../../native/log.c"
#include "../../../native/region.c"

#ifdef FUZZ_CONFIG
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1), *envp[65] = {0}, err[512];
    int n = 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    for (char *p = buf, *q; p && n < 64; p = q) {
        q = strchr(p, '\n');
        if (q) *q++ = '\0';
        envp[n++] = p;
    }
    struct gg_config cfg;
    err[0] = '\0';
    if (gg_config_parse(envp, &cfg, err, sizeof(err)) == 0) {
        for (int d = 0; d < GG_MAX_DEVICES; d++)
            if (cfg.core_limit[d] > 99) abort(); /* 100 is stored as 0: not throttled */
        if (cfg.scrub != 0 && cfg.scrub != 1) abort();
        if (cfg.log_level < 0 || cfg.log_level > 3) abort();
        if (cfg.region_path[0] && cfg.region_path[0] != '/') abort();
        if (cfg.n_uuids < 0 || cfg.n_uuids > GG_MAX_DEVICES) abort();
        for (int i = 0; i < cfg.n_uuids; i++)
            if (strlen(cfg.uuids[i]) != 32) abort();
    } else if (!err[0] || !memchr(err, '\0', sizeof(err))) {
        abort(); /* a refusal must say why */
    }
    uint64_t v;
    gg_parse_bytes(buf, &v);
    free(buf);
    return 0;
}
#endif

#ifdef FUZZ_REGION
static char path[64];

static void remove_region(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(path, sizeof(path), "/tmp/gpugov-fuzz-region-%d", (int)getpid());
    atexit(remove_region);
    gg_log_level = -1; /* quiet: refusals are expected */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct gg_region img;
    size_t n = size < sizeof(img) ? size : sizeof(img);
    uint8_t flags = size ? data[0] : 0;
    memset(&img, 0, sizeof(img));
    memcpy(&img, data, n);
    if (flags & 1) { /* a well-formed header, so the fuzzer reaches slots and exports */
        img.header.magic = GG_REGION_MAGIC;
        img.header.version = GG_REGION_VERSION;
        img.header.initialized = 1;
        if (flags & 2) {
            img.header.header_bytes = sizeof(struct gg_header);
            img.header.slot_bytes = sizeof(struct gg_slot);
            img.header.max_slots = GG_MAX_SLOTS;
            img.header.max_devices = GG_MAX_DEVICES;
        }
    }
    memset(img.header.lock, 0, sizeof(img.header.lock));
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(&img, 1, flags & 4 ? n : sizeof(img), f); /* sometimes a short file */
    fclose(f);

    if (R) munmap(R, sizeof(*R));
    if (lock_fd >= 0) close(lock_fd);
    R = NULL;
    lock_fd = -1;
    my_slot = -1;
    struct gg_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    strcpy(cfg.region_path, path);
    for (int d = 0; d < GG_MAX_DEVICES; d++) { /* agree with the file, so it is joined */
        cfg.mem_limit[d] = img.header.mem_limit[d];
        cfg.core_limit[d] = (uint32_t)img.header.core_limit[d];
    }
    char err[512];
    if (gg_region_open(&cfg, err, sizeof(err)) != 0) return 0;
    /* the tail of the input drives operations on the loaded region */
    const uint8_t *op = size > sizeof(img) ? data + sizeof(img) : data;
    size_t ops = size > sizeof(img) ? size - sizeof(img) : (size < 64 ? size : 64);
    uint64_t limit, in_use, ref = 0;
    for (size_t i = 0; i + 10 <= ops; i += 10) {
        int dev = op[i + 1] % GG_MAX_DEVICES;
        uint64_t bytes;
        uint8_t handle[64] = {0}; /* exported handles are 64 bytes */
        memcpy(&bytes, op + i + 2, sizeof(bytes));
        memcpy(handle, op + i, 10);
        switch (op[i] % 6) {
        case 0: gg_charge(dev, bytes, 0, &limit, &in_use); break;
        case 1: gg_uncharge(dev, bytes); break;
        case 2: gg_export_record(1 + (op[i] & 1), handle, bytes, bytes >> 8, dev); break;
        case 3: gg_export_cover(1 + (op[i] & 1), handle, &ref); break;
        case 4: gg_export_uncover(ref ^ bytes); break;
        default: gg_export_drop(bytes); break;
        }
    }
    release_slot();
    return 0;
}
#endif
