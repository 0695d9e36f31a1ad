/* Fetch-and-add by delegation on two runtime threads: apply from many
 * fibers or apply_then with a window, shared or dedicated trustees, closed
 * loop or open loop at a Poisson rate (latencies). */
#ifndef DSM_BENCH_TRUST_DELEG_RUN_H
#define DSM_BENCH_TRUST_DELEG_RUN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dsm/deleg.h"

enum { D_APPLY, D_THEN };
struct deleg_run {
    int mode, dedicated;
    unsigned fibers, window;
    uint32_t *ring;
    uint32_t n;
    dsm_deleg_trust_t trusts[2];
    unsigned ntrustees;
    double t_end;
    _Atomic uint64_t ops;
    struct dfib *fibs[2]; /* per client thread, freed after the run */
    /* latency mode */
    double rate;
    uint64_t *lat;
    size_t nlat, caplat;
    pthread_mutex_t latmu;
};

struct dfib {
    struct deleg_run *r;
    uint32_t pos;
    uint64_t ops;
    unsigned inflight;
    _Atomic int *done;
};

/* Ops/s for `mode` over n objects in ring order; with rate > 0 the
 * latencies (ns) go to lat_out->lat/nlat (the caller frees lat);
 * *min_share (if not NULL): bench_min_share of the two client threads'
 * operations (shared trustees; a dedicated trustee has one client: -1). */
double run_deleg(int mode, int dedicated, uint32_t n, uint32_t *ring, double rate, struct deleg_run *lat_out,
                 double *min_share);

#endif
