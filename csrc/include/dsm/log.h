/* libdsm's diagnostics: one line per event, filtered by a level, on stderr
 * or handed to a sink (pydsm routes them into Python's logging). UCX's own
 * log lines come the same way, under the module name "ucx".
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_LOG_H
#define DSM_LOG_H

#include "dsm/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 errors, 1 warnings, 2 info (default), 3 debug. DSM_LOG_LEVEL in the
 * environment sets the initial level. */
DSM_API void dsm_set_log_level(int level);
DSM_API int dsm_get_log_level(void);

/* Where lines go: the sink gets each line's level, module and message (no
 * prefix, no newline) instead of stderr; NULL restores stderr. It is called
 * from any thread, UCX's progress thread included, so it must return soon
 * and must not call back into libdsm. */
typedef void (*dsm_log_sink_t)(void *ctx, int level, const char *module, const char *message);
DSM_API void dsm_set_log_sink(dsm_log_sink_t sink, void *ctx);

/* Writing a line (a plugin logs through its host's level and sink):
 * dsm_log_write formats and sends one line when `level` passes the filter;
 * errors (level 0) are always formatted, as the thread's last error. */
enum { DSM_LOG_ERROR = 0, DSM_LOG_WARN = 1, DSM_LOG_INFO = 2, DSM_LOG_DEBUG = 3 };
DSM_API int dsm_log_enabled(int level);
DSM_API void dsm_log_write(int level, const char *module, const char *fmt, ...)
    DSM_PRINTF(3, 4);

/* The last error this thread logged, printed or not (why a join was refused,
 * which fabric the cluster uses, ...): the detail a status code cannot carry.
 * "" if none since dsm_clear_last_error(). */
DSM_API const char *dsm_last_error(void);
DSM_API void dsm_clear_last_error(void);

/* Logging from a layer or a plugin, under its module name: a line is
 * formatted only when its level is enabled. */
#define dsm_log(level, module, ...) \
    do { if (dsm_log_enabled(level)) dsm_log_write((level), (module), __VA_ARGS__); } while (0)
/* Errors are always formatted: the thread keeps the last (dsm_last_error). */
#define DSM_ERROR(mod, ...) dsm_log_write(DSM_LOG_ERROR, (mod), __VA_ARGS__)
#define DSM_WARN(mod, ...) dsm_log(DSM_LOG_WARN, mod, __VA_ARGS__)
#define DSM_INFO(mod, ...) dsm_log(DSM_LOG_INFO, mod, __VA_ARGS__)
#define DSM_DEBUG(mod, ...) dsm_log(DSM_LOG_DEBUG, mod, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
