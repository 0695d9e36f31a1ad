/* An owned value's slot in network memory (owned_var, an SST row): a value
 * of up to 8 bytes is one word, written and read whole; a larger one is
 * {u64 version, payload words, u64 checksum of version and payload}, so a
 * reader that sees a mix of two writes (pieces placed in any order) finds
 * the checksum wrong and reads again. A slot never written (all zero) reads
 * as zeros. Every word is accessed with relaxed 8-byte atomics: remote
 * writes land in it concurrently. */
#ifndef DSM_CHAN_SLOT_H
#define DSM_CHAN_SLOT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/mix.h"

static inline size_t chan_slot_words(size_t size) { return (size + 7) / 8; }
static inline size_t chan_slot_bytes(size_t size) { return size <= 8 ? 8 : 16 + 8 * chan_slot_words(size); }

static inline uint64_t chan_slot_sum(uint64_t version, const uint64_t *words, size_t n)
{
    uint64_t h = dsm_hash64(version ^ ((uint64_t)n << 48));
    for (size_t i = 0; i < n; i++) h = dsm_mix64(h ^ words[i]) + i;
    return h | 1;   /* never 0: an all-zero slot is "never written", not a value */
}

/* Write version's value src[0..size) into slot (this node's memory). */
static inline void chan_slot_write(uint8_t *slot, size_t size, uint64_t version, const void *src)
{
    uint64_t *w = (uint64_t *)(void *)slot;
    if (size <= 8) {
        uint64_t v = 0;
        memcpy(&v, src, size);
        __atomic_store_n(w, v, __ATOMIC_RELEASE);
        return;
    }
    size_t n = chan_slot_words(size);
    uint64_t payload[n];
    payload[n - 1] = 0;
    memcpy(payload, src, size);
    __atomic_store_n(&w[0], version, __ATOMIC_RELAXED);
    for (size_t i = 0; i < n; i++) __atomic_store_n(&w[1 + i], payload[i], __ATOMIC_RELAXED);
    __atomic_store_n(&w[1 + n], chan_slot_sum(version, payload, n), __ATOMIC_RELEASE);
}

/* Decode slot bytes (a local slot, or a copy fetched from a peer) into
 * dst[0..size): 1 if they are one write's value (or never written), 0 if
 * the checksum disagrees. *version (may be NULL) gets its version. */
static inline int chan_slot_read(const uint8_t *slot, size_t size, void *dst, uint64_t *version)
{
    const uint64_t *w = (const uint64_t *)(const void *)slot;
    if (size <= 8) {
        uint64_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        memcpy(dst, &v, size);
        if (version)
            *version = 0;
        return 1;
    }
    size_t n = chan_slot_words(size);
    uint64_t payload[n];
    uint64_t sum = __atomic_load_n(&w[1 + n], __ATOMIC_ACQUIRE);
    uint64_t ver = __atomic_load_n(&w[0], __ATOMIC_RELAXED);
    for (size_t i = 0; i < n; i++) payload[i] = __atomic_load_n(&w[1 + i], __ATOMIC_RELAXED);
    if (sum == 0 && ver == 0) {
        int zero = 1;
        for (size_t i = 0; i < n; i++) zero &= payload[i] == 0;
        if (zero) {
            memset(dst, 0, size);
            if (version)
                *version = 0;
            return 1;
        }
        return 0;
    }
    if (sum != chan_slot_sum(ver, payload, n))
        return 0;
    memcpy(dst, payload, size);
    if (version)
        *version = ver;
    return 1;
}

#endif
