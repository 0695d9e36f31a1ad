/* dsm-bench-kv5: one key-value workload run by the five designs that share
 * the fabric and heap (own's and dir's kv, the delegation store, CoRM,
 * LOCO's kvstore). This header owns what the designs share: the cell (the
 * workload's parameters), the operation streams every design runs, the
 * sequential model a design's results are checked against, and one run's
 * outcome. */
#ifndef DSM_BENCH_KV5_H
#define DSM_BENCH_KV5_H

#include <stddef.h>
#include <stdint.h>

#include "harness/cluster.h"

enum { KV5_NODES = 3, KV5_VALUE_WORDS = 4 /* 32-byte values */, KV5_BUCKETS = 64 };

/* One cell of the grid: the same keys, skew and mix for every design. */
typedef struct kv5_cell {
    uint32_t keys;      /* a multiple of KV5_BUCKETS */
    double theta;       /* 0: uniform; 0.99: zipf */
    uint32_t get_pct;   /* 100, 95, 50 */
    uint64_t nops;      /* per node */
    uint64_t seed;
} kv5_cell_t;

/* One node's operations: key id, GET (1) or SET (0), and the SET's delta. */
typedef struct kv5_op {
    uint32_t id;
    uint8_t get;
    uint64_t delta;
} kv5_op_t;

/* The streams of a cell: node i runs ops[i][0..nops), the same stream
 * dsm_kvc_run draws for stream i (apps/kvc.c: seed, zipf cdf, mix). */
typedef struct kv5_streams {
    kv5_cell_t cell;
    kv5_op_t *ops[KV5_NODES];
    double *cdf;
} kv5_streams_t;

int kv5_streams_make(kv5_streams_t *s, const kv5_cell_t *cell);
void kv5_streams_free(kv5_streams_t *s);

/* A key's 8-byte name and initial value, as kvc's table holds them. */
uint64_t kv5_key(uint32_t id);
uint64_t kv5_initial(const kv5_cell_t *cell, uint32_t id);

/* Designs whose SET adds its delta (own, dir, deleg): the final value of
 * every key whatever the interleaving (the initial value plus its deltas),
 * into final[keys]; and kvc's checksum of that table. */
void kv5_model_adds(const kv5_streams_t *s, uint64_t *final);
uint64_t kv5_model_kvc_checksum(const kv5_streams_t *s, const uint64_t *final);

/* Designs whose SET puts a value (CoRM, LOCO): the value node `node`'s op i
 * writes (it names its key, so a GET can check what it read; node -1 and
 * i = -1: the key's initial value, which names it too), and whether
 * v may be key id's final value under some order of the nodes' operations
 * (the initial value if none wrote it, else one node's last write to it). */
uint64_t kv5_put_value(uint32_t id, int node, uint64_t i);
int kv5_put_names(uint64_t v, uint32_t id);
int kv5_final_ok(const kv5_streams_t *s, uint32_t id, uint64_t v);

/* What one run of a design measured: the nodes' operations over the
 * longest node's time, and the fabric counters summed over the nodes:
 * active messages sent (requests, replies, posts; over tcp the emulated
 * one-sided operations' requests and replies too), one-sided operations
 * issued (over shm loads and stores on a peer's mapping, no message), and
 * the bytes of each. */
typedef struct kv5_result {
    double ops, seconds, am, am_bytes, onesided, onesided_bytes;
    double wakeups;   /* a waiter's sleep on the worker, a progress thread's wake-up */
} kv5_result_t;

/* Run the streams from node i's thread each: fn(ctx, i) runs node i's
 * stream and returns 0 (or -1, a message printed). Times each thread and
 * counts the nodes' messages around the threads. */
int kv5_run_nodes(dsm_harness_t *c, int (*fn)(void *ctx, int i), void *ctx, kv5_result_t *out);

/* The designs: each builds its store on c's nodes and loads every key,
 * runs the streams, checks the outcome against the model, and takes the
 * store down; 0, or -1 with a message on stderr. */
int kv5_run_kvc(dsm_harness_t *c, const kv5_streams_t *s, const char *protocol, kv5_result_t *out);
int kv5_run_corm(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out);
int kv5_run_loco(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out);
int kv5_run_deleg(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out);
/* The harness hook that starts node i with every module and a delegation
 * runtime; kv5_deleg_destroy destroys the runtimes after the nodes. */
dsm_status_t kv5_deleg_attach(void *ctx, int i, dsm_node_t *node);
void kv5_deleg_close(void);
void kv5_deleg_destroy(void);
void kv5_corm_close(void);
void kv5_loco_close(void);

#endif
