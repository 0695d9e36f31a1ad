/* dir's per-node state shared by its files: the node's copies (cache.c),
 * the directory of the objects it is home to and its transactions
 * (home.c), and the API (dir.c). */
#ifndef DSM_DIR_INTERNAL_H
#define DSM_DIR_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "dsm/dir.h"
#include "dsm/heap_sdk.h"
#include "dsm/fabric.h"
#include "dir/msg.h"

enum { DIR_BUCKETS = 4096, DIR_TIMEOUT_MS = 30000 };
enum { DIR_S = 1, DIR_M = 2 };   /* a copy's state (absent: I) */

enum {
    DC_MESSAGES, DC_BYTES, DC_HITS, DC_MISSES, DC_LOCAL, DC_MOVES, DC_INVALIDATIONS, DC_FREES, DC_DEFERRED, DC_HELD_BACK, DC_CHAINED, DC_COUNT
};

/* A node's copy of an object (or, at the home, its view of the home memory). */
typedef struct dir_copy {
    uint64_t addr;
    uint8_t *data;        /* whole object: header + payload */
    size_t len;
    int state;            /* DIR_S or DIR_M */
    long readers;
    int writer;
    int pending;          /* a request for it is in flight */
    int home;             /* data is the home memory itself (not owned) */
    /* The home's INV or RECALL that a borrow or the request in flight
     * holds back: answered when it ends (GAM queues it at the cacher). */
    int owed;             /* 0, DIR_MSG_INV or DIR_MSG_RECALL */
    int owed_mode;
    /* An INV came while the request was in flight: the data it brings
     * serves that borrow only (a later write may have been granted). */
    int stale;
    struct dir_copy *chain, *prev, *next;
} dir_copy_t;

/* A node's answer to its home's INV (ACK) or RECALL (DATA; an ACK means
 * "no copy here"), sent once no lock is held. */
typedef struct dir_answer {
    uint64_t addr;
    int type;             /* 0: none */
    uint8_t *data;        /* RECALL of a non-home copy: malloc'd object */
    size_t len;
} dir_answer_t;

/* Where this node's own transaction at its home learns its outcome. */
typedef struct dir_local {
    int done;             /* atomic */
    dsm_status_t st;
} dir_local_t;

/* A transaction at a home: the requester and how it is answered. */
typedef struct dir_txn {
    uint32_t who;
    uint64_t request_id;  /* a peer's request; 0 for this node's own */
    int op;               /* DIR_MSG_READ / WRITE / DROP */
    dir_local_t *local;   /* this node's own */
    struct dir_txn *next;
} dir_txn_t;

/* The home's directory entry of one object. */
typedef struct dir_entry {
    uint64_t addr;
    int state;            /* 0 (I), DIR_S, DIR_M */
    uint32_t owner;       /* DIR_M: the holder */
    uint64_t sharers[4];  /* DIR_S: a bit per rank */
    /* busy: a transaction waits for answers (the ranks in awaiting; the
     * owner's is a recall when recalling); later ones queue behind it */
    int busy, recalling;
    int asked;            /* the transaction asked another node (its requester waits for that round trip) */
    dir_txn_t txn;
    dsm_status_t txn_st;
    uint64_t awaiting[4];
    dir_txn_t *qhead, *qtail;
    struct dir_entry *chain;
} dir_entry_t;

/* Messages a home decided on under its lock, sent after it is let go (a
 * send takes the fabric's worker lock, which a handler already holds when
 * it takes the directory's). */
typedef struct dir_out {
    uint32_t rank;
    uint64_t request_id;  /* nonzero: a reply with status st */
    dsm_status_t st;
    uint64_t addr;        /* an INV or RECALL: its object */
    uint8_t *msg;
    size_t len;
} dir_out_t;
typedef struct dir_outbox {
    dir_out_t *v;
    size_t n, cap;
} dir_outbox_t;

