/* The CPU-server side of the managed heap (internal): the heap's state
 * (regions, page cache, handles, barrier queues, remembered sets, the MSCT
 * round) shared by cache.c (the page cache), mheap.c (the API, barriers,
 * remsets) and gc.c (collections). */
#ifndef DSM_MHEAP_CPU_H
#define DSM_MHEAP_CPU_H

#include <pthread.h>
#include <stdint.h>

#include "dsm/heap.h"
#include "dsm/mheap.h"
#include "mheap/layout.h"
#include "mheap/msg.h"
#include "mheap/trace.h"
#include "mheap/types.h"
#include "util/bytes.h"

/* ---- a set of nonzero u64 (open addressing) ---- */
typedef struct u64set {
    uint64_t *v;
    uint32_t cap, n;   /* cap a power of two or 0 */
} u64set_t;
int u64set_add(u64set_t *s, uint64_t x);   /* 1 added, 0 present, -1 no memory */
void u64set_clear(u64set_t *s);
void u64set_free(u64set_t *s);

/* ---- growable u64 array ---- */
typedef struct u64vec {
    uint64_t *v;
    size_t n, cap;
} u64vec_t;
int u64vec_push(u64vec_t *a, uint64_t x);

enum { PAGE_INIT = 0, PAGE_CACHED = 1, PAGE_EVICTED = 2 };
#define NO_PAGE UINT32_MAX

typedef struct page {
    uint32_t frame;
    uint8_t state, dirty;
    uint32_t prev, next;   /* LRU list of cached pages, head = most recent */
    uint64_t wb_seq;       /* the write-back that last changed the memory server's copy */
} page_t;

typedef struct region {
    uint32_t server, local;   /* which memory server, which region of its part */
    uint64_t start;           /* universal address */
    uint32_t bp, old_bp;
    int in_use;
    uint64_t *starts;         /* object starts, 1 bit per 8 bytes */
    u64set_t slots, targets;  /* remset: source queue (kept here), target queue (tracing roots) */
    uint32_t trace_epoch;     /* MSCT result of that epoch ... */
    int trace_ok;             /* ... is held by the memory server */
    uint64_t trace_live;
    dsm_mheap_rtrace_t ct;    /* cpu_marking: the CPU thread's trace (bitmap NULL until used) */
    uint32_t tams;            /* cpu_marking: top at mark start; objects above it are live to the marking */
} region_t;

/* A thread's barrier buffers for one heap. */
enum { TLQ_CAP = 256 };
typedef struct tlq {
    struct tlq *next;
    pthread_t owner;
    uint32_t ncard, nsatb;
    uint64_t card[TLQ_CAP][2];   /* (slot, target) */
    uint64_t satb[TLQ_CAP];
} tlq_t;

/* A full card buffer handed to the transfer thread. */
typedef struct cardbuf {
    struct cardbuf *next;
    uint32_t n;
    uint64_t e[TLQ_CAP][2];
} cardbuf_t;

/* One prepared MSCT request and its outcome. */
typedef struct trace_job {
    uint32_t region;
    dsm_writer_t req;
    dsm_status_t status;
    int ok;
    uint64_t live, traced;
} trace_job_t;

struct dsm_mheap {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    dsm_mheap_config_t cfg;
    uint32_t servers[DSM_MHEAP_MAX_SERVERS];
    dsm_gaddr_t chunk[DSM_MHEAP_MAX_SERVERS];
    uint32_t heap_id, serial;
    dsm_mheap_types_t *types;
    dsm_status_t dead;          /* sticky: a memory server died */

    pthread_mutex_t mu;         /* mutator operations and collections */
    /* The marker's turn at mu (mheap_lock_gc): while it waits, the mutator
     * lets it in before its next operation instead of re-taking mu at once. */
    pthread_mutex_t turn_mu;
    pthread_cond_t turn_cv;
    int mu_waiting;
    uint32_t region_bytes, region_shift, nregions, rps;   /* rps: regions per server */
    uint64_t part_bytes;
    region_t *regions;
    uint32_t alloc_region;      /* current bump region or UINT32_MAX */

