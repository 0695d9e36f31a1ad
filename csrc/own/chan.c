/* Channels that carry global pointers (DRust §4.1.2): a channel lives at
 * its home node (the creator) as a FIFO of 64-bit items in the home's
 * process memory, named by an 8-byte heap slot there (the handle, coloured
 * OWN_CHAN_COLOUR). Items are sent and taken by request messages to the
 * home (none when the home is this node); nothing is serialised but the
 * pointer. Sending a box is an ownership transfer: the box travels as its
 * owner (DRust's owner is the pointer: the object's coloured address, with
 * its type and size); the sender's record dies (its handle is refused from
 * then on) and the receiver makes a record of its own (the handle it gets
 * names it). A box sent on a channel homed on its record's node keeps its
 * record instead: the record takes its next generation (the sender's
 * handle is refused just the same) and the item names it, so a receiver
 * there takes the handle as it is (a pipeline's hop on one node costs no
 * record work), and one elsewhere moves the record to itself. A plain
 * word (a directory object, any global address) travels as is. A receiver
 * polls the home with growing pauses until an item comes or its time is up,
 * serving its node's peers in the pauses (a send to its channel ends one);
 * an item is never handed to a receiver that stopped waiting. A posted
 * send does not wait for the home (DRust's channel is a one-way queue): a
 * home that refuses a posted item keeps it for its sender, whose flush
 * (after the posts on the same endpoint, so in order) takes it back. */
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "own/internal.h"
#include "own/place.h"
#include "own/place_msg.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG_MOD "own"
/* A home keeps at most REFUSED_MAX refused posts (a sender that never
 * flushes must not grow it without end). */
enum { CHAN_MAX_ITEMS = 1 << 20, REFUSED_MAX = 1 << 16 };

struct own_chan {
    uint64_t addr;            /* stripped handle */
    own_chan_item_t *ring;    /* the FIFO: n items from head, cap a power of two */
    uint32_t head, n, cap;
    own_chan_t *chain;
};

/* A posted item the home refused, until its sender flushes. */
struct own_refused {
    uint64_t chan;            /* stripped handle */
    uint32_t sender;          /* rank */
    dsm_status_t status;
    own_chan_item_t item;
    own_refused_t *next;
};

static unsigned cbucket(uint64_t a) { return (unsigned)((a >> 3) * 0x9e3779b1u) & (OWN_CHAN_BUCKETS - 1); }

/* Under p->lock. */
static own_chan_t **cfind(struct own_place *p, uint64_t addr)
{
    own_chan_t **pp = &p->chans[cbucket(addr)];
    while (*pp && (*pp)->addr != addr)
        pp = &(*pp)->chain;
    return pp;
}

static void chan_destroy(own_chan_t *c)
{
    free(c->ring);
    free(c);
}

void own_chans_destroy(struct own_place *p)
{
    for (unsigned b = 0; b < OWN_CHAN_BUCKETS; b++)
        while (p->chans[b]) {
            own_chan_t *c = p->chans[b];
            p->chans[b] = c->chain;
            chan_destroy(c);
        }
    while (p->refused) {
        own_refused_t *r = p->refused;
        p->refused = r->next;
        free(r);
    }
}

/* At the home: keep a refused posted item for its sender's flush. */
static void refused_keep(own_node_t *o, uint32_t sender, uint64_t chan, dsm_status_t status,
                         const own_chan_item_t *item)
{
    struct own_place *p = o->place;
    own_refused_t *r = malloc(sizeof *r);
    int kept = 0, nomem = r == NULL;
    if (r != NULL) {
        *r = (own_refused_t){.chan = dsm_gaddr_strip(chan), .sender = sender, .status = status, .item = *item};
        dsm_spin_lock(&p->lock);
        if (p->nrefused < REFUSED_MAX) {
            own_refused_t **pp = &p->refused;
            while (*pp)
                pp = &(*pp)->next;
            *pp = r;
            p->nrefused++;
            kept = 1;
        }
        dsm_spin_unlock(&p->lock);
        if (kept)
            return;
        free(r);
    }
    DSM_ERROR(LOG_MOD, "a post from rank %u refused on channel 0x%llx (%s) is lost: %s", sender,
              (unsigned long long)chan, dsm_strerror(status),
              nomem ? "no memory to keep it" : "the home keeps too many refused posts unflushed");
}

