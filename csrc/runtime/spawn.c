/* Remote execution and the runtime's own messages: spawn/join/cancel of
 * registered functions on any node, and reading a peer's stats counters. A
 * spawn ships (function id, task token, argument bytes) one way, from the
 * caller's thread; the target runs the function on a thread of its job pool
 * (handlers must not block the progress thread) and sends the result bytes
 * back one way under the token (RESULT), which completes the caller's task:
 * no caller thread waits out a spawn (starting one was a median 259 us,
 * p75 1 ms, of a spawn on a loaded 2-core host). A spawn sent as a request
 * (request id set: older callers, tools) is answered as a reply instead. A
 * peer's death or this node's destroy fails the tasks still waiting on it.
 * A cancel ships the token: the target raises the stop flag of the job
 * that the caller's token names. As the job's thread starts, the target
 * tells the caller (the token, one way): a caller may wait for its function
 * to be running before it acts. A spawn to this node runs on a thread of
 * its own task. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"
#include "runtime/node_internal.h"
#include "runtime/spawn_wire.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

struct dsm_stop {
    atomic_int requested;
    atomic_uint_fast64_t since_ns;   /* when it was raised (0: not yet) */
};

/* A spawn as the node's lists hold it, under the node's lock: a job by its
 * caller's rank and token, a task by its target's rank and token. */
typedef struct spawn_entry {
    uint32_t rank;
    uint64_t token;
    struct spawn_entry *next;
} spawn_entry_t;

struct dsm_task {
    dsm_node_t *node;
    spawn_entry_t entry;   /* the target; the token names the job there, for a cancel */
    uint32_t fn_id;
    int notify;            /* asked for the start notice */
    atomic_int cancel_requested;  /* a cancel of a local job that may not be listed yet */
    uint8_t *request;      /* {u32 fn id, u64 token, args} */
    size_t request_len;
    uint8_t *result;
    size_t result_len;
    dsm_status_t status;
    int started, done;
    int has_thread;        /* a spawn here: its thread, joined by dsm_join */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

typedef struct spawn_job {
    dsm_node_t *node;
    dsm_fn_t fn;
    uint32_t fn_id;
    spawn_entry_t entry;      /* the caller */
    uint64_t request_id;      /* 0: the caller wants a RESULT message, not a reply */
    int notify;               /* the caller wants the start notice */
    dsm_stop_t stop;
    size_t args_len;
    uint8_t args[];
} spawn_job_t;


static atomic_uint_fast64_t next_token = 1;
static const dsm_stop_t never_stopped;
static _Thread_local const dsm_stop_t *current_stop;

const dsm_stop_t *dsm_spawn_stop(void) { return current_stop ? current_stop : &never_stopped; }

int dsm_stop_requested(const dsm_stop_t *stop)
{
    return stop && atomic_load_explicit(&((dsm_stop_t *)stop)->requested, memory_order_relaxed);
}

/* Raise a job's stop flag, remembering when first (for dsm_node_overdue_job). */
static void stop_raise(dsm_stop_t *stop)
{
    uint_fast64_t zero = 0;
    atomic_compare_exchange_strong(&stop->since_ns, &zero, dsm_now_ns());
    atomic_store(&stop->requested, 1);
}

#define CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static void entry_add(dsm_node_t *n, spawn_entry_t **list, spawn_entry_t *e)
{
    pthread_mutex_lock(&n->lock);
    e->next = *list;
    *list = e;
    pthread_mutex_unlock(&n->lock);
}

static void entry_remove(dsm_node_t *n, spawn_entry_t **list, spawn_entry_t *e)
{
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t **p = list; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    pthread_mutex_unlock(&n->lock);
}

/* Cancels that came before their spawn: the caller sends a spawn from its
 * task's thread and a cancel from its own, so a cancel may overtake the
 * spawn it names. The last few are remembered (tokens never repeat; one
 * whose job had already finished just ages out). */
enum { EARLY_CANCELS = 64 };
static struct {
    pthread_mutex_t lock;
    struct { uint32_t rank; uint64_t token; } seen[EARLY_CANCELS];
    unsigned next;
} early = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void early_cancel_remember(uint32_t src_rank, uint64_t token)
{
    pthread_mutex_lock(&early.lock);
    early.seen[early.next % EARLY_CANCELS].rank = src_rank;
    early.seen[early.next % EARLY_CANCELS].token = token;
    early.next++;
    pthread_mutex_unlock(&early.lock);
}

static int early_cancel_seen(uint32_t src_rank, uint64_t token)
{
    int seen = 0;
    pthread_mutex_lock(&early.lock);
    for (unsigned i = 0; i < EARLY_CANCELS && !seen; i++)
        seen = early.seen[i].token == token && early.seen[i].rank == src_rank && token != 0;
    pthread_mutex_unlock(&early.lock);
    return seen;
}

/* Raise the stop flag of (src_rank, token)'s job; 0 if none runs here. */
static int jobs_stop(dsm_node_t *n, uint32_t src_rank, uint64_t token)
{
    int found = 0;
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t *e = n->jobs; e; e = e->next)
        if (e->rank == src_rank && e->token == token) {
            stop_raise(&CONTAINER(e, spawn_job_t, entry)->stop);
            found = 1;
        }
    pthread_mutex_unlock(&n->lock);
    return found;
}

