/* Mutexes serialised at their home node (see dsm/own.h), both ways: the
 * delegated kind keeps its state (held, holder, FIFO of waiters) in the
 * home's process memory and answers LOCK requests when it grants them; the
 * CAS kind is a word of global memory taken by one-sided compare-and-swap.
 * A delegated mutex exists while the home has its state, which is how a
 * forged or freed handle is recognised.
 *
 * A mutex may guard one object (Mutex<Box<T>>, see guard.c): the home
 * keeps the object's current coloured address with the mutex (the
 * delegated kind in its state, the CAS kind in the three words after the
 * lock word); a delegated grant carries it in the lock's reply, and the
 * unlock carries it back when a mutable borrow changed it. */
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "own/internal.h"
#include "own/msg.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG_MOD "own"
enum { LOCK_TIMEOUT_MS = 60000 };
/* A waiter at its mutex's home looks for a grant from a holder here at
 * least this often. */
enum { LOCAL_GRANT_PAUSE_NS = 100000 };

typedef struct waiter {
    uint32_t rank;
    uint64_t request_id;        /* a remote waiter's request */
    int local;                  /* a thread on this home node (on its stack), which looks for `granted` */
    int granted;
    struct waiter *next;
} waiter_t;

/* How long dsm_own_mutex_free waits for a remote holder's in-flight
 * unlock: many round trips of any fabric, short enough for a caller error
 * (freeing a mutex still in use) to come back soon. */
enum { OWN_FREE_WAIT_MS = 1000 };

struct own_mutex_state {
    uint64_t addr;
    own_grant_t guard;      /* the guarded object (g 0: none) */
    int locked;
    uint32_t holder;
    waiter_t *head, *tail;
    own_mutex_state_t *chain;
};

static unsigned mbucket(uint64_t a) { return (unsigned)((a >> 3) * 0x9e3779b1u) & (OWN_MUTEX_BUCKETS - 1); }

void own_mutexes_init(own_node_t *o) { pthread_mutex_init(&o->mlock, NULL); }

void own_mutexes_destroy(own_node_t *o)
{
    for (unsigned b = 0; b < OWN_MUTEX_BUCKETS; b++)
        while (o->mutexes[b]) {
            own_mutex_state_t *m = o->mutexes[b];
            o->mutexes[b] = m->chain;
            while (m->head) {
                waiter_t *w = m->head;
                m->head = w->next;
                if (!w->local)
                    free(w);
            }
            free(m);
        }
    pthread_mutex_destroy(&o->mlock);
}

/* Under mlock. */
static own_mutex_state_t **find(own_node_t *o, uint64_t addr)
{
    own_mutex_state_t **pp = &o->mutexes[mbucket(addr)];
    while (*pp && (*pp)->addr != addr)
        pp = &(*pp)->chain;
    return pp;
}

static int kind_of(dsm_own_mutex_t m) { return dsm_gaddr_colour(m) & 0xff; }

dsm_status_t dsm_own_mutex_new(dsm_node_t *node, int kind, dsm_own_mutex_t *out)
{
    own_node_t *o = own_lookup(node);
    if (out == NULL || (kind != DSM_OWN_MUTEX_DELEG && kind != DSM_OWN_MUTEX_CAS))
        return DSM_ERR_INVALID;
    *out = 0;
    if (o == NULL)
        return DSM_ERR_STATE;
    dsm_gaddr_t a;
    dsm_status_t st = dsm_alloc(node, own_self(o), OWN_MUTEX_BYTES, &a);
    if (st != DSM_OK)
        return st;
    a = dsm_gaddr_strip(a);   /* the tag bits carry the mutex's kind instead */
    uint64_t *w = dsm_local_ptr(node, a);
    for (int i = OWN_MUTEX_BYTES / 8 - 1; i >= 0; i--)
        __atomic_store_n(&w[i], 0, __ATOMIC_RELEASE);
    if (kind == DSM_OWN_MUTEX_DELEG) {
        own_mutex_state_t *m = calloc(1, sizeof *m);
        if (m == NULL) {
            (void)dsm_free(node, a);
            return DSM_ERR_NOMEM;
        }
        m->addr = a;
        pthread_mutex_lock(&o->mlock);
        own_mutex_state_t **pp = find(o, a);
        if (*pp) {   /* a state left by a mutex freed elsewhere: replace it */
            own_mutex_state_t *old = *pp;
            *pp = old->chain;
            free(old);
        }
        m->chain = o->mutexes[mbucket(a)];
        o->mutexes[mbucket(a)] = m;
        pthread_mutex_unlock(&o->mlock);
    }
    *out = dsm_gaddr_with_colour(a, (uint16_t)kind);
    return DSM_OK;
}

