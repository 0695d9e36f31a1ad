/* dir's per-node state shared by its files: the node's copies (cache.c),
 * the directory of the objects it is home to and the thread that serves
 * peers' requests (home.c), and the API (dir.c). */
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
    DC_MESSAGES, DC_BYTES, DC_HITS, DC_MISSES, DC_LOCAL, DC_MOVES, DC_INVALIDATIONS, DC_FREES, DC_DEFERRED, DC_BUSY, DC_COUNT
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
    struct dir_copy *chain, *prev, *next;
} dir_copy_t;

/* The home's directory entry of one object. */
typedef struct dir_entry {
    uint64_t addr;
    int state;            /* 0 (I), DIR_S, DIR_M */
    uint32_t owner;       /* DIR_M: the holder */
    uint64_t sharers[4];  /* DIR_S: a bit per rank */
    int busy;             /* a transaction waits for other nodes' answers: others wait for it */
    struct dir_entry *chain;
} dir_entry_t;

typedef struct dir_job {
    uint32_t src;
    uint64_t request_id;
    size_t len;
    struct dir_job *next;
    uint8_t data[];
} dir_job_t;

typedef struct dir_node {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    /* copies (cache.c) */
    pthread_mutex_t clock;
    pthread_cond_t cdone;
    dir_copy_t *copies[DIR_BUCKETS];
    dir_copy_t *oldest, *newest;
    uint64_t budget, cbytes, centries, evictions;
    /* directory (home.c); lock order: dlock, then clock */
    pthread_mutex_t dlock;   /* never held across a round trip */
    pthread_cond_t ecv;      /* an entry stopped being busy */
    dir_entry_t *entries[DIR_BUCKETS];
    /* the directory thread and its queue */
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    dir_job_t *qhead, *qtail;
    int stop, started;
    pthread_t worker;
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
/* Apply an INV or RECALL to this node's copy (home or not). On DSM_OK for a
 * recall of a non-home copy, *data and *len is a malloc'd copy of the object. */
dsm_status_t dir_copy_apply(dir_node_t *d, uint64_t addr, int type, int mode, uint8_t **data, size_t *len);
void dir_on_cache(void *ctx, const dsm_am_msg_t *msg);
void dir_copies_free(dir_node_t *d);

/* home.c */
dsm_status_t dir_home_start(dir_node_t *d);
void dir_home_stop(dir_node_t *d);
void dir_on_home(void *ctx, const dsm_am_msg_t *msg);
/* A transaction at this node, the home of addr, for requester `who`
 * (DIR_MSG_READ / WRITE / DROP). For who == this node it also takes the
 * local borrow (reader or writer) on the home copy. On DSM_OK for a remote
 * READ/WRITE, *reply holds a malloc'd DATA message of *reply_len bytes.
 * DSM_ERR_STATE: busy, ask again. With may_wait 0 (a progress handler) a
 * transaction that would wait (a busy entry, another node to ask) is left
 * untouched and *deferred set, for the directory thread. */
dsm_status_t dir_home_txn(dir_node_t *d, uint32_t who, int op, uint64_t addr, int may_wait, int *deferred,
                          uint8_t **reply, size_t *reply_len);
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
