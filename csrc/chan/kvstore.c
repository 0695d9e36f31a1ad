/* kvstore (dsm/chan.h, LOCO §6 and App. C): per-participant slot arrays in
 * network memory, a local index per node fed by the other participants'
 * tracker ringbuffers, ticket locks key % locks for every change, fenced
 * updates, and lookups that take no lock: the index, then one read of the
 * slot, again while its checksum disagrees.
 *
 * A slot is {key, value words, meta = counter << 1 | valid, sum}, the
 * value words holding the store's fixed-size value (8 bytes by default);
 * the sum covers the other words, so a read that sees pieces of two
 * writes (a chaos split places words in any order) retries. The counter grows at
 * every reuse of the slot, so an index entry left from before a delete
 * reads as a miss. Only lock holders change a key's slot and index entry,
 * and they wait for every participant's ack before they release, so under
 * its lock a key's index entry is the same on every node. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan/internal.h"
#include "chan/ring.h"
#include "chan/track_wire.h"
#include "util/log.h"
#include "util/mix.h"
#include "util/thread.h"

/* A tracker message is up to MSG_MAX records of MSG_WORDS words
 * (track_wire.h). */
enum { TRACKER_BYTES = 4096, MSG_WORDS = CHAN_TRACK_WORDS, MSG_MAX = CHAN_TRACK_MAX };
/* A slot's most words: key, DSM_CHAN_KV_MAX_VALUE of value, meta, sum. */
enum { SLOT_MAX_WORDS = 3 + DSM_CHAN_KV_MAX_VALUE / 8 };
enum { OP_INSERT = CHAN_TRACK_INSERT, OP_DELETE = CHAN_TRACK_DELETE };

typedef struct kv_entry {
    uint64_t key, counter;
    uint32_t host, slot;
    uint32_t used;
} kv_entry_t;

struct dsm_chan_kv {
    dsm_chan_t *c;              /* region 0: this node's slots */
    uint32_t nslots, nlocks;
    size_t vsize;               /* a value's bytes */
    uint32_t vwords, words;     /* a value's words, a slot's (vwords + 3) */
    dsm_chan_lock_t **locks;
    dsm_chan_ring_t **trackers; /* one per participant, its sender */
    pthread_mutex_t send;       /* this node's tracker has one sender thread at a time */
    pthread_rwlock_t index_lock;
    kv_entry_t *index;
    uint64_t mask, count;
    pthread_mutex_t free_lock;
    uint32_t *free, nfree;
    uint32_t settle_ms;
    int fence;
    int stop;
    dsm_status_t broken;        /* the tracker thread met a bad message and stopped */
    pthread_t thread;
    int started;
};

/* ---- slots ------------------------------------------------------------------ */

/* A slot's words: w[0] key, w[1..vwords] value, w[meta(kv)], w[sum]. */
static uint32_t meta_at(const dsm_chan_kv_t *kv) { return kv->vwords + 1; }
static uint64_t slot_bytes(const dsm_chan_kv_t *kv) { return (uint64_t)kv->words * 8; }

static uint64_t slot_sum(const dsm_chan_kv_t *kv, const uint64_t *w)
{
    uint64_t h = dsm_hash64(w[0] ^ 0x6b7673746f7265ull);
    for (uint32_t i = 1; i <= meta_at(kv); i++) h = dsm_mix64(h ^ w[i]) + i;
    return h | 1;   /* never 0: a never-written slot is not a value */
}

static void slot_make(const dsm_chan_kv_t *kv, uint64_t *w, uint64_t key, const void *value, uint64_t counter,
                      int valid)
{
    w[0] = key;
    w[kv->vwords] = 0;   /* a value's tail past its bytes */
    if (value)
        memcpy(&w[1], value, kv->vsize);
    else
        memset(&w[1], 0, kv->vsize);
    w[meta_at(kv)] = counter << 1 | (uint64_t)(valid != 0);
    w[meta_at(kv) + 1] = slot_sum(kv, w);
}

static uint64_t *local_slot(const dsm_chan_kv_t *kv, uint32_t s)
{
    return (uint64_t *)(void *)(chan_local(kv->c, 0) + (uint64_t)s * slot_bytes(kv));
}

/* Write slot s of participant host (this node's: stores, the sum last;
 * another's: one put, complete on return but not necessarily placed). */
static dsm_status_t slot_write(dsm_chan_kv_t *kv, uint32_t host, uint32_t s, const uint64_t *w)
{
    if (host == kv->c->self) {
        uint64_t *m = local_slot(kv, s);
        for (uint32_t i = 0; i + 1 < kv->words; i++) __atomic_store_n(&m[i], w[i], __ATOMIC_RELAXED);
        __atomic_store_n(&m[kv->words - 1], w[kv->words - 1], __ATOMIC_RELEASE);
        return DSM_OK;
    }
    dsm_chan_ack_t key = {{0}};
    dsm_status_t st = dsm_chan_put_async(kv->c, host, 0, (uint64_t)s * slot_bytes(kv), w, slot_bytes(kv), &key);
    dsm_status_t w8 = dsm_chan_ack_wait(&key);
    return st != DSM_OK ? st : w8;
}

