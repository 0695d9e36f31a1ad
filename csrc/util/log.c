/* Logging: one line per event, filtered by a process-wide level, written to
 * stderr or handed to the sink a program installed. */
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The sink and its context change together: both live in one struct that
 * is published with one pointer store, so a logging thread never sees a new
 * sink with an old context. Replaced structs are kept (a handful per
 * process at most) because a thread may still be using one. */
typedef struct log_sink {
    dsm_log_sink_t fn;
    void *ctx;
    struct log_sink *retired_next;   /* the replaced ones stay reachable */
} log_sink_t;
static _Atomic(log_sink_t *) log_sink;
static log_sink_t *retired_sinks;
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;

void dsm_set_log_level(int level) { atomic_store(&log_level, level); }

int dsm_get_log_level(void) { return current_level(); }

void dsm_set_log_sink(dsm_log_sink_t fn, void *ctx)
{
    log_sink_t *s = NULL;
    if (fn) {
        s = malloc(sizeof *s);
        if (!s) return;
        s->fn = fn;
        s->ctx = ctx;
        s->retired_next = NULL;
    }
    log_sink_t *old = atomic_exchange(&log_sink, s);
    if (old) {
        pthread_mutex_lock(&retired_lock);
        old->retired_next = retired_sinks;
        retired_sinks = old;
        pthread_mutex_unlock(&retired_lock);
    }
}

const char *dsm_last_error(void) { return last_error; }

void dsm_clear_last_error(void) { last_error[0] = '\0'; }

int dsm_log_enabled(int level) { return level <= current_level(); }

void dsm_log_write(int level, const char *module, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    /* errors are kept for dsm_last_error whether or not they are shown */
    if (level == DSM_LOG_ERROR) {
        size_t keep = (size_t)len < sizeof last_error - 1 ? (size_t)len : sizeof last_error - 1;
        memcpy(last_error, msg, keep);
        last_error[keep] = '\0';
    }
    if (!dsm_log_enabled(level)) return;
    log_sink_t *sink = atomic_load(&log_sink);
    if (sink) {
        sink->fn(sink->ctx, level, module, msg);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[1200];
    int n = snprintf(line, sizeof line, "[%ld.%03ld dsm %d %s %s] %s\n", (long)ts.tv_sec, ts.tv_nsec / 1000000,
                     (int)getpid(), names[level < 0 ? 0 : level > 3 ? 3 : level], module, msg);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) {
        n = sizeof line - 1;
        line[n - 1] = '\n';
    }
    /* One write() so lines from several threads do not interleave. */
    ssize_t unused = write(2, line, (size_t)n);
    (void)unused;
}
