/* glibc's own dlvsym, found without asking dlsym or dlvsym (gpugov defines both, so a program
 * that looks either up gets gpugov's). The dynamic symbol table of the C library (libc.so.6,
 * or libdl.so.2 before glibc 2.34) is searched through its GNU hash table, as the dynamic
 * linker does. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <elf.h>
#include <link.h>
#include <string.h>
#include "gg.h"

struct find { const char *name; void *addr; };

static uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = h * 33 + *p;
    return h;
}

/* In-memory dynamic entries are relocated by the dynamic linker on most targets, not all. */
static uintptr_t at(const struct dl_phdr_info *info, ElfW(Addr) v) {
    return v < info->dlpi_addr ? info->dlpi_addr + v : v;
}

GG_NO_SANITIZE static void *lookup(const struct dl_phdr_info *info, const char *name) {
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return NULL;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gh = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)at(info, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_STRTAB) strtab = (const char *)at(info, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_GNU_HASH) gh = (const uint32_t *)at(info, dyn->d_un.d_ptr);
    }
    if (!symtab || !strtab || !gh) return NULL;
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2];
    if (!nbuckets) return NULL;
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)(gh + 4);
    const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size), *chain = buckets + nbuckets;
    uint32_t h = gnu_hash(name), idx = buckets[h % nbuckets];
    if (idx < symoffset) return NULL;
    for (;; idx++) {
        uint32_t ch = chain[idx - symoffset];
        const ElfW(Sym) *s = &symtab[idx];
        if ((ch | 1) == (h | 1) && s->st_shndx != SHN_UNDEF && s->st_value
            && strcmp(strtab + s->st_name, name) == 0)
            return (void *)(info->dlpi_addr + s->st_value);
        if (ch & 1) return NULL;
    }
}

GG_NO_SANITIZE static int visit(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct find *f = data;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    base = base ? base + 1 : info->dlpi_name;
    if (!base || (strncmp(base, "libc.so", 7) != 0 && strncmp(base, "libdl.so", 8) != 0)) return 0;
    f->addr = lookup(info, f->name);
    return f->addr != NULL; /* stop at the first library defining it */
}

GG_NO_SANITIZE void *gg_libc_symbol(const char *name) {
    struct find f = {name, NULL};
    dl_iterate_phdr(visit, &f);
    return f.addr;
}