/* This node's slot s into w, the sum first (a write stores it last). */
static void slot_load(const dsm_chan_kv_t *kv, uint32_t s, uint64_t *w)
{
    const uint64_t *m = local_slot(kv, s);
    w[kv->words - 1] = __atomic_load_n(&m[kv->words - 1], __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i + 1 < kv->words; i++) w[i] = __atomic_load_n(&m[i], __ATOMIC_RELAXED);
}

static int slot_settled(const dsm_chan_kv_t *kv, const uint64_t *w) { return w[kv->words - 1] == slot_sum(kv, w); }

/* Read slot s of participant host: 1 if its checksum agrees, 0 if not. */
static int slot_read(dsm_chan_kv_t *kv, uint32_t host, uint32_t s, uint64_t *w, dsm_status_t *st)
{
    *st = DSM_OK;
    if (host == kv->c->self) {
        slot_load(kv, s, w);
    } else {
        dsm_chan_ack_t key = {{0}};
        *st = dsm_chan_get_async(kv->c, host, 0, (uint64_t)s * slot_bytes(kv), w, slot_bytes(kv), &key);
        dsm_status_t w8 = dsm_chan_ack_wait(&key);
        if (*st == DSM_OK)
            *st = w8;
        if (*st != DSM_OK)
            return 0;
    }
    return slot_settled(kv, w);
}

/* The value and whether the settled slot w is key's live entry e. */
static int slot_hit(const dsm_chan_kv_t *kv, const uint64_t *w, uint64_t key, uint64_t counter, void *value)
{
    if (w[0] != key || w[meta_at(kv)] != (counter << 1 | 1))
        return 0;
    memcpy(value, &w[1], kv->vsize);
    return 1;
}

/* ---- the local index: linear probing, deletion by backward shift -------- */

static uint64_t home(const dsm_chan_kv_t *kv, uint64_t key) { return dsm_hash64(key) & kv->mask; }

static kv_entry_t *index_find(dsm_chan_kv_t *kv, uint64_t key)
{
    for (uint64_t i = home(kv, key);; i = (i + 1) & kv->mask) {
        if (!kv->index[i].used)
            return NULL;
        if (kv->index[i].key == key)
            return &kv->index[i];
    }
}

static void index_set(dsm_chan_kv_t *kv, uint64_t key, uint32_t host, uint32_t slot, uint64_t counter)
{
    pthread_rwlock_wrlock(&kv->index_lock);
    uint64_t i = home(kv, key);
    while (kv->index[i].used && kv->index[i].key != key) i = (i + 1) & kv->mask;
    if (!kv->index[i].used)
        kv->count++;
    kv->index[i] = (kv_entry_t){.key = key, .counter = counter, .host = host, .slot = slot, .used = 1};
    pthread_rwlock_unlock(&kv->index_lock);
}

/* Remove key's entry if it still names (host, slot, counter). */
static void index_remove(dsm_chan_kv_t *kv, uint64_t key, uint32_t host, uint32_t slot, uint64_t counter)
{
    pthread_rwlock_wrlock(&kv->index_lock);
    kv_entry_t *e = index_find(kv, key);
    if (e != NULL && e->host == host && e->slot == slot && e->counter == counter) {
        uint64_t i = (uint64_t)(e - kv->index);
        for (uint64_t j = (i + 1) & kv->mask; kv->index[j].used; j = (j + 1) & kv->mask) {
            uint64_t k = home(kv, kv->index[j].key);
            /* j's entry may move to the hole at i unless its home lies in (i, j] */
            if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
                kv->index[i] = kv->index[j];
                i = j;
            }
        }
        kv->index[i].used = 0;
        kv->count--;
    }
    pthread_rwlock_unlock(&kv->index_lock);
}

static int index_get(dsm_chan_kv_t *kv, uint64_t key, kv_entry_t *out)
{
    pthread_rwlock_rdlock(&kv->index_lock);
    kv_entry_t *e = index_find(kv, key);
    if (e)
        *out = *e;
    pthread_rwlock_unlock(&kv->index_lock);
    return e != NULL;
}

static void slot_free(dsm_chan_kv_t *kv, uint32_t s)
{
    pthread_mutex_lock(&kv->free_lock);
    if (kv->nfree < kv->nslots)
        kv->free[kv->nfree++] = s;
    pthread_mutex_unlock(&kv->free_lock);
}

static int slot_take(dsm_chan_kv_t *kv, uint32_t *s)
{
    pthread_mutex_lock(&kv->free_lock);
    int ok = kv->nfree > 0;
    if (ok)
        *s = kv->free[--kv->nfree];
    pthread_mutex_unlock(&kv->free_lock);
    return ok;
}

/* ---- trackers ------------------------------------------------------------- */

/* Broadcast {op, key, host, slot, counter} on this node's tracker and wait
 * until every participant has applied it to its index. *sent (may be NULL)
 * says whether the message left, so peers may have applied it. */
