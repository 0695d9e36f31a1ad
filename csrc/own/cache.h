/* The per-node read cache H of Algorithm 2: local copies of remote objects
 * keyed by their coloured global address, each with the number of live
 * shared references to it. A miss inserts a pending entry, fetches without
 * the lock (other readers of the same key wait for it), then publishes the
 * copy. Entries whose count is zero stay until the cache holds more bytes
 * than its budget; then the oldest-inserted zero-count entries are evicted
 * (lazy eviction). Pure: the fetch is a callback, so this is unit-testable
 * without a fabric. */
#ifndef DSM_OWN_CACHE_H
#define DSM_OWN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

typedef struct own_cache own_cache_t;

/* Fill buf[0..len) with the object at key; any error is passed on. */
typedef dsm_status_t (*own_fetch_fn)(void *ctx, uint64_t key, void *buf, size_t len);

dsm_status_t own_cache_create(uint64_t budget, own_cache_t **out);
void own_cache_destroy(own_cache_t *c);
void own_cache_set_budget(own_cache_t *c, uint64_t budget);

/* Take a reference to the copy of `key` (len bytes): *hit 1 if it was
 * there. On a miss fetch() fills a new copy; on its failure nothing stays
 * cached. *copy stays valid until the matching release. A hit on an entry
 * whose length differs is DSM_ERR_BAD_ADDR (a key names one object). */
dsm_status_t own_cache_acquire(own_cache_t *c, uint64_t key, size_t len, own_fetch_fn fetch, void *ctx,
                               const uint8_t **copy, int *hit);
/* Drop one reference; DSM_ERR_STATE if the key holds none. */
dsm_status_t own_cache_release(own_cache_t *c, uint64_t key);
/* Free the copy of `key` now if nothing references it (ownership transfer
 * and drop free the sender's copy); 1 if freed. */
int own_cache_forget(own_cache_t *c, uint64_t key);
/* Evict zero-count entries until at most `target` bytes stay; returns how
 * many were evicted. */
uint64_t own_cache_evict(own_cache_t *c, uint64_t target);
/* Entries, bytes held, evictions so far, and the count of one key (-1 if absent). */
void own_cache_usage(own_cache_t *c, uint64_t *entries, uint64_t *bytes, uint64_t *evictions);
long own_cache_count(own_cache_t *c, uint64_t key);

#endif
