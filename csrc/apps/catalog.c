/* The catalog of described workloads: what each registered workload takes
 * (names, types, defaults, help), and the check of argument text against it
 * that every workload runs first, so a bad argument comes back as one line
 * naming the parameter instead of a bare DSM_ERR_INVALID. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/plugin.h"
#include "dsm/workload.h"

enum { MAX_DESCRIBED = 256 };

static pthread_mutex_t catalog_lock = PTHREAD_MUTEX_INITIALIZER;
static const dsm_workload_info_t *catalog[MAX_DESCRIBED];
static uint32_t n_catalog;

/* Set by the driver from its Placement and node list (pydsm/workloads.py). */
static const char *const runner_keys[] = {"threads", "pin", "trustees", "memory_nodes", "rank_index", "nodes"};

const char *dsm_workload_runner_key(uint32_t index)
{
    return index < sizeof runner_keys / sizeof runner_keys[0] ? runner_keys[index] : NULL;
}

dsm_status_t dsm_register_workload(const dsm_workload_info_t *info)
{
    if (!info || !info->name || !info->fn || (info->n_params && !info->params)) return DSM_ERR_INVALID;
    for (uint32_t i = 0; i < info->n_params; i++)
        if (!info->params[i].name || !info->params[i].type) return DSM_ERR_INVALID;
    dsm_status_t st = dsm_register(info->name, info->fn);
    if (st != DSM_OK) return st;
    pthread_mutex_lock(&catalog_lock);
    uint32_t i = 0;
    while (i < n_catalog && strcmp(catalog[i]->name, info->name) != 0) i++;
    if (i < n_catalog) catalog[i] = info;
    else if (n_catalog < MAX_DESCRIBED) catalog[n_catalog++] = info;
    else st = DSM_ERR_NOMEM;
    pthread_mutex_unlock(&catalog_lock);
    return st;
}

const dsm_workload_info_t *dsm_workload_info(const char *name)
{
    const dsm_workload_info_t *found = NULL;
    if (!name) return NULL;
    pthread_mutex_lock(&catalog_lock);
    for (uint32_t i = 0; i < n_catalog && !found; i++)
        if (!strcmp(catalog[i]->name, name)) found = catalog[i];
    pthread_mutex_unlock(&catalog_lock);
    return found;
}

static dsm_status_t refuse(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static dsm_status_t refuse(char *msg, size_t cap, const char *fmt, ...)
{
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return DSM_ERR_INVALID;
}

static const dsm_param_info_t *declared(const dsm_workload_info_t *w, const char *key, size_t key_len)
{
    for (uint32_t i = 0; i < w->n_params; i++)
        if (strlen(w->params[i].name) == key_len && !memcmp(w->params[i].name, key, key_len)) return &w->params[i];
    return NULL;
}

static int is_runner_key(const char *key, size_t key_len)
{
    for (uint32_t i = 0; dsm_workload_runner_key(i); i++)
        if (strlen(runner_keys[i]) == key_len && !memcmp(runner_keys[i], key, key_len)) return 1;
    return 0;
}

/* "addr", or "addr:" and the element types the workload reads there
 * (pydsm refuses a buffer of another dtype before the run). */
static int is_addr(const char *type)
{
    return strncmp(type, "addr", 4) == 0 && (type[4] == '\0' || type[4] == ':');
}

static int is_number(const char *v, size_t n)
{
    char text[32];
    if (n == 0 || n >= sizeof text || v[0] == '-') return 0;
    memcpy(text, v, n);
    text[n] = '\0';
    char *stop;
    errno = 0;
    (void)strtoull(text, &stop, 0);
    return !errno && *stop == '\0';
}

dsm_status_t dsm_workload_check_args(const dsm_workload_info_t *w, const void *args, size_t len, char *msg,
                                     size_t cap)
{
    if (!w || (len && !args)) return refuse(msg, cap, "no workload description");
    const char *p = args, *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        if (line_end > p) {
            const char *eq = memchr(p, '=', (size_t)(line_end - p));
            if (!eq || eq == p)
                return refuse(msg, cap, "%s: argument line '%.*s' is not key=value", w->name,
                              (int)(line_end - p > 60 ? 60 : line_end - p), p);
            size_t key_len = (size_t)(eq - p);
            const dsm_param_info_t *param = declared(w, p, key_len);
            if (!param && !is_runner_key(p, key_len)) {
                /* The advice names the parameters: it must work wherever the
                 * message is read (a driver, a daemon's log, pydsm run). */
                char known[256] = "";
                size_t used = 0;
                for (uint32_t i = 0; i < w->n_params && used < sizeof known; i++)
                    used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                             w->params[i].name);
                return refuse(msg, cap, "%s: unknown parameter '%.*s' (%s takes %s)", w->name,
                              (int)(key_len > 60 ? 60 : key_len), p, w->name,
                              w->n_params ? known : "no parameters");
            }
            size_t value_len = (size_t)(line_end - eq - 1);
            if (param && strcmp(param->type, "str") != 0 && !is_number(eq + 1, value_len))
                return refuse(msg, cap, "%s: parameter '%s' takes %s, not '%.*s'", w->name, param->name,
                              is_addr(param->type) ? "a global address" : "an unsigned integer",
                              (int)(value_len > 40 ? 40 : value_len), eq + 1);
        }
        p = line_end + 1;
    }
    for (uint32_t i = 0; i < w->n_params; i++) {
        int bad = 0;
        char probe[2];
        if (!w->params[i].fallback && !dsm_param_str(args, len, w->params[i].name, probe, sizeof probe, &bad) && !bad)
            return refuse(msg, cap, "%s: missing parameter '%s' (%s)", w->name, w->params[i].name,
                          w->params[i].help ? w->params[i].help : w->params[i].type);
    }
    return DSM_OK;
}

dsm_status_t dsm_workload_refuse(void *ret, size_t cap, size_t *ret_len, const char *fmt, ...)
{
    if (ret && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ret, cap, fmt, ap);
        va_end(ap);
        *ret_len = strnlen(ret, cap);
    }
    return DSM_ERR_INVALID;
}

dsm_status_t dsm_workload_begin(const dsm_workload_info_t *w, const void *args, size_t len, void *ret, size_t cap,
                                size_t *ret_len)
{
    dsm_status_t st = dsm_workload_check_args(w, args, len, ret, cap);
    if (st != DSM_OK && ret && cap) *ret_len = strnlen(ret, cap);
    return st;
}
