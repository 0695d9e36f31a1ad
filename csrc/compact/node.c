/* The compact module's node glue: attach (the store, its fabric region,
 * publication at join), peers' stores learnt at join (their region, and on
 * shm a read-only mirror of their memfd obtained with pidfd_getfd, which
 * catches up with the server's current layout before it is used), the
 * active-message handlers, the remap notices a compacting store sends to
 * mirroring peers before it punches old pages (on verbs: the range's new
 * key instead), and the store's thread that runs triggered and remote
 * compaction rounds. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include "compact/ids.h"
#include "compact/info.h"
#include "compact/internal.h"
#include "compact/layout.h"
#include "compact/wire.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

#define LOG_MOD "compact"

void dsm_compact_config_init(dsm_compact_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->range_size = 16u << 20;
    c->block_size = 4096;
    c->id_bits = 16;
    c->max_merges = 256;
    c->workers = 4;
}

static dsm_compact_t *lookup(dsm_node_t *node) { return node ? dsm_module_state(node, &dsm_compact_module) : NULL; }
dsm_compact_t *dsm_compact_of(dsm_node_t *node) { return lookup(node); }

/* ---- the store's thread ------------------------------------------------------ */

static void run_job(dsm_compact_t *c, compact_job_t *j)
{
    dsm_compact_stats_t stats = {0};
    dsm_status_t st = c->store ? dsm_compact_store_compact(c->store, j->cls, &stats) : DSM_ERR_STATE;
    if (j->local) {
        pthread_mutex_lock(&c->lock);
        j->stats = stats;
        j->status = st;
        j->done = 1;
        pthread_cond_broadcast(&c->done_cond);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    dsm_compact_msg_t r = {.type = DSM_COMPACT_MSG_COMPACT_REP, .stats = stats, .status = st};
    uint8_t buf[DSM_COMPACT_MSG_HEADER_LEN + 36];
    size_t n = dsm_compact_msg_encode(&r, buf);
    dsm_status_t rs = dsm_fabric_am_reply(c->fabric, j->rank, j->request_id, DSM_OK, buf, n);
    if (rs != DSM_OK)
        DSM_DEBUG(LOG_MOD, "compaction reply to rank %u: %s", j->rank, dsm_strerror(rs));
}

/* Compaction is background work: its merges and remaps take the CPU
 * that readers, the progress thread serving gets and RPCs, and the
 * application need, so on a host with fewer cores than runnable threads
 * the store's thread yields to them (the lowest nice value: it still
 * runs, so rounds finish and a preempted merge's locks come free). */
static void background_priority(void)
{
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), 19) != 0)
        DSM_DEBUG(LOG_MOD, "store thread keeps its priority: %s", strerror(errno));
}

