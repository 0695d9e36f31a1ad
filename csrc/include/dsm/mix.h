/* 64-bit mixing (splitmix64's finaliser and generator): seeds, keys and
 * workload data from integers, the same everywhere so runs reproduce.
 *
 * Part of the SDK (dsm/sdk.h): header-only, so a plugin's keys and data
 * match the project's; libdsm's own files include them as util/mix.h. */
#ifndef DSM_MIX_H
#define DSM_MIX_H

#include <stdint.h>

#define DSM_MIX_GOLDEN 0x9e3779b97f4a7c15ull

/* A bijective finaliser: nearby inputs give unrelated outputs. */
static inline uint64_t dsm_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The first draw of the stream seeded with x: a hash of an integer. */
static inline uint64_t dsm_hash64(uint64_t x)
{
    return dsm_mix64(x + DSM_MIX_GOLDEN);
}

/* The next draw of a splitmix64 stream whose state is *s. */
static inline uint64_t dsm_splitmix64(uint64_t *s)
{
    return dsm_mix64(*s += DSM_MIX_GOLDEN);
}

#endif
