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

/* Plain loops: string functions may be intercepted by a sanitizer not yet started. */
GG_NO_SANITIZE static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}
GG_NO_SANITIZE static int prefix(const char *s, const char *p) {
    while (*p && *s == *p) s++, p++;
    return !*p;
}

GG_NO_SANITIZE static uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = h * 33 + *p;
    return h;
}

/* In-memory dynamic entries are relocated by the dynamic linker on most targets, not all. */
static uintptr_t at(uintptr_t base, ElfW(Addr) v) { return v < base ? base + v : v; }

GG_NO_SANITIZE static void *lookup(const struct link_map *m, const char *name) {
    const ElfW(Dyn) *dyn = m->l_ld;
    uintptr_t base = m->l_addr;
    if (!dyn) return NULL;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gh = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)at(base, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_STRTAB) strtab = (const char *)at(base, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_GNU_HASH) gh = (const uint32_t *)at(base, dyn->d_un.d_ptr);
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
        if ((ch | 1) == (h | 1) && s->st_shndx != SHN_UNDEF && s->st_value && same(strtab + s->st_name, name))
            return (void *)(base + s->st_value);
        if (ch & 1) return NULL;
    }
}

/* The link map is walked directly (no dl_iterate_phdr: sanitizer runtimes intercept it and
 * call gpugov's dlsym before their own start-up is done). */
GG_NO_SANITIZE void *gg_libc_symbol(const char *name) {
    for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next) {
        const char *n = m->l_name, *base = n;
        for (const char *p = n; p && *p; p++)
            if (*p == '/') base = p + 1;
        if (!base || !(prefix(base, "libc.so") || prefix(base, "libdl.so"))) continue;
        void *addr = lookup(m, name);
        if (addr) return addr;
    }
    return NULL;
}
