/* The order a message gives, told to ThreadSanitizer: UCX is not
 * instrumented, so TSan cannot see that what a thread wrote before sending
 * is visible to the handler that receives it, and reports every object
 * handed over by a message (a box written on one node, read where a spawn
 * took it) as a race. A send releases on its destination rank's word, a
 * delivery acquires on its own; in other builds both are empty. Ranks of
 * clusters sharing a process share a word: that orders more than the
 * messages do, never less. */
#ifndef DSM_FABRIC_TSAN_HB_H
#define DSM_FABRIC_TSAN_HB_H

#include <stdint.h>

#if defined(__SANITIZE_THREAD__)
#define DSM_FABRIC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DSM_FABRIC_TSAN 1
#endif
#endif

#ifdef DSM_FABRIC_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char dsm_fabric_tsan_rank_word[256];
static inline void dsm_fabric_tsan_send(uint32_t rank) { __tsan_release(&dsm_fabric_tsan_rank_word[rank & 255]); }
static inline void dsm_fabric_tsan_deliver(uint32_t rank) { __tsan_acquire(&dsm_fabric_tsan_rank_word[rank & 255]); }
#else
static inline void dsm_fabric_tsan_send(uint32_t rank) { (void)rank; }
static inline void dsm_fabric_tsan_deliver(uint32_t rank) { (void)rank; }
#endif

#endif