static dsm_status_t broadcast(dsm_chan_kv_t *kv, uint64_t op, uint64_t key, uint32_t host, uint32_t slot,
                              uint64_t counter, int *sent)
{
    dsm_chan_t *c = kv->c;
    if (sent)
        *sent = 0;
    if (c->npeers == 1)
        return DSM_OK;
    uint64_t msg[MSG_WORDS] = {op, key, host, slot, counter};
    dsm_chan_ring_t *r = kv->trackers[c->self];
    pthread_mutex_lock(&kv->send);
    dsm_status_t st = dsm_chan_ring_send(r, msg, sizeof msg, 0);
    if (st == DSM_OK && sent)
        *sent = 1;
    if (st == DSM_OK)
        st = chan_ring_wait_acked(r, chan_ring_sent(r), 0);
    pthread_mutex_unlock(&kv->send);
    if (st == DSM_OK && __atomic_load_n(&kv->broken, __ATOMIC_ACQUIRE) != DSM_OK)
        st = kv->broken;
    return st;
}

/* Broadcast m records on this node's tracker, MSG_MAX to a message, and
 * wait until every participant has applied them; *sent says whether any
 * left. */
static dsm_status_t broadcast_many(dsm_chan_kv_t *kv, const uint64_t (*recs)[MSG_WORDS], uint32_t m, int *sent)
{
    dsm_chan_t *c = kv->c;
    *sent = 0;
    if (c->npeers == 1 || m == 0)
        return DSM_OK;
    dsm_chan_ring_t *r = kv->trackers[c->self];
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&kv->send);
    for (uint32_t at = 0; at < m && st == DSM_OK; at += MSG_MAX) {
        uint32_t k = m - at < MSG_MAX ? m - at : MSG_MAX;
        st = dsm_chan_ring_send(r, recs[at], (size_t)k * MSG_WORDS * 8, 0);
        if (st == DSM_OK)
            *sent = 1;
    }
    if (*sent) {
        dsm_status_t ws = chan_ring_wait_acked(r, chan_ring_sent(r), 0);
        if (st == DSM_OK)
            st = ws;
    }
    pthread_mutex_unlock(&kv->send);
    if (st == DSM_OK && __atomic_load_n(&kv->broken, __ATOMIC_ACQUIRE) != DSM_OK)
        st = kv->broken;
    return st;
}

/* Apply one tracker message from participant `from` (track_wire.h);
 * DSM_ERR_PROTO, applying none, if it is not one this kvstore sends. */
static dsm_status_t apply(dsm_chan_kv_t *kv, uint32_t from, const uint64_t *msg, size_t len)
{
    chan_track_rec_t recs[CHAN_TRACK_MAX];
    int n = chan_track_decode(msg, len, from, kv->c->npeers, kv->nslots, recs);
    if (n < 0) {
        DSM_ERROR(LOG_MOD, "kvstore '%s': a tracker message from rank %u that no kvstore sends (%zu bytes, op %llu)",
                  kv->c->name, kv->c->peers[from].rank, len, (unsigned long long)(len >= 8 ? msg[0] : 0));
        return DSM_ERR_PROTO;
    }
    for (int i = 0; i < n; i++) {
        const chan_track_rec_t *r = &recs[i];
        if (r->op == OP_INSERT) {
            index_set(kv, r->key, r->host, r->slot, r->counter);
        } else {
            index_remove(kv, r->key, r->host, r->slot, r->counter);
            if (r->host == kv->c->self)
                slot_free(kv, r->slot);   /* invalid and fenced before the broadcast */
        }
    }
    return DSM_OK;
}

/* The thread that applies the other participants' trackers to this node's
 * index, then acknowledges: an ack means "my index has it". */
static void *tracker_thread(void *arg)
{
    dsm_chan_kv_t *kv = arg;
    dsm_chan_t *c = kv->c;
    dsm_thread_name("kvtrack", (int)c->self);
    long pause = 1000;
    while (!__atomic_load_n(&kv->stop, __ATOMIC_ACQUIRE)) {
        int any = 0;
        for (uint32_t p = 0; p < c->npeers; p++) {
            if (p == c->self)
                continue;
            uint64_t msg[MSG_MAX * MSG_WORDS];
            size_t len = 0;
            int got;
            while ((got = chan_ring_poll(kv->trackers[p], msg, sizeof msg, &len)) > 0) {
                dsm_status_t st = apply(kv, p, msg, len);
                if (st == DSM_OK)
                    st = chan_ring_ack(kv->trackers[p]);
                if (st != DSM_OK) {
                    got = st;
                    break;
                }
                any = 1;
            }
            if (got < 0) {
                if (got != DSM_ERR_PROTO && got != DSM_ERR_TOO_BIG)
                    DSM_ERROR(LOG_MOD, "kvstore '%s': tracker of rank %u: %s", c->name, c->peers[p].rank,
                              dsm_strerror(got));
                __atomic_store_n(&kv->broken, got, __ATOMIC_RELEASE);
                goto out;
            }
        }
        if (any)
            pause = 1000;
        else
            dsm_backoff_sleep(&pause, 200000);   /* idle: back off to 200 us, 2 cores are shared */
    }
out:
    for (uint32_t p = 0; p < c->npeers; p++)
        if (p != c->self)
            (void)chan_ring_ack_wait(kv->trackers[p]);
    return NULL;
}

/* ---- the object ----------------------------------------------------------- */

