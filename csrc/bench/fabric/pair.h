/* How the fabric bench's processes (ours, and the raw-UCX floor's) meet:
 * pinning, and length-prefixed blobs over a socketpair (pair.c). */
#ifndef DSM_BENCH_FABRIC_PAIR_H
#define DSM_BENCH_FABRIC_PAIR_H

#include <stdint.h>

/* Pin the calling thread (and the threads it starts) to `cpu`; with fewer
 * cores than asked it says so and measures unpinned. */
void dsm_bench_pin(int cpu);
/* Send / receive one blob; exit(1) on a broken socket. The received blob is
 * malloc'd (free it). */
void dsm_bench_send_blob(int fd, const void *p, uint32_t len);
void *dsm_bench_recv_blob(int fd, uint32_t *len);

#endif
