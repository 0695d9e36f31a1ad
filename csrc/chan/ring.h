/* The ringbuffer's steps, for objects built on it (the kvstore's
 * trackers): a receiver may apply a message before it acknowledges it, and
 * a sender may wait until every receiver has acknowledged what it sent. */
#ifndef DSM_CHAN_RING_H
#define DSM_CHAN_RING_H

#include "chan/internal.h"

/* Receiver: the next message into buf[0..cap) without acknowledging it:
 * 1 (its length in *len), 0 if none is complete yet, DSM_ERR_TOO_BIG (not
 * consumed) or DSM_ERR_PROTO. */
int chan_ring_poll(dsm_chan_ring_t *r, void *buf, size_t cap, size_t *len);
/* Receiver: acknowledge everything polled so far. */
dsm_status_t chan_ring_ack(dsm_chan_ring_t *r);
/* Receiver: wait for its acks in flight (before its thread exits: they
 * live in the thread's operation table). */
dsm_status_t chan_ring_ack_wait(dsm_chan_ring_t *r);
/* Sender: the position after its last message. */
uint64_t chan_ring_sent(const dsm_chan_ring_t *r);
/* Sender: wait until every receiver acknowledged up to pos; DSM_ERR_TIMEOUT
 * naming the slowest after timeout_ms (0: the op timeout). */
dsm_status_t chan_ring_wait_acked(dsm_chan_ring_t *r, uint64_t pos, uint32_t timeout_ms);

#endif
