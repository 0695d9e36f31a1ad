/* ringbuffer: one sender broadcasts mixed-size messages to every other
 * participant's copy of the ring. A record at byte position pos (offset
 * pos % capacity) is {u64 header: length << 32 | sequence (low 32 bits)},
 * the payload padded to words, then {u64 trailer: sequence}, written as a
 * second put after the first on the same connection: placement within one
 * put is unordered (a chaos split places words in any order), across puts
 * on one connection it is not, so a receiver that sees the trailer sees
 * the whole payload. A record that would cross the end is preceded by a
 * SKIP header that sends the reader to the start. Sequences only grow, so
 * a header or trailer left from an earlier lap never matches. Receivers
 * put the position they consumed into the sender's "acks" region; the
 * sender waits while the slowest lags by the whole capacity. */
#include <stdlib.h>
#include <string.h>

#include "chan/internal.h"
#include "chan/ring.h"
#include "util/log.h"

enum { SKIP = 0xffffffffu };

struct dsm_chan_ring {
    dsm_chan_t *c;
    uint32_t sender;
    uint64_t cap;
    uint64_t pos, seq;      /* the next record's position and sequence */
    dsm_chan_ack_t acked;   /* a receiver's last ack put */
};

static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }
static uint64_t *word_at(const dsm_chan_ring_t *r, uint32_t region, uint64_t off)
{
    return (uint64_t *)(void *)(chan_local(r->c, region) + off);
}

dsm_status_t dsm_chan_ring_create(dsm_node_t *node, const char *name, uint32_t sender, size_t capacity,
                                  uint32_t timeout_ms, dsm_chan_ring_t **out)
{
    if (out == NULL || capacity < 256 || capacity % 8)
        return DSM_ERR_INVALID;
    dsm_chan_ring_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return DSM_ERR_NOMEM;
    dsm_chan_t *c = NULL;
    dsm_status_t st = dsm_chan_create(node, name, DSM_CHAN_RINGBUFFER, &c);
    if (st == DSM_OK) {
        static const char *const names[] = {"sender", "capacity"};
        const uint64_t shape[] = {sender, capacity};
        st = sender < c->npeers ? dsm_chan_set_shape(c, names, shape, 2) : DSM_ERR_INVALID;
        if (st == DSM_OK)
            st = dsm_chan_add_region(c, "ring", capacity, NULL);
        if (st == DSM_OK)
            st = dsm_chan_add_region(c, "acks", 8 * (size_t)c->npeers, NULL);
        st = chan_finish(c, st, timeout_ms);
    }
    if (st != DSM_OK) {
        free(r);
        return st;
    }
    *r = (dsm_chan_ring_t){.c = c, .sender = sender, .cap = capacity, .seq = 1};
    *out = r;
    return DSM_OK;
}

/* The position every receiver has consumed up to; *slow its index. */
static uint64_t min_acked(const dsm_chan_ring_t *r, uint32_t *slow)
{
    uint64_t min = UINT64_MAX;
    for (uint32_t p = 0; p < r->c->npeers; p++) {
        if (p == r->sender)
            continue;
        uint64_t a = __atomic_load_n(word_at(r, 1, 8 * (uint64_t)p), __ATOMIC_ACQUIRE);
        if (a < min) {
            min = a;
            *slow = p;
        }
    }
    return min == UINT64_MAX ? r->pos : min;
}

/* Write words [off, off+len) of this node's ring to every receiver's. */
static dsm_status_t spread(dsm_chan_ring_t *r, uint64_t off, uint64_t len, dsm_chan_ack_t *key)
{
    dsm_status_t st = DSM_OK;
    for (uint32_t p = 0; p < r->c->npeers && st == DSM_OK; p++)
        if (p != r->sender)
            st = dsm_chan_put_async(r->c, p, 0, off, chan_local(r->c, 0) + off, len, key);
    return st;
}

dsm_status_t dsm_chan_ring_send(dsm_chan_ring_t *r, const void *data, size_t len, uint32_t timeout_ms)
{
    dsm_chan_t *c = r->c;
    if (c->self != r->sender)
        return DSM_ERR_STATE;
    if (len == 0 || len > r->cap / 4)
        return DSM_ERR_INVALID;
    if (timeout_ms == 0)
        timeout_ms = chan_op_timeout(c);
    uint64_t rec = 16 + pad8(len), off = r->pos % r->cap;
    uint64_t need = rec + (off + rec > r->cap ? r->cap - off : 0);
    uint64_t deadline = dsm_deadline_ns(timeout_ms);
    long pause = 200;
    unsigned polls = 0;
    uint32_t slow = 0;
    uint64_t acked;
    while (r->pos + need - (acked = min_acked(r, &slow)) > r->cap) {
        if (dsm_now_ns() >= deadline) {
            DSM_ERROR(LOG_MOD,
                      "ringbuffer '%s': rank %u lags by the whole capacity (%llu bytes) for %u ms "
                      "(it acknowledged %llu bytes of the %llu sent)",
                      c->name, c->peers[slow].rank, (unsigned long long)r->cap, timeout_ms,
                      (unsigned long long)acked, (unsigned long long)r->pos);
            return DSM_ERR_TIMEOUT;
        }
        chan_pause(c->m->fabric, &polls, &pause, 100000);
    }
    dsm_chan_ack_t key = {{0}};
    dsm_status_t st = DSM_OK;
    if (off + rec > r->cap) {
        *word_at(r, 0, off) = (uint64_t)SKIP << 32 | (uint32_t)r->seq;
        st = spread(r, off, 8, &key);
        r->pos += r->cap - off;
        r->seq++;
        off = 0;
    }
    uint8_t *at = chan_local(c, 0) + off;
    *word_at(r, 0, off) = (uint64_t)len << 32 | (uint32_t)r->seq;
    memset(at + 8 + pad8(len) - 8, 0, 8);
    memcpy(at + 8, data, len);
    *word_at(r, 0, off + rec - 8) = r->seq;
    if (st == DSM_OK)
        st = spread(r, off, rec - 8, &key);
    if (st == DSM_OK)
        st = spread(r, off + rec - 8, 8, &key);
    dsm_status_t w = dsm_chan_ack_wait(&key);   /* the puts read this node's ring */
    r->pos += rec;
    r->seq++;
    return st != DSM_OK ? st : w;
}