int dsm_node_stop_jobs(dsm_node_t *n)
{
    if (!n) return 0;
    int running = 0;
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t *e = n->jobs; e; e = e->next, running++)
        stop_raise(&CONTAINER(e, spawn_job_t, entry)->stop);
    pthread_mutex_unlock(&n->lock);
    return running;
}

int dsm_node_overdue_job(dsm_node_t *n, uint32_t grace_ms, char *what, size_t cap)
{
    if (!n) return 0;
    uint64_t now = dsm_now_ns(), oldest = 0;
    int overdue = 0;
    uint32_t fn_id = 0, src = 0;
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t *e = n->jobs; e; e = e->next) {
        spawn_job_t *j = CONTAINER(e, spawn_job_t, entry);
        uint64_t since = atomic_load(&j->stop.since_ns);
        if (since == 0 || now - since < (uint64_t)grace_ms * 1000000u) continue;
        overdue++;
        if (oldest == 0 || since < oldest) {
            oldest = since;
            fn_id = j->fn_id;
            src = e->rank;
        }
    }
    pthread_mutex_unlock(&n->lock);
    if (overdue && what && cap) {
        const char *name = NULL;
        dsm_registry_find(fn_id, &name);
        snprintf(what, cap, "workload '%s' (from rank %u) ignored its stop flag for %.1f s after a cancel",
                 name ? name : "?", src, (double)(now - oldest) / 1e9);
    }
    return overdue;
}

static void spawn_finished(dsm_node_t *n)
{
    pthread_mutex_lock(&n->lock);
    n->spawns_running--;
    pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->lock);
}

/* Runs job's function on the calling thread. The job was added to the
 * node's list (entry_add) by whoever received it, before its thread started,
 * so a cancel that follows the spawn always finds it; run_fn removes it. */
static dsm_status_t run_fn(spawn_job_t *job, uint8_t **result, size_t *result_len)
{
    dsm_node_t *n = job->node;
    *result = malloc(DSM_SPAWN_MAX_RESULT);
    *result_len = 0;
    if (!*result) {
        entry_remove(n, &n->jobs, &job->entry);
        return DSM_ERR_NOMEM;
    }
    current_stop = &job->stop;
    dsm_status_t st = job->fn(n, job->args, job->args_len, *result, DSM_SPAWN_MAX_RESULT, result_len);
    current_stop = NULL;
    entry_remove(n, &n->jobs, &job->entry);
    if (*result_len > DSM_SPAWN_MAX_RESULT) {
        *result_len = 0;
        st = DSM_ERR_TOO_BIG;
    }
    atomic_fetch_add_explicit(&n->spawns_run, 1, memory_order_relaxed);
    return st;
}

/* A spawn's answer: a reply to its request, or a RESULT message {token,
 * status, result} for a one-way spawn. In a handler (the progress thread)
 * only sends that do not block: a reply, or a post. */