static void *store_thread(void *arg)
{
    dsm_compact_t *c = arg;
    dsm_thread_name("dsm-compact", -1);
    background_priority();
    pthread_mutex_lock(&c->lock);
    while (!c->stopping) {
        if (c->jobs) {
            compact_job_t *j = c->jobs;
            c->jobs = j->next;
            pthread_mutex_unlock(&c->lock);
            int local = j->local;
            run_job(c, j);
            if (!local)
                free(j);
            pthread_mutex_lock(&c->lock);
            continue;
        }
        if (c->triggered) {
            c->triggered = 0;
            pthread_mutex_unlock(&c->lock);
            uint32_t mask = dsm_compact_store_take_triggers(c->store);
            for (int cls = 0; cls < DSM_COMPACT_NCLASSES; cls++)
                if (mask >> cls & 1) {
                    dsm_status_t st = dsm_compact_store_compact(c->store, cls, NULL);
                    if (st != DSM_OK)
                        DSM_WARN(LOG_MOD, "triggered compaction of class %d: %s", cls, dsm_strerror(st));
                }
            pthread_mutex_lock(&c->lock);
            continue;
        }
        pthread_cond_wait(&c->cond, &c->lock);
    }
    /* Requests nobody will serve now: answer them. */
    while (c->jobs) {
        compact_job_t *j = c->jobs;
        c->jobs = j->next;
        if (j->local) {
            j->status = DSM_ERR_CLOSED;
            j->done = 1;
            pthread_cond_broadcast(&c->done_cond);
            continue;
        }
        (void)dsm_fabric_am_reply(c->fabric, j->rank, j->request_id, DSM_ERR_CLOSED, NULL, 0);
        free(j);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

dsm_status_t dsm_compact_local_round(dsm_compact_t *c, int cls, dsm_compact_stats_t *stats)
{
    if (!c->thread_started || pthread_equal(pthread_self(), c->thread))
        return dsm_compact_store_compact(c->store, cls, stats);
    compact_job_t j = {.cls = cls, .local = 1};
    pthread_mutex_lock(&c->lock);
    if (c->stopping) {
        pthread_mutex_unlock(&c->lock);
        return DSM_ERR_CLOSED;
    }
    compact_job_t **pp = &c->jobs;
    while (*pp)
        pp = &(*pp)->next;
    *pp = &j;
    pthread_cond_signal(&c->cond);
    while (!j.done)
        pthread_cond_wait(&c->done_cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
    if (stats) {
        stats->merges += j.stats.merges;
        stats->moved += j.stats.moved;
        stats->kept += j.stats.kept;
        stats->refused_budget += j.stats.refused_budget;
    }
    return j.status;
}

static void on_trigger(void *ctx)
{
    dsm_compact_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->triggered = 1;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

/* ---- store hooks ---------------------------------------------------------------- */

/* Verbs re-registers the whole range once per batch (on_notify), not per
 * block; elsewhere the fabric is told per block (a no-op there). */
static void on_remapped(void *ctx, uint32_t vblock)
{
    dsm_compact_t *c = ctx;
    if (c->transport == DSM_TRANSPORT_VERBS) {
        __atomic_store_n(&c->rekey_pending, 1, __ATOMIC_RELEASE);
        return;
    }
    uint32_t bs = c->cfg.block_size;
    (void)dsm_fabric_region_remapped(c->region, (size_t)vblock * bs, bs);
}

/* Send an encoded message to every live member that attached the module
 * (but us) on the remap handler and wait for each answer. */
static void tell_peers(dsm_compact_t *c, const uint8_t *buf, size_t len, const char *what)
{
    uint32_t self = dsm_node_rank(c->node);
    for (uint32_t r = 0; r < DSM_MAX_RANKS; r++) {
        if (r == self || !__atomic_load_n(&c->peers[r].attached, __ATOMIC_ACQUIRE) ||
            dsm_node_peer_state(c->node, r) != DSM_OK)
            continue;
        size_t rl = 0;
        uint64_t t0 = dsm_now_ns();
        dsm_status_t st = dsm_fabric_am_request(c->fabric, r, DSM_AM_COMPACT_REMAP, buf, len, NULL, 0, &rl, 0);
        __atomic_fetch_add(&c->notice_ns, dsm_now_ns() - t0, __ATOMIC_RELAXED);
        __atomic_fetch_add(&c->notices, 1, __ATOMIC_RELAXED);
        if (st != DSM_OK && st != DSM_ERR_NO_HANDLER)
            DSM_WARN(LOG_MOD, "%s to rank %u: %s (its stale view fails validation)", what, r, dsm_strerror(st));
    }
}

/* Verbs: the NIC's registration still pins the pages the blocks showed
 * before the batch. Register the range anew (dsm_fabric_region_remapped)
 * and give every peer the new key before the old pages are punched. */
static void rekey(dsm_compact_t *c, uint64_t seq)
{
    if (!__atomic_exchange_n(&c->rekey_pending, 0, __ATOMIC_ACQ_REL))
        return;
    dsm_status_t st = dsm_fabric_region_remapped(c->region, 0, dsm_fabric_region_length(c->region));
    const void *key;
    size_t key_len;
    if (st == DSM_OK)
        st = dsm_fabric_region_key(c->region, &key, &key_len);
    if (st == DSM_OK && key_len > DSM_COMPACT_MSG_MAX_KEY)
        st = DSM_ERR_TOO_BIG;
    if (st != DSM_OK) {
        /* The old registration stays: reads of remapped blocks through it
         * fail validation and fall back to the RPC. */
        DSM_WARN(LOG_MOD, "cannot register the store's range anew: %s", dsm_strerror(st));
        return;
    }
    dsm_compact_msg_t m = {.type = DSM_COMPACT_MSG_REKEY_REQ, .seq = seq, .data = key, .len = (uint32_t)key_len};
    uint8_t buf[DSM_COMPACT_MSG_HEADER_LEN + 12 + DSM_COMPACT_MSG_MAX_KEY];
    size_t len = dsm_compact_msg_encode(&m, buf);
    tell_peers(c, buf, len, "new region key");
}

/* Tell every live member that attached the module (daemons and clients:
 * on shm any of them may map our memfd) which virtual blocks now show which
 * pages, and wait for each to answer, so that the pages punched next are no
 * longer in anyone's view. A stale view fails validation rather than lies:
 * a page a block does not show holds no object that came from that block
 * (punched zeros, or another block's objects), and every one-sided read
 * checks the origin block. */
static void on_notify(void *ctx, uint64_t seq, const uint8_t *pairs, uint32_t n)
{
    dsm_compact_t *c = ctx;
    if (c->before_notice)
        c->before_notice(c->hook_ctx, pairs, n);
    if (c->transport == DSM_TRANSPORT_VERBS)
        rekey(c, seq);
    if (c->transport != DSM_TRANSPORT_SHM)
        return;
    uint8_t *buf = malloc(DSM_COMPACT_MSG_MAX_LEN);
    if (buf == NULL)
        return;
    for (uint32_t done = 0; done < n;) {
        uint32_t k = n - done < DSM_COMPACT_MSG_MAX_REMAP ? n - done : DSM_COMPACT_MSG_MAX_REMAP;
        dsm_compact_msg_t m = {.type = DSM_COMPACT_MSG_REMAP_REQ, .seq = seq, .remap = pairs + 8 * (size_t)done, .nremap = k};
        tell_peers(c, buf, dsm_compact_msg_encode(&m, buf), "remap notice");
        done += k;
    }
    free(buf);
}

/* ---- handlers (progress context) ---------------------------------------------------- */

static void on_request(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_compact_t *c = ctx;
    if (msg->request_id == 0) {
        DSM_WARN(LOG_MOD, "store message from rank %u without a request id dropped", msg->src_rank);
        return;
    }
    /* A node that sends requests attached the module: from now on its
     * mirror (if any) hears of remaps. Set before a layout request is
     * served, so no remap batch falls between the layout and the notices. */
    if (msg->src_rank < DSM_MAX_RANKS && !__atomic_load_n(&c->peers[msg->src_rank].attached, __ATOMIC_ACQUIRE))
        __atomic_store_n(&c->peers[msg->src_rank].attached, 1, __ATOMIC_SEQ_CST);
    uint8_t reply[DSM_COMPACT_MSG_HEADER_LEN + 20 + DSM_COMPACT_MSG_MAX_DATA];
    size_t rl = 0;
    dsm_status_t st = c->store ? dsm_compact_store_serve(c->store, msg->data, msg->len, reply, sizeof reply, &rl)
                               : DSM_ERR_UNSUPPORTED;
    (void)dsm_fabric_am_reply(c->fabric, msg->src_rank, msg->request_id, st, reply, st == DSM_OK ? rl : 0);
}

static void on_compact(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_compact_t *c = ctx;
    if (msg->request_id == 0)
        return;
    dsm_compact_msg_t m;
    dsm_status_t st = dsm_compact_msg_decode(msg->data, msg->len, &m);
    if (st == DSM_OK && m.type != DSM_COMPACT_MSG_COMPACT_REQ)
        st = DSM_ERR_PROTO;
    if (st == DSM_OK && (c->store == NULL || !c->thread_started))
        st = DSM_ERR_UNSUPPORTED;
    compact_job_t *j = st == DSM_OK ? calloc(1, sizeof *j) : NULL;
    if (st == DSM_OK && j == NULL)
        st = DSM_ERR_NOMEM;
    if (st != DSM_OK) {
        (void)dsm_fabric_am_reply(c->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
        return;
    }
    j->rank = msg->src_rank;
    j->request_id = msg->request_id;
    j->cls = m.cls;
    pthread_mutex_lock(&c->lock);
    compact_job_t **pp = &c->jobs;
    while (*pp)
        pp = &(*pp)->next;
    *pp = j;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

/* Map pairs {vblock, page} into p's view (p->mlock held). MAP_FIXED
 * replaces a mapping atomically, so a reader copying from the mirror at the
 * same time sees the old page or the new one (or a mix, which the checksum
 * refuses), never a hole. A failed remap leaves the old view, which fails
 * validation (see on_notify): readers fall back to the RPC for that block. */
static dsm_status_t view_apply(compact_peer_t *p, uint32_t rank, const uint8_t *pairs, uint32_t n)
{
    dsm_status_t st = DSM_OK;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = dsm_get_u32(pairs + 8 * (size_t)i), t = dsm_get_u32(pairs + 8 * (size_t)i + 4);
        void *r = mmap(p->view + (size_t)v * p->block_size, p->block_size, PROT_READ,
                       MAP_SHARED | MAP_FIXED | MAP_NORESERVE, p->memfd, (off_t)t * p->block_size);
        if (r == MAP_FAILED) {
            DSM_WARN(LOG_MOD, "mirror of rank %u: cannot remap block %u: %s", rank, v, strerror(errno));
            st = DSM_ERR_NOMEM;
        }
    }
    return st;
}

static int pairs_in_range(const compact_peer_t *p, const uint8_t *pairs, uint32_t n)
{
    uint32_t nblocks = (uint32_t)(p->size / p->block_size);
    for (uint32_t i = 0; i < n; i++)
        if (dsm_get_u32(pairs + 8 * (size_t)i) >= nblocks || dsm_get_u32(pairs + 8 * (size_t)i + 4) >= nblocks)
            return 0;
    return 1;
}

enum { HELD_MAX = 64 };   /* notices kept for a view not caught up yet */

static void held_clear(compact_peer_t *p)
{
    while (p->held) {
        compact_notice_t *h = p->held;
        p->held = h->next;
        free(h);
    }
    p->held_tail = &p->held;
    p->nheld = 0;
}

/* Keep a notice for the catch-up (p->mlock held). A full list is dropped
 * and remembered: a layout older than what it dropped is fetched again. */
static void held_add(compact_peer_t *p, uint64_t seq, const uint8_t *pairs, uint32_t n)
{
    compact_notice_t *h = p->nheld < HELD_MAX ? malloc(sizeof *h + 8 * (size_t)n) : NULL;
    if (h == NULL) {
        held_clear(p);
        p->dropped_seq = seq;
        return;
    }
    h->seq = seq;
    h->n = n;
    h->next = NULL;
    memcpy(h->pairs, pairs, 8 * (size_t)n);
    *p->held_tail = h;
    p->held_tail = &h->next;
    p->nheld++;
}

/* A server's remap notice or new region key. A notice goes to our view of
 * its memfd: at once if the view caught up (and the notice is newer than
 * what it shows), else held for the catch-up. A key (verbs) replaces the
 * one we use for its region; only the region's owner sends it. */
static void on_remap(void *ctx, const dsm_am_msg_t *msg)
{

    dsm_compact_t *c = ctx;
    dsm_compact_msg_t m;
    dsm_status_t st = dsm_compact_msg_decode(msg->data, msg->len, &m);
    if (st == DSM_OK && m.type != DSM_COMPACT_MSG_REMAP_REQ && m.type != DSM_COMPACT_MSG_REKEY_REQ)
        st = DSM_ERR_PROTO;
    compact_peer_t *p = msg->src_rank < DSM_MAX_RANKS ? &c->peers[msg->src_rank] : NULL;
    if (st == DSM_OK && m.type == DSM_COMPACT_MSG_REKEY_REQ) {
        /* the server's range was registered anew (verbs) */
        st = p ? dsm_fabric_remote_region_rekey(c->fabric, msg->src_rank, DSM_COMPACT_REGION, m.data, m.len)
               : DSM_ERR_NO_PEER;
    } else if (st == DSM_OK && p) {
        pthread_mutex_lock(&p->mlock);
        if (p->view && !pairs_in_range(p, m.remap, m.nremap))
            st = DSM_ERR_PROTO;
        else if (p->view && p->mirror == NULL)
            held_add(p, m.seq, m.remap, m.nremap);
        else if (p->view && m.seq > p->seq) {
            uint64_t t0 = dsm_now_ns();
            st = view_apply(p, msg->src_rank, m.remap, m.nremap);
            p->seq = m.seq;
            __atomic_fetch_add(&c->apply_ns, dsm_now_ns() - t0, __ATOMIC_RELAXED);
            __atomic_fetch_add(&c->applied, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&p->mlock);
    }
    if (msg->request_id)
        (void)dsm_fabric_am_reply(c->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
}

/* Fetch rank's whole layout (all pages at one sequence) into *pairs. */
static dsm_status_t layout_fetch(dsm_compact_t *c, uint32_t rank, uint8_t **pairs, uint32_t *n, uint64_t *seq)
{
    uint32_t cap = 0, start = 0;
    *n = 0;
    do {
        dsm_compact_msg_t req = {.type = DSM_COMPACT_MSG_LAYOUT_REQ, .start = start}, rep;
        uint8_t in[DSM_COMPACT_MSG_HEADER_LEN + 20 + DSM_COMPACT_MSG_MAX_DATA];
        dsm_status_t st = dsm_compact_rpc(c, rank, DSM_AM_COMPACT_REQ, &req, DSM_COMPACT_MSG_LAYOUT_REP, &rep, in, sizeof in);
        if (st != DSM_OK)
            return st;
        if (start != 0 && rep.seq != *seq)
            return DSM_ERR_STATE;   /* remapped between pages: start over */
        if ((rep.next != 0 && rep.next <= start) || *n + rep.nremap > (uint32_t)(c->peers[rank].size / 4096))
            return DSM_ERR_PROTO;
        *seq = rep.seq;
        if (*n + rep.nremap > cap) {
            cap = 2 * (*n + rep.nremap);
            uint8_t *b = realloc(*pairs, 8 * (size_t)cap);
            if (b == NULL)
                return DSM_ERR_NOMEM;
            *pairs = b;
        }
        if (rep.nremap)
            memcpy(*pairs + 8 * (size_t)*n, rep.remap, 8 * (size_t)rep.nremap);
        *n += rep.nremap;
        start = rep.next;
    } while (start != 0);
    return DSM_OK;
}

int dsm_compact_mirror_catch_up(dsm_compact_t *c, uint32_t rank)
{
    compact_peer_t *p = &c->peers[rank];
    if (__atomic_load_n(&p->mirror, __ATOMIC_ACQUIRE))
        return 1;
    pthread_mutex_lock(&p->mlock);
    int mine = p->view != NULL && !p->catching;
    p->catching = 1;
    pthread_mutex_unlock(&p->mlock);
    if (!mine)
        return 0;
    /* The RPCs run without the lock: the progress thread that delivers
     * their replies also delivers notices, which are held meanwhile. */
    uint8_t *pairs = NULL;
    uint32_t n = 0;
    uint64_t seq = 0;
    dsm_status_t st = DSM_ERR_STATE;
    for (int attempt = 0; attempt < 8 && st == DSM_ERR_STATE; attempt++) {
        st = layout_fetch(c, rank, &pairs, &n, &seq);
        if (st != DSM_OK)
            continue;
        pthread_mutex_lock(&p->mlock);
        if (seq < p->dropped_seq) {
            st = DSM_ERR_STATE;   /* older than notices we had to drop */
        } else if (!pairs_in_range(p, pairs, n)) {
            st = DSM_ERR_PROTO;
        } else {
            st = view_apply(p, rank, pairs, n);
            p->seq = seq;
            for (compact_notice_t *h = p->held; h && st == DSM_OK; h = h->next)
                if (h->seq > p->seq && pairs_in_range(p, h->pairs, h->n)) {
                    st = view_apply(p, rank, h->pairs, h->n);
                    p->seq = h->seq;
                }
            held_clear(p);
            if (st == DSM_OK)
                __atomic_store_n(&p->mirror, p->view, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&p->mlock);
    }
    free(pairs);
    if (st != DSM_OK) {
        /* catching stays set: this peer's reads use the fabric from now on */
        DSM_WARN(LOG_MOD, "rank %u: mirror cannot catch up (%s); one-sided reads use the fabric", rank,
                 dsm_strerror(st));
        pthread_mutex_lock(&p->mlock);
        held_clear(p);
        pthread_mutex_unlock(&p->mlock);
        return 0;
    }
    DSM_DEBUG(LOG_MOD, "rank %u: mirror caught up at layout %llu (%u blocks remapped)", rank,
              (unsigned long long)seq, n);
    return 1;
}

/* ---- peers ------------------------------------------------------------------------------ */

/* Map a same-host peer's memfd read-only (shm only). Any failure leaves the
 * peer on the fabric path, which is slower but equally correct. */
static void mirror_open(dsm_compact_t *c, uint32_t rank, const dsm_compact_info_t *info)
{
    compact_peer_t *p = &c->peers[rank];
    int pfd = pidfd_open((pid_t)info->pid, 0);
    if (pfd < 0) {
        DSM_DEBUG(LOG_MOD, "rank %u: pidfd_open: %s; reads go through the fabric", rank, strerror(errno));
        return;
    }
    int fd = pidfd_getfd(pfd, info->memfd, 0);
    close(pfd);
    if (fd < 0) {
        DSM_DEBUG(LOG_MOD, "rank %u: pidfd_getfd: %s; reads go through the fabric", rank, strerror(errno));
        return;
    }
    void *m = mmap(NULL, info->size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&p->mlock);
    p->memfd = fd;
    p->view = m;   /* published as the mirror once it caught up */
    pthread_mutex_unlock(&p->mlock);
    DSM_DEBUG(LOG_MOD, "rank %u: store mapped (%llu bytes)", rank, (unsigned long long)info->size);
}

static dsm_status_t on_peer_join(void *ctx, uint32_t rank)
{
    dsm_compact_t *c = ctx;
    if (rank >= DSM_MAX_RANKS)
        return DSM_ERR_INVALID;
    if (rank == dsm_node_rank(c->node) && c->store)
        dsm_compact_store_set_rank(c->store, rank);
    uint8_t value[DSM_NODE_MAX_VALUE_BYTES];
    size_t len = 0;
    compact_peer_t *p = &c->peers[rank];
    if (dsm_node_peer_value(c->node, rank, DSM_COMPACT_PUBLISH_KEY, value, sizeof value, &len) != DSM_OK)
        return DSM_OK;   /* no store attached there */
    dsm_compact_info_t info;
    if (dsm_compact_info_decode(value, len, &info) != DSM_OK) {
        DSM_WARN(LOG_MOD, "rank %u published a malformed store", rank);
        return DSM_ERR_PROTO;
    }
    __atomic_store_n(&p->attached, 1, __ATOMIC_RELEASE);
    if (!(info.flags & DSM_COMPACT_INFO_SERVES))
        return DSM_OK;
    if (p->serves)
        return DSM_OK;   /* a rank that came back keeps what it had (same process) */
    p->size = info.size;
    p->block_size = info.block_size;
    p->key_tag = info.key_tag;
    if (rank != dsm_node_rank(c->node)) {
        dsm_status_t st = dsm_fabric_remote_region_add(c->fabric, rank, DSM_COMPACT_REGION, info.base, info.size,
                                                       info.key, info.key_len);
        if (st != DSM_OK && st != DSM_ERR_EXISTS)
            return st;
        if (c->transport == DSM_TRANSPORT_SHM)
            mirror_open(c, rank, &info);
    }
    __atomic_store_n(&p->serves, 1, __ATOMIC_RELEASE);
    return DSM_OK;
}

/* ---- attach / teardown -------------------------------------------------------------------- */

static void compact_free(void *state)
{
    dsm_compact_t *c = state;
    if (c == NULL)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->lock);
        c->stopping = 1;
        pthread_cond_signal(&c->cond);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->thread, NULL);
    }
    for (int r = 0; r < DSM_MAX_RANKS; r++) {
        compact_peer_t *p = &c->peers[r];
        if (p->view)
            munmap(p->view, p->size);
        if (p->memfd >= 0)
            close(p->memfd);
        held_clear(p);
        pthread_mutex_destroy(&p->mlock);
    }
    if (c->region)
        dsm_fabric_region_unregister(c->region);
    dsm_compact_store_destroy(c->store);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    pthread_cond_destroy(&c->done_cond);
    free(c);
}

dsm_status_t dsm_compact_attach(dsm_node_t *node, const dsm_compact_config_t *config)
{
    if (node == NULL)
        return DSM_ERR_INVALID;
    dsm_fabric_t *fabric = dsm_node_fabric(node);
    if (fabric == NULL)
        return DSM_ERR_STATE;
    if (lookup(node) != NULL) {
        /* the caller's slip, not the node's fault: the store attached stays */
        DSM_WARN(LOG_MOD, "a CoRM store is attached to this node already (dsm_start attaches one)");
        return DSM_ERR_EXISTS;
    }
    dsm_compact_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSM_ERR_NOMEM;
    c->node = node;
    c->fabric = fabric;
    c->transport = dsm_node_config(node)->transport;
    if (config)
        c->cfg = *config;
    else
        dsm_compact_config_init(&c->cfg);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    pthread_cond_init(&c->done_cond, NULL);
    for (int r = 0; r < DSM_MAX_RANKS; r++) {
        c->peers[r].memfd = -1;
        pthread_mutex_init(&c->peers[r].mlock, NULL);
        c->peers[r].held_tail = &c->peers[r].held;
    }
    dsm_status_t st = dsm_node_add_module(node, &dsm_compact_module, c);
    if (st != DSM_OK) {
        DSM_ERROR(LOG_MOD, "cannot attach the store: %s", dsm_strerror(st));
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        pthread_cond_destroy(&c->done_cond);
        free(c);
        return st;
    }
    /* From here on the node owns c and frees it whatever fails below. */
    while (c->key_tag == 0)
        if (getrandom(&c->key_tag, sizeof c->key_tag, 0) != sizeof c->key_tag)
            c->key_tag = (uint16_t)(uintptr_t)c | 1;
    dsm_compact_info_t info = {.pid = (uint32_t)getpid(), .memfd = -1};
    if (c->cfg.range_size > 0) {
        dsm_compact_store_hooks_t hooks = {.ctx = c, .remapped = on_remapped, .notify = on_notify, .trigger = on_trigger};
        st = dsm_compact_store_create(&c->cfg, DSM_MAX_RANKS, c->key_tag, &hooks, &c->store);
        if (st != DSM_OK) {
            DSM_ERROR(LOG_MOD, "cannot create the store (range %llu, block %u, %u-bit IDs): %s",
                      (unsigned long long)c->cfg.range_size, c->cfg.block_size, c->cfg.id_bits, dsm_strerror(st));
            return st;
        }
        /* tcp: the emulated get copies from this range on every access, so a
         * remap shows at once; shm peers map the memfd (mirror_open). */
        st = dsm_fabric_region_register(fabric, dsm_compact_store_base(c->store), dsm_compact_store_size(c->store),
                                        &c->region);
        if (st != DSM_OK)
            return st;
        const void *key;
        size_t key_len;
        if ((st = dsm_fabric_region_key(c->region, &key, &key_len)) != DSM_OK)
            return st;
        if (key_len > DSM_NODE_MAX_VALUE_BYTES / 2)
            return DSM_ERR_TOO_BIG;
        info.base = (uint64_t)(uintptr_t)dsm_compact_store_base(c->store);
        info.size = dsm_compact_store_size(c->store);
        info.block_size = c->cfg.block_size;
        info.key_tag = c->key_tag;
        info.flags = DSM_COMPACT_INFO_SERVES;
        info.memfd = dsm_compact_store_memfd(c->store);
        info.key = key;
        info.key_len = key_len;
        if (dsm_thread_start(&c->thread, NULL, store_thread, c) != 0)
            return DSM_ERR_NOMEM;
        c->thread_started = 1;
    }
    uint8_t value[DSM_NODE_MAX_VALUE_BYTES];
    size_t vlen = dsm_compact_info_encode(&info, value);
    if ((st = dsm_node_publish(node, DSM_COMPACT_PUBLISH_KEY, value, vlen)) != DSM_OK ||
        (st = dsm_node_on_peer_join(node, on_peer_join, c)) != DSM_OK)
        return st;
    return DSM_OK;
}

static dsm_status_t attach(dsm_node_t *node, void *arg) { return dsm_compact_attach(node, arg); }

static const dsm_am_handler_t handlers[DSM_COMPACT_AM_COUNT] = {
    [DSM_COMPACT_AM_REQ] = on_request,
    [DSM_COMPACT_AM_COMPACT] = on_compact,
    [DSM_COMPACT_AM_REMAP] = on_remap,
};
static const char *const keys[] = {DSM_COMPACT_PUBLISH_KEY, NULL};
dsm_module_t dsm_compact_module = {
    .name = "compact",
    .am_count = DSM_COMPACT_AM_COUNT,
    .handlers = handlers,
    .keys = keys,
    .attach = attach,
    .detach = compact_free,
};

