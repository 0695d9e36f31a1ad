/* The "key=value" argument lines and "name value unit" result lines of workloads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/workloads.h"

uint64_t dsm_param_u64(const void *args, size_t len, const char *key, uint64_t fallback, int *bad)
{
    const char *p = args, *end = p + len;
    size_t key_len = strlen(key);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        if ((size_t)(line_end - p) > key_len && memcmp(p, key, key_len) == 0 && p[key_len] == '=') {
            char value[32];
            size_t n = (size_t)(line_end - p) - key_len - 1;
            if (n == 0 || n >= sizeof value) { *bad = 1; return fallback; }
            memcpy(value, p + key_len + 1, n);
            value[n] = '\0';
            char *stop;
            errno = 0;
            unsigned long long v = strtoull(value, &stop, 0);
            if (errno || *stop || value[0] == '-') { *bad = 1; return fallback; }
            return v;
        }
        p = line_end + 1;
    }
    return fallback;
}

dsm_status_t dsm_result_add(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                            const char *unit)
{
    if (*ret_len >= cap) return DSM_ERR_TOO_BIG;
    int n = snprintf((char *)ret + *ret_len, cap - *ret_len, "%s %.6g %s\n", name, value, unit);
    if (n < 0 || (size_t)n >= cap - *ret_len) return DSM_ERR_TOO_BIG;
    *ret_len += (size_t)n;
    return DSM_OK;
}