static void answer(dsm_node_t *n, uint32_t rank, uint64_t request_id, uint64_t token, dsm_status_t st,
                   const void *data, size_t len, int in_handler)
{
    if (request_id) {
        dsm_fabric_am_reply(n->fabric, rank, request_id, st, data, len);
        return;
    }
    uint8_t small[DSM_SPAWN_RESULT_HEADER_LEN], *buf = len ? malloc(DSM_SPAWN_RESULT_HEADER_LEN + len) : small;
    if (buf == NULL) {
        buf = small;
        st = DSM_ERR_NOMEM;
        len = 0;
    }
    dsm_spawn_result_encode(buf, token, st);
    if (len) memcpy(buf + DSM_SPAWN_RESULT_HEADER_LEN, data, len);
    /* a caller that is gone learns nothing; its peer-death callback fails the task */
    if (in_handler)
        (void)dsm_fabric_am_post(n->fabric, rank, DSM_AM_RUNTIME_RESULT, buf, DSM_SPAWN_RESULT_HEADER_LEN + len);
    else
        (void)dsm_fabric_am_send(n->fabric, rank, DSM_AM_RUNTIME_RESULT, buf, DSM_SPAWN_RESULT_HEADER_LEN + len);
    if (buf != small) free(buf);
}

static void spawn_job_run(void *arg)
{
    spawn_job_t *job = arg;
    if (job->notify) {
        uint8_t token[DSM_SPAWN_TOKEN_LEN];
        dsm_spawn_token_encode(token, job->entry.token);
        /* a caller that is gone learns nothing; the job runs on to its reply */
        (void)dsm_fabric_am_send(job->node->fabric, job->entry.rank, DSM_AM_RUNTIME_STARTED, token, sizeof token);
    }
    uint8_t *result;
    size_t result_len;
    dsm_status_t st = run_fn(job, &result, &result_len);
    answer(job->node, job->entry.rank, job->request_id, job->entry.token, st, result, result_len, 0);
    free(result);
    spawn_finished(job->node);
    free(job);
}

static void on_spawn(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_node_t *n = ctx;
    dsm_spawn_header_t h;
    if (dsm_spawn_header_decode(msg->data, msg->len, &h) != DSM_OK) {
        /* a one-way spawn without a token cannot be answered */
        if (msg->request_id) answer(n, msg->src_rank, msg->request_id, 0, DSM_ERR_PROTO, NULL, 0, 1);
        else DSM_WARN("spawn", "rank %u: malformed spawn from rank %u dropped", n->rank, msg->src_rank);
        return;
    }
    dsm_fn_t fn = dsm_registry_find(h.fn_id, NULL);
    if (!fn) {
        DSM_WARN("spawn", "rank %u: rank %u asked for unknown function id %08x", n->rank, msg->src_rank, h.fn_id);
        answer(n, msg->src_rank, msg->request_id, h.token, DSM_ERR_NO_HANDLER, NULL, 0, 1);
        return;
    }
    size_t args_len = msg->len - DSM_SPAWN_HEADER_LEN;
    spawn_job_t *job = malloc(sizeof *job + args_len);
    if (!job) {
        answer(n, msg->src_rank, msg->request_id, h.token, DSM_ERR_NOMEM, NULL, 0, 1);
        return;
    }
    *job = (spawn_job_t){.node = n, .fn = fn, .fn_id = h.fn_id, .entry = {.rank = msg->src_rank, .token = h.token},
                         .notify = h.notify, .request_id = msg->request_id, .args_len = args_len};
    memcpy(job->args, (const uint8_t *)msg->data + DSM_SPAWN_HEADER_LEN, args_len);
    pthread_mutex_lock(&n->lock);
    int closed = n->closed && n->joined;
    int busy = !closed && n->spawns_running >= DSM_SPAWN_MAX_RUNNING;
    if (!closed && !busy) n->spawns_running++;
    pthread_mutex_unlock(&n->lock);
    if (busy) {
        DSM_WARN("spawn", "rank %u: refused a spawn from rank %u: %d spawns already running", n->rank,
                 msg->src_rank, DSM_SPAWN_MAX_RUNNING);
        answer(n, msg->src_rank, msg->request_id, h.token, DSM_ERR_BUSY, NULL, 0, 1);
        free(job);
        return;
    }
    if (!closed) {
        entry_add(n, &n->jobs, &job->entry);
        if (early_cancel_seen(job->entry.rank, job->entry.token)) stop_raise(&job->stop);
    }
    dsm_status_t st = closed ? DSM_ERR_CLOSED : dsm_spawn_pool_run(n->pool, spawn_job_run, job);
    if (st != DSM_OK) {
        answer(n, msg->src_rank, msg->request_id, h.token, st, NULL, 0, 1);
        if (!closed) {
            entry_remove(n, &n->jobs, &job->entry);
            spawn_finished(n);
        }
        free(job);
    }
}

