/* Fetch-and-add under locks on two threads: closed loop (throughput) or
 * open loop at a Poisson rate (latencies). */
#ifndef DSM_BENCH_TRUST_LOCK_RUN_H
#define DSM_BENCH_TRUST_LOCK_RUN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/trust/locks.h"

enum { L_MUTEX, L_SPIN, L_MCS, L_ATOMIC };
extern const char *lock_names[];

struct lock_run {
    int kind;
    lobj_t *objs;
    uint32_t *ring;
    _Atomic int go, stop;
    _Atomic uint64_t ops;
    uint64_t thread_ops[2]; /* each thread's count, written once as it ends */
    int pin;
    _Atomic unsigned next_idx; /* which core each thread takes */
    /* latency mode */
    double rate; /* per thread, ops/s; 0 = closed loop */
    uint64_t *lat;
    size_t nlat, caplat;
    pthread_mutex_t latmu;
};

/* Ops/s of `kind` over n objects in ring order for the run's duration; with
 * rate > 0 (per thread, ops/s) the latencies (ns) go to out_lat->lat/nlat
 * (the caller frees lat); *min_share (if not NULL): bench_min_share of the
 * two threads' operations. */
double run_locks(int kind, uint32_t n, uint32_t *ring, double rate, struct lock_run *out_lat, double *min_share);

#endif
