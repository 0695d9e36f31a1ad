/* shared_queue (dsm/chan.h): head and tail words on a host participant,
 * slots striped over the participants (slot i on participant i % n, at
 * (i / n) * 16: {state, value}). A slot's state is (cycle << 1) | full;
 * the push of ticket t waits for (t / K) << 1 (the pop of ticket t - K
 * emptied it), puts the value and swaps in full; the pop of ticket t waits
 * for full, gets the value and swaps in the next cycle's empty. The value
 * put and the state swap go to the same rank in that order, so the value
 * is placed before the swap (a write is placed before a later atomic on
 * the same connection completes). Tickets are taken by CAS, never by a
 * blind fetch-add, so a pop on an empty queue and a push on a full one
 * take none and no ticket is left without its partner. */
#include <stdlib.h>

#include "chan/ids.h"
#include "chan/internal.h"
#include "util/log.h"

enum { HEAD = 0, TAIL = 8 };

struct dsm_chan_queue {
    dsm_chan_t *c;
    uint32_t host;
    uint64_t cap;
};

dsm_status_t dsm_chan_queue_create(dsm_node_t *node, const char *name, uint32_t capacity, uint32_t timeout_ms,
                                   dsm_chan_queue_t **out)
{
    if (out == NULL || name == NULL || capacity == 0)
        return DSM_ERR_INVALID;
    dsm_chan_queue_t *q = calloc(1, sizeof *q);
    if (q == NULL)
        return DSM_ERR_NOMEM;
    dsm_chan_t *c = NULL;
    dsm_status_t st = dsm_chan_create(node, name, DSM_CHAN_SHARED_QUEUE, &c);
    if (st == DSM_OK) {
        static const char *const names[] = {"capacity"};
        if ((st = dsm_chan_set_shape(c, names, &(uint64_t){capacity}, 1)) == DSM_OK)
            st = dsm_chan_add_region(c, "ctl", 16, NULL);
        if (st == DSM_OK)
            st = dsm_chan_add_region(c, "slots", 16 * (((size_t)capacity + c->npeers - 1) / c->npeers), NULL);
        st = chan_finish(c, st, timeout_ms);
    }
    if (st != DSM_OK) {
        free(q);
        return st;
    }
    q->c = c;
    q->host = 0;
    q->cap = capacity;
    *out = q;
    return DSM_OK;
}

/* Participant p's fabric offset of region r at `at`. */
static uint64_t where(const dsm_chan_t *c, uint32_t p, uint32_t r, uint64_t at)
{
    return (p == c->self ? c->regions[r].offset : chan_remote_off(c, p, r, 0)) + at;
}

static dsm_status_t ctl_get(dsm_chan_queue_t *q, uint64_t at, uint64_t *v)
{
    dsm_chan_t *c = q->c;
    return dsm_fabric_get(c->m->fabric, c->peers[q->host].rank, DSM_CHAN_REGION, where(c, q->host, 0, at), v, 8);
}

/* Take a ticket from `take` (HEAD for a pop, TAIL for a push) by CAS. A
 * push waits up to timeout_ms for room (then DSM_ERR_BUSY); a pop that
 * finds the queue empty waits up to timeout_ms for a value if `wait`,
 * else returns at once, *got = 0 either way. */
static dsm_status_t ticket(dsm_chan_queue_t *q, uint64_t take, int pop, int wait, uint64_t *t, int *got,
                           uint32_t timeout_ms)
{
    dsm_chan_t *c = q->c;
    uint64_t deadline = dsm_deadline_ns(timeout_ms);
    long pause = 200;
    unsigned polls = 0;
    *got = 0;
    for (;;) {
        uint64_t h, tl, old;
        dsm_status_t st = pop ? ctl_get(q, HEAD, &h) : ctl_get(q, TAIL, &tl);
        if (st == DSM_OK)
            st = pop ? ctl_get(q, TAIL, &tl) : ctl_get(q, HEAD, &h);
        if (st != DSM_OK)
            return st;
        /* Read in this order the first is the older: a stale head only
         * makes a pop see the queue emptier, a stale tail only makes a
         * push's CAS fail; a head past the stale tail is read again. */
        if (!pop && h > tl)
            continue;
        if (pop ? h >= tl : tl - h >= q->cap) {
            if ((pop && !wait) || dsm_now_ns() >= deadline)
                return pop ? DSM_OK : DSM_ERR_BUSY;
            chan_pause(c->m->fabric, &polls, &pause, 100000);
            continue;
        }
        uint64_t mine = pop ? h : tl;
        st = dsm_fabric_cas(c->m->fabric, c->peers[q->host].rank, DSM_CHAN_REGION, where(c, q->host, 0, take), mine,
                            mine + 1, &old);
        if (st != DSM_OK)
            return st;
        if (old == mine) {
            *t = mine;
            *got = 1;
            return DSM_OK;
        }
    }
}

