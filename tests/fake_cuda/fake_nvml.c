/* A fake libnvidia-ml.so.1: devices with FAKECUDA_MEM_BYTES of memory; "used" comes
 * from the fake driver when it is loaded in the same process. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include "../../native/cuda_types.h"

#define EXPORT __attribute__((visibility("default")))
struct fake_nvml_dev { unsigned int index; };
static struct fake_nvml_dev devs[16] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};

static unsigned long long total_bytes(void) {
    const char *e = getenv("FAKECUDA_MEM_BYTES");
    return e ? strtoull(e, NULL, 10) : (1ULL << 30);
}
static unsigned long long used_bytes(unsigned int i) {
    uint64_t (*used)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "fakegpu_used");
    return used ? used((int)i) : 0;
}
static unsigned int count(void) {
    const char *e = getenv("FAKECUDA_DEVICES");
    int n = e ? atoi(e) : 1;
    return n < 1 || n > 16 ? 1 : (unsigned int)n;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = count(); return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (i >= count()) return NVML_ERROR_INVALID_ARGUMENT;
    *d = (nvmlDevice_t)&devs[i];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) {
    *i = ((struct fake_nvml_dev *)d)->index;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    unsigned int i = ((struct fake_nvml_dev *)d)->index;
    m->total = total_bytes();
    m->used = used_bytes(i);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    unsigned int i = ((struct fake_nvml_dev *)d)->index;
    m->total = total_bytes();
    m->reserved = 1ULL << 20;
    m->used = used_bytes(i);
    m->free = m->total - m->used - m->reserved;
    return NVML_SUCCESS;
}