/* Stats travel as an array of little-endian u64, in dsm_stats_t's field order. */
enum { STATS_WORDS = sizeof(dsm_stats_t) / sizeof(uint64_t) };

static void on_stats(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_node_t *n = ctx;
    if (!msg->request_id) return;
    dsm_stats_t s;
    dsm_node_stats(n, &s);
    uint64_t words[STATS_WORDS];
    memcpy(words, &s, sizeof s);
    uint8_t out[sizeof s];
    for (size_t i = 0; i < STATS_WORDS; i++) dsm_put_u64(out + 8 * i, words[i]);
    dsm_fabric_am_reply(n->fabric, msg->src_rank, msg->request_id, DSM_OK, out, sizeof out);
}

static void on_cancel(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_node_t *n = ctx;
    uint64_t token;
    if (dsm_spawn_token_decode(msg->data, msg->len, &token) != DSM_OK) {
        DSM_WARN("spawn", "rank %u: malformed cancel from rank %u (%zu bytes)", n->rank, msg->src_rank, msg->len);
        /* a sender that asked for an answer gets one at once, not its op timeout */
        if (msg->request_id) dsm_fabric_am_reply(n->fabric, msg->src_rank, msg->request_id, DSM_ERR_PROTO, NULL, 0);
        return;
    }
    /* No such job yet: the cancel overtook its spawn (or crossed its reply). */
    if (!jobs_stop(n, msg->src_rank, token)) early_cancel_remember(msg->src_rank, token);
}

static void task_set_started(dsm_task_t *t)
{
    pthread_mutex_lock(&t->lock);
    t->started = 1;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

/* A peer began a function this node spawned there. A token this node's
 * spawns to that peer do not hold (the task ended, or no such spawn) is
 * dropped: the message only ever tells, it asks for nothing. */
static void on_started(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_node_t *n = ctx;
    uint64_t token;
    if (dsm_spawn_token_decode(msg->data, msg->len, &token) != DSM_OK) {
        DSM_WARN("spawn", "rank %u: malformed start notice from rank %u (%zu bytes)", n->rank, msg->src_rank,
                 msg->len);
        return;
    }
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t *e = n->tasks; e; e = e->next)
        if (e->token == token && e->rank == msg->src_rank) {
            task_set_started(CONTAINER(e, dsm_task_t, entry));
            break;
        }
    pthread_mutex_unlock(&n->lock);
}

/* Complete task t (its entry already off the node's list): n->lock held. */
static void task_complete_locked(dsm_task_t *t, dsm_status_t st, uint8_t *result, size_t result_len)
{
    pthread_mutex_lock(&t->lock);
    t->status = st;
    t->result = result;
    t->result_len = result_len;
    t->done = 1;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

/* A one-way spawn's result. A token no task of this node's to that peer
 * holds (failed already as the peer was thought dead) is dropped. */
static void on_result(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_node_t *n = ctx;
    uint64_t token;
    dsm_status_t st;
    if (dsm_spawn_result_decode(msg->data, msg->len, &token, &st) != DSM_OK) {
        DSM_WARN("spawn", "rank %u: malformed spawn result from rank %u (%zu bytes)", n->rank, msg->src_rank,
                 msg->len);
        return;
    }
    size_t len = msg->len - DSM_SPAWN_RESULT_HEADER_LEN;
    uint8_t *result = len ? malloc(len) : NULL;
    if (len && result == NULL) {
        st = DSM_ERR_NOMEM;
        len = 0;
    } else if (len) {
        memcpy(result, (const uint8_t *)msg->data + DSM_SPAWN_RESULT_HEADER_LEN, len);
    }
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t **p = &n->tasks; *p; p = &(*p)->next)
        if ((*p)->token == token && (*p)->rank == msg->src_rank) {
            dsm_task_t *t = CONTAINER(*p, dsm_task_t, entry);
            *p = (*p)->next;
            task_complete_locked(t, st, result, len);
            result = NULL;
            break;
        }
    pthread_mutex_unlock(&n->lock);
    free(result);
}

