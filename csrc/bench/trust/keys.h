/* Key streams of the trust benchmark: a precomputed ring of RING object
 * indices per (object count, distribution), and the xorshift generator. */
#ifndef DSM_BENCH_TRUST_KEYS_H
#define DSM_BENCH_TRUST_KEYS_H

#include <stdint.h>

#define RING (1u << 20)

static inline uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* RING indices in [0, n): uniform, or zipf(1) with ranks scattered over the
 * objects (malloc'd; the caller frees). */
uint32_t *make_ring(uint32_t n, int zipf, uint64_t seed);

#endif
