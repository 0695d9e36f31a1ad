/* A workload's refusal of one parameter (see refuse.h). */
#include "apps/refuse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

dsm_status_t dsm_apps_refuse_param(const dsm_workload_info_t *w, const void *args, size_t len, const char *param,
                                   void *ret, size_t cap, size_t *ret_len, const char *allowed, ...)
{
    char value[64], given[192], rule[256];
    int bad = 0;
    if (dsm_param_str(args, len, param, value, sizeof value, &bad))
        snprintf(given, sizeof given, "%s=%s refused", param, value);
    else if (bad)
        snprintf(given, sizeof given, "%s (a value longer than %zu bytes) refused", param, sizeof value - 1);
    else {
        const char *fallback = NULL;
        for (uint32_t i = 0; i < w->n_params; i++)
            if (strcmp(w->params[i].name, param) == 0) fallback = w->params[i].fallback;
        if (fallback)
            snprintf(given, sizeof given, "%s not given (default %s)", param, fallback);
        else
            snprintf(given, sizeof given, "%s not given", param);
    }
    va_list ap;
    va_start(ap, allowed);
    vsnprintf(rule, sizeof rule, allowed, ap);
    va_end(ap);
    return dsm_workload_refuse(ret, cap, ret_len, "%s: %s: must be %s", w->name, given, rule);
}
