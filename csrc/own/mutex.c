/* Mutexes serialised at their home node (see dsm/own.h), both ways: the
 * delegated kind keeps its state (held, holder, FIFO of waiters) in the
 * home's process memory and answers LOCK requests when it grants them; the
 * CAS kind is a word of global memory taken by one-sided compare-and-swap.
 * A delegated mutex exists while the home has its state, which is how a
 * forged or freed handle is recognised. */
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "own/internal.h"
#include "own/msg.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG_MOD "own"
enum { LOCK_TIMEOUT_MS = 60000 };

typedef struct waiter {
    uint32_t rank;
    uint64_t request_id;        /* a remote waiter's request */
    pthread_cond_t *cond;       /* a local waiter's (on this home node) */
    int granted;
    struct waiter *next;
} waiter_t;

struct own_mutex_state {
    uint64_t addr;
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
                if (w->cond == NULL)
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

static int kind_of(dsm_own_mutex_t m) { return dsm_gaddr_colour(m); }

dsm_status_t dsm_own_mutex_new(dsm_node_t *node, int kind, dsm_own_mutex_t *out)
{
    own_node_t *o = own_lookup(node);
    if (out == NULL || (kind != DSM_OWN_MUTEX_DELEG && kind != DSM_OWN_MUTEX_CAS))
        return DSM_ERR_INVALID;
    *out = 0;
    if (o == NULL)
        return DSM_ERR_STATE;
    dsm_gaddr_t a;
    dsm_status_t st = dsm_alloc(node, own_self(o), 8, &a);
    if (st != DSM_OK)
        return st;
    a = dsm_gaddr_strip(a);   /* the tag bits carry the mutex's kind instead */
    uint64_t *w = dsm_local_ptr(node, a);
    __atomic_store_n(w, 0, __ATOMIC_RELEASE);
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
static dsm_status_t home_unlock(own_node_t *o, uint64_t addr, uint32_t rank)
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
        if (w->cond) {
            w->granted = 1;
            pthread_cond_signal(w->cond);
            pthread_mutex_unlock(&o->mlock);
            return DSM_OK;
        }
        pthread_mutex_unlock(&o->mlock);
        dsm_status_t st = dsm_fabric_am_reply(o->fabric, w->rank, w->request_id, DSM_OK, NULL, 0);
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
    pthread_mutex_lock(&o->mlock);
    st = home_lock(o, m.g, w, &granted);
    pthread_mutex_unlock(&o->mlock);
    if (st != DSM_OK || granted) {
        free(w);
        (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
    }
}

void own_on_unlock(void *ctx, const dsm_am_msg_t *msg)
{
    own_node_t *o = ctx;
    own_msg_t m;
    if (own_msg_decode(msg->data, msg->len, &m) != DSM_OK || m.type != OWN_MSG_UNLOCK || !own_is_local(o, m.g)) {
        DSM_WARN(LOG_MOD, "bad unlock from rank %u", msg->src_rank);
        return;
    }
    (void)home_unlock(o, m.g, msg->src_rank);
}

static dsm_status_t deleg_lock(own_node_t *o, uint64_t addr)
{
    if (own_is_local(o, addr)) {
        pthread_cond_t cond;
        pthread_cond_init(&cond, NULL);
        waiter_t w = {.rank = own_self(o), .cond = &cond};
        int granted;
        pthread_mutex_lock(&o->mlock);
        dsm_status_t st = home_lock(o, addr, &w, &granted);
        if (st == DSM_OK && !granted) {
            struct timespec ts;
            dsm_realtime_deadline(&ts, LOCK_TIMEOUT_MS);
            while (!w.granted)
                if (pthread_cond_timedwait(&cond, &o->mlock, &ts) != 0 && !w.granted) {
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
        pthread_mutex_unlock(&o->mlock);
        pthread_cond_destroy(&cond);
        return st;
    }
    own_msg_t m = {.type = OWN_MSG_LOCK, .g = addr};
    uint8_t buf[OWN_MSG_MAX_LEN];
    size_t n = own_msg_encode(&m, buf), rl = 0;
    own_count(o, C_MESSAGES, 2);
    own_count(o, C_BYTES, n);
    return dsm_fabric_am_request(o->fabric, dsm_gaddr_node(addr), DSM_AM_OWN_LOCK, buf, n, NULL, 0, &rl,
                                 LOCK_TIMEOUT_MS);
}

static dsm_status_t deleg_unlock(own_node_t *o, uint64_t addr)
{
    if (own_is_local(o, addr))
        return home_unlock(o, addr, own_self(o));
    own_msg_t m = {.type = OWN_MSG_UNLOCK, .g = addr};
    uint8_t buf[OWN_MSG_MAX_LEN];
    size_t n = own_msg_encode(&m, buf);
    own_count(o, C_MESSAGES, 1);
    own_count(o, C_BYTES, n);
    return dsm_fabric_am_send(o->fabric, dsm_gaddr_node(addr), DSM_AM_OWN_UNLOCK, buf, n);
}

/* ---- one-sided CAS ---------------------------------------------------------- */

static dsm_status_t cas_lock(own_node_t *o, uint64_t addr)
{
    uint64_t deadline = dsm_deadline_ns(LOCK_TIMEOUT_MS), me = (uint64_t)own_self(o) + 1;
    long pause_ns = 1000;
    for (;;) {
        uint64_t old = 0;
        if (!own_is_local(o, addr)) {
            own_count(o, C_MESSAGES, 2);
            own_count(o, C_BYTES, 24);
        }
        dsm_status_t st = dsm_cas(o->node, addr, 0, me, &old);
        if (st != DSM_OK || old == 0)
            return st;
        if (dsm_now_ns() > deadline)
            return DSM_ERR_TIMEOUT;
        /* Exponential backoff: spinning tries would starve the holder of the
         * CPU (and of the target's progress) on a small machine. */
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 256000)
            pause_ns *= 2;
    }
}

static dsm_status_t cas_unlock(own_node_t *o, uint64_t addr)
{
    uint64_t old = 0;
    if (!own_is_local(o, addr)) {
        own_count(o, C_MESSAGES, 2);
        own_count(o, C_BYTES, 16);
    }
    dsm_status_t st = dsm_swap(o->node, addr, 0, &old);
    if (st == DSM_OK && old != (uint64_t)own_self(o) + 1) {
        DSM_WARN(LOG_MOD, "unlock of mutex 0x%llx that this node did not hold", (unsigned long long)addr);
        if (old != 0)
            (void)dsm_swap(o->node, addr, old, NULL);   /* give it back to its holder */
        st = DSM_ERR_STATE;
    }
    return st;
}

/* ---- API -------------------------------------------------------------------- */

static dsm_status_t check(own_node_t *o, dsm_own_mutex_t m)
{
    if (o == NULL)
        return DSM_ERR_STATE;
    int k = kind_of(m);
    if ((k != DSM_OWN_MUTEX_DELEG && k != DSM_OWN_MUTEX_CAS) || dsm_gaddr_offset(m) == 0 ||
        (dsm_gaddr_offset(m) & 7)) {
        DSM_WARN(LOG_MOD, "0x%llx is not a mutex", (unsigned long long)m);
        return DSM_ERR_BAD_ADDR;
    }
    return DSM_OK;
}

dsm_status_t dsm_own_mutex_lock(dsm_node_t *node, dsm_own_mutex_t m)
{
    own_node_t *o = own_lookup(node);
    dsm_status_t st = check(o, m);
    if (st != DSM_OK)
        return st;
    st = kind_of(m) == DSM_OWN_MUTEX_DELEG ? deleg_lock(o, dsm_gaddr_strip(m)) : cas_lock(o, dsm_gaddr_strip(m));
    if (st == DSM_OK)
        own_count(o, C_LOCKS, 1);
    return st;
}

dsm_status_t dsm_own_mutex_unlock(dsm_node_t *node, dsm_own_mutex_t m)
{
    own_node_t *o = own_lookup(node);
    dsm_status_t st = check(o, m);
    if (st != DSM_OK)
        return st;
    return kind_of(m) == DSM_OWN_MUTEX_DELEG ? deleg_unlock(o, dsm_gaddr_strip(m))
                                             : cas_unlock(o, dsm_gaddr_strip(m));
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
    if (kind_of(m) == DSM_OWN_MUTEX_DELEG) {
        pthread_mutex_lock(&o->mlock);
        own_mutex_state_t **pp = find(o, a), *s = *pp;
        if (s == NULL || s->locked) {
            pthread_mutex_unlock(&o->mlock);
            return s == NULL ? DSM_ERR_BAD_ADDR : DSM_ERR_STATE;
        }
        *pp = s->chain;
        free(s);
        pthread_mutex_unlock(&o->mlock);
    } else {
        uint64_t *w = dsm_local_ptr(node, a);
        if (w == NULL)
            return DSM_ERR_BAD_ADDR;
        if (__atomic_load_n(w, __ATOMIC_ACQUIRE) != 0)
            return DSM_ERR_STATE;
    }
    return dsm_free(node, a);
}