/* Fail the tasks waiting on `rank` (every peer: UINT32_MAX) with st. */
static void tasks_fail(dsm_node_t *n, uint32_t rank, dsm_status_t st)
{
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t **p = &n->tasks; *p;) {
        if (rank != UINT32_MAX && (*p)->rank != rank) {
            p = &(*p)->next;
            continue;
        }
        dsm_task_t *t = CONTAINER(*p, dsm_task_t, entry);
        *p = (*p)->next;
        task_complete_locked(t, st, NULL, 0);
    }
    pthread_mutex_unlock(&n->lock);
}

static void on_peer_dead(void *ctx, uint32_t rank) { tasks_fail(ctx, rank, DSM_ERR_PEER_DEAD); }

/* A ping that asks for an answer is echoed; a one-way ping is a poke. */
static void on_ping(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_node_t *n = ctx;
    if (msg->request_id)
        dsm_fabric_am_reply(n->fabric, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
    else
        atomic_fetch_add_explicit(&n->pokes, 1, memory_order_release);
}

dsm_status_t dsm_node_poke(dsm_node_t *n, uint32_t rank)
{
    if (!n) return DSM_ERR_INVALID;
    if (rank == n->rank) {
        atomic_fetch_add_explicit(&n->pokes, 1, memory_order_release);
        return DSM_OK;
    }
    dsm_status_t st = dsm_node_peer_state(n, rank);
    return st != DSM_OK ? st : dsm_fabric_am_send(n->fabric, rank, DSM_AM_RUNTIME_PING, NULL, 0);
}

uint64_t dsm_node_pokes(const dsm_node_t *n)
{
    return n ? atomic_load_explicit(&n->pokes, memory_order_acquire) : 0;
}

dsm_status_t dsm_spawn_attach(dsm_node_t *n)
{
    dsm_status_t st = dsm_fabric_am_register(n->fabric, DSM_AM_RUNTIME_SPAWN, on_spawn, n);
    if (st == DSM_OK) st = dsm_fabric_am_register(n->fabric, DSM_AM_RUNTIME_STATS, on_stats, n);
    if (st == DSM_OK) st = dsm_fabric_am_register(n->fabric, DSM_AM_RUNTIME_PING, on_ping, n);
    if (st == DSM_OK) st = dsm_fabric_am_register(n->fabric, DSM_AM_RUNTIME_CANCEL, on_cancel, n);
    if (st == DSM_OK) st = dsm_fabric_am_register(n->fabric, DSM_AM_RUNTIME_STARTED, on_started, n);
    if (st == DSM_OK) st = dsm_fabric_am_register(n->fabric, DSM_AM_RUNTIME_RESULT, on_result, n);
    if (st == DSM_OK && !(n->pool = dsm_spawn_pool_new())) st = DSM_ERR_NOMEM;
    if (st == DSM_OK) dsm_node_on_peer_dead(n, on_peer_dead, n);
    return st;
}

void dsm_spawn_detach(dsm_node_t *n)
{
    dsm_spawn_pool_destroy(n->pool);
    n->pool = NULL;
    tasks_fail(n, UINT32_MAX, DSM_ERR_CLOSED);
}

dsm_status_t dsm_node_peer_stats(dsm_node_t *n, uint32_t rank, dsm_stats_t *out)
{
    if (rank == n->rank) {
        dsm_node_stats(n, out);
        return DSM_OK;
    }
    dsm_status_t st = dsm_node_peer_state(n, rank);
    if (st != DSM_OK) return st;
    uint8_t reply[sizeof(dsm_stats_t)];
    size_t len = 0;
    st = dsm_fabric_am_request(n->fabric, rank, DSM_AM_RUNTIME_STATS, NULL, 0, reply, sizeof reply, &len, 0);
    if (st != DSM_OK) return st;
    if (len != sizeof reply) return DSM_ERR_PROTO;
    uint64_t words[STATS_WORDS];
    for (size_t i = 0; i < STATS_WORDS; i++) words[i] = dsm_get_u64(reply + 8 * i);
    memcpy(out, words, sizeof *out);
    return DSM_OK;
}

/* ---- the caller's side -------------------------------------------------- */

/* A spawn to this node: its function on this task's thread. */
static void *task_main(void *arg)
{
    dsm_task_t *t = arg;
    dsm_thread_name("dsm-task", -1);
    dsm_node_t *n = t->node;
    uint8_t *result = NULL;
    size_t result_len = 0;
    dsm_status_t st;
    {
        spawn_job_t *job = malloc(sizeof *job + t->request_len - DSM_SPAWN_HEADER_LEN);
        if (job) {
            *job = (spawn_job_t){.node = n, .fn = dsm_registry_find(t->fn_id, NULL), .fn_id = t->fn_id,
                                 .entry = {.rank = n->rank, .token = t->entry.token},
                                 .args_len = t->request_len - DSM_SPAWN_HEADER_LEN};
            memcpy(job->args, t->request + DSM_SPAWN_HEADER_LEN, job->args_len);
            if (job->fn) {
                entry_add(n, &n->jobs, &job->entry);
                if (atomic_load(&t->cancel_requested)) stop_raise(&job->stop);
                task_set_started(t);
            }
            st = job->fn ? run_fn(job, &result, &result_len) : DSM_ERR_NO_HANDLER;
            free(job);
        } else {
            st = DSM_ERR_NOMEM;
        }
    }
    pthread_mutex_lock(&t->lock);
    t->status = st;
    t->result = result;
    t->result_len = result_len;
    t->done = 1;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

dsm_status_t dsm_spawn(dsm_node_t *n, uint32_t rank, const char *fn, const void *args, size_t len,
                       dsm_task_t **out)
{
    if (!n || !fn || !out || (len && !args)) return DSM_ERR_INVALID;
    /* The id is the name's hash: the caller need not have the function
     * itself (a plugin may live only in the daemons); the target says if it
     * does not know it. */
    uint32_t id = dsm_registry_id(fn);
    if (rank == n->rank && dsm_lookup(fn, NULL) != DSM_OK) {
        DSM_WARN("spawn", "no function named '%s' is registered", fn);
        return DSM_ERR_NO_HANDLER;
    }
    dsm_status_t st = dsm_node_peer_state(n, rank);
    if (st != DSM_OK) return st;
    if (len > DSM_AM_MAX_PAYLOAD - DSM_SPAWN_HEADER_LEN) return DSM_ERR_TOO_BIG;
    dsm_task_t *t = calloc(1, sizeof *t);
    if (!t || !(t->request = malloc(DSM_SPAWN_HEADER_LEN + len))) {
        free(t);
        return DSM_ERR_NOMEM;
    }
    t->node = n;
    t->entry = (spawn_entry_t){.rank = rank, .token = atomic_fetch_add(&next_token, 1)};
    t->fn_id = id;
    /* internal tasks ('_' names: own places one per task) want no notice */
    t->notify = fn[0] != '_';
    dsm_spawn_header_encode(t->request,
                            &(dsm_spawn_header_t){.fn_id = id, .token = t->entry.token, .notify = t->notify});
    if (len) memcpy(t->request + DSM_SPAWN_HEADER_LEN, args, len);
    t->request_len = DSM_SPAWN_HEADER_LEN + len;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    if (rank == n->rank) {
        t->has_thread = dsm_thread_start(&t->thread, NULL, task_main, t) == 0;
        st = t->has_thread ? DSM_OK : DSM_ERR_NOMEM;
    } else {
        /* Listed before it leaves (its result or start notice may come at
         * once), and the peer looked at again after: a death marked before
         * the listing is seen here, one after it fails the task
         * (on_peer_dead). No deadline of its own: a spawn may run long. */
        entry_add(n, &n->tasks, &t->entry);
        st = dsm_node_peer_state(n, rank);
        /* sent, not posted: a post may wait in the background for a
         * progress thread that stands down after this thread's last wait */
        if (st == DSM_OK)
            st = dsm_fabric_am_send(n->fabric, rank, DSM_AM_RUNTIME_SPAWN, t->request, t->request_len);
        if (st != DSM_OK) entry_remove(n, &n->tasks, &t->entry);
    }
    if (st != DSM_OK) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        free(t->request);
        free(t);
        return st;
    }
    *out = t;
    return DSM_OK;
}

dsm_status_t dsm_task_cancel(dsm_task_t *t)
{
    if (!t) return DSM_ERR_INVALID;
    pthread_mutex_lock(&t->lock);
    int done = t->done;
    pthread_mutex_unlock(&t->lock);
    if (done) return DSM_OK;
    dsm_node_t *n = t->node;
    if (t->entry.rank == n->rank) {
        /* flag first, then the list: task_main lists the job, then reads the flag */
        atomic_store(&t->cancel_requested, 1);
        jobs_stop(n, n->rank, t->entry.token);
        return DSM_OK;
    }
    uint8_t msg[DSM_SPAWN_TOKEN_LEN];
    dsm_spawn_token_encode(msg, t->entry.token);
    return dsm_fabric_am_send(n->fabric, t->entry.rank, DSM_AM_RUNTIME_CANCEL, msg, sizeof msg);
}

int dsm_task_started(dsm_task_t *t)
{
    if (!t) return 0;
    pthread_mutex_lock(&t->lock);
    int started = t->started || t->done;
    pthread_mutex_unlock(&t->lock);
    return started;
}

dsm_status_t dsm_task_wait_started(dsm_task_t *t, uint32_t timeout_ms)
{
    if (!t) return DSM_ERR_INVALID;
    pthread_mutex_lock(&t->lock);
    if (timeout_ms) {
        struct timespec deadline;
        dsm_realtime_deadline(&deadline, timeout_ms);
        int rc = 0;
        while (!t->started && !t->done && rc == 0) rc = pthread_cond_timedwait(&t->cond, &t->lock, &deadline);
    } else {
        while (!t->started && !t->done) pthread_cond_wait(&t->cond, &t->lock);
    }
    int started = t->started || t->done;
    pthread_mutex_unlock(&t->lock);
    return started ? DSM_OK : DSM_ERR_TIMEOUT;
}

static int task_done(dsm_task_t *t)
{
    pthread_mutex_lock(&t->lock);
    int done = t->done;
    pthread_mutex_unlock(&t->lock);
    return done;
}

/* A join of a spawn on a peer attends the node's worker while it waits
 * (dsm_fabric_backoff), so the result is handled by the joining thread as
 * it arrives: one wake-up, where the progress thread's wake-up and then
 * the joiner's were two (70-130 us median between the task's end and the
 * join's return on a loaded 2-core host). A result another thread handles
 * meanwhile is seen at the pause's end (2 ms at most). Not with busy
 * progress: the progress thread polls anyway, and the cond wait after
 * serves. timeout_ms as dsm_join's. */
enum { JOIN_PAUSE_NS = 50000, JOIN_PAUSE_MAX_NS = 2000000 };

static void join_attend(dsm_task_t *t, uint32_t timeout_ms)
{
    if (t->has_thread || task_done(t)) return;   /* done: its node may be gone */
    dsm_node_t *n = t->node;
    if (dsm_progress_resolve(n->config.progress, n->config.transport) == DSM_PROGRESS_BUSY) return;
    dsm_fabric_t *f = n->fabric;
    uint64_t deadline = timeout_ms ? dsm_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
    long pause = JOIN_PAUSE_NS;
    while (!task_done(t)) {
        uint64_t now = dsm_now_ns();
        if (deadline && now >= deadline) break;
        long max = JOIN_PAUSE_MAX_NS;
        if (deadline && (long)(deadline - now) < max) max = (long)(deadline - now);
        if (pause > max) pause = max;
        (void)dsm_fabric_backoff(f, &pause, max);
    }
}

dsm_status_t dsm_join(dsm_task_t *t, void *ret, size_t cap, size_t *ret_len, uint32_t timeout_ms)
{
    if (!t) return DSM_ERR_INVALID;
    join_attend(t, timeout_ms);
    pthread_mutex_lock(&t->lock);
    if (timeout_ms) {
        struct timespec deadline;
        dsm_realtime_deadline(&deadline, timeout_ms);
        int rc = 0;
        while (!t->done && rc == 0) rc = pthread_cond_timedwait(&t->cond, &t->lock, &deadline);
    } else {
        while (!t->done) pthread_cond_wait(&t->cond, &t->lock);
    }
    int done = t->done;
    pthread_mutex_unlock(&t->lock);
    /* Not done yet: the task stays valid and may be joined again. */
    if (!done) return DSM_ERR_TIMEOUT;
    if (t->has_thread) pthread_join(t->thread, NULL);
    dsm_status_t st = t->status;
    if (ret_len) *ret_len = t->result_len;
    if (st == DSM_OK && t->result_len > cap) st = DSM_ERR_TOO_BIG;
    else if (ret && t->result_len) memcpy(ret, t->result, t->result_len < cap ? t->result_len : cap);
    free(t->result);
    free(t->request);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
    return st;
}
