/* Zipf-distributed choices among n items (item 0 the most frequent): the
 * key choice of the workloads and benchmarks, the same everywhere so that
 * runs reproduce and designs compared on "the same keys" get them.
 *
 * Part of the SDK (dsm/sdk.h): header-only, as dsm/mix.h, so a plugin's
 * keys match the project's. */
#ifndef DSM_ZIPF_H
#define DSM_ZIPF_H

#include <math.h>
#include <stdint.h>

/* cdf[0..n) of Zipf(theta) over n >= 1 items; cdf[n - 1] is 1. */
static inline void dsm_zipf_cdf(double *cdf, uint32_t n, double theta)
{
    double z = 0, acc = 0;
    for (uint32_t i = 0; i < n; i++)
        z += 1.0 / pow((double)i + 1, theta);
    for (uint32_t i = 0; i < n; i++) {
        acc += 1.0 / pow((double)i + 1, theta) / z;
        cdf[i] = acc;
    }
    cdf[n - 1] = 1.0;
}

/* The item a 64-bit random draw r picks: its top 53 bits as a uniform
 * u in [0, 1), the first item whose cdf reaches u. */
static inline uint32_t dsm_zipf_pick(const double *cdf, uint32_t n, uint64_t r)
{
    double u = (double)(r >> 11) * (1.0 / 9007199254740992.0);
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

#endif
