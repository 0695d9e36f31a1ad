/* The managed heap (Semeru): a heap of typed objects with reference fields
 * that lives on memory servers, is cached page by page on the CPU server (the
 * node that runs the program), and is traced and compacted on the memory
 * servers. The program holds objects only through handles (precise roots);
 * every field access goes through this API, which is where the page cache,
 * the write barriers and the SATB pre-write barrier live.
 *
 * Memory servers: every node started by dsm_start() serves the managed
 * heap; a CPU server names the ones it uses in its config and
 * takes its part of the universal range from each one's heap partition.
 *
 * Part of the SDK (dsm/sdk.h): a program reaches the managed heap through the semeru
 * workload, whose code calls
 * these. */
#ifndef DSM_MHEAP_H
#define DSM_MHEAP_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/node.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsm_mheap dsm_mheap_t;
/* A root: an index into the heap's handle table; 0 is no handle. A handle
 * holds one reference (or null); the collector updates it when the object
 * moves, so a handle stays valid across collections, an address does not. */
typedef uint32_t dsm_mheap_handle_t;
/* A universal address: the same on the CPU server and on every memory
 * server; 0 is null. */
typedef uint64_t dsm_mheap_addr_t;

enum {
    DSM_MHEAP_MAX_TYPES = 256,
    DSM_MHEAP_MAX_REFS = 64,          /* reference fields per type */
    DSM_MHEAP_MAX_SERVERS = 16,
    DSM_MHEAP_MIN_REGION = 1 << 20,   /* regions are 1..4 MiB, a power of two */
    DSM_MHEAP_MAX_REGION = 4 << 20,
    DSM_MHEAP_PAGE = 4096,            /* the cache's unit */
};

/* A type: `size` payload bytes, of which the 8-byte fields at ref_offsets
 * (multiples of 8, inside the payload, pairwise distinct) hold references.
 * Field offsets in the API are payload offsets. */
typedef struct dsm_mheap_type {
    uint32_t size;
    uint32_t nrefs;
    const uint32_t *ref_offsets;
} dsm_mheap_type_t;

typedef enum dsm_mheap_order {
    DSM_MHEAP_ORDER_DFS = 0,   /* survivors laid out depth first */
    DSM_MHEAP_ORDER_BFS = 1,
} dsm_mheap_order_t;

typedef struct dsm_mheap_config {
    const uint32_t *memory_servers;   /* ranks holding the heap, in address order */
    uint32_t nservers;
    uint64_t heap_bytes;              /* the whole universal range, split evenly */
    uint32_t region_bytes;            /* 0 = 1 MiB */
    uint32_t cache_percent;           /* CPU cache budget, % of heap_bytes (1..100; 0 = 100) */
    const dsm_mheap_type_t *types;    /* type ids are indices into this array */
    uint32_t ntypes;
    int msct;          /* 1: trace and compact on the memory servers; 0: a CPU-only baseline */
    int cpu_marking;   /* with msct 0: the G1-like baseline (a CPU thread marks region by region,
                        * concurrently, pulling pages through the cache; a pause evacuates the
                        * regions with garbage on the CPU server); 0: full GCs only */
    int msct_auto;     /* 1: a trace round starts after every collection (cpu_marking: a marking once
                        * the heap is 45% full, a young pause whenever eden is full); 0: only
                        * dsm_mheap_trace_start and collections */
    int satb;          /* 1: the SATB pre-write barrier (switch off only to show why it is needed) */
    dsm_mheap_order_t order;
    uint32_t handles;  /* handle table size (0 = 65536) */
    uint32_t fetch_delay_us;   /* added to every page fetch, to stand in for a slower device (NVMe-oF) */
    uint32_t gc_trigger_percent;   /* also collect (AUTO) when heap use passes this % of heap_bytes,
                                    * checked whenever allocation opens a region (0: only when
                                    * allocation finds no room, or on demand; 1..99) */
} dsm_mheap_config_t;

/* Defaults: no servers, 1 MiB regions, 100% cache, msct, msct_auto, satb, DFS,
 * no use trigger. */
DSM_API void dsm_mheap_config_init(dsm_mheap_config_t *config);

/* Create a heap used from this node (the CPU server). Validates the types
 * (DSM_ERR_INVALID for overlapping or misplaced reference fields), carves
 * heap_bytes / nservers from each memory server's partition (DSM_ERR_NOMEM,
 * with a log line, if the servers do not hold that much) and ships the types
 * to every server. */
DSM_API dsm_status_t dsm_mheap_create(dsm_node_t *node, const dsm_mheap_config_t *config, dsm_mheap_t **out);
/* Frees the heap here and on every live memory server. */
DSM_API void dsm_mheap_destroy(dsm_mheap_t *heap);

