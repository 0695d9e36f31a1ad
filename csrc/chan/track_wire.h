/* The kvstore's tracker messages (kvstore.c): what a participant tells the
 * others' indexes, one record or a window's (delete_many) in one ring
 * message. Pure checked decoder, no I/O (fuzzed by
 * csrc/fuzz/fuzz_chan_track.c).
 *
 *   a message: n x {u64 op, u64 key, u64 host, u64 slot, u64 counter},
 *   1 <= n <= CHAN_TRACK_MAX, host-endian (the ring is this host's memory
 *   or a peer's of the same build)
 * op is INSERT or DELETE; host names a participant and slot one of its
 * slots; an insert's host is its sender (inserts land in the inserter's
 * slots). */
#ifndef DSM_CHAN_TRACK_WIRE_H
#define DSM_CHAN_TRACK_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

/* A ring message is at most a quarter of the tracker's 4096 bytes. */
enum { CHAN_TRACK_WORDS = 5, CHAN_TRACK_MAX = 4096 / 4 / (CHAN_TRACK_WORDS * 8) };
enum { CHAN_TRACK_INSERT = 1, CHAN_TRACK_DELETE = 2 };

typedef struct chan_track_rec {
    uint64_t op, key, counter;
    uint32_t host, slot;
} chan_track_rec_t;

/* The records of msg (len bytes) from participant `from` of a kvstore of
 * npeers participants with nslots slots each, into recs
 * (CHAN_TRACK_MAX of them); how many, or DSM_ERR_PROTO if the length or
 * any record is not one such a kvstore sends. */
int chan_track_decode(const void *msg, size_t len, uint32_t from, uint32_t npeers, uint32_t nslots,
                      chan_track_rec_t *recs);

#endif
