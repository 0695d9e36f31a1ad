/* How the fabric bench's processes (ours, and the raw-UCX floor's) meet:
 * length-prefixed blobs over a socketpair, what our side publishes
 * of itself, and the echo our targets answer with (pair.c). */
#ifndef DSM_BENCH_FABRIC_PAIR_H
#define DSM_BENCH_FABRIC_PAIR_H

#include <stdint.h>

#include "dsm/fabric.h"

/* Send / receive one blob; exit(1) on a broken socket. The received blob is
 * malloc'd (free it). */
void dsm_bench_send_blob(int fd, const void *p, uint32_t len);
void *dsm_bench_recv_blob(int fd, uint32_t *len);
/* Send f's address, then region's key and base, as three blobs. */
void dsm_bench_publish(int fd, dsm_fabric_t *f, dsm_region_t *region);
/* A request answered with its own bytes (ctx: the fabric). */
void dsm_bench_echo_handler(void *ctx, const dsm_am_msg_t *msg);

#endif
