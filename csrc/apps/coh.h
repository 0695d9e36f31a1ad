/* One table of coherent-object operations per protocol, so a workload is
 * written once and run under own (DRust), dir (the directory baseline) or
 * local (plain process memory: the single-process original) by name; and
 * one table of locks per kind: "deleg" (own's mutex serialised by messages
 * at its home), "cas" (own's mutex taken by one-sided compare-and-swap),
 * and the original's: "local" (a pthread mutex), "spin" (a word of process
 * memory taken by exchange) or "boxed" (spin's word with its object's
 * pointer beside it, the original's Mutex<Box<T>>). Handles are 64-bit (a
 * box, a directory object, a pointer, a mutex). */
#ifndef DSM_APPS_COH_H
#define DSM_APPS_COH_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/dir.h"
#include "dsm/node.h"
#include "dsm/own_sdk.h"

typedef struct dsm_coh_ref {
    const void *data;
    size_t size;
    union {
        dsm_own_ref_t own;
        dsm_dir_ref_t dir;
    } u;
    dsm_own_guard_t guard;   /* lock_borrow's */
} dsm_coh_ref_t;

typedef struct dsm_coh_mut {
    void *data;
    size_t size;
    union {
        dsm_own_mut_t own;
        dsm_dir_mut_t dir;
    } u;
    dsm_own_guard_t guard;   /* lock_borrow_mut's */
} dsm_coh_mut_t;

/* The counters both protocols keep (local keeps none). */
typedef struct dsm_coh_stats {
    uint64_t messages, bytes, cache_hits, cache_misses, moves, invalidations;
    uint64_t held_back;   /* dir: a home's INV/RECALL held back while a borrow used the copy */
    uint64_t cache_evictions;   /* own: copies dropped past the node's cache budget */
    uint64_t chained_round_trips;   /* dir: round trips a home's INV/RECALL added to this node's waits */
} dsm_coh_stats_t;

typedef struct dsm_coh_ops {
    const char *name;
    /* A zero-filled object of `size` bytes homed on `node`. */
    dsm_status_t (*alloc)(dsm_node_t *node, uint32_t type, size_t size, uint64_t *h);
    dsm_status_t (*borrow)(dsm_node_t *node, uint64_t h, dsm_coh_ref_t *r);
    dsm_status_t (*release)(dsm_node_t *node, dsm_coh_ref_t *r);
    dsm_status_t (*borrow_mut)(dsm_node_t *node, uint64_t h, dsm_coh_mut_t *m);
    dsm_status_t (*release_mut)(dsm_node_t *node, dsm_coh_mut_t *m);
    dsm_status_t (*drop)(dsm_node_t *node, uint64_t h);
    void (*stats)(dsm_node_t *node, dsm_coh_stats_t *out);
    /* Mutex<Box<T>> (own and local, NULL for dir): object h moves into
     * `lock` (a lock whose kind guards: own's "deleg" or "cas" made on the
     * same node, the original's "boxed"), which frees it when freed;
     * *guarding_lock is the lock's handle from then on; its holder borrows
     * through the lock. */
    dsm_status_t (*adopt)(dsm_node_t *node, uint64_t lock, uint64_t h, uint64_t *guarding_lock);
    dsm_status_t (*lock_borrow)(dsm_node_t *node, uint64_t lock, dsm_coh_ref_t *r);
    dsm_status_t (*unlock_release)(dsm_node_t *node, dsm_coh_ref_t *r);
    dsm_status_t (*lock_borrow_mut)(dsm_node_t *node, uint64_t lock, dsm_coh_mut_t *m);
    dsm_status_t (*unlock_release_mut)(dsm_node_t *node, dsm_coh_mut_t *m);
} dsm_coh_ops_t;

typedef struct dsm_coh_lock_ops {
    const char *name;
    int process;   /* 1: a lock of process memory, the original's (protocol local only) */
    int guards;    /* 1: it can hold its object (the protocol's adopt): own's, and the original's "boxed" */
    /* A lock homed on `node`; freed on that node too. */
    dsm_status_t (*lock_new)(dsm_node_t *node, uint64_t *lock);
    dsm_status_t (*lock)(dsm_node_t *node, uint64_t lock);
    dsm_status_t (*unlock)(dsm_node_t *node, uint64_t lock);
    void (*lock_free)(dsm_node_t *node, uint64_t lock);
} dsm_coh_lock_ops_t;

/* "own", "dir" or "local"; NULL for any other name. */
const dsm_coh_ops_t *dsm_coh_ops(const char *name);
/* "deleg", "cas", "local" or "spin"; NULL for any other name. */
const dsm_coh_lock_ops_t *dsm_coh_locks(const char *name);

#endif
