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

#ifdef __cplusplus
}
#endif
#endif
