/* Writing workloads: what a plugin (and the project's own apps plugin,
 * libdsm-apps.so) uses to register its workloads, read their "key=value"
 * argument lines, pin their threads and write their "name value unit"
 * result lines.
 *
 * A plugin is a shared object built against the installed headers alone
 * (`pydsm.get_include()`; it includes dsm/sdk.h, or dsm/dsm.h and this
 * header), linking no libdsm: the process that loads it (dsmd, or libdsm
 * in the driver) provides the API. It exports one function, which it
 * declares itself, `dsm_status_t dsm_plugin_init(void)` marked DSM_API; it
 * registers the plugin's workloads with dsm_register_workload
 * (examples/plugin shows one).
 *
 * Sharing a handle between nodes: a workload's threads on different nodes
 * share state through global addresses. One node (say rank_index 0) creates
 * the object (a dsm_own_mutex, a deleg channel's target, a heap block) and
 * publishes its 64-bit address, either by storing it into a global buffer
 * the driver passed as an "addr" parameter (the others wait for it to turn
 * non-zero) or by returning it as an integer result (dsm_result_add_u64,
 * exact through Python's Result) for the driver to pass to the next run.
 *
 * Part of the SDK (dsm/sdk.h); dsm/dsm.h, the user API, does not include it. */
#ifndef DSM_PLUGIN_H
#define DSM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/workload.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers info->fn under info->name in the function registry and keeps
 * the description, which must outlive the process's use of it (static
 * storage). */
DSM_API dsm_status_t dsm_register_workload(const dsm_workload_info_t *info);

/* The first call of every described workload: checks its arguments against
 * its description; on a violation the message is the result text (the
 * driver shows it) and the status DSM_ERR_INVALID. */
DSM_API dsm_status_t dsm_workload_begin(const dsm_workload_info_t *w, const void *args, size_t len, void *ret,
                                        size_t cap, size_t *ret_len);
/* A workload's refusal of its arguments: the message (printf-style) becomes
 * the result text; returns DSM_ERR_INVALID. */
DSM_API dsm_status_t dsm_workload_refuse(void *ret, size_t cap, size_t *ret_len, const char *fmt, ...)
    DSM_PRINTF(4, 5);

/* Value of `key` in the argument text, or `fallback`. A present but
 * malformed value sets *bad. */
DSM_API uint64_t dsm_param_u64(const void *args, size_t len, const char *key, uint64_t fallback, int *bad);
/* Copies the text value of `key` into out[0..cap) (NUL-terminated); returns
 * 1 if present, 0 if absent; a value that does not fit sets *bad. */
DSM_API int dsm_param_str(const void *args, size_t len, const char *key, char *out, size_t cap, int *bad);

/* The CPU for workload thread `thread_index` by the placement in `args`:
 * pin=compact puts a node's threads on neighbouring CPUs, pin=scatter spreads
 * them with the other nodes' threads interleaved (rank_index and nodes say
 * where this node stands), over `cpus` CPUs; pin=none (the default) gives
 * *cpu = -1. DSM_ERR_INVALID for a bad placement. */
DSM_API dsm_status_t dsm_workload_cpu(const void *args, size_t len, unsigned thread_index, long cpus, int *cpu);
/* Pins the calling thread where dsm_workload_cpu says. */
DSM_API dsm_status_t dsm_workload_pin(const void *args, size_t len, unsigned thread_index);

/* Appends "name value unit\n" (15 significant digits: a measurement);
 * DSM_ERR_TOO_BIG when out of room. */
DSM_API dsm_status_t dsm_result_add(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                                    const char *unit);
/* Appends an integer figure exactly (a count, a handle, a global address):
 * "name value unit\n" with all the value's digits. A value written as
 * digits alone is an integer figure, which Python's Result keeps exactly
 * (Result.integer) beside its float64 value. DSM_ERR_TOO_BIG when out of
 * room. */
DSM_API dsm_status_t dsm_result_add_u64(void *ret, size_t cap, size_t *ret_len, const char *name, uint64_t value,
                                        const char *unit);

/* What a figure is, so that Python's Result knows how the nodes' values of
 * it combine into the run's (a unit cannot say: "msgs" may be a count or a
 * per-operation ratio). A result line declares it as a last ":kind" word. */
typedef enum {
    DSM_FIGURE_TOTAL = 1, /* the nodes' values add up (counts, bytes) */
    DSM_FIGURE_RATE,      /* work per second: the nodes' work over the slowest node's time */
    DSM_FIGURE_MEAN,      /* the nodes' values are averaged (a latency) */
    DSM_FIGURE_SAME,      /* every node must report the same value (a parameter, a verdict) */
    DSM_FIGURE_FIRST,     /* computed by the node of rank_index 0 alone (a checksum); the others' is 0 */
} dsm_figure_kind_t;

/* dsm_result_add with the figure's kind declared: "name value unit :kind\n".
 * DSM_ERR_INVALID for an unknown kind. */
DSM_API dsm_status_t dsm_result_add_kind(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                                         const char *unit, dsm_figure_kind_t kind);
/* A ratio of totals (messages per operation): the node's num / den, with
 * both kept ("name value unit :ratio=num/den\n") so that the run's value is
 * the sum of the nums over the sum of the dens, not a sum of ratios.
 * The value is 0 when den is 0. */
DSM_API dsm_status_t dsm_result_add_ratio(void *ret, size_t cap, size_t *ret_len, const char *name, double num,
                                          double den, const char *unit);

#ifdef __cplusplus
}
#endif
#endif