/* Handles. A new handle is null. */
DSM_API dsm_status_t dsm_mheap_handle_new(dsm_mheap_t *heap, dsm_mheap_handle_t *out);
DSM_API void dsm_mheap_handle_free(dsm_mheap_t *heap, dsm_mheap_handle_t handle);
/* dst = src (src 0 makes dst null). */
DSM_API dsm_status_t dsm_mheap_handle_set(dsm_mheap_t *heap, dsm_mheap_handle_t dst, dsm_mheap_handle_t src);
/* The object's current address (0 for null or a bad handle); it changes when
 * a collection moves the object. */
DSM_API dsm_mheap_addr_t dsm_mheap_addr(dsm_mheap_t *heap, dsm_mheap_handle_t handle);

/* Allocate a zeroed object of `type` into handle `dst`. May collect first. */
DSM_API dsm_status_t dsm_mheap_alloc(dsm_mheap_t *heap, uint32_t type, dsm_mheap_handle_t dst);
DSM_API dsm_status_t dsm_mheap_type_of(dsm_mheap_t *heap, dsm_mheap_handle_t obj, uint32_t *type);

/* Bytes of the payload. A write that covers a reference field is refused
 * (DSM_ERR_INVALID): references change only through store_ref/store_addr. */
DSM_API dsm_status_t dsm_mheap_read(dsm_mheap_t *heap, dsm_mheap_handle_t obj, uint32_t offset, void *dst,
                                    size_t len);
DSM_API dsm_status_t dsm_mheap_write(dsm_mheap_t *heap, dsm_mheap_handle_t obj, uint32_t offset,
                                     const void *src, size_t len);
/* Reference fields (offset must be one of the type's ref_offsets). */
DSM_API dsm_status_t dsm_mheap_load_ref(dsm_mheap_t *heap, dsm_mheap_handle_t obj, uint32_t offset,
                                        dsm_mheap_handle_t dst);
DSM_API dsm_status_t dsm_mheap_store_ref(dsm_mheap_t *heap, dsm_mheap_handle_t obj, uint32_t offset,
                                         dsm_mheap_handle_t value);
/* Store a raw address: refused (DSM_ERR_BAD_ADDR) unless it is 0 or the
 * start of an object of this heap. */
DSM_API dsm_status_t dsm_mheap_store_addr(dsm_mheap_t *heap, dsm_mheap_handle_t obj, uint32_t offset,
                                          dsm_mheap_addr_t value);

/* Collections. AUTO: what the allocator would do (a CSSC on the memory
 * servers, or on the CPU server with cpu_marking; a full GC if that frees
 * too little; the full-GC baseline always runs a full GC). */
typedef enum dsm_mheap_gc {
    DSM_MHEAP_GC_AUTO = 0,
    DSM_MHEAP_GC_CSSC = 1,   /* stop the world; memory servers (or the CPU server, cpu_marking) compact along the traces */
    DSM_MHEAP_GC_FULL = 2,   /* stop the world; the CPU server marks and compacts the whole heap */
} dsm_mheap_gc_t;
DSM_API dsm_status_t dsm_mheap_collect(dsm_mheap_t *heap, dsm_mheap_gc_t kind);
/* Start a round of memory-server tracing (MSCT) of every region in use,
 * from the roots of the last collection (with cpu_marking: the CPU
 * thread's marking); wait for it. */
DSM_API dsm_status_t dsm_mheap_trace_start(dsm_mheap_t *heap);
DSM_API dsm_status_t dsm_mheap_trace_wait(dsm_mheap_t *heap);
/* Trace the whole heap on the CPU server, from the handles through the
 * page cache (pulling what is not cached), and collect nothing: the bytes
 * of the reachable objects in *live_bytes. The CPU side of a like-for-like
 * tracing-throughput comparison with dsm_mheap_trace_start (the baseline's
 * way to trace). */
DSM_API dsm_status_t dsm_mheap_trace_cpu(dsm_mheap_t *heap, uint64_t *live_bytes);

/* Write back and drop from the CPU cache the page holding `obj`'s header
 * (or every cached page for obj 0), as the cache would under pressure. */
DSM_API dsm_status_t dsm_mheap_evict(dsm_mheap_t *heap, dsm_mheap_handle_t obj);

