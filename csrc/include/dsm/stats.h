/* Per-node counters that experiments read: operations, bytes, messages by kind.
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_STATS_H
#define DSM_STATS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { DSM_AM_MAX_HANDLERS = 64 };

typedef struct dsm_stats {
    uint64_t gets;
    uint64_t puts;
    uint64_t atomics;
    uint64_t bytes_read;     /* payload of gets */
    uint64_t bytes_written;  /* payload of puts */
    uint64_t am_sent;
    uint64_t am_recv;
    uint64_t am_bytes_sent;
    uint64_t am_bytes_recv;
    uint64_t am_rejected;    /* malformed or unknown-handler messages dropped */
    uint64_t spawns_run;     /* spawned functions executed on this node */
    uint64_t errors;         /* operations that returned an error */
    uint64_t waits;          /* calls that waited on their own thread (ops, AM replies) */
    uint64_t wait_sleeps;    /* times such a waiter slept on the worker's event fd */
    uint64_t round_trips_waited; /* waits for a peer's answer: every request's reply, and a one-sided operation or flush that travels to the peer when its answer was not there as the wait began; the round trips this node's threads blocked on */
    uint64_t round_trip_wait_ns; /* the time those waits took, from the wait's start to its answer, while dsm_fabric_time_waits is on (over the waits then: the round trip this node's threads saw) */
    uint64_t round_trips_slept; /* those waits that slept on the worker's event fd before their answer came (each then paid its thread's wake-up) */
    uint64_t progress_wakeups; /* the blocking progress thread woke from its event fd and found work */
    uint64_t progress_empty_wakeups; /* ... and found none (tcp: a fd UCX left ready, each followed by a short pause; shm: mostly a signal of what a waiter took) */
    uint64_t progress_parks; /* the progress thread stood down for a waiter */
    uint64_t linger_backoffs; /* lingers skipped: hybrid, the host ran more threads than cores (samples in a row); adaptive, its budget was 0 */
    uint64_t linger_crowded; /* adaptive lingers a crowded host shortened but did not skip (each may cost a wake-up too) */
    uint64_t wait_spins_cut; /* waits for an answer that slept after a spin cut short (a crowded host, spins that rarely caught) */
    uint64_t wait_kicks;     /* sleepers woken because another thread's progress may have taken their answer */
    uint64_t progress_cpu_ns; /* CPU time the node's progress thread has used (serving peers) */
    uint64_t deferred;       /* emulated requests (tcp) that waited behind one in flight to their peer */
    uint64_t deferred_batches; /* the messages those left in */
    /* What the fabric's chaos mode (DSM_CHAOS) injected; all 0 when it is off. */
    uint64_t chaos_delayed;  /* messages sent after a drawn delay */
    uint64_t chaos_late;     /* one-sided writes completed before they were placed */
    uint64_t chaos_split;    /* writes placed as 8-byte pieces in random order */
    uint64_t chaos_dropped;  /* delayed items whose peer was gone when they were due */
    uint64_t chaos_defer_held;   /* batches of deferred requests sent after a drawn delay */
    uint64_t chaos_defer_opened; /* queues of deferred requests held open for a drawn time */
    uint64_t chaos_defer_early;  /* queues of deferred requests sent at once when one joined */
    /* Membership as this node's fabric saw it. */
    uint64_t endpoints_opened; /* UCX endpoints created (each may connect): peers, lanes, address probes */
    uint64_t peers_failed;   /* peers marked dead as failures (a fabric error, the coordinator's notice) */
    uint64_t peers_left;     /* peers marked gone as clean departures (the coordinator's LEFT) */
    uint64_t am_sent_by_handler[DSM_AM_MAX_HANDLERS];
    uint64_t am_recv_by_handler[DSM_AM_MAX_HANDLERS];
} dsm_stats_t;

#ifdef __cplusplus
}
#endif
#endif