int chan_ring_poll(dsm_chan_ring_t *r, void *buf, size_t cap, size_t *len)
{
    dsm_chan_t *c = r->c;
    for (;;) {
        uint64_t off = r->pos % r->cap;
        uint64_t hdr = __atomic_load_n(word_at(r, 0, off), __ATOMIC_ACQUIRE);
        if ((uint32_t)hdr != (uint32_t)r->seq)
            return 0;
        uint32_t l = (uint32_t)(hdr >> 32);
        if (l == SKIP) {
            r->pos += r->cap - off;
            r->seq++;
            continue;
        }
        if (l == 0 || l > r->cap / 4 || off + 16 + pad8(l) > r->cap) {
            DSM_ERROR(LOG_MOD, "ringbuffer '%s': a record of %u bytes at %llu does not fit", c->name, l,
                      (unsigned long long)off);
            return DSM_ERR_PROTO;
        }
        uint64_t rec = 16 + pad8(l);
        if (__atomic_load_n(word_at(r, 0, off + rec - 8), __ATOMIC_ACQUIRE) != r->seq)
            return 0;
        *len = l;
        if (l > cap)
            return DSM_ERR_TOO_BIG;
        memcpy(buf, chan_local(c, 0) + off + 8, l);
        r->pos += rec;
        r->seq++;
        return 1;
    }
}

dsm_status_t chan_ring_ack(dsm_chan_ring_t *r)
{
    /* one ack in flight at a time, in order on its connection */
    dsm_status_t st = dsm_chan_ack_wait(&r->acked);
    if (st == DSM_OK)
        st = dsm_chan_put_async(r->c, r->sender, 1, 8 * (uint64_t)r->c->self, &r->pos, 8, &r->acked);
    return st;
}

dsm_status_t dsm_chan_ring_recv(dsm_chan_ring_t *r, void *buf, size_t cap, size_t *len, uint32_t timeout_ms)
{
    dsm_chan_t *c = r->c;
    if (c->self == r->sender || len == NULL)
        return DSM_ERR_STATE;
    if (timeout_ms == 0)
        timeout_ms = chan_op_timeout(c);
    uint64_t deadline = dsm_deadline_ns(timeout_ms);
    long pause = 200;
    unsigned polls = 0;
    for (;;) {
        int got = chan_ring_poll(r, buf, cap, len);
        if (got < 0)
            return got;
        if (got)
            return chan_ring_ack(r);
        if (dsm_now_ns() >= deadline)
            return DSM_ERR_TIMEOUT;
        chan_pause(c->m->fabric, &polls, &pause, 100000);
    }
}

dsm_status_t chan_ring_ack_wait(dsm_chan_ring_t *r) { return dsm_chan_ack_wait(&r->acked); }

uint64_t chan_ring_sent(const dsm_chan_ring_t *r) { return r->pos; }

dsm_status_t chan_ring_wait_acked(dsm_chan_ring_t *r, uint64_t pos, uint32_t timeout_ms)
{
    dsm_chan_t *c = r->c;
    uint64_t deadline = dsm_deadline_ns(timeout_ms ? timeout_ms : chan_op_timeout(c));
    long pause = 200;
    unsigned polls = 0;
    uint32_t slow = 0;
    while (min_acked(r, &slow) < pos) {
        if (dsm_now_ns() >= deadline) {
            DSM_ERROR(LOG_MOD, "ringbuffer '%s': rank %u did not acknowledge within %u ms", c->name,
                      c->peers[slow].rank, timeout_ms ? timeout_ms : chan_op_timeout(c));
            return DSM_ERR_TIMEOUT;
        }
        chan_pause(c->m->fabric, &polls, &pause, 100000);
    }
    return DSM_OK;
}

void dsm_chan_ring_destroy(dsm_chan_ring_t *r)
{
    if (r == NULL)
        return;
    (void)dsm_chan_ack_wait(&r->acked);
    dsm_chan_destroy(r->c);
    free(r);
}
