/* DRust's KV workload, written once over the coherent-object table
 * (apps/coh.h) and so runnable under own, dir, or local (the plain
 * single-process original): a hash table of bucket objects, one lock per
 * bucket, YCSB-style zipfian keys (theta 0.99 by default) and a GET/SET mix
 * (90/10 by default). A SET adds a delta to the key's value (under the
 * bucket's lock), so the final table does not depend on how the nodes'
 * streams interleave: its checksum equals the original's, which runs the
 * same streams one after the other. A GET checks its value is not torn. */
#ifndef DSM_APPS_KVC_H
#define DSM_APPS_KVC_H

#include <stdint.h>

#include "apps/coh.h"

typedef struct dsm_kvc_config {
    uint32_t buckets;       /* 64 */
    uint32_t slots;         /* per bucket, 8 */
    uint32_t keys;          /* at most buckets * slots; 256 */
    uint32_t value_words;   /* 8-byte words per value, 4 */
    uint32_t get_pct;       /* 90 */
    double theta;           /* zipf skew, 0.99 */
    uint64_t seed;
    uint32_t guard;         /* 1: each bucket lives in its lock (Mutex<Box<T>>)
                               where the protocol has it (own with an own lock); 1 */
    uint32_t timing;        /* 1: each operation's phases timed into the result's ns; 0 */
} dsm_kvc_config_t;

/* An operation's phases (timing = 1): taking the lock and the bucket,
 * the work on the bucket, giving both back. */
enum { DSM_KVC_T_ACQUIRE, DSM_KVC_T_WORK, DSM_KVC_T_RELEASE, DSM_KVC_T_COUNT };

typedef struct dsm_kvc_result {
    uint64_t gets, sets, not_found, torn;
    uint64_t ns[DSM_KVC_T_COUNT];   /* timing = 1: ns in each phase */
} dsm_kvc_result_t;

typedef struct dsm_kvc dsm_kvc_t;

enum { DSM_KVC_TYPE = 0x4b56 };   /* the bucket objects' type id ("KV") */

void dsm_kvc_config_default(dsm_kvc_config_t *cfg);
/* The bytes of one bucket object under cfg: `slots` entries of a key word
 * and `value_words` value words. */
size_t dsm_kvc_bucket_bytes(const dsm_kvc_config_t *cfg);
/* Build and load the table: bucket b (and its lock) lives on nodes[b %
 * nnodes] (local: nodes may hold NULLs). DSM_ERR_INVALID for a config that
 * does not fit. */
dsm_status_t dsm_kvc_create(const dsm_coh_ops_t *ops, const dsm_coh_lock_ops_t *locks,
                            const dsm_kvc_config_t *cfg, dsm_node_t *const *nodes, unsigned nnodes, dsm_kvc_t **out);
/* Drop every bucket and lock a table made by dsm_kvc_create holds, each on
 * its home node; a table made by dsm_kvc_new drops nothing (its buckets
 * belong to the nodes that created them: dsm_kvc_drop_bucket). */
void dsm_kvc_destroy(dsm_kvc_t *t);

/* A table spread over processes: every node makes a table with the same
 * config, creates its own buckets, and learns the others' handles. */
dsm_status_t dsm_kvc_new(const dsm_coh_ops_t *ops, const dsm_coh_lock_ops_t *locks, const dsm_kvc_config_t *cfg,
                         dsm_kvc_t **out);
dsm_status_t dsm_kvc_create_bucket(dsm_kvc_t *t, dsm_node_t *node, uint32_t b);
void dsm_kvc_get_bucket(const dsm_kvc_t *t, uint32_t b, uint64_t *bucket, uint64_t *lock);
dsm_status_t dsm_kvc_set_bucket(dsm_kvc_t *t, uint32_t b, uint64_t bucket, uint64_t lock);
dsm_status_t dsm_kvc_drop_bucket(dsm_kvc_t *t, dsm_node_t *node, uint32_t b);
/* Run operation stream `stream` (its keys and mix depend on the seed and
 * the stream only) for `nops` operations from `node`; adds to *res. */
dsm_status_t dsm_kvc_run(dsm_kvc_t *t, dsm_node_t *node, uint32_t stream, uint64_t nops, dsm_kvc_result_t *res);
/* One operation as a client saw it, for a linearizability check (pydsm's
 * checker reads it as a per-key counter: a GET reads it, a SET is a
 * fetch-and-add of delta): the key's id, its initial value, the value the
 * operation found, and its call and return times on CLOCK_MONOTONIC, which
 * every process on one host shares. Eight-byte words only: the driver reads
 * a node's records as an array of them. */
typedef struct dsm_kvc_record {
    uint64_t key, kind, initial, delta, seen, call_ns, return_ns;
} dsm_kvc_record_t;

enum { DSM_KVC_GET = 1, DSM_KVC_SET = 2 };

/* Record the next operations of dsm_kvc_run into history[0..cap) (NULL:
 * stop recording); dsm_kvc_recorded says how many were written. */
void dsm_kvc_record(dsm_kvc_t *t, dsm_kvc_record_t *history, uint64_t cap);
uint64_t dsm_kvc_recorded(const dsm_kvc_t *t);
/* An order-independent checksum of every key and value. */
dsm_status_t dsm_kvc_checksum(dsm_kvc_t *t, dsm_node_t *node, uint64_t *sum);

#endif