void dsm_chan_kv_destroy(dsm_chan_kv_t *kv)
{
    if (kv == NULL)
        return;
    if (kv->started) {
        __atomic_store_n(&kv->stop, 1, __ATOMIC_RELEASE);
        pthread_join(kv->thread, NULL);
    }
    if (kv->trackers)
        for (uint32_t p = 0; p < kv->c->npeers; p++) dsm_chan_ring_destroy(kv->trackers[p]);
    if (kv->locks)
        for (uint32_t i = 0; i < kv->nlocks; i++) dsm_chan_lock_destroy(kv->locks[i]);
    dsm_chan_destroy(kv->c);
    pthread_mutex_destroy(&kv->send);
    pthread_mutex_destroy(&kv->free_lock);
    pthread_rwlock_destroy(&kv->index_lock);
    free(kv->trackers);
    free(kv->locks);
    free(kv->index);
    free(kv->free);
    free(kv);
}

dsm_status_t dsm_chan_kv_create(dsm_node_t *node, const char *name, uint32_t slots, uint32_t locks,
                                size_t value_size, uint32_t timeout_ms, dsm_chan_kv_t **out)
{
    return dsm_chan_kv_create_typed(node, name, slots, locks, value_size, 0, timeout_ms, out);
}

dsm_status_t dsm_chan_kv_create_typed(dsm_node_t *node, const char *name, uint32_t slots, uint32_t locks,
                                      size_t value_size, uint64_t value_type, uint32_t timeout_ms,
                                      dsm_chan_kv_t **out)
{
    if (out == NULL || name == NULL || slots == 0 || slots > DSM_CHAN_KV_MAX_SLOTS || locks == 0 ||
        locks > DSM_CHAN_KV_MAX_LOCKS || value_size == 0 || value_size > DSM_CHAN_KV_MAX_VALUE ||
        strlen(name) + sizeof "/tracker/64" > DSM_CHAN_NAME_MAX + 1)
        return DSM_ERR_INVALID;
    dsm_chan_kv_t *kv = calloc(1, sizeof *kv);
    if (kv == NULL)
        return DSM_ERR_NOMEM;
    pthread_mutex_init(&kv->send, NULL);
    pthread_mutex_init(&kv->free_lock, NULL);
    pthread_rwlock_init(&kv->index_lock, NULL);
    kv->nslots = slots;
    kv->vsize = value_size;
    kv->vwords = (uint32_t)((value_size + 7) / 8);
    kv->words = kv->vwords + 3;
    kv->fence = 1;
    /* the slots' bytes alone would let 2 slots of 8-byte values meet 1 of
     * 40, and equal sizes a float64 meet a uint64: a typed store says its
     * type too */
    static const char *const names[] = {"value_size", "slots", "locks", "value_type"};
    const uint64_t shape[] = {value_size, slots, locks, value_type};
    dsm_status_t st = chan_open(node, name, DSM_CHAN_KVSTORE, "slots", (size_t)slots * slot_bytes(kv), names, shape,
                                value_type != 0 ? 4 : 3, timeout_ms, &kv->c);
    if (st != DSM_OK) {
        kv->c = NULL;
        dsm_chan_kv_destroy(kv);
        return st;
    }
    dsm_chan_t *c = kv->c;
    kv->settle_ms = chan_op_timeout(c);
    uint64_t cap = 16;
    while (cap < 2ull * slots * c->npeers) cap <<= 1;
    kv->mask = cap - 1;
    kv->index = calloc(cap, sizeof *kv->index);
    kv->free = calloc(slots, sizeof *kv->free);
    kv->locks = calloc(locks, sizeof *kv->locks);
    kv->trackers = calloc(c->npeers, sizeof *kv->trackers);
    if (!kv->index || !kv->free || !kv->locks || !kv->trackers)
        st = DSM_ERR_NOMEM;
    for (uint32_t s = 0; s < slots && st == DSM_OK; s++) kv->free[kv->nfree++] = slots - 1 - s;
    char sub[DSM_CHAN_NAME_MAX + 1];
    for (uint32_t i = 0; i < locks && st == DSM_OK; i++) {
        snprintf(sub, sizeof sub, "%s/lock/%u", name, i);
        if ((st = dsm_chan_lock_create(node, sub, timeout_ms, &kv->locks[i])) == DSM_OK)
            kv->nlocks++;
    }
    for (uint32_t p = 0; p < c->npeers && st == DSM_OK; p++) {
        snprintf(sub, sizeof sub, "%s/tracker/%u", name, p);
        st = dsm_chan_ring_create(node, sub, p, TRACKER_BYTES, timeout_ms, &kv->trackers[p]);
    }
    if (st == DSM_OK && c->npeers > 1) {
        if (dsm_thread_start(&kv->thread, NULL, tracker_thread, kv) != 0)
            st = DSM_ERR_NOMEM;
        else
            kv->started = 1;
    }
    if (st != DSM_OK) {
        dsm_chan_kv_destroy(kv);
        return st;
    }
    *out = kv;
    return DSM_OK;
}

void dsm_chan_kv_set_settle_ms(dsm_chan_kv_t *kv, uint32_t ms) { kv->settle_ms = ms; }
void dsm_chan_kv_set_fence(dsm_chan_kv_t *kv, int on) { kv->fence = on != 0; }

