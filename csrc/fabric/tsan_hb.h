/* The order the fabric gives, told to ThreadSanitizer. UCX is not
 * instrumented, so TSan cannot see that what a thread wrote before sending
 * is visible to the handler that receives it, and reports every object
 * handed over by a message (a box written on one node, read where a spawn
 * took it) as a race. A send releases on its destination rank's word, a
 * delivery acquires on its own. Ranks of clusters sharing a process share a
 * word: that orders more than the messages do, never less.
 *
 * A peer's region mapped here (shm) is the owner's memory at a second
 * address, and TSan relates atomics by address: one through the mapping
 * also releases and acquires at the owner's address of the word, where
 * TSan sees the owner's own atomics (dsm_fabric_tsan_mapped_atomic,
 * declared in dsm/fabric.h for the layers that do their own). In other
 * builds all of this is empty. */
#ifndef DSM_FABRIC_TSAN_HB_H
#define DSM_FABRIC_TSAN_HB_H

#include <stdint.h>

#include "dsm/fabric.h"

#ifdef DSM_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char dsm_fabric_tsan_rank_word[256];
static inline void dsm_fabric_tsan_send(uint32_t rank) { __tsan_release(&dsm_fabric_tsan_rank_word[rank & 255]); }
static inline void dsm_fabric_tsan_deliver(uint32_t rank) { __tsan_acquire(&dsm_fabric_tsan_rank_word[rank & 255]); }
/* A mapping of `len` bytes at `mapped` of the region the owner has at
 * owner_base; dropped before it is unmapped. */
void dsm_fabric_tsan_map_add(const void *mapped, uint64_t len, uint64_t owner_base);
void dsm_fabric_tsan_map_drop(const void *mapped);
#else
static inline void dsm_fabric_tsan_send(uint32_t rank) { (void)rank; }
static inline void dsm_fabric_tsan_deliver(uint32_t rank) { (void)rank; }
static inline void dsm_fabric_tsan_map_add(const void *mapped, uint64_t len, uint64_t owner_base)
{
    (void)mapped;
    (void)len;
    (void)owner_base;
}
static inline void dsm_fabric_tsan_map_drop(const void *mapped) { (void)mapped; }
#endif

#endif
