/* The memcached load generator of the trust benchmark: pipelined get/set
 * (zipf keys, 5% writes, 32 B values) over several connections, the same
 * for stock memcached and the delegation server. */
#ifndef DSM_BENCH_TRUST_LOADGEN_H
#define DSM_BENCH_TRUST_LOADGEN_H

#include <stdint.h>

/* Prefill nkeys keys, then run `seconds` with `depth` requests in flight per
 * connection; returns completed requests per second. */
double loadgen(uint16_t port, unsigned nconns, unsigned depth, uint32_t nkeys, double seconds);
/* A TCP port on 127.0.0.1 that was free a moment ago. */
uint16_t free_port(void);

#endif