uint64_t dsm_chan_kv_count(dsm_chan_kv_t *kv)
{
    pthread_rwlock_rdlock(&kv->index_lock);
    uint64_t n = kv->count;
    pthread_rwlock_unlock(&kv->index_lock);
    return n;
}

static dsm_chan_lock_t *lock_of(const dsm_chan_kv_t *kv, uint64_t key) { return kv->locks[key % kv->nlocks]; }

/* Release the key's lock after its work (st); the release's own failure
 * only if the work succeeded. */
static dsm_status_t unlock(dsm_chan_kv_t *kv, uint64_t key, dsm_status_t st)
{
    dsm_status_t rs = dsm_chan_lock_release(lock_of(kv, key), DSM_CHAN_FENCE_NONE);
    return st != DSM_OK ? st : rs;
}

static dsm_status_t insert(dsm_chan_kv_t *kv, uint64_t key, const void *value)
{
    dsm_chan_t *c = kv->c;
    uint32_t s;
    if (!slot_take(kv, &s)) {
        DSM_ERROR(LOG_MOD, "kvstore '%s': all %u slots of rank %u are taken (an insert lands in the inserter's slots)",
                  c->name, kv->nslots, c->peers[c->self].rank);
        return DSM_ERR_NOMEM;
    }
    uint64_t counter = (__atomic_load_n(&local_slot(kv, s)[meta_at(kv)], __ATOMIC_RELAXED) >> 1) + 1,
             w[SLOT_MAX_WORDS];
    slot_make(kv, w, key, value, counter, 0);
    dsm_status_t st = slot_write(kv, c->self, s, w);
    int sent = 0;
    if (st == DSM_OK)
        st = broadcast(kv, OP_INSERT, key, c->self, s, counter, &sent);
    if (st != DSM_OK) {
        /* The key is not in: this node's index does not name the slot (a
         * put would take it for an update of a key no one else has). A
         * slot whose message left stays invalid and out of use, so that an
         * entry a peer applied reads as a miss and names no other key. */
        if (!sent)
            slot_free(kv, s);
        return st;
    }
    index_set(kv, key, c->self, s, counter);
    slot_make(kv, w, key, value, counter, 1);   /* linearises: every index has it */
    return slot_write(kv, c->self, s, w);
}

dsm_status_t dsm_chan_kv_put(dsm_chan_kv_t *kv, uint64_t key, const void *value)
{
    if (kv == NULL || value == NULL)
        return DSM_ERR_INVALID;
    dsm_status_t st = dsm_chan_lock_acquire(lock_of(kv, key), 0);
    if (st != DSM_OK)
        return st;
    kv_entry_t e;
    if (!index_get(kv, key, &e))
        return unlock(kv, key, insert(kv, key, value));
    uint64_t w[SLOT_MAX_WORDS];
    slot_make(kv, w, key, value, e.counter, 1);
    if (e.host == kv->c->self)
        return unlock(kv, key, slot_write(kv, e.host, e.slot, w));
    /* A completed put is not a placed one: without its fence before the
     * release the next holder, or a reader after we return, may still find
     * the old value. The release orders it (chan_lock_release_after): where
     * the lock lives with the slot, its atomic follows the write in one
     * message. Without the fence (unsafe) the two are in flight at once. */
    dsm_fabric_t *f = kv->c->m->fabric;
    dsm_chan_lock_t *l = lock_of(kv, key);
    dsm_chan_ack_t ack = {{0}};
    dsm_fabric_batch_begin(f);
    st = dsm_chan_put_async(kv->c, e.host, 0, (uint64_t)e.slot * slot_bytes(kv), w, slot_bytes(kv), &ack);
    dsm_status_t rs = st == DSM_OK && kv->fence ? chan_lock_release_after(l, kv->c, e.host)
                                                : dsm_chan_lock_release(l, DSM_CHAN_FENCE_NONE);
    dsm_fabric_batch_end(f);
    dsm_status_t ws = dsm_chan_ack_wait(&ack);
    if (st == DSM_OK)
        st = rs != DSM_OK ? rs : ws;
    return st;
}

/* The window's locks (ascending) and, for key i, which of them is its. */
static uint32_t window_locks(const dsm_chan_kv_t *kv, const uint64_t *keys, const uint8_t *live, uint32_t n,
                             dsm_chan_lock_t **ls, uint32_t *of)
{
    int32_t at[DSM_CHAN_KV_MAX_LOCKS];
    for (uint32_t l = 0; l < kv->nlocks; l++) at[l] = -1;
    for (uint32_t i = 0; i < n; i++)
        if (live[i])
            at[keys[i] % kv->nlocks] = 0;
    uint32_t nl = 0;
    for (uint32_t l = 0; l < kv->nlocks; l++)
        if (at[l] == 0) {
            at[l] = (int32_t)nl;
            ls[nl++] = kv->locks[l];
        }
    for (uint32_t i = 0; i < n; i++) of[i] = live[i] ? (uint32_t)at[keys[i] % kv->nlocks] : 0;
    return nl;
}

/* Keys whose later put or delete in the window supersedes them: they are
 * concurrent with it, so ordered just before it and overwritten. */