    /* page cache */
    uint32_t npages, budget, ncached, lru_head, lru_tail;
    page_t *pages;
    uint8_t *frames;
    uint32_t *free_frames, nfree_frames;
    uint8_t *wb_stage;          /* a region's dirty pages, staged for one write batch */
    uint8_t *ra_buf;            /* swap-like readahead: the pages after a fault, read as one */
    uint32_t ra_last, ra_window;   /* the last page faulted in, the window the next contiguous fault reads */
    uint64_t wb_seq;            /* write-backs so far (page_t.wb_seq) */
    dsm_gaddr_t *wb_addrs;
    uint8_t *wb_page0;          /* page 0 of the region, without its header */
    /* The trace driver's write-back, sent outside the heap lock: its own
     * staging, and the region in flight (tw_region, UINT32_MAX if none),
     * whose pages no eviction may touch until it lands (tw_mu, tw_cv). */
    uint8_t *tw_stage, *tw_page0;
    dsm_gaddr_t *tw_addrs;
    uint32_t tw_region, tw_ndirty, tw_nstaged;
    pthread_mutex_t tw_mu;
    pthread_cond_t tw_cv;

    /* handles */
    uint64_t *handle_addr;
    uint8_t *handle_used;
    uint32_t nhandles, *handle_free, nhandle_free;

    /* barriers: thread buffers, the transfer thread, the SATB log */
    pthread_mutex_t tl_mu;      /* tlqs list, full buffers, SATB log */
    pthread_cond_t tl_cv, tl_idle;
    tlq_t *tlqs;
    cardbuf_t *full;
    int transfer_busy, transfer_stop;
    pthread_t transfer;
    u64vec_t satb_log;
    pthread_mutex_t rs_mu;      /* every region's remset */

    /* MSCT */
    uint32_t epoch;
    u64vec_t snap_roots;        /* handle addresses at the last collection */
    pthread_t msct;
    pthread_mutex_t msct_mu;
    pthread_cond_t msct_cv;
    int msct_stop, msct_running, msct_pending, msct_abort;
    trace_job_t *jobs;          /* the round in flight or done, of epoch jobs_epoch */
    uint32_t njobs, jobs_epoch;
    int async;                  /* traces are sent without waiting; TRACE_DONE answers (msct_done) */
    u64vec_t mark_stack;        /* cpu_marking: grey objects of the global marking (kept across young pauses) */
    u64vec_t mark_waiting;      /* ... and those set aside for pages the marker is reading */
    int mark_live;              /* cpu_marking: a marking is under way or complete, not yet used by a mixed pause */
    int mark_drained;           /* ... and its concurrent part reached the end of the grey stack */
    int mark_concurrent;        /* ... and it was started for the marker thread (not by a pause) */
    uint32_t mark_epoch;        /* cpu_marking: the marking's number; a region is in it if ct.epoch matches */
    uint32_t eden_regions;      /* cpu_marking: young regions that start a young pause */
    uint32_t promo_region;      /* cpu_marking: the old region the last pause evacuated into (or UINT32_MAX) */
    uint64_t mark_alloc0;       /* cpu_marking: bytes_allocated when the marking began */
    uint64_t mark_alloc;        /* ... and what the last one saw allocated until its end (adaptive IHOP) */
    struct {                    /* the one trace in flight (under msct_mu) */
        uint32_t rank, local, epoch;
        int waiting, done;
        dsm_mheap_msg_t rep;
    } inflight;

    int in_gc;
    u64vec_t pauses;            /* every collection's length (ns) */
    uint64_t trigger_bytes;     /* use that starts a collection (0: no trigger) */
    dsm_mheap_stats_t st;       /* counters (under mu, fabric bytes atomically) */
};

/* Collections evacuate region by region (a CSSC): on the memory servers,
 * or on the CPU server in the G1-like baseline. */
static inline int mheap_regional(const dsm_mheap_t *h) { return h->cfg.msct || h->cfg.cpu_marking; }

/* A young region: everything in it was allocated since the last
 * collection. */
static inline int region_young(const region_t *r)
{
    return r->in_use && r->old_bp <= DSM_MHEAP_REGION_HDR && r->bp > DSM_MHEAP_REGION_HDR;
}

static inline region_t *region_of(dsm_mheap_t *h, uint64_t a)
{
    if (a < DSM_MHEAP_UBASE)
        return NULL;
    uint64_t i = (a - DSM_MHEAP_UBASE) >> h->region_shift;
    return i < h->nregions ? &h->regions[i] : NULL;
}
static inline int bit_test(const uint64_t *b, uint64_t i) { return (b[i >> 6] >> (i & 63)) & 1; }
static inline void bit_on(uint64_t *b, uint64_t i) { b[i >> 6] |= 1ull << (i & 63); }
static inline void bit_off(uint64_t *b, uint64_t i) { b[i >> 6] &= ~(1ull << (i & 63)); }

/* Account bytes over the fabric (in GC too if a collection runs, or if the
 * calling thread does GC work: the trace driver, the marker). */