/* ---- delegated ----------------------------------------------------------- */

/* Take or queue a lock request at the home. Returns 1 if granted now. */
static dsm_status_t home_lock(own_node_t *o, uint64_t addr, waiter_t *w, int *granted)
{
    *granted = 0;
    own_mutex_state_t *m = *find(o, addr);
    if (m == NULL)
        return DSM_ERR_BAD_ADDR;
    if (!m->locked) {
        m->locked = 1;
        m->holder = w->rank;
        *granted = 1;
        return DSM_OK;
    }
    w->next = NULL;
    if (m->tail) m->tail->next = w; else m->head = w;
    m->tail = w;
    return DSM_OK;
}

/* Hand the mutex at addr over (or free it), for unlocker `rank`. Remote
 * grants are answered outside the lock; a waiter that cannot be answered
 * (dead) passes the mutex on. */
/* The reply that grants a lock: a GRANT message when the mutex guards an
 * object, else nothing. Returns the length. */
static size_t grant_encode(const own_grant_t *g, uint8_t *buf)
{
    if (g->g == 0)
        return 0;
    own_msg_t m = {.type = OWN_MSG_GRANT, .g = g->g, .obj_type = g->type, .arg = g->size};
    return own_msg_encode(&m, buf);
}

static dsm_status_t home_unlock(own_node_t *o, uint64_t addr, uint32_t rank, const uint64_t *newg)
{
    for (;;) {
        pthread_mutex_lock(&o->mlock);
        own_mutex_state_t *m = *find(o, addr);
        if (m == NULL || !m->locked || m->holder != rank) {
            pthread_mutex_unlock(&o->mlock);
            DSM_WARN(LOG_MOD, "unlock of mutex 0x%llx by rank %u refused: %s", (unsigned long long)addr, rank,
                     m == NULL ? "no such mutex" : !m->locked ? "not locked" : "held by another rank");
            return m == NULL ? DSM_ERR_BAD_ADDR : DSM_ERR_STATE;
        }
        if (newg != NULL) {
            if (m->guard.g == 0)
                DSM_WARN(LOG_MOD, "owner update for mutex 0x%llx, which guards nothing, ignored",
                         (unsigned long long)addr);
            else
                m->guard.g = *newg;
            newg = NULL;
        }
        waiter_t *w = m->head;
        if (w == NULL) {
            m->locked = 0;
            pthread_mutex_unlock(&o->mlock);
            return DSM_OK;
        }
        m->head = w->next;
        if (m->head == NULL)
            m->tail = NULL;
        m->holder = w->rank;
        if (w->local) {
            w->granted = 1;
            pthread_mutex_unlock(&o->mlock);
            return DSM_OK;
        }
        uint8_t grant[OWN_MSG_MAX_LEN];
        size_t gl = grant_encode(&m->guard, grant);
        pthread_mutex_unlock(&o->mlock);
        dsm_status_t st = dsm_fabric_am_reply(o->fabric, w->rank, w->request_id, DSM_OK, grant, gl);
        uint32_t next = w->rank;
        free(w);
        if (st == DSM_OK)
            return DSM_OK;
        rank = next;   /* the grantee is gone: unlock on its behalf */
    }
}

void own_on_lock(void *ctx, const dsm_am_msg_t *msg)
{
    own_node_t *o = ctx;
    own_msg_t m;
    dsm_status_t st = own_msg_decode(msg->data, msg->len, &m);
    if (st != DSM_OK || m.type != OWN_MSG_LOCK || msg->request_id == 0 || !own_is_local(o, m.g)) {
        DSM_WARN(LOG_MOD, "bad lock request from rank %u", msg->src_rank);
        if (msg->request_id)
            (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, DSM_ERR_PROTO, NULL, 0);
        return;
    }
    waiter_t *w = calloc(1, sizeof *w);
    if (w == NULL) {
        (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, DSM_ERR_NOMEM, NULL, 0);
        return;
    }
    w->rank = msg->src_rank;
    w->request_id = msg->request_id;
    int granted;
    uint8_t grant[OWN_MSG_MAX_LEN];
    size_t gl = 0;
    pthread_mutex_lock(&o->mlock);
    st = home_lock(o, m.g, w, &granted);
    if (st == DSM_OK && granted)
        gl = grant_encode(&(*find(o, m.g))->guard, grant);
    pthread_mutex_unlock(&o->mlock);
    if (st != DSM_OK || granted) {
        free(w);
        (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, st, grant, gl);
    }
}

