/* One-line logging to stderr; a single write() per line so lines never interleave. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include "gg.h"

int gg_log_level = GG_LOG_WARN;

void gg_log(int level, const char *fmt, ...) {
    static const char *tags[] = {"error", "warn", "info", "debug"};
    char buf[1024];
    int n;
    va_list ap;
    if (level > gg_log_level) return;
    n = snprintf(buf, sizeof(buf), "gpugov[%d] %s: ", (int)getpid(), tags[level]);
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(buf) - 2) n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}