void mheap_fabric_bytes(dsm_mheap_t *h, uint64_t n);
/* n round trips to a memory server: counted if a pause is under way. */
void mheap_round_trips(dsm_mheap_t *h, uint64_t n);
/* Bytes over the fabric that the GC caused, from any thread. */
void mheap_gc_bytes(dsm_mheap_t *h, uint64_t n);
/* The calling thread works for the GC from now on (its bytes are GC bytes). */
void mheap_gc_thread(void);
/* Time since t0 added to phase ph (DSM_MHEAP_PHASE_*), from any thread;
 * returns now, the next phase's start. A fault's (an eviction's) time
 * goes to DSM_MHEAP_PHASE_FAULT (_EVICT) only when the program took it
 * (mheap_program_ns). */
uint64_t mheap_phase(dsm_mheap_t *h, int ph, uint64_t t0);
void mheap_program_ns(dsm_mheap_t *h, int ph, uint64_t t0);
/* The heap lock, taken fairly: the mutator's side (every API call), and
 * the marker's, which waits its turn and gives up (-1) when a pause asks
 * the marking to stop (msct_abort), since the pause holds the lock. */
void mheap_lock(dsm_mheap_t *h);
void mheap_unlock(dsm_mheap_t *h);
int mheap_lock_gc(dsm_mheap_t *h);
/* Wake a marker waiting in mheap_lock_gc (after msct_abort was set). */
void mheap_lock_kick(dsm_mheap_t *h);
dsm_status_t mheap_failed(dsm_mheap_t *h, dsm_status_t st);
/* The type of the object at a, its header read through the cache:
 * DSM_ERR_BAD_ADDR for a header that names no type or the wrong size. */
dsm_status_t mheap_object_type(dsm_mheap_t *h, uint64_t a, const dsm_mheap_tinfo_t **ti);

/* Bytes below the bump pointers of the regions in use. */
uint64_t mheap_used(dsm_mheap_t *h);
/* The use that starts the next collection, from gc_trigger_percent and what
 * is used now (after a collection). */
void mheap_retrigger(dsm_mheap_t *h);

/* ---- cache.c ---- */
dsm_status_t cache_init(dsm_mheap_t *h);
void cache_free(dsm_mheap_t *h);
dsm_status_t cache_read(dsm_mheap_t *h, uint64_t a, void *dst, size_t len);
dsm_status_t cache_write(dsm_mheap_t *h, uint64_t a, const void *src, size_t len);
dsm_status_t cache_load64(dsm_mheap_t *h, uint64_t a, uint64_t *v);
dsm_status_t cache_store64(dsm_mheap_t *h, uint64_t a, uint64_t v);
int cache_is_cached(dsm_mheap_t *h, uint64_t a);
int cache_is_init(dsm_mheap_t *h, uint64_t a);   /* never written back: reads as zeros */
/* Write back a region's dirty pages as one batch inside the tag bracket. */
dsm_status_t cache_writeback_region(dsm_mheap_t *h, region_t *r);
/* The same for the trace driver, without holding the heap lock across the
 * network: cache_trace_stage (lock held) copies the region's dirty pages
 * out and marks them in flight, and returns how many (0: nothing to send,
 * nothing in flight); cache_trace_send (no lock) sends them in the tag
 * bracket and lets waiting evictions go; cache_trace_written (lock held,
 * after a send that succeeded) marks clean the pages not written since.
 * Until then an eviction of any page of the region, and a fault of one
 * that is evicted, waits for the send, so neither an older copy overtakes
 * a newer one nor a read of the server meets the send's writes. */
uint32_t cache_trace_stage(dsm_mheap_t *h, region_t *r);
dsm_status_t cache_trace_send(dsm_mheap_t *h, region_t *r);
void cache_trace_written(dsm_mheap_t *h, region_t *r);
/* Tests only: called by cache_trace_send with region `region`'s pages
 * staged and about to be sent (no lock held); NULL for none. Process-wide. */
typedef void (*dsm_mheap_send_hook_t)(void *ctx, uint32_t region);
void dsm_mheap_set_send_hook(dsm_mheap_send_hook_t fn, void *ctx);
/* The same for several regions at once (in a pause): their write-backs in
 * flight together, a few round trips in all rather than a few per region. */
dsm_status_t cache_writeback_regions(dsm_mheap_t *h, region_t *const *rs, uint32_t nr);
/* A pause's write-back inside its control messages (the memory server
 * writes the pages in order with the requests after them, and traces
 * nothing meanwhile, so no tag bracket): the dirty pages of a region,
 * cache_pages_item adds them to a BATCH as one PAGES request;
 * cache_pages_written marks them clean once the BATCH was answered
 * (nothing dirties them in between: the pause holds the heap lock). */
