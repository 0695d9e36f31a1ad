/* UCX's log lines, routed into libdsm's log (module "ucx"): one format and
 * one destination for every diagnostic of the process, so a program that
 * installs a log sink (pydsm: Python's logging) gets UCX's lines too. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include <ucs/debug/log_def.h>

#include "fabric_int.h"
#include "util/log.h"

static int dsm_level_of(ucs_log_level_t level)
{
    if (level <= UCS_LOG_LEVEL_ERROR) return DSM_LOG_ERROR;
    if (level == UCS_LOG_LEVEL_WARN) return DSM_LOG_WARN;
    if (level <= UCS_LOG_LEVEL_INFO) return DSM_LOG_INFO;
    return DSM_LOG_DEBUG;
}

static ucs_log_func_rc_t forward_ucx_line(const char *file, unsigned line, const char *function,
                                          ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                          const char *fmt, va_list ap)
{
    (void)function;
    (void)comp;
    if (level == UCS_LOG_LEVEL_FATAL) {
        /* UCX aborts next: say why where it survives the abort, not only in
         * a sink whose buffered records die with the process */
        va_list copy;
        va_copy(copy, ap);
        fprintf(stderr, "[ucx fatal] %s:%u ", file, line);
        vfprintf(stderr, fmt, copy);
        fputc('\n', stderr);
        va_end(copy);
    }
    int dsm_level = dsm_level_of(level);
    if (dsm_log_enabled(dsm_level)) {
        char msg[768];
        vsnprintf(msg, sizeof msg, fmt, ap);
        dsm_log_write(dsm_level, "ucx", "%s:%u %s", file, line, msg);
    }
    return UCS_LOG_FUNC_RC_STOP;
}

static void push_handler(void) { ucs_log_push_handler(forward_ucx_line); }

void dsm_fabric_route_ucx_log(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, push_handler);
}
