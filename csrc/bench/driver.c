/* The dsm-bench-* programs' shared command line and case-table listing
 * (see driver.h). */
#include "bench/driver.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *out, const char *prog, const dsm_bench_flag_t *flags, size_t n_flags)
{
    fprintf(out, "usage: %s [--quick] [--json PATH] [--only PREFIX] [--runs N] [--transport shm|tcp] [--list] [--help]",
            prog);
    for (size_t i = 0; i < n_flags; i++)
        fprintf(out, " [%s %s]", flags[i].name, flags[i].arg);
    fprintf(out, "\n");
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
            size_t f = 0;
            while (f < n_flags && strcmp(a, flags[f].name) != 0)
                f++;
            if (f == n_flags)
                goto bad;
            *flags[f].value = v;
        }
    }
    return -1;
bad:
    usage(stderr, argv[0], flags, n_flags);
    return 2;
}