static void window_live(const uint64_t *keys, uint32_t n, uint8_t *live)
{
    for (uint32_t i = 0; i < n; i++) {
        live[i] = 1;
        for (uint32_t j = i + 1; j < n && live[i]; j++) live[i] = keys[j] != keys[i];
    }
}

/* The window's writes w[i] of updates (upd[i]) to their slots e[i]: this
 * node's as stores, then the others' in flight together host by host, each
 * host's followed by the releases of the locks of rel it hosts (locks whose
 * writes all went to this node's slots or their own host's: a release's
 * atomic follows the writes on their connection, which places them before
 * it applies); then with `fence` one pair fence per host written (a
 * completed write is not a placed one). rel's locks are released whatever
 * happens. */
static dsm_status_t write_window(dsm_chan_kv_t *kv, uint32_t n, const uint8_t *upd, const kv_entry_t *e,
                                 uint64_t (*w)[kv->words], int fence, dsm_chan_lock_t *const *rel, uint32_t nrel)
{
    dsm_chan_t *c = kv->c;
    uint64_t hosts = 0;
    for (uint32_t i = 0; i < n; i++)
        if (upd[i] && e[i].host != c->self)
            hosts |= 1ull << e[i].host;
    for (uint32_t i = 0; i < n; i++)
        if (upd[i] && e[i].host == c->self)
            (void)slot_write(kv, c->self, e[i].slot, w[i]);
    dsm_op_t op[DSM_CHAN_KV_MAX_LOCKS];
    uint8_t issued[DSM_CHAN_KV_MAX_LOCKS], sent[DSM_CHAN_KV_MAX_LOCKS];
    memset(sent, 0, nrel);
    dsm_chan_ack_t key = {{0}};
    dsm_status_t st = DSM_OK, rs = DSM_OK, is;
    dsm_fabric_batch_begin(c->m->fabric);
    for (uint64_t h = hosts; h != 0; h &= h - 1) {
        uint32_t p = (uint32_t)__builtin_ctzll(h);
        for (uint32_t i = 0; i < n && st == DSM_OK; i++)
            if (upd[i] && e[i].host == p)
                st = dsm_chan_put_async(c, p, 0, (uint64_t)e[i].slot * slot_bytes(kv), w[i], slot_bytes(kv), &key);
        for (uint32_t j = 0; j < nrel; j++)
            if (!sent[j] && chan_lock_host_rank(rel[j]) == c->peers[p].rank) {
                sent[j] = 1;
                if ((is = chan_lock_release_issue(&rel[j], 1, 0, &op[j], &issued[j])) != DSM_OK && rs == DSM_OK)
                    rs = is;
            }
    }
    for (uint32_t j = 0; j < nrel; j++)   /* hosts written to none: behind this node's stores */
        if (!sent[j] && (is = chan_lock_release_issue(&rel[j], 1, 0, &op[j], &issued[j])) != DSM_OK && rs == DSM_OK)
            rs = is;
    dsm_fabric_batch_end(c->m->fabric);
    if ((is = chan_lock_release_finish(rel, nrel, op, issued)) != DSM_OK && rs == DSM_OK)
        rs = is;
    dsm_status_t ws = dsm_chan_ack_wait(&key);
    if (st == DSM_OK)
        st = ws;
    for (uint64_t h = hosts; h != 0 && st == DSM_OK && fence; h &= h - 1)
        st = dsm_chan_fence_pair(c, (uint32_t)__builtin_ctzll(h));
    return st != DSM_OK ? st : rs;
}

dsm_status_t dsm_chan_kv_put_many(dsm_chan_kv_t *kv, const uint64_t *keys, uint32_t n, const void *values)
{
    if (kv == NULL || keys == NULL || values == NULL || n == 0 || n > DSM_CHAN_ACK_BITS)
        return DSM_ERR_INVALID;
    uint8_t live[n], upd[n], got[DSM_CHAN_KV_MAX_LOCKS];
    uint32_t of[n];
    dsm_chan_lock_t *ls[DSM_CHAN_KV_MAX_LOCKS];
    window_live(keys, n, live);
    uint32_t nl = window_locks(kv, keys, live, n, ls, of);
    dsm_status_t st = chan_lock_try_many(ls, nl, got);
    kv_entry_t e[n];
    uint64_t w[n][kv->words];
    const uint8_t *v = values;
    for (uint32_t i = 0; i < n; i++) {
        upd[i] = live[i] && got[of[i]] && index_get(kv, keys[i], &e[i]);
        if (upd[i])
            slot_make(kv, w[i], keys[i], v + (size_t)i * kv->vsize, e[i].counter, 1);
    }
    /* with the fence, the locks whose keys are all updates of this node's
     * slots or their host's go behind the writes (write_window) */
    uint8_t early[DSM_CHAN_KV_MAX_LOCKS];
    for (uint32_t l = 0; l < nl; l++) early[l] = st == DSM_OK && kv->fence && got[l];
    for (uint32_t i = 0; i < n; i++)
        if (live[i] && got[of[i]] &&
            (!upd[i] || (e[i].host != kv->c->self &&
                         kv->c->peers[e[i].host].rank != chan_lock_host_rank(ls[of[i]]))))
            early[of[i]] = 0;
    dsm_chan_lock_t *rel[DSM_CHAN_KV_MAX_LOCKS];
    uint32_t nrel = 0;
    for (uint32_t l = 0; l < nl; l++)
        if (early[l])
            rel[nrel++] = ls[l];
    if (st == DSM_OK)
        st = write_window(kv, n, upd, e, w, kv->fence, rel, nrel);
    /* new keys whose lock is held: inserts, each broadcast and acked */
    for (uint32_t i = 0; i < n && st == DSM_OK; i++)
        if (live[i] && got[of[i]] && !upd[i])
            st = insert(kv, keys[i], v + (size_t)i * kv->vsize);
    dsm_chan_lock_t *held[DSM_CHAN_KV_MAX_LOCKS];
    uint32_t nh = 0;
    for (uint32_t l = 0; l < nl; l++)
        if (got[l] && !early[l])
            held[nh++] = ls[l];
    dsm_status_t rs = chan_lock_release_many(held, nh);
    if (st == DSM_OK)
        st = rs;
    /* keys whose lock was busy: one by one, each waiting for its lock
     * while holding no other */
    for (uint32_t i = 0; i < n && st == DSM_OK; i++)
        if (live[i] && !got[of[i]])
            st = dsm_chan_kv_put(kv, keys[i], v + (size_t)i * kv->vsize);
    return st;
}

