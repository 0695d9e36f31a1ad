/* The dsm-bench-* programs' shared command line and case-table listing
 * (see driver.h). */
#include "bench/driver.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out, const char *prog, const dsm_bench_flag_t *flags, size_t n_flags)
{
    fprintf(out, "usage: %s [--quick] [--json PATH] [--only PREFIX] [--runs N] [--transport shm|tcp] [--list] [--help]",
            prog);
    for (size_t i = 0; i < n_flags; i++)
        fprintf(out, flags[i].arg ? " [%s %s]" : " [%s]", flags[i].name, flags[i].arg);
    fprintf(out, "\n");
}

static const dsm_bench_flag_t *find_flag(const dsm_bench_flag_t *flags, size_t n_flags, const char *name)
{
    for (size_t f = 0; f < n_flags; f++)
        if (strcmp(name, flags[f].name) == 0)
            return &flags[f];
    return NULL;
}

void dsm_bench_list(FILE *out, const dsm_bench_case_t *cases, size_t n_cases)
{
    for (size_t i = 0; i < n_cases; i++)
        fprintf(out, "%s\t%s\t%s\t%s\n", cases[i].figure, cases[i].unit,
                cases[i].higher ? "higher" : "lower", cases[i].anchor);
}

int dsm_bench_wanted(const dsm_bench_opts_t *o, const char *figure)
{
    return o->only == NULL || strncmp(figure, o->only, strlen(o->only)) == 0;
}

int dsm_bench_transport_on(const dsm_bench_opts_t *o, dsm_transport_t tr)
{
    return !o->transport_set || o->transport == tr;
}

/* Whether prefix could begin a name of the pattern (its '*' matching any text). */
static int pattern_prefix(const char *pattern, const char *prefix)
{
    for (; *prefix; pattern++, prefix++) {
        if (*pattern == '*')
            return 1;
        if (*pattern != *prefix)
            return 0;
    }
    return 1;
}

int dsm_bench_run_wanted(const dsm_bench_opts_t *o, const dsm_bench_case_t *cases, size_t n_cases, int run)
{
    if (o->only == NULL)
        return 1;
    for (size_t i = 0; i < n_cases; i++)
        if (cases[i].run == run && pattern_prefix(cases[i].figure, o->only))
            return 1;
    return 0;
}

int dsm_bench_parse(int argc, char **argv, const dsm_bench_case_t *cases, size_t n_cases,
                    const dsm_bench_flag_t *flags, size_t n_flags, dsm_bench_opts_t *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
            continue;
        }
        if (!strcmp(a, "--list")) {
            dsm_bench_list(stdout, cases, n_cases);
            return 0;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, argv[0], flags, n_flags);
            return 0;
        }
        const dsm_bench_flag_t *own = find_flag(flags, n_flags, a);
        if (own != NULL && own->arg == NULL) {
            *own->value = "1";
            continue;
        }
        if (v == NULL)
            goto bad;
        i++;
        if (!strcmp(a, "--json")) {
            o->json = v;
        } else if (!strcmp(a, "--only")) {
            o->only = v;
        } else if (!strcmp(a, "--runs") || !strcmp(a, "--reps")) {
            o->runs = atoi(v);
            if (o->runs < 1)
                goto bad;
        } else if (!strcmp(a, "--transport")) {
            if (dsm_transport_parse(v, &o->transport) != DSM_OK) {
                fprintf(stderr, "unknown transport %s\n", v);
                return 2;
            }
            o->transport_set = 1;
        } else {
            if (own == NULL)
                goto bad;
            *own->value = v;
        }
    }
    return -1;
bad:
    usage(stderr, argv[0], flags, n_flags);
    return 2;
}

int dsm_bench_progress_flag(const char *flag, const char *value, dsm_progress_mode_t *out)
{
    if (dsm_progress_parse(value, out) == DSM_OK && (*out == DSM_PROGRESS_BUSY || *out == DSM_PROGRESS_BLOCKING))
        return 0;
    fprintf(stderr, "%s takes busy or blocking, not %s\n", flag, value);
    return 2;
}

const char *dsm_bench_sibling(const char *name, char *buf, size_t cap)
{
    if (cap < 2)
        return NULL;
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1)
        return NULL;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash == NULL || (size_t)(slash + 1 - buf) + strlen(name) >= cap)
        return NULL;
    strcpy(slash + 1, name);
    return buf;
}