typedef struct dir_node {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    /* copies (cache.c) */
    pthread_mutex_t clock;
    pthread_cond_t cdone;
    dir_copy_t *copies[DIR_BUCKETS];
    dir_copy_t *oldest, *newest;
    uint64_t budget, cbytes, centries, evictions;
    /* directory (home.c); lock order: dlock, then clock; no send under either */
    pthread_mutex_t dlock;
    dir_entry_t *entries[DIR_BUCKETS];
    uint64_t c[DC_COUNT];
} dir_node_t;

static inline void dir_count(dir_node_t *d, int which, uint64_t n)
{
    __atomic_fetch_add(&d->c[which], n, __ATOMIC_RELAXED);
}
/* One round trip: a request of `sent` bytes, a reply of `got` (counted
 * when it fit in cap). */
static inline void dir_count_round_trip(dir_node_t *d, size_t sent, size_t got, size_t cap)
{
    dir_count(d, DC_MESSAGES, 2);
    dir_count(d, DC_BYTES, sent + (got <= cap ? got : 0));
}
static inline unsigned dir_bucket(uint64_t a)
{
    a ^= a >> 29;
    a *= 0xbf58476d1ce4e5b9ull;
    a ^= a >> 32;
    return (unsigned)(a & (DIR_BUCKETS - 1));
}

/* cache.c: under clock */
dir_copy_t *dir_copy_find(dir_node_t *d, uint64_t addr);
dir_copy_t *dir_copy_insert(dir_node_t *d, uint64_t addr);
void dir_copy_remove(dir_node_t *d, dir_copy_t *c);
void dir_copy_evict(dir_node_t *d, uint64_t target);
/* Under clock: apply the home's INV or RECALL to this node's copy (home or
 * not) into *a, or, when a borrow or a request in flight holds the copy,
 * record it owed (returns 0; *a untouched). */
int dir_copy_answer(dir_node_t *d, uint64_t addr, int type, int mode, dir_answer_t *a);
/* Under clock: a borrow of c ended or its request came back: apply what is
 * owed if nothing holds the copy now (returns 1, *a to send). c may be
 * freed (an invalidated or spent stale copy). */
int dir_copy_settle(dir_node_t *d, dir_copy_t *c, dir_answer_t *a);
/* Without locks: deliver an answer to the object's home (this node's
 * directory directly) and free it. */
void dir_answer_send(dir_node_t *d, dir_answer_t *a);
void dir_on_cache(void *ctx, const dsm_am_msg_t *msg);
void dir_copies_free(dir_node_t *d);

/* home.c */
void dir_on_home(void *ctx, const dsm_am_msg_t *msg);
void dir_on_peer_dead(void *ctx, uint32_t rank);
/* This node's own transaction at its home (READ / WRITE / DROP on an
 * object homed here): queued behind a busy entry, asking other nodes as it
 * must, and waited for. On DSM_OK for READ or WRITE it holds the local
 * borrow (reader or writer) of the home copy. */
dsm_status_t dir_home_local(dir_node_t *d, int op, uint64_t addr);
/* An answer from rank `from` to this home's INV or RECALL of addr (data: a
 * recalled object, NULL for this node's own copy). */
void dir_home_answer(dir_node_t *d, uint32_t from, uint64_t addr, int type, const uint8_t *data, size_t len);
void dir_entries_free(dir_node_t *d);

/* dir.c: one round trip, counted; the reply is decoded into *rep (its data
 * pointing into *buf, malloc'd, the caller frees). `cap` is the expected
 * reply size; a longer reply costs the request once more. */
dsm_status_t dir_request(dir_node_t *d, uint32_t rank, uint16_t handler, const dir_msg_t *req, size_t cap,
                         dir_msg_t *rep, uint8_t **buf);
uint32_t dir_self(dir_node_t *d);

/* The directory's calls that only dir and its tests make (not exported). */
/* Attach between dsm_node_create and dsm_node_join, after the heap. */
dsm_status_t dsm_dir_attach(dsm_node_t *node);
/* Bytes of shared copies this node keeps unreferenced (default 64 MiB). */
dsm_status_t dsm_dir_set_cache_budget(dsm_node_t *node, uint64_t bytes);

#endif