typedef struct dsm_mheap_stats {
    uint64_t heap_bytes, used_bytes, regions, regions_free;
    uint64_t objects_allocated, bytes_allocated;
    uint64_t cache_pages, cache_budget_pages;
    uint64_t page_faults, pages_fetched, pages_written_back, evictions, writeback_batches;
    uint64_t cssc_count, full_gc_count, regions_compacted, regions_freed;
    uint64_t regions_on_cpu;        /* regions a CSSC collected on the CPU server (mostly cached) */
    uint64_t regions_skipped;       /* regions a CSSC left alone: their trace found little garbage */
    uint64_t traces_ok, traces_discarded, traces_at_pause;
    uint64_t gc_ns, pause_max_ns;
    uint64_t fabric_bytes, fabric_bytes_gc;   /* page and message bytes this heap moved (caused by the GC, in
                                               * any phase: pauses, write-backs before a trace, trace
                                               * messages, the marker's fetches) */
    uint64_t barrier_entries, remset_slots, remset_targets, satb_logged;
    uint64_t bytes_traced_server;   /* bytes of objects the memory servers traced */
    uint64_t roots_lost;            /* handles whose object a compaction did not keep (an unsound trace) */
    uint64_t trigger_gcs;           /* collections started because use passed gc_trigger_percent */
    uint64_t pauses;                /* collections (stop-the-world pauses) so far */
    uint64_t regions_dead;          /* regions a CSSC freed without a message: their trace found nothing live */
    uint64_t regions_colocated;     /* regions a memory server evacuated into another one (co-location) */
    uint64_t ctl_requests;          /* control round trips to the memory servers (REMARK, EVAC, FIXUP batches ...) */
    uint64_t bytes_traced_cpu;      /* bytes of objects the G1-like baseline's CPU traced (concurrently, or in the pause that finished its marking) */
    uint64_t marks_started;         /* G1-like baseline: concurrent markings that ended (not those under way) */
    uint64_t marks_finished;        /* ... and those that reached their end concurrently (the rest ended in a pause) */
    uint64_t pages_readahead;       /* pages fetched by readahead (a fault contiguous with the last one) */
    uint64_t pause_round_trips;     /* round trips to the memory servers inside pauses: control requests,
                                     * fetch requests, write-back steps; requests in flight together count
                                     * once (the message-count view of GC time) */
    uint64_t young_pauses;          /* G1-like baseline: pauses that collected the young regions only */
    uint64_t mixed_pauses;          /* ... and those that also finished a marking and took old regions */
    /* Where the pauses' time went (ns, summed over pauses; gc_ns is about
     * their sum), and the GC work outside them: DSM_MHEAP_PHASE_*. */
    uint64_t phase_ns[16];
} dsm_mheap_stats_t;
/* The entries of dsm_mheap_stats_t.phase_ns. In a pause: */
enum {
    DSM_MHEAP_PHASE_CUT = 0,        /* stopping the concurrent work in flight (a server trace, a marker turn) */
    DSM_MHEAP_PHASE_REMSET = 1,     /* barrier queues flushed, remsets cleaned (SLOTS reads) */
    DSM_MHEAP_PHASE_WRITEBACK = 2,  /* dirty pages of the regions the servers collect written back */
    DSM_MHEAP_PHASE_REMARK = 3,     /* REMARK batches; G1-like: the marking finished, young regions marked */
    DSM_MHEAP_PHASE_LOCAL = 4,      /* regions traced and compacted on the CPU server (Task 3), dead ones freed */
    DSM_MHEAP_PHASE_EVAC = 5,       /* sources evicted and EVAC batches; G1-like: survivors copied */
    DSM_MHEAP_PHASE_FIXUP = 6,      /* handles, cached slots and FIXUPs, remsets merged */
    DSM_MHEAP_PHASE_FINISH = 7,     /* the next cycle's snapshot and the next round's (or marking's) start */
    DSM_MHEAP_PHASE_FULL = 8,       /* full GCs */
    /* Outside pauses (the trace driver or the G1-like marker): */
    DSM_MHEAP_PHASE_TRACE_WB = 9,   /* write-backs before a memory server's trace */
    DSM_MHEAP_PHASE_TRACE_WAIT = 10,/* a TRACE sent until its TRACE_DONE (the server's queue and trace) */
    DSM_MHEAP_PHASE_MARK = 11,      /* G1-like: the marker's turns at the heap lock */
    DSM_MHEAP_PHASE_MARK_READ = 12, /* G1-like: the marker's page reads */
    DSM_MHEAP_PHASE_FAULT = 13,     /* the program's page faults (outside pauses) */
    DSM_MHEAP_PHASE_EVICT = 14,     /* the program's write-backs of dirty victims (outside pauses) */
    DSM_MHEAP_PHASES = 15,
};
DSM_API void dsm_mheap_stats(dsm_mheap_t *heap, dsm_mheap_stats_t *out);
/* The length of every pause so far, oldest first, in ns: copies the first
 * min(cap, count) into out (out may be NULL when cap is 0) and returns the
 * count (stats.pauses). */
DSM_API size_t dsm_mheap_pauses(dsm_mheap_t *heap, uint64_t *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
