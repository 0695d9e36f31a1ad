/* Latency against offered load: mutex, MCS and apply_then (dedicated and
 * shared) at Poisson arrival rates, mean and p99.9. */
#include <stdio.h>
#include <stdlib.h>

#include "bench/trust/deleg_run.h"
#include "bench/trust/keys.h"
#include "bench/trust/lock_run.h"
#include "bench/trust/trust.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void lat_stats(uint64_t *lat, size_t n, double *mean, double *p999)
{
    if (n == 0) {
        *mean = *p999 = 0;
        return;
    }
    /* drop the first 10% (warm-up) */
    size_t skip = n / 10;
    lat += skip;
    n -= skip;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)lat[i];
    *mean = s / (double)n / 1000.0;
    qsort(lat, n, sizeof *lat, cmp_u64);
    *p999 = (double)lat[(size_t)((double)(n - 1) * 0.999)] / 1000.0;
}

/* ---- latency vs offered load (64 objects, uniform) ---- */
/* One latency point of one method, run LAT_REPS times: this is a VM where a
 * run now and then loses the core for milliseconds, which in a single
 * 0.1-0.5 s run decides p99.9 (and even the mean) for whichever method it
 * hits; the median over runs keeps what is the method's own. */
#define LAT_REPS 5

static void lat_point(int method, uint32_t *ring, double load, double *mean, double *p999)
{
    double m[LAT_REPS], p[LAT_REPS];
    for (int rep = 0; rep < LAT_REPS; rep++) {
        uint64_t *lat;
        size_t nlat;
        if (method < 2) {
            struct lock_run lr;
            run_locks(method == 0 ? L_MUTEX : L_MCS, 64, ring, load / 2, &lr, NULL);
            lat = lr.lat;
            nlat = lr.nlat;
        } else {
            /* dedicated: one client thread offers all the load */
            struct deleg_run dr;
            int dedicated = method == 2;
            run_deleg(D_THEN, dedicated, 64, ring, dedicated ? load : load / 2, &dr, NULL);
            lat = dr.lat;
            nlat = dr.nlat;
        }
        lat_stats(lat, nlat, &m[rep], &p[rep]);
        free(lat);
    }
    *mean = dsm_report_median(m, LAT_REPS);
    *p999 = dsm_report_median(p, LAT_REPS);
}

void bench_latency(dsm_report_t *r)
{
    printf("\n== latency vs offered load, 64 objects uniform, mean / p99.9 in us (median of %d runs) ==\n",
           LAT_REPS);
    static const double loads[] = {0.5e6, 1e6, 2e6, 4e6};
    uint32_t *ring = make_ring(64, 0, 777);
    printf("%-10s %-22s %-22s %-22s %-22s\n", "Mops/s", "mutex", "mcs", "apply_then-dedicated",
           "apply_then-shared");
    for (unsigned li = 0; li < sizeof loads / sizeof *loads; li++) {
        double L = loads[li];
        double mean[4], p[4];
        for (int k = 0; k < 4; k++) lat_point(k, ring, L, &mean[k], &p[k]);
        printf("%-10.1f", L / 1e6);
        for (int k = 0; k < 4; k++) printf(" %9.2f / %-9.2f ", mean[k], p[k]);
        printf("\n");
        const char *nm[] = {"mutex", "mcs", "apply_then_dedicated", "apply_then_shared"};
        for (int k = 0; k < 4; k++) {
            char name[96];
            snprintf(name, sizeof name, "latency_64obj_%.1fMops/%s_mean", L / 1e6, nm[k]);
            dsm_report_add(r, name, mean[k], "us", "mutex_mean", mean[0], 0);
            snprintf(name, sizeof name, "latency_64obj_%.1fMops/%s_p999", L / 1e6, nm[k]);
            dsm_report_add(r, name, p[k], "us", "mutex_p999", p[0], 0);
        }
    }
    free(ring);
}
