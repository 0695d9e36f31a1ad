/* Logging: one line per event on stderr, filtered by a process-wide level. */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dsm/log.h"

static atomic_int log_level = -1;
static _Thread_local char last_error[512];

static int current_level(void)
{
    int level = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (level < 0) {
        const char *env = getenv("DSM_LOG_LEVEL");
        level = env ? atoi(env) : DSM_LOG_INFO;
        atomic_store_explicit(&log_level, level, memory_order_relaxed);
    }
    return level;
}

void dsm_set_log_level(int level) { atomic_store(&log_level, level); }

const char *dsm_last_error(void) { return last_error; }

void dsm_clear_last_error(void) { last_error[0] = '\0'; }

int dsm_log_enabled(int level) { return level <= current_level(); }

void dsm_log_write(int level, const char *module, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[1024];
    int n = snprintf(line, sizeof line, "[%ld.%03ld dsm %d %s %s] ", (long)ts.tv_sec,
                     ts.tv_nsec / 1000000, (int)getpid(), names[level < 0 ? 0 : level > 3 ? 3 : level], module);
    va_list ap;
    va_start(ap, fmt);
    int head = n;
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (level == DSM_LOG_ERROR && head > 0 && (size_t)head < sizeof line)
        snprintf(last_error, sizeof last_error, "%s", line + head);
    if (!dsm_log_enabled(level)) return;
    if ((size_t)n >= sizeof line - 1) n = sizeof line - 2;
    line[n++] = '\n';
    /* One write() so lines from several threads do not interleave. */
    ssize_t unused = write(2, line, (size_t)n);
    (void)unused;
}