/* At the home: the oldest item kept for sender on chan, taken out (0: none). */
static int refused_take(own_node_t *o, uint32_t sender, uint64_t chan, dsm_status_t *status, own_chan_item_t *item)
{
    struct own_place *p = o->place;
    own_refused_t *r = NULL;
    dsm_spin_lock(&p->lock);
    for (own_refused_t **pp = &p->refused; *pp; pp = &(*pp)->next)
        if ((*pp)->sender == sender && (*pp)->chan == dsm_gaddr_strip(chan)) {
            r = *pp;
            *pp = r->next;
            p->nrefused--;
            break;
        }
    dsm_spin_unlock(&p->lock);
    if (r == NULL)
        return 0;
    *status = r->status;
    *item = r->item;
    free(r);
    return 1;
}

/* Under p->lock: room for one more item (the ring doubles, in order). */
static dsm_status_t ring_room(own_chan_t *c)
{
    if (c->n < c->cap)
        return DSM_OK;
    if (c->n >= CHAN_MAX_ITEMS)
        return DSM_ERR_TOO_BIG;
    uint32_t cap = c->cap ? c->cap * 2 : 16;
    own_chan_item_t *r = malloc(cap * sizeof *r);
    if (r == NULL)
        return DSM_ERR_NOMEM;
    for (uint32_t i = 0; i < c->n; i++)
        r[i] = c->ring[(c->head + i) & (c->cap - 1)];
    free(c->ring);
    c->ring = r;
    c->head = 0;
    c->cap = cap;
    return DSM_OK;
}

/* At the home: queue an item (no allocation but the ring's growth). */
static dsm_status_t home_push(own_node_t *o, uint64_t chan, const own_chan_item_t *item)
{
    struct own_place *p = o->place;
    dsm_spin_lock(&p->lock);
    own_chan_t *c = *cfind(p, dsm_gaddr_strip(chan));
    dsm_status_t st = c == NULL ? DSM_ERR_BAD_ADDR : ring_room(c);
    if (st == DSM_OK) {
        c->ring[(c->head + c->n) & (c->cap - 1)] = *item;
        c->n++;
    }
    dsm_spin_unlock(&p->lock);
    return st;
}

/* At the home: take the oldest item; *got 0 when there is none. */
static dsm_status_t home_pop(own_node_t *o, uint64_t chan, own_chan_item_t *item, int *got)
{
    struct own_place *p = o->place;
    dsm_status_t st = DSM_OK;
    *got = 0;
    dsm_spin_lock(&p->lock);
    own_chan_t *c = *cfind(p, dsm_gaddr_strip(chan));
    if (c == NULL)
        st = DSM_ERR_BAD_ADDR;
    else if (c->n > 0) {
        *item = c->ring[c->head];
        c->head = (c->head + 1) & (c->cap - 1);
        c->n--;
        *got = 1;
    }
    dsm_spin_unlock(&p->lock);
    return st;
}