/* Wait for slot t's state to be `want`, then do the slot's work. */
static dsm_status_t slot_wait(dsm_chan_queue_t *q, uint64_t t, uint64_t want, uint32_t timeout_ms)
{
    dsm_chan_t *c = q->c;
    uint64_t i = t % q->cap;
    uint32_t p = (uint32_t)(i % c->npeers);
    uint64_t deadline = dsm_deadline_ns(timeout_ms), state = 0;
    long pause = 200;
    for (;;) {
        dsm_status_t st = dsm_fabric_get(c->m->fabric, c->peers[p].rank, DSM_CHAN_REGION,
                                         where(c, p, 1, (i / c->npeers) * 16), &state, 8);
        if (st != DSM_OK || state == want)
            return st;
        if (dsm_now_ns() >= deadline) {
            DSM_ERROR(LOG_MOD, "shared_queue '%s': slot %llu at rank %u stayed in state %llu, not %llu, for %u ms",
                      c->name, (unsigned long long)i, c->peers[p].rank, (unsigned long long)state,
                      (unsigned long long)want, timeout_ms);
            return DSM_ERR_TIMEOUT;
        }
        dsm_fabric_backoff(c->m->fabric, &pause, 100000);
    }
}

/* The value word (put or get) then the state swap, on slot t. */
static dsm_status_t slot_do(dsm_chan_queue_t *q, uint64_t t, uint64_t *value, int put, uint64_t state)
{
    dsm_chan_t *c = q->c;
    uint64_t i = t % q->cap, old;
    uint32_t p = (uint32_t)(i % c->npeers);
    uint32_t rank = c->peers[p].rank;
    uint64_t at = where(c, p, 1, (i / c->npeers) * 16);
    dsm_status_t st = put ? dsm_fabric_put(c->m->fabric, rank, DSM_CHAN_REGION, at + 8, value, 8)
                          : dsm_fabric_get(c->m->fabric, rank, DSM_CHAN_REGION, at + 8, value, 8);
    if (st == DSM_OK)
        st = dsm_fabric_swap(c->m->fabric, rank, DSM_CHAN_REGION, at, state, &old);
    return st;
}

dsm_status_t dsm_chan_queue_push(dsm_chan_queue_t *q, uint64_t value, uint32_t timeout_ms)
{
    if (timeout_ms == 0)
        timeout_ms = chan_op_timeout(q->c);
    uint64_t t;
    int got;
    dsm_status_t st = ticket(q, TAIL, 0, 1, &t, &got, timeout_ms);
    if (st != DSM_OK)
        return st;
    /* Ticket taken: its slot frees within the op timeout (a pop of the
     * ticket a lap earlier is under way), whatever the caller's bound. */
    uint64_t cycle = t / q->cap;
    if ((st = slot_wait(q, t, cycle << 1, chan_op_timeout(q->c))) != DSM_OK)
        return st;
    return slot_do(q, t, &value, 1, cycle << 1 | 1);
}

static dsm_status_t pop(dsm_chan_queue_t *q, uint64_t *value, int *got, int wait, uint32_t timeout_ms)
{
    if (timeout_ms == 0)
        timeout_ms = chan_op_timeout(q->c);
    uint64_t t;
    dsm_status_t st = ticket(q, HEAD, 1, wait, &t, got, timeout_ms);
    if (st != DSM_OK || !*got)
        return st;
    uint64_t cycle = t / q->cap;
    if ((st = slot_wait(q, t, cycle << 1 | 1, chan_op_timeout(q->c))) != DSM_OK)
        return st;
    return slot_do(q, t, value, 0, (cycle + 1) << 1);
}

dsm_status_t dsm_chan_queue_pop(dsm_chan_queue_t *q, uint64_t *value, int *got, uint32_t timeout_ms)
{
    return pop(q, value, got, 0, timeout_ms);
}

dsm_status_t dsm_chan_queue_pop_wait(dsm_chan_queue_t *q, uint64_t *value, uint32_t timeout_ms)
{
    int got = 0;
    dsm_status_t st = pop(q, value, &got, 1, timeout_ms);
    return st == DSM_OK && !got ? DSM_ERR_TIMEOUT : st;
}

void dsm_chan_queue_destroy(dsm_chan_queue_t *q)
{
    if (q == NULL)
        return;
    dsm_chan_destroy(q->c);
    free(q);
}
