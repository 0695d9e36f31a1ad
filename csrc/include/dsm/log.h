/* The log level of libdsm's diagnostics (one line per event on stderr). */
#ifndef DSM_LOG_H
#define DSM_LOG_H

#include "dsm/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 errors, 1 warnings, 2 info (default), 3 debug. DSM_LOG_LEVEL in the
 * environment sets the initial level. */
DSM_API void dsm_set_log_level(int level);

/* The last error this thread logged, printed or not (why a join was refused,
 * which fabric the cluster uses, ...): the detail a status code cannot carry.
 * "" if none since dsm_clear_last_error(). */
DSM_API const char *dsm_last_error(void);
DSM_API void dsm_clear_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
