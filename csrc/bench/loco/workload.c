/* dsm-bench-loco: the kvstore workload both sides run, the same operations
 * in the same order: keys drawn uniformly or by Zipf (theta 0.99) over the
 * filled keys, a share of them puts. */
#include <math.h>
#include <stdlib.h>

#include "bench/loco/loco.h"
#include "dsm/mix.h"

uint64_t loco_key(uint64_t i) { return dsm_hash64(i ^ 0x6c6f636f6b657973ull); }

static double unit(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

void loco_ops_make(loco_ops_t *o, size_t n, uint64_t nkeys, loco_dist_t d, int put_pct, uint64_t seed)
{
    o->n = n;
    o->key = malloc(n * sizeof *o->key);
    o->put = malloc(n);
    double *cdf = d == LOCO_ZIPF ? malloc(nkeys * sizeof *cdf) : NULL;
    if (!o->key || !o->put || (d == LOCO_ZIPF && !cdf))
        loco_die("workload", DSM_ERR_NOMEM);
    if (cdf) {
        double sum = 0;
        for (uint64_t k = 0; k < nkeys; k++) cdf[k] = sum += 1.0 / pow((double)(k + 1), 0.99);
        for (uint64_t k = 0; k < nkeys; k++) cdf[k] /= sum;
    }
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = unit(&s);
        uint64_t k;
        if (cdf) {
            uint64_t lo = 0, hi = nkeys - 1;
            while (lo < hi) {
                uint64_t mid = (lo + hi) / 2;
                if (cdf[mid] < u)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            /* the hot ranks spread over the keys, so over both nodes */
            k = dsm_hash64(lo) % nkeys;
        } else {
            k = (uint64_t)(u * (double)nkeys);
            if (k >= nkeys)
                k = nkeys - 1;
        }
        o->key[i] = k;
        o->put[i] = unit(&s) * 100.0 < put_pct;
    }
    free(cdf);
}

void loco_ops_free(loco_ops_t *o)
{
    free(o->key);
    free(o->put);
}