uint32_t cache_dirty_pages(dsm_mheap_t *h, const region_t *r);
void cache_pages_item(dsm_mheap_t *h, const region_t *r, dsm_mheap_batch_t *b);
void cache_pages_written(dsm_mheap_t *h, const region_t *r);
/* Write back (if dirty) and drop every cached page of a region. */
dsm_status_t cache_evict_region(dsm_mheap_t *h, region_t *r);
dsm_status_t cache_evict_page(dsm_mheap_t *h, uint64_t a);
/* Faults taken outside the heap lock (the G1-like marker's, so that the
 * program runs while it waits for the pages): cache_fetch_plan, lock
 * held, for an evicted page: the pages to read (with readahead) and the
 * write-back count to check; cache_fetch_read without the lock reads the
 * pages of nf (at most CACHE_FETCH_MAX) plans as one batch, in flight
 * together, packed into buf in plan order; cache_fetch_install, lock held,
 * caches each page of a plan (from its place in buf) that is still
 * evicted and was not written back since the plan. */
typedef struct cache_fetch {
    uint32_t page, n;
    uint64_t seq;
} cache_fetch_t;
enum { CACHE_RA_MAX = 8 };      /* pages in the largest readahead window */
enum { CACHE_FETCH_MAX = 32 };   /* plans read as one batch */
int cache_is_evicted(dsm_mheap_t *h, uint64_t a);
void cache_fetch_plan(dsm_mheap_t *h, uint64_t a, cache_fetch_t *f);
dsm_status_t cache_fetch_read(dsm_mheap_t *h, const cache_fetch_t *f, uint32_t nf, uint8_t *buf);
dsm_status_t cache_fetch_install(dsm_mheap_t *h, const cache_fetch_t *f, const uint8_t *buf);
/* After a region's contents changed on its server: pages below bp become
 * Evicted (fetched on use), those above Init; cached copies are dropped. */
void cache_region_reset(dsm_mheap_t *h, region_t *r, uint32_t bp, int server_has_data);

/* ---- mheap.c ---- */
void remset_flush(dsm_mheap_t *h);
void remset_add_locked(dsm_mheap_t *h, uint64_t slot, uint64_t target);   /* rs_mu held */   /* every thread's and pending buffer into the remsets, SATB into the log */

/* ---- gc.c ---- */
dsm_status_t gc_collect(dsm_mheap_t *h, dsm_mheap_gc_t kind);
dsm_status_t gc_full(dsm_mheap_t *h);
/* An unsound trace (a reference to an object the collector did not keep):
 * logged, and the heap fails with DSM_ERR_STATE from then on. */
dsm_status_t mheap_unsound(dsm_mheap_t *h, const char *what, uint64_t addr);
/* Mark the heap on the CPU server through its cache, collect nothing: the
 * bytes of the reachable objects. */
dsm_status_t gc_mark_only(dsm_mheap_t *h, uint64_t *live_bytes);
dsm_status_t msct_start_locked(dsm_mheap_t *h);   /* prepare a round (heap lock held) and wake the driver */
dsm_status_t msct_wait(dsm_mheap_t *h);
void *msct_main(void *arg);
/* A TRACE_DONE of this heap from rank src (len bytes on the wire): wakes
 * the driver if it is the trace it waits for. Any thread; takes msct_mu. */
void msct_done(dsm_mheap_t *h, uint32_t src, const dsm_mheap_msg_t *m, size_t len);
/* One control request to memory server `server` (an index into the config's
 * list); the reply lands in rep[0..cap). No heap lock needed. */
dsm_status_t ctl_request(dsm_mheap_t *h, uint32_t server, const uint8_t *req, size_t len, uint8_t *rep,
                         size_t cap, size_t *rep_len);
/* One control request to each memory server s with len[s] > 0, all in
 * flight together (a pause waits one round trip for them, not one per
 * server); server s's reply lands in rep[s][0..cap[s]), its length in
 * rep_len[s]. The first failure, or DSM_OK. No heap lock needed. */
dsm_status_t ctl_request_all(dsm_mheap_t *h, const uint8_t *const *req, const size_t *len, uint8_t *const *rep,
                             const size_t *cap, size_t *rep_len);

/* Not exported: for the managed heap and its tests. */
/* Every object in the heap, in address order (an oracle's view; pulls
 * pages). The callback gets the address, type and payload. */
typedef void (*dsm_mheap_walk_fn)(void *ctx, dsm_mheap_addr_t addr, uint32_t type, const void *payload,
                                  uint32_t size);
dsm_status_t dsm_mheap_walk(dsm_mheap_t *heap, dsm_mheap_walk_fn fn, void *ctx);

#endif
