/* dsm-bench-loco's parts: the in-process cluster and its chan objects
 * (objects.c), the kvstore workload shared by both sides (workload.c), the
 * Open MPI anchors (mpi_anchor.c) and the Redis anchor (redis.c). */
#ifndef DSM_BENCH_LOCO_H
#define DSM_BENCH_LOCO_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/chan_sdk.h"
#include "harness/cluster.h"

enum { LOCO_MAX_NODES = 3, LOCO_TXN_LOCKS = 64, LOCO_START_BALANCE = 1000 };

/* What a run measures: sizes and operation counts. */
typedef struct loco_params {
    dsm_transport_t transport;
    int nodes;
    int txn, kv;           /* whether to build the accounts and the kvstore */
    long barriers, lock_ops, txn_ops, accounts;
    uint32_t kv_slots;     /* per node; 80% of them filled */
    long kv_ops, fence_ops, rtt_ops;
    long kv_min_ms;        /* a kvstore cell's least time: its operations again until then */
} loco_params_t;

/* The cluster and, per node, its objects. */
typedef struct loco_cluster {
    dsm_harness_t k;
    loco_params_t p;
    dsm_chan_barrier_t *bar[LOCO_MAX_NODES];
    dsm_chan_lock_t *lock[LOCO_MAX_NODES];
    dsm_chan_region_t *word[LOCO_MAX_NODES];   /* the lock's protected word: node 0's first 8 bytes */
    dsm_chan_region_t *accts[LOCO_MAX_NODES];  /* account a on node a % nodes, at (a / nodes) * 8 */
    dsm_chan_lock_t *tlock[LOCO_MAX_NODES][LOCO_TXN_LOCKS];
    dsm_chan_kv_t *kv[LOCO_MAX_NODES];
    uint64_t nkeys;                            /* kvstore keys 0..nkeys-1 (loco_key names them) */
} loco_cluster_t;

void loco_die(const char *what, dsm_status_t st);
void loco_start(loco_cluster_t *c, const loco_params_t *p);
void loco_stop(loco_cluster_t *c);

/* Each returns the figure it measures. */
double loco_rtt_us(loco_cluster_t *c);              /* one 8-byte get, node 0 -> node 1 */
double loco_barrier_us(loco_cluster_t *c);          /* per barrier, every node */
double loco_lock_mops(loco_cluster_t *c);           /* acquire, get, put, release; every node */
double loco_txn_mops(loco_cluster_t *c);            /* transfers, every node; exits if money is lost */
/* an update of a key node 1 hosts, from node 0, with and without its fence */
void loco_fence_us(loco_cluster_t *c, double *with_us, double *without_us);
/* node 0 alone: an 8-byte put to node 1 and then a fence of each scope
 * (pair, thread, global), us per put and fence */
void loco_fence_scopes_us(loco_cluster_t *c, double us[3]);

/* ---- the kvstore workload (workload.c) --------------------------------- */

typedef enum { LOCO_UNIFORM = 0, LOCO_ZIPF = 1 } loco_dist_t;
typedef struct loco_ops {
    uint64_t *key;   /* key index 0..nkeys-1 */
    uint8_t *put;    /* 1: a write */
    size_t n;
} loco_ops_t;

/* The 8-byte key of index i (spread, so neither side sees dense keys). */
uint64_t loco_key(uint64_t i);
/* n operations over nkeys keys, puts with probability put_pct/100. */
void loco_ops_make(loco_ops_t *o, size_t n, uint64_t nkeys, loco_dist_t d, int put_pct, uint64_t seed);
void loco_ops_free(loco_ops_t *o);
/* LOCO's side: node 0 runs o, window operations at a time (a window's puts
 * in one dsm_chan_kv_put_many, then its gets in one dsm_chan_kv_get_many),
 * o again until min_ms have passed; Mops/s. */
double loco_kv_mops(loco_cluster_t *c, const loco_ops_t *o, size_t window, long min_ms);
/* The same, with one_by_one each put a dsm_chan_kv_put of its own (an
 * update's cost alone, for the counts beside put_many's). */
double loco_kv_mops_puts(loco_cluster_t *c, const loco_ops_t *o, size_t window, long min_ms, int one_by_one);

/* What one pass of o costs in counted events, per operation (puts as
 * loco_kv_mops_puts): messages the
 * client (node 0) and the serving node (node 1) sent and received, the
 * serving node's calls of the emulation's handler (one per request), the
 * client's requests that waited behind one in flight and the batches they
 * left in, the client's waits and its sleeps on the worker, the serving
 * progress thread's wake-ups and CPU time, and the process's context
 * switches (every thread's wake-up). */
typedef struct loco_kv_counts {
    double client_sent, client_recv, server_recv, server_sent, server_dispatches;
    double deferred, deferred_batches, client_waits, client_sleeps;
    double server_wakeups, server_cpu_us, ctx_switches;
    double us;   /* the pass's time per operation */
} loco_kv_counts_t;
void loco_kv_count(loco_cluster_t *c, const loco_ops_t *o, size_t window, int one_by_one, loco_kv_counts_t *out);

/* ---- anchors ------------------------------------------------------------- */

/* mpirun -np nodes dsm-mpi-loco MODE OPS [ACCOUNTS] over shm; 0 and the
 * printed figures, or -1 with the reason in why. */
int loco_mpi(int nodes, const char *mode, long ops, long accounts, double *us_per_op, double *mops, char *why,
             size_t cap);

typedef struct loco_redis loco_redis_t;
/* redis-server without persistence on a free loopback port, filled with
 * nkeys keys; NULL with the reason in why. */
loco_redis_t *loco_redis_start(uint64_t nkeys, char *why, size_t cap);
/* o over one connection, window commands pipelined at a time, o again
 * until min_ms have passed; Mops/s, or a negative value when the server
 * failed. */
double loco_redis_mops(loco_redis_t *r, const loco_ops_t *o, size_t window, long min_ms);
void loco_redis_stop(loco_redis_t *r);

#endif