dsm_status_t dsm_chan_kv_delete(dsm_chan_kv_t *kv, uint64_t key, int *found)
{
    if (kv == NULL)
        return DSM_ERR_INVALID;
    if (found)
        *found = 0;
    dsm_status_t st = dsm_chan_lock_acquire(lock_of(kv, key), 0);
    if (st != DSM_OK)
        return st;
    kv_entry_t e;
    if (!index_get(kv, key, &e))
        return unlock(kv, key, DSM_OK);
    if (found)
        *found = 1;
    uint64_t w[SLOT_MAX_WORDS];
    slot_make(kv, w, key, NULL, e.counter, 0);   /* linearises once placed: the fence */
    st = slot_write(kv, e.host, e.slot, w);
    if (st == DSM_OK)
        st = dsm_chan_fence_pair(kv->c, e.host);
    if (st == DSM_OK)
        st = broadcast(kv, OP_DELETE, key, e.host, e.slot, e.counter, NULL);
    if (st == DSM_OK) {
        index_remove(kv, key, e.host, e.slot, e.counter);
        if (e.host == kv->c->self)
            slot_free(kv, e.slot);
    }
    return unlock(kv, key, st);
}

dsm_status_t dsm_chan_kv_delete_many(dsm_chan_kv_t *kv, const uint64_t *keys, uint32_t n, int *found)
{
    if (kv == NULL || keys == NULL || found == NULL || n == 0 || n > DSM_CHAN_ACK_BITS)
        return DSM_ERR_INVALID;
    dsm_chan_t *c = kv->c;
    uint8_t live[n], has[n], got[DSM_CHAN_KV_MAX_LOCKS];
    uint32_t of[n];
    dsm_chan_lock_t *ls[DSM_CHAN_KV_MAX_LOCKS];
    window_live(keys, n, live);
    uint32_t nl = window_locks(kv, keys, live, n, ls, of);
    dsm_status_t st = chan_lock_try_many(ls, nl, got);
    kv_entry_t e[n];
    uint64_t w[n][kv->words], recs[n][MSG_WORDS];
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        found[i] = 0;
        has[i] = live[i] && got[of[i]] && index_get(kv, keys[i], &e[i]);
        if (!has[i])
            continue;
        found[i] = 1;
        slot_make(kv, w[i], keys[i], NULL, e[i].counter, 0);   /* each linearises once placed: the fence */
        recs[m][0] = OP_DELETE;
        recs[m][1] = keys[i];
        recs[m][2] = e[i].host;
        recs[m][3] = e[i].slot;
        recs[m][4] = e[i].counter;
        m++;
    }
    if (st == DSM_OK)
        st = write_window(kv, n, has, e, w, 1, NULL, 0);
    int sent = 0;
    if (st == DSM_OK)
        st = broadcast_many(kv, (const uint64_t(*)[MSG_WORDS])recs, m, &sent);
    for (uint32_t i = 0; i < n && st == DSM_OK; i++)
        if (has[i]) {
            index_remove(kv, keys[i], e[i].host, e[i].slot, e[i].counter);
            if (e[i].host == c->self)
                slot_free(kv, e[i].slot);
        }
    dsm_chan_lock_t *held[DSM_CHAN_KV_MAX_LOCKS];
    uint32_t nh = 0;
    for (uint32_t l = 0; l < nl; l++)
        if (got[l])
            held[nh++] = ls[l];
    dsm_status_t rs = chan_lock_release_many(held, nh);
    if (st == DSM_OK)
        st = rs;
    for (uint32_t i = 0; i < n && st == DSM_OK; i++)
        if (live[i] && !got[of[i]])
            st = dsm_chan_kv_delete(kv, keys[i], &found[i]);
    /* a superseded delete of a key comes first: it found what the window's
     * last one of that key found, and that one found nothing */
    for (uint32_t i = 0; i < n; i++)
        if (!live[i])
            for (uint32_t j = i + 1; j < n; j++)
                if (live[j] && keys[j] == keys[i]) {
                    found[i] = found[j];
                    found[j] = 0;
                    break;
                }
    return st;
}

