/* Internal logging with a level, a timestamp and the module name (to stderr,
 * or to the sink a program installed: dsm/log.h). */
#ifndef DSM_UTIL_LOG_H
#define DSM_UTIL_LOG_H

#include "dsm/log.h"   /* the levels, dsm_log_enabled and dsm_log_write */

#define dsm_log(level, module, ...) \
    do { if (dsm_log_enabled(level)) dsm_log_write((level), (module), __VA_ARGS__); } while (0)
/* Errors are always formatted: the thread keeps the last (dsm_last_error). */
#define DSM_ERROR(mod, ...) dsm_log_write(DSM_LOG_ERROR, (mod), __VA_ARGS__)
#define DSM_WARN(mod, ...) dsm_log(DSM_LOG_WARN, mod, __VA_ARGS__)
#define DSM_INFO(mod, ...) dsm_log(DSM_LOG_INFO, mod, __VA_ARGS__)
#define DSM_DEBUG(mod, ...) dsm_log(DSM_LOG_DEBUG, mod, __VA_ARGS__)

#endif
