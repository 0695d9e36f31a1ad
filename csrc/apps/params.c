/* The workload SDK's text formats (dsm/workload.h): "key=value" argument
 * lines, thread placement, and "name value unit" result lines. */
#include <errno.h>
#include <sched.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/plugin.h"
#include "dsm/workload.h"

int dsm_param_str(const void *args, size_t len, const char *key, char *out, size_t cap, int *bad)
{
    const char *p = args, *end = p + len;
    size_t key_len = strlen(key);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        if ((size_t)(line_end - p) > key_len && memcmp(p, key, key_len) == 0 && p[key_len] == '=') {
            size_t n = (size_t)(line_end - p) - key_len - 1;
            if (n >= cap) { *bad = 1; return 0; }
            memcpy(out, p + key_len + 1, n);
            out[n] = '\0';
            return 1;
        }
        p = line_end + 1;
    }
    return 0;
}

uint64_t dsm_param_u64(const void *args, size_t len, const char *key, uint64_t fallback, int *bad)
{
    char value[32];
    if (!dsm_param_str(args, len, key, value, sizeof value, bad)) return fallback;
    char *stop;
    errno = 0;
    unsigned long long v = strtoull(value, &stop, 0);
    if (!value[0] || errno || *stop || value[0] == '-') { *bad = 1; return fallback; }
    return v;
}

dsm_status_t dsm_workload_cpu(const void *args, size_t len, unsigned thread_index, long cpus, int *cpu)
{
    char pin[16] = "none";
    int bad = 0;
    dsm_param_str(args, len, "pin", pin, sizeof pin, &bad);
    uint64_t threads = dsm_param_u64(args, len, "threads", 1, &bad);
    uint64_t node = dsm_param_u64(args, len, "rank_index", 0, &bad);
    uint64_t nodes = dsm_param_u64(args, len, "nodes", 1, &bad);
    if (bad || nodes == 0 || node >= nodes) return DSM_ERR_INVALID;
    uint64_t slot;
    if (!strcmp(pin, "none")) slot = UINT64_MAX;
    else if (!strcmp(pin, "compact")) slot = node * threads + thread_index;
    else if (!strcmp(pin, "scatter")) slot = (uint64_t)thread_index * nodes + node;
    else return DSM_ERR_INVALID;
    *cpu = slot == UINT64_MAX || cpus < 1 ? -1 : (int)(slot % (uint64_t)cpus);
    return DSM_OK;
}

dsm_status_t dsm_workload_pin(const void *args, size_t len, unsigned thread_index)
{
    int cpu;
    dsm_status_t st = dsm_workload_cpu(args, len, thread_index, sysconf(_SC_NPROCESSORS_ONLN), &cpu);
    if (st != DSM_OK || cpu < 0) return st;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? DSM_OK : DSM_ERR_INVALID;
}

dsm_status_t dsm_result_add(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                            const char *unit)
{
    if (*ret_len >= cap) return DSM_ERR_TOO_BIG;
    int n = snprintf((char *)ret + *ret_len, cap - *ret_len, "%s %.15g %s\n", name, value, unit);
    if (n < 0 || (size_t)n >= cap - *ret_len) return DSM_ERR_TOO_BIG;
    *ret_len += (size_t)n;
    return DSM_OK;
}

dsm_status_t dsm_result_add_u64(void *ret, size_t cap, size_t *ret_len, const char *name, uint64_t value,
                                const char *unit)
{
    if (*ret_len >= cap) return DSM_ERR_TOO_BIG;
    int n = snprintf((char *)ret + *ret_len, cap - *ret_len, "%s %llu %s\n", name, (unsigned long long)value, unit);
    if (n < 0 || (size_t)n >= cap - *ret_len) return DSM_ERR_TOO_BIG;
    *ret_len += (size_t)n;
    return DSM_OK;
}

/* The ":kind" word of a result line, by dsm_figure_kind_t (Python's
 * pydsm/result.py reads the same words). */
static const char *const figure_kinds[] = {
    [DSM_FIGURE_TOTAL] = "total", [DSM_FIGURE_RATE] = "rate", [DSM_FIGURE_MEAN] = "mean",
    [DSM_FIGURE_SAME] = "same",   [DSM_FIGURE_FIRST] = "first",
};

static dsm_status_t result_line(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                                const char *unit, const char *kind, double num, double den)
{
    if (*ret_len >= cap) return DSM_ERR_TOO_BIG;
    char *out = (char *)ret + *ret_len;
    size_t room = cap - *ret_len;
    int n = kind ? snprintf(out, room, "%s %.15g %s :%s\n", name, value, unit, kind)
                 : snprintf(out, room, "%s %.15g %s :ratio=%.17g/%.17g\n", name, value, unit, num, den);
    if (n < 0 || (size_t)n >= room) return DSM_ERR_TOO_BIG;
    *ret_len += (size_t)n;
    return DSM_OK;
}

dsm_status_t dsm_result_add_kind(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                                 const char *unit, dsm_figure_kind_t kind)
{
    if ((int)kind < DSM_FIGURE_TOTAL || (int)kind > DSM_FIGURE_FIRST) return DSM_ERR_INVALID;
    return result_line(ret, cap, ret_len, name, value, unit, figure_kinds[kind], 0, 0);
}

dsm_status_t dsm_result_add_ratio(void *ret, size_t cap, size_t *ret_len, const char *name, double num, double den,
                                  const char *unit)
{
    return result_line(ret, cap, ret_len, name, den != 0 ? num / den : 0, unit, NULL, num, den);
}