void own_on_unlock(void *ctx, const dsm_am_msg_t *msg)
{
    own_node_t *o = ctx;
    own_msg_t m;
    if (own_msg_decode(msg->data, msg->len, &m) != DSM_OK ||
        (m.type != OWN_MSG_UNLOCK && m.type != OWN_MSG_UNLOCK_BOX) || !own_is_local(o, m.g)) {
        DSM_WARN(LOG_MOD, "bad unlock from rank %u", msg->src_rank);
        /* unlock is one-way; a sender that asked for an answer still gets one */
        if (msg->request_id)
            (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, DSM_ERR_PROTO, NULL, 0);
        return;
    }
    dsm_status_t st = home_unlock(o, m.g, msg->src_rank, m.type == OWN_MSG_UNLOCK_BOX ? &m.arg : NULL);
    if (msg->request_id)
        (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
}

static dsm_status_t deleg_unlock(own_node_t *o, uint64_t addr, const uint64_t *newg);

static dsm_status_t deleg_lock(own_node_t *o, uint64_t addr, own_grant_t *grant)
{
    if (own_is_local(o, addr)) {
        waiter_t w = {.rank = own_self(o), .local = 1};
        int granted;
        pthread_mutex_lock(&o->mlock);
        dsm_status_t st = home_lock(o, addr, &w, &granted);
        if (st == DSM_OK && !granted) {
            /* The grant comes with the holder's unlock. From a holder
             * elsewhere that is a message to this node, which this thread
             * serves itself, at once, as it waits attending the worker (on
             * the condition variable alone it waited for the progress
             * thread, parked a while after this thread's last wait: 0.55 ms
             * a contended lock in kv on 3 nodes over tcp). A holder here
             * unlocks in place: the pauses' cap bounds how late that is seen. */
            uint64_t deadline = dsm_deadline_ns(LOCK_TIMEOUT_MS);
            long pause_ns = 2000;
            while (!w.granted)
                if (dsm_now_ns() <= deadline) {
                    pthread_mutex_unlock(&o->mlock);
                    (void)dsm_fabric_backoff(o->fabric, &pause_ns, LOCAL_GRANT_PAUSE_NS);
                    pthread_mutex_lock(&o->mlock);
                } else {
                    /* Leave the queue, or we would be granted while gone. */
                    own_mutex_state_t *m = *find(o, addr);
                    for (waiter_t **pp = m ? &m->head : NULL; pp && *pp; pp = &(*pp)->next)
                        if (*pp == &w) {
                            *pp = w.next;
                            break;
                        }
                    if (m) {
                        m->tail = NULL;
                        for (waiter_t *x = m->head; x; x = x->next)
                            m->tail = x;
                    }
                    st = DSM_ERR_TIMEOUT;
                    break;
                }
        }
        if (st == DSM_OK && grant)
            *grant = (*find(o, addr))->guard;
        pthread_mutex_unlock(&o->mlock);
        return st;
    }
    own_msg_t m = {.type = OWN_MSG_LOCK, .g = addr};
    uint8_t buf[OWN_MSG_MAX_LEN];
    size_t n = own_msg_encode(&m, buf), rl = 0;
    uint8_t reply[OWN_MSG_MAX_LEN];
    dsm_status_t st = dsm_fabric_am_request(o->fabric, dsm_gaddr_node(addr), DSM_AM_OWN_LOCK, buf, n, reply,
                                            sizeof reply, &rl, LOCK_TIMEOUT_MS);
    own_count(o, C_MESSAGES, 2);
    own_count(o, C_BYTES, n + rl);
    if (st != DSM_OK || grant == NULL)
        return st;
    *grant = (own_grant_t){0};
    own_msg_t g;
    if (rl > 0 && (own_msg_decode(reply, rl, &g) != DSM_OK || g.type != OWN_MSG_GRANT)) {
        DSM_WARN(LOG_MOD, "malformed grant of mutex 0x%llx", (unsigned long long)addr);
        (void)deleg_unlock(o, addr, NULL);
        return DSM_ERR_PROTO;
    }
    if (rl > 0)
        *grant = (own_grant_t){.g = g.g, .size = g.arg, .type = g.obj_type};
    return DSM_OK;
}

static dsm_status_t deleg_unlock(own_node_t *o, uint64_t addr, const uint64_t *newg)
{
    if (own_is_local(o, addr))
        return home_unlock(o, addr, own_self(o), newg);
    own_msg_t m = {.type = newg ? OWN_MSG_UNLOCK_BOX : OWN_MSG_UNLOCK, .g = addr, .arg = newg ? *newg : 0};
    uint8_t buf[OWN_MSG_MAX_LEN];
    size_t n = own_msg_encode(&m, buf);
    own_count(o, C_MESSAGES, 1);
    own_count(o, C_BYTES, n);
    return dsm_fabric_am_send(o->fabric, dsm_gaddr_node(addr), DSM_AM_OWN_UNLOCK, buf, n);
}

/* ---- one-sided CAS ---------------------------------------------------------- */

/* A one-sided operation on a mutex word: a round trip when remote. */
static void count_remote(own_node_t *o, uint64_t addr, uint64_t bytes)
{
    if (!own_is_local(o, addr)) {
        own_count(o, C_MESSAGES, 2);
        own_count(o, C_BYTES, bytes);
    }
}

/* Wait before trying a held lock again; 0 once the deadline passed, which
 * is set at the first pause (*deadline 0 until then: an uncontended lock
 * reads no clock). Exponential backoff: spinning tries would starve the
 * holder of the CPU (and of the target's progress) on a small machine. */
static int backoff(uint64_t *deadline, long *pause_ns)
{
    if (*deadline == 0)
        *deadline = dsm_deadline_ns(LOCK_TIMEOUT_MS);
    else if (dsm_now_ns() > *deadline)
        return 0;
    struct timespec ts = {0, *pause_ns};
    nanosleep(&ts, NULL);
    if (*pause_ns < 256000)
        *pause_ns *= 2;
    return 1;
}

/* The CAS kind's one-sided word operations: a CPU atomic on the word when
 * it is in this node's heap blocks (the heap's own local path does the
 * same, so peers' one-sided atomics see it), else the heap's. */
static dsm_status_t word_swap(own_node_t *o, uint64_t addr, uint64_t v, uint64_t *old)
{
    uint64_t *w = (dsm_gaddr_offset(addr) & 7) ? NULL : own_local_at(o, addr, 8);
    if (w == NULL)
        return dsm_swap(o->node, addr, v, old);
    uint64_t prev = __atomic_exchange_n(w, v, __ATOMIC_SEQ_CST);
    if (old)
        *old = prev;
    return DSM_OK;
}
static dsm_status_t word_cas(own_node_t *o, uint64_t addr, uint64_t expect, uint64_t v, uint64_t *old)
{
    uint64_t *w = (dsm_gaddr_offset(addr) & 7) ? NULL : own_local_at(o, addr, 8);
    if (w == NULL)
        return dsm_cas(o->node, addr, expect, v, old);
    __atomic_compare_exchange_n(w, &expect, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    *old = expect;
    return DSM_OK;
}

static dsm_status_t cas_lock(own_node_t *o, uint64_t addr)
{
    uint64_t deadline = 0, me = (uint64_t)own_self(o) + 1;
    long pause_ns = 1000;
    for (;;) {
        uint64_t old = 0;
        count_remote(o, addr, 24);
        dsm_status_t st = word_cas(o, addr, 0, me, &old);
        if (st != DSM_OK || old == 0)
            return st;
        if (old > (uint64_t)DSM_MAX_DAEMONS + 1) {   /* an address: the mutex guards a box */
            DSM_WARN(LOG_MOD, "lock of mutex 0x%llx refused: it guards a box (use its guarding handle)",
                     (unsigned long long)addr);
            return DSM_ERR_STATE;
        }
        if (!backoff(&deadline, &pause_ns))
            return DSM_ERR_TIMEOUT;
    }
}

static dsm_status_t cas_unlock(own_node_t *o, uint64_t addr)
{
    uint64_t old = 0;
    count_remote(o, addr, 16);
    dsm_status_t st = word_swap(o, addr, 0, &old);
    if (st == DSM_OK && old != (uint64_t)own_self(o) + 1) {
        DSM_WARN(LOG_MOD, "unlock of mutex 0x%llx that this node did not hold", (unsigned long long)addr);
        if (old != 0)
            (void)word_swap(o, addr, old, NULL);   /* give it back to its holder */
        st = DSM_ERR_STATE;
    }
    return st;
}

/* The CAS kind guarding an object (the handle's guarded bit says so): its
 * lock word holds the object's coloured address while the mutex is free and
 * OWN_CAS_HELD while it is held (an object address is 8-aligned, never 1), so
 * one one-sided swap takes the lock *and* reads the address, and one swap
 * gives it back with the (possibly new) address: the owner update rides the
 * unlock here too. The words after it keep the object's size and type
 * (fixed at adoption), which a node reads once and remembers. A swap over
 * OWN_CAS_HELD leaves OWN_CAS_HELD: a waiter changes nothing. */
enum { CAS_META = 16 };

static dsm_status_t cas_box_lock(own_node_t *o, uint64_t addr, uint64_t *g)
{
    uint64_t deadline = 0;
    long pause_ns = 1000;
    for (;;) {
        uint64_t old = 0;
        count_remote(o, addr, 16);
        dsm_status_t st = word_swap(o, addr, OWN_CAS_HELD, &old);
        if (st != DSM_OK)
            return st;
        if (old != OWN_CAS_HELD) {
            if (dsm_gaddr_offset(old) == 0) {   /* not a guarding mutex's word: give it back */
                (void)word_swap(o, addr, old, NULL);
                return DSM_ERR_BAD_ADDR;
            }
            *g = old;
            return DSM_OK;
        }
        if (!backoff(&deadline, &pause_ns))
            return DSM_ERR_TIMEOUT;
    }
}

static dsm_status_t cas_box_unlock(own_node_t *o, uint64_t addr, uint64_t g)
{
    uint64_t old = 0;
    count_remote(o, addr, 16);
    dsm_status_t st = word_swap(o, addr, g, &old);
    if (st == DSM_OK && old != OWN_CAS_HELD) {
        DSM_WARN(LOG_MOD, "unlock of mutex 0x%llx, which was not held", (unsigned long long)addr);
        (void)word_swap(o, addr, old, NULL);   /* the word it held stays */
        st = DSM_ERR_STATE;
    }
    return st;
}

/* The guarded object's size and type: remembered per node (refresh reads
 * them again; a stale memory shows as a header mismatch, DSM_ERR_BAD_ADDR,
 * and the guard refreshes). */
static dsm_status_t cas_box_meta(own_node_t *o, uint64_t addr, own_grant_t *grant, int refresh)
{
    const uint64_t *local = own_local_at(o, addr, OWN_MUTEX_BYTES);
    if (local != NULL) {   /* the home reads its own words: nothing to remember */
        grant->size = __atomic_load_n(&local[2], __ATOMIC_RELAXED);
        grant->type = (uint32_t)__atomic_load_n(&local[3], __ATOMIC_RELAXED);
        return grant->size > OWN_MAX_SIZE || grant->type == 0 ? DSM_ERR_BAD_ADDR : DSM_OK;
    }
    unsigned i = (unsigned)((addr >> 3) * 0x9e3779b1u) & (OWN_META_SLOTS - 1);
    pthread_mutex_lock(&o->mlock);
    own_meta_t e = o->meta[i];
    pthread_mutex_unlock(&o->mlock);
    if (!refresh && e.addr == addr) {
        grant->size = e.size;
        grant->type = e.type;
        return DSM_OK;
    }
    uint64_t w[2];
    dsm_status_t st = dsm_read(o->node, addr + CAS_META, w, sizeof w);
    count_remote(o, addr, 8 + sizeof w);
    if (st != DSM_OK)
        return st;
    if (w[0] > OWN_MAX_SIZE || w[1] == 0 || w[1] > OWN_MAX_TYPE)
        return DSM_ERR_BAD_ADDR;
    grant->size = w[0];
    grant->type = (uint32_t)w[1];
    pthread_mutex_lock(&o->mlock);
    o->meta[i] = (own_meta_t){.addr = addr, .size = w[0], .type = (uint32_t)w[1]};
    pthread_mutex_unlock(&o->mlock);
    return DSM_OK;
}

/* ---- API -------------------------------------------------------------------- */

static int guarded(dsm_own_mutex_t m) { return (dsm_gaddr_colour(m) & OWN_MUTEX_GUARDED) != 0; }

static dsm_status_t check(own_node_t *o, dsm_own_mutex_t m)
{
    if (o == NULL)
        return DSM_ERR_STATE;
    int k = kind_of(m);
    if ((k != DSM_OWN_MUTEX_DELEG && k != DSM_OWN_MUTEX_CAS) || dsm_gaddr_offset(m) == 0 ||
        (dsm_gaddr_offset(m) & 7) || (dsm_gaddr_colour(m) & ~(0xffu | OWN_MUTEX_GUARDED))) {
        DSM_WARN(LOG_MOD, "0x%llx is not a mutex", (unsigned long long)m);
        return DSM_ERR_BAD_ADDR;
    }
    return DSM_OK;
}

dsm_status_t own_mutex_lock_grant(own_node_t *o, dsm_own_mutex_t m, own_grant_t *grant)
{
    dsm_status_t st = check(o, m);
    if (st != DSM_OK)
        return st;
    if ((grant != NULL) != guarded(m)) {
        DSM_WARN(LOG_MOD, "mutex 0x%llx %s", (unsigned long long)m,
                 grant ? "guards nothing: lock it with dsm_own_mutex_lock"
                       : "guards a box: lock it with dsm_own_mutex_lock_guard");
        return grant ? DSM_ERR_STATE : DSM_ERR_INVALID;
    }
    uint64_t a = dsm_gaddr_strip(m);
    if (kind_of(m) == DSM_OWN_MUTEX_DELEG) {
        st = deleg_lock(o, a, grant);
        if (st == DSM_OK && grant && grant->g == 0) {   /* cannot be: guarded at adoption */
            (void)deleg_unlock(o, a, NULL);
            st = DSM_ERR_STATE;
        }
    } else if (grant == NULL) {
        st = cas_lock(o, a);
    } else {
        *grant = (own_grant_t){0};
        uint64_t g = 0;
        if ((st = cas_box_lock(o, a, &g)) == DSM_OK) {
            grant->g = g;
            if ((st = cas_box_meta(o, a, grant, 0)) != DSM_OK)
                (void)cas_box_unlock(o, a, g);
        }
    }
    return st;
}

dsm_status_t own_mutex_refresh_grant(own_node_t *o, dsm_own_mutex_t m, own_grant_t *grant)
{
    if (kind_of(m) != DSM_OWN_MUTEX_CAS)
        return DSM_ERR_BAD_ADDR;   /* a delegated grant came from the home: nothing to refresh */
    return cas_box_meta(o, dsm_gaddr_strip(m), grant, 1);
}

dsm_status_t own_mutex_unlock_grant(own_node_t *o, dsm_own_mutex_t m, const own_grant_t *grant, int changed)
{
    dsm_status_t st = check(o, m);
    if (st != DSM_OK)
        return st;
    if ((grant != NULL) != guarded(m))
        return grant ? DSM_ERR_STATE : DSM_ERR_INVALID;
    uint64_t a = dsm_gaddr_strip(m);
    if (kind_of(m) == DSM_OWN_MUTEX_DELEG)
        return deleg_unlock(o, a, grant && changed ? &grant->g : NULL);
    return grant ? cas_box_unlock(o, a, grant->g) : cas_unlock(o, a);
}

dsm_status_t own_mutex_adopt(own_node_t *o, dsm_own_mutex_t m, const own_grant_t *grant, dsm_own_mutex_t *out)
{
    dsm_status_t st = check(o, m);
    if (st != DSM_OK)
        return st;
    uint64_t a = dsm_gaddr_strip(m);
    if (!own_is_local(o, a))
        return DSM_ERR_INVALID;
    if (guarded(m))
        return DSM_ERR_STATE;
    if (kind_of(m) == DSM_OWN_MUTEX_DELEG) {
        pthread_mutex_lock(&o->mlock);
        own_mutex_state_t *s = *find(o, a);
        st = s == NULL ? DSM_ERR_BAD_ADDR : (s->locked || s->guard.g) ? DSM_ERR_STATE : DSM_OK;
        if (st == DSM_OK && grant->g)
            s->guard = *grant;
        pthread_mutex_unlock(&o->mlock);
    } else {
        uint64_t *w = dsm_local_ptr(o->node, a);
        if (w == NULL)
            return DSM_ERR_BAD_ADDR;
        if (__atomic_load_n(&w[0], __ATOMIC_ACQUIRE) != 0 || __atomic_load_n(&w[2], __ATOMIC_ACQUIRE) != 0)
            return DSM_ERR_STATE;
        if (grant->g) {
            __atomic_store_n(&w[2], grant->size, __ATOMIC_RELAXED);
            __atomic_store_n(&w[3], grant->type, __ATOMIC_RELAXED);
            uint64_t zero = 0;   /* free and unguarded -> free and guarding g */
            if (!__atomic_compare_exchange_n(&w[0], &zero, grant->g, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                __atomic_store_n(&w[2], 0, __ATOMIC_RELAXED);
                return DSM_ERR_STATE;
            }
        }
    }
    if (st == DSM_OK && out)
        *out = dsm_gaddr_with_colour(m, (uint16_t)(dsm_gaddr_colour(m) | OWN_MUTEX_GUARDED));
    return st;
}

dsm_status_t dsm_own_mutex_lock(dsm_node_t *node, dsm_own_mutex_t m)
{
    return own_mutex_lock_grant(own_lookup(node), m, NULL);
}

dsm_status_t dsm_own_mutex_unlock(dsm_node_t *node, dsm_own_mutex_t m)
{
    return own_mutex_unlock_grant(own_lookup(node), m, NULL, 0);
}

dsm_status_t dsm_own_mutex_free(dsm_node_t *node, dsm_own_mutex_t m)
{
    own_node_t *o = own_lookup(node);
    dsm_status_t st = check(o, m);
    if (st != DSM_OK)
        return st;
    uint64_t a = dsm_gaddr_strip(m);
    if (!own_is_local(o, a))
        return DSM_ERR_INVALID;
    own_grant_t guard = {0};
    if (kind_of(m) == DSM_OWN_MUTEX_DELEG) {
        /* A remote holder's unlock is one-way: when its call has returned
         * the message may still be on its way here. So a mutex a remote
         * rank holds gets a bounded wait for that unlock; one still held
         * after it (or held on this node) is in use. */
        uint64_t deadline = dsm_deadline_ns(OWN_FREE_WAIT_MS);
        long pause_ns = 20000;
        for (;;) {
            pthread_mutex_lock(&o->mlock);
            own_mutex_state_t **pp = find(o, a), *s = *pp;
            if (s != NULL && s->locked && s->holder != own_self(o) && dsm_now_ns() < deadline) {
                pthread_mutex_unlock(&o->mlock);
                dsm_backoff_sleep(&pause_ns, 2000000);
                continue;
            }
            if (s == NULL || s->locked) {
                uint32_t holder = s ? s->holder : 0;
                pthread_mutex_unlock(&o->mlock);
                if (s != NULL)
                    DSM_WARN(LOG_MOD, "free of mutex 0x%llx refused: rank %u holds it", (unsigned long long)a,
                             holder);
                return s == NULL ? DSM_ERR_BAD_ADDR : DSM_ERR_STATE;
            }
            guard = s->guard;
            *pp = s->chain;
            free(s);
            pthread_mutex_unlock(&o->mlock);
            break;
        }
    } else {
        uint64_t *w = dsm_local_ptr(node, a);
        if (w == NULL)
            return DSM_ERR_BAD_ADDR;
        uint64_t word = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        if (guarded(m) ? word == OWN_CAS_HELD || word == 0 : word != 0)
            return DSM_ERR_STATE;
        if (guarded(m))
            guard = (own_grant_t){.g = word, .size = w[2], .type = (uint32_t)w[3]};
    }
    /* Dropping a Mutex<Box<T>> drops the box. */
    if (guard.g != 0 && (st = own_object_free(o, guard.g, guard.type)) != DSM_OK)
        DSM_WARN(LOG_MOD, "the object mutex 0x%llx guarded was not freed: %s", (unsigned long long)a,
                 dsm_strerror(st));
    return dsm_free(node, a);
}