dsm_status_t dsm_chan_kv_get(dsm_chan_kv_t *kv, uint64_t key, void *value, int *found)
{
    if (kv == NULL || value == NULL || found == NULL)
        return DSM_ERR_INVALID;
    *found = 0;
    uint64_t deadline = 0, reads = 0;
    long pause = 200;
    for (;;) {
        kv_entry_t e;
        if (!index_get(kv, key, &e))
            return DSM_OK;
        uint64_t w[SLOT_MAX_WORDS];
        dsm_status_t st;
        int ok = slot_read(kv, e.host, e.slot, w, &st);
        if (st != DSM_OK)
            return st;
        reads++;
        if (ok) {
            /* a miss if invalid, or another counter: the key's delete or insert is under way */
            *found = slot_hit(kv, w, key, e.counter, value);
            return DSM_OK;
        }
        if (deadline == 0)
            deadline = dsm_deadline_ns(kv->settle_ms);
        else if (dsm_now_ns() >= deadline)
            break;
        dsm_fabric_backoff(kv->c->m->fabric, &pause, 100000);
    }
    DSM_ERROR(LOG_MOD, "kvstore '%s': key %llu's slot did not settle within %u ms (%llu reads, checksum wrong)",
              kv->c->name, (unsigned long long)key, kv->settle_ms, (unsigned long long)reads);
    return DSM_ERR_TIMEOUT;
}

dsm_status_t dsm_chan_kv_get_many(dsm_chan_kv_t *kv, const uint64_t *keys, uint32_t n, void *values, int *found)
{
    if (kv == NULL || keys == NULL || values == NULL || found == NULL || n == 0 || n > DSM_CHAN_ACK_BITS)
        return DSM_ERR_INVALID;
    uint64_t w[n][kv->words];
    kv_entry_t e[DSM_CHAN_ACK_BITS];
    uint8_t todo[DSM_CHAN_ACK_BITS];
    uint32_t left = n;
    for (uint32_t i = 0; i < n; i++) {
        found[i] = 0;
        todo[i] = 1;
    }
    dsm_chan_t *c = kv->c;
    dsm_fabric_t *f = c->m->fabric;
    uint64_t deadline = 0;
    long pause = 200;
    for (;;) {
        /* every unsettled key's entry under one read lock; a key the index
         * lacks is a miss */
        uint64_t hosts = 0;
        pthread_rwlock_rdlock(&kv->index_lock);
        for (uint32_t i = 0; i < n; i++) {
            const kv_entry_t *x = todo[i] ? index_find(kv, keys[i]) : NULL;
            if (x != NULL) {
                e[i] = *x;
                if (x->host != c->self)
                    hosts |= 1ull << x->host;
            } else if (todo[i]) {
                todo[i] = 0;
                left--;
            }
        }
        pthread_rwlock_unlock(&kv->index_lock);
        if (left == 0)
            return DSM_OK;
        /* the remote slots' reads at once, host by host, so each host's
         * travel together (one message where they are emulated); this
         * node's slots are loads, done while those are on their way */
        dsm_chan_ack_t key = {{0}};
        dsm_status_t st = DSM_OK;
        dsm_fabric_batch_begin(f);
        for (; hosts != 0 && st == DSM_OK; hosts &= hosts - 1) {
            uint32_t h = (uint32_t)__builtin_ctzll(hosts);
            for (uint32_t i = 0; i < n && st == DSM_OK; i++)
                if (todo[i] && e[i].host == h)
                    st = dsm_chan_get_async(c, h, 0, (uint64_t)e[i].slot * slot_bytes(kv), w[i], slot_bytes(kv),
                                            &key);
        }
        dsm_fabric_batch_end(f);
        for (uint32_t i = 0; i < n; i++)
            if (todo[i] && e[i].host == c->self)
                slot_load(kv, e[i].slot, w[i]);
        dsm_status_t ws = dsm_chan_ack_wait(&key);
        if (st == DSM_OK)
            st = ws;
        if (st != DSM_OK)
            return st;
        for (uint32_t i = 0; i < n; i++) {
            if (!todo[i] || !slot_settled(kv, w[i]))
                continue;   /* done, or a write being placed: read again */
            found[i] = slot_hit(kv, w[i], keys[i], e[i].counter, (uint8_t *)values + (size_t)i * kv->vsize);
            todo[i] = 0;
            left--;
        }
        if (left == 0)
            return DSM_OK;
        if (deadline == 0)
            deadline = dsm_deadline_ns(kv->settle_ms);
        else if (dsm_now_ns() >= deadline)
            break;
        dsm_fabric_backoff(f, &pause, 100000);
    }
    DSM_ERROR(LOG_MOD, "kvstore '%s': %u of %u slots did not settle within %u ms (checksum wrong)", kv->c->name, left, n,
              kv->settle_ms);
    return DSM_ERR_TIMEOUT;
}