void own_on_chan_send(void *ctx, const dsm_am_msg_t *msg)
{
    own_node_t *o = ctx;
    own_chan_msg_t m;
    dsm_status_t st = own_chan_decode(msg->data, msg->len, &m);
    if (st != DSM_OK || m.type != OWN_CHAN_SEND) {
        DSM_WARN(LOG_MOD, "malformed channel send from rank %u refused", msg->src_rank);
        st = DSM_ERR_PROTO;
    } else if (!own_is_local(o, m.chan))
        st = DSM_ERR_BAD_ADDR;
    else
        st = home_push(o, m.chan, &m.item);
    if (msg->request_id)
        (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
    else if (st != DSM_OK && st != DSM_ERR_PROTO)
        refused_keep(o, msg->src_rank, m.chan, st, &m.item);   /* posted: nobody waits for the answer */
}

void own_on_chan_recv(void *ctx, const dsm_am_msg_t *msg)
{
    own_node_t *o = ctx;
    own_chan_msg_t m;
    uint8_t item[OWN_CHAN_ITEM_LEN];
    size_t n = 0;
    dsm_status_t st = own_chan_decode(msg->data, msg->len, &m);
    if (st != DSM_OK || (m.type != OWN_CHAN_RECV && m.type != OWN_CHAN_FLUSH)) {
        DSM_WARN(LOG_MOD, "malformed channel recv from rank %u refused", msg->src_rank);
        st = DSM_ERR_PROTO;
    }
    /* Only a request can carry an item back: a one-way recv or flush takes nothing. */
    else if (m.type == OWN_CHAN_FLUSH) {
        own_chan_item_t it;
        dsm_status_t refusal;
        if (msg->request_id && refused_take(o, msg->src_rank, m.chan, &refusal, &it)) {
            own_chan_item_encode(&it, item);
            n = sizeof item;
            st = refusal;
        }
    } else if (!own_is_local(o, m.chan))
        st = DSM_ERR_BAD_ADDR;
    else if (msg->request_id) {
        own_chan_item_t it;
        int got = 0;
        st = home_pop(o, m.chan, &it, &got);
        if (st == DSM_OK && got) {
            own_chan_item_encode(&it, item);
            n = sizeof item;
        }
    }
    if (msg->request_id)
        (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, st, n ? item : NULL, n);
}

static dsm_status_t chan_check(own_node_t *o, dsm_own_chan_t chan)
{
    if (o == NULL)
        return DSM_ERR_STATE;
    uint64_t off = dsm_gaddr_offset(chan);
    if (dsm_gaddr_colour(chan) != OWN_CHAN_COLOUR || off == 0 || (off & 7)) {
        DSM_WARN(LOG_MOD, "0x%llx is not a channel", (unsigned long long)chan);
        return DSM_ERR_BAD_ADDR;
    }
    return DSM_OK;
}

/* Messages to a remote home: a request and its reply (2), or a post (1). */
static void count_msgs(own_node_t *o, uint64_t chan, uint64_t msgs, uint64_t bytes)
{
    if (!own_is_local(o, chan)) {
        own_count(o, C_MESSAGES, msgs);
        own_count(o, C_BYTES, bytes);
    }
}

dsm_status_t dsm_own_chan_new(dsm_node_t *node, dsm_own_chan_t *out)
{
    own_node_t *o = own_lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    if (o == NULL)
        return DSM_ERR_STATE;
    own_chan_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSM_ERR_NOMEM;
    dsm_gaddr_t a;
    dsm_status_t st = dsm_alloc(node, own_self(o), 8, &a);
    if (st != DSM_OK) {
        free(c);
        return st;
    }
    a = dsm_gaddr_strip(a);   /* the tag bits carry the channel colour instead */
    c->addr = a;
    struct own_place *p = o->place;
    dsm_spin_lock(&p->lock);
    own_chan_t **pp = cfind(p, a);
    c->chain = *pp;
    *pp = c;
    dsm_spin_unlock(&p->lock);
    *out = dsm_gaddr_with_colour(a, OWN_CHAN_COLOUR);
    return DSM_OK;
}

dsm_status_t dsm_own_chan_free(dsm_node_t *node, dsm_own_chan_t chan)
{
    own_node_t *o = own_lookup(node);
    dsm_status_t st = chan_check(o, chan);
    if (st != DSM_OK)
        return st;
    if (!own_is_local(o, chan))
        return DSM_ERR_INVALID;
    struct own_place *p = o->place;
    dsm_spin_lock(&p->lock);
    own_chan_t **pp = cfind(p, dsm_gaddr_strip(chan)), *c = *pp;
    uint32_t held = c ? c->n : 0;
    if (c && held == 0)
        *pp = c->chain;
    dsm_spin_unlock(&p->lock);
    if (c == NULL)
        return DSM_ERR_BAD_ADDR;
    if (held) {
        DSM_WARN(LOG_MOD, "free of channel 0x%llx refused: it holds %u items", (unsigned long long)chan, held);
        return DSM_ERR_STATE;
    }
    chan_destroy(c);
    return dsm_free(node, dsm_gaddr_strip(chan));
}

/* Queue an item at the channel's home: waiting for its answer, or posted
 * (one message; a refusal waits at the home for the sender's flush). */
static dsm_status_t push(own_node_t *o, dsm_own_chan_t chan, const own_chan_item_t *item, int posted)
{
    if (own_is_local(o, chan))
        return home_push(o, chan, item);
    own_chan_msg_t m = {.type = OWN_CHAN_SEND, .chan = chan, .item = *item};
    uint8_t buf[OWN_CHAN_MAX_LEN];
    size_t n = own_chan_encode(&m, buf), rl = 0;
    uint32_t home = dsm_gaddr_node(dsm_gaddr_strip(chan));
    count_msgs(o, chan, posted ? 1 : 2, n);
    if (posted)
        return dsm_fabric_am_send(o->fabric, home, DSM_AM_OWN_CHAN_SEND, buf, n);
    return dsm_fabric_am_request(o->fabric, home, DSM_AM_OWN_CHAN_SEND, buf, n, NULL, 0, &rl, 0);
}

/* A RECV or FLUSH request to chan's remote home: its status, and *got 1
 * with the item its reply carried. */
static dsm_status_t ask_home(own_node_t *o, dsm_own_chan_t chan, uint16_t type, own_chan_item_t *it, int *got)
{
    own_chan_msg_t m = {.type = type, .chan = chan};
    uint8_t buf[OWN_CHAN_MAX_LEN], item[OWN_CHAN_ITEM_LEN];
    size_t n = own_chan_encode(&m, buf), rl = 0;
    uint32_t home = dsm_gaddr_node(dsm_gaddr_strip(chan));
    count_msgs(o, chan, 2, n);
    dsm_status_t st = dsm_fabric_am_request(o->fabric, home, DSM_AM_OWN_CHAN_RECV, buf, n, item, sizeof item, &rl, 0);
    *got = 0;
    if (rl == 0)
        return st;
    own_count(o, C_BYTES, rl);
    dsm_status_t ds = own_chan_item_decode(item, rl, it);
    if (ds != DSM_OK) {
        DSM_WARN(LOG_MOD, "malformed channel item from rank %u", home);
        return ds;
    }
    *got = 1;
    return st;
}

static dsm_status_t pop(own_node_t *o, dsm_own_chan_t chan, own_chan_item_t *it, int *got)
{
    if (own_is_local(o, chan))
        return home_pop(o, chan, it, got);
    dsm_status_t st = ask_home(o, chan, OWN_CHAN_RECV, it, got);
    if (st != DSM_OK)
        *got = 0;   /* an item comes only with a take */
    return st;
}

static dsm_status_t send_word(dsm_node_t *node, dsm_own_chan_t chan, uint64_t word, int posted)
{
    own_node_t *o = own_lookup(node);
    dsm_status_t st = chan_check(o, chan);
    own_chan_item_t it = {.value = word, .kind = OWN_CHAN_WORD};
    return st != DSM_OK ? st : push(o, chan, &it, posted);
}

dsm_status_t dsm_own_chan_send_word(dsm_node_t *node, dsm_own_chan_t chan, uint64_t word)
{
    return send_word(node, chan, word, 0);
}

dsm_status_t dsm_own_chan_post_word(dsm_node_t *node, dsm_own_chan_t chan, uint64_t word)
{
    return send_word(node, chan, word, 1);
}

static dsm_status_t send_box(dsm_node_t *node, dsm_own_chan_t chan, dsm_own_box_t *box, int posted)
{
    own_node_t *o = own_lookup(node);
    if (box == NULL)
        return DSM_ERR_INVALID;
    dsm_status_t st = chan_check(o, chan);
    if (st != DSM_OK)
        return st;
    /* The transfer: the record retired to its next generation, or the
     * owner taken out of it (refused, and nothing changes, if the box is
     * borrowed, dropped or forged). */
    own_chan_item_t it = {.kind = OWN_CHAN_REC};
    st = own_is_local(o, chan) ? own_box_retag(o, *box, &it.value, &it.type, &it.size) : DSM_ERR_INVALID;
    if (st == DSM_ERR_INVALID) {
        it.kind = OWN_CHAN_BOX;
        st = own_box_take_owner(o, *box, &it.value, &it.type, &it.size);
    }
    if (st != DSM_OK)
        return st;
    if ((st = push(o, chan, &it, posted)) != DSM_OK) {
        if (it.kind == OWN_CHAN_REC) {
            *box = it.value;   /* still the sender's, under its new handle */
            return st;
        }
        /* Not queued: the owner comes back to the sender, under a new handle. */
        DSM_WARN(LOG_MOD, "send on channel 0x%llx failed: %s; the box stays with the sender",
                 (unsigned long long)chan, dsm_strerror(st));
        dsm_own_box_t back;
        *box = own_box_from_owner(o, it.value, it.type, it.size, &back) == DSM_OK ? back : 0;
        return st;
    }
    *box = 0;
    return DSM_OK;
}

dsm_status_t dsm_own_chan_send(dsm_node_t *node, dsm_own_chan_t chan, dsm_own_box_t *box)
{
    return send_box(node, chan, box, 0);
}

dsm_status_t dsm_own_chan_post(dsm_node_t *node, dsm_own_chan_t chan, dsm_own_box_t *box)
{
    return send_box(node, chan, box, 1);
}

dsm_status_t dsm_own_chan_flush(dsm_node_t *node, dsm_own_chan_t chan, dsm_own_box_t *box, uint64_t *word)
{
    if (box == NULL || word == NULL)
        return DSM_ERR_INVALID;
    *box = 0;
    *word = 0;
    own_node_t *o = own_lookup(node);
    dsm_status_t st = chan_check(o, chan);
    if (st != DSM_OK || own_is_local(o, chan))
        return st;   /* a post to a home here was pushed at once */
    own_chan_item_t it;
    int got;
    st = ask_home(o, chan, OWN_CHAN_FLUSH, &it, &got);
    if (!got)
        return st;
    if (st == DSM_OK || it.kind == OWN_CHAN_REC) {   /* an item comes back only with its refusal, never a record */
        DSM_WARN(LOG_MOD, "malformed refused item from rank %u", dsm_gaddr_node(dsm_gaddr_strip(chan)));
        return DSM_ERR_PROTO;
    }
    if (it.kind == OWN_CHAN_WORD) {
        *word = it.value;
        return st;
    }
    /* The box is the sender's again, under a new handle. */
    dsm_status_t ds = own_box_from_owner(o, it.value, it.type, it.size, box);
    if (ds != DSM_OK) {
        DSM_ERROR(LOG_MOD, "a box refused on channel 0x%llx came back, but no record could be made for it: %s",
                  (unsigned long long)chan, dsm_strerror(ds));
        return ds;
    }
    return st;
}

/* Poll until an item comes, the time is up or the caller's task is asked to stop. */
static dsm_status_t take(own_node_t *o, dsm_own_chan_t chan, uint32_t timeout_ms, own_chan_item_t *it)
{
    uint64_t deadline = 0;   /* set at the first empty poll: a queued item reads no clock */
    long pause_ns = 2000;
    const dsm_stop_t *stop = dsm_spawn_stop();
    for (;;) {
        int got = 0;
        dsm_status_t st = pop(o, chan, it, &got);
        if (st != DSM_OK || got)
            return st;
        if (dsm_stop_requested(stop))
            return DSM_ERR_CANCELLED;
        if (deadline == 0)
            deadline = dsm_deadline_ns(timeout_ms ? timeout_ms : 60000);
        else if (dsm_now_ns() > deadline)
            return DSM_ERR_TIMEOUT;
        (void)dsm_fabric_backoff(o->fabric, &pause_ns, 1000000);
    }
}

/* Take an item of `kind`; one of the other kind is queued again (at the back). */
static dsm_status_t take_kind(dsm_node_t *node, dsm_own_chan_t chan, uint32_t timeout_ms, uint32_t kind,
                              own_chan_item_t *it)
{
    own_node_t *o = own_lookup(node);
    dsm_status_t st = chan_check(o, chan);
    if (st != DSM_OK || (st = take(o, chan, timeout_ms, it)) != DSM_OK)
        return st;
    if ((it->kind == OWN_CHAN_WORD) != (kind == OWN_CHAN_WORD)) {
        int boxed = it->kind != OWN_CHAN_WORD;
        DSM_WARN(LOG_MOD, "receive on channel 0x%llx got a %s: use dsm_own_chan_recv%s", (unsigned long long)chan,
                 boxed ? "box" : "plain word", boxed ? "" : "_word");
        (void)push(o, chan, it, 0);
        return DSM_ERR_STATE;
    }
    return DSM_OK;
}

dsm_status_t dsm_own_chan_recv_word(dsm_node_t *node, dsm_own_chan_t chan, uint32_t timeout_ms, uint64_t *word)
{
    if (word == NULL)
        return DSM_ERR_INVALID;
    own_chan_item_t it = {0};
    dsm_status_t st = take_kind(node, chan, timeout_ms, OWN_CHAN_WORD, &it);
    *word = st == DSM_OK ? it.value : 0;
    return st;
}

/* The receiving end of the transfer: the record the item names, if it is
 * here; else a record here for the owner (taken out of the sender's record
 * first if the item names one: from then on the item carries the owner). */
static dsm_status_t box_from_item(own_node_t *o, own_chan_item_t *it, dsm_own_box_t *box)
{
    if (it->kind == OWN_CHAN_REC) {
        if (own_is_local(o, it->value)) {
            *box = it->value;
            return DSM_OK;
        }
        own_record_t r;
        dsm_status_t st = own_box_take(o, it->value, &r);
        if (st != DSM_OK)
            return st;
        *it = (own_chan_item_t){.kind = OWN_CHAN_BOX, .value = r.g, .type = r.type, .size = r.size};
    }
    return own_box_from_owner(o, it->value, it->type, it->size, box);
}

dsm_status_t dsm_own_chan_recv(dsm_node_t *node, dsm_own_chan_t chan, uint32_t timeout_ms, dsm_own_box_t *box)
{
    if (box == NULL)
        return DSM_ERR_INVALID;
    *box = 0;
    own_chan_item_t it = {0};
    dsm_status_t st = take_kind(node, chan, timeout_ms, OWN_CHAN_BOX, &it);
    if (st != DSM_OK)
        return st;
    own_node_t *o = own_lookup(node);
    if ((st = box_from_item(o, &it, box)) != DSM_OK) {
        DSM_WARN(LOG_MOD, "receive on channel 0x%llx: no record for the box here (%s); it stays queued",
                 (unsigned long long)chan, dsm_strerror(st));
        (void)push(o, chan, &it, 0);
    }
    return st;
}
