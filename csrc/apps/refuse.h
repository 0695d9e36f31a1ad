/* How a workload refuses a parameter: one line naming the workload, the
 * parameter, the value it was given (or that it was not given) and what is
 * allowed, so that someone without the source knows what to change. */
#ifndef DSM_APPS_REFUSE_H
#define DSM_APPS_REFUSE_H

#include <stddef.h>

#include "dsm/plugin.h"
#include "dsm/workload.h"

/* Writes "W: PARAM=VALUE refused: must be ALLOWED" (ALLOWED printf-style;
 * "W: PARAM not given (default D): must be ..." when args lack it) as the
 * result text and returns DSM_ERR_INVALID. */
dsm_status_t dsm_apps_refuse_param(const dsm_workload_info_t *w, const void *args, size_t len, const char *param,
                                   void *ret, size_t cap, size_t *ret_len, const char *allowed, ...)
    DSM_PRINTF(8, 9);

#endif
