/* Key streams: uniform and zipf(1) rings of object indices. */
#include "bench/trust/keys.h"

#include <stdlib.h>

uint32_t *make_ring(uint32_t n, int zipf, uint64_t seed)
{
    uint32_t *r = malloc(RING * sizeof *r);
    if (!zipf) {
        for (uint32_t i = 0; i < RING; i++) r[i] = (uint32_t)(xs(&seed) % n);
        return r;
    }
    double *cdf = malloc((size_t)n * sizeof *cdf), sum = 0;
    for (uint32_t i = 0; i < n; i++) cdf[i] = (sum += 1.0 / (i + 1.0));
    for (uint32_t i = 0; i < RING; i++) {
        double u = (double)(xs(&seed) >> 11) / 9007199254740992.0 * sum;
        uint32_t lo = 0, hi = n - 1;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        /* scatter ranks so that popular objects are not neighbours */
        r[i] = (uint32_t)(((uint64_t)lo * 2654435761u) % n);
    }
    free(cdf);
    return r;
}
