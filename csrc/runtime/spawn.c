/* Remote execution and the runtime's own messages: spawn/join/cancel of
 * registered functions on any node, and reading a peer's stats counters. A
 * spawn ships (function id, task token, argument bytes) as a request from
 * the caller's thread, without waiting; the target's handler answers it at
 * once with an acknowledgement (the token, or why it refuses: PROTO for a
 * spawn it cannot read, NO_HANDLER, BUSY, NOMEM, CLOSED), runs the function
 * on a thread of its job pool (handlers must not block the progress
 * thread) and sends the result bytes back one way under the token (RESULT),
 * which completes the caller's task: no caller thread is started to wait
 * out a spawn (a thread start is slow on a busy host). A refusal fails the
 * task. A waiter (join, wait_started)
 * watches its task: an acknowledgement missing after the op timeout, or a
 * ping to the target unanswered that long while the result is awaited,
 * fails the peer as the fabric fails one that leaves an operation
 * unanswered, so a spawn or a result lost on a cut link ends in an error,
 * not a hang. A peer's death or this node's destroy fails the tasks still
 * waiting on it. A cancel ships the token: the target raises the stop flag
 * of the job that the caller's token names. As the job's thread starts,
 * the target tells the caller (the token, one way): a caller may wait for
 * its function to be running before it acts. A spawn to this node runs on
 * the same pool, and completes its task there. */
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
    int local;             /* a spawn to this node: no messages, nothing to watch */
    uint8_t *result;
    size_t result_len;
    dsm_status_t status;
    int started, done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* A spawn on a peer: its request (answered by the acknowledgement) and
     * the ping that checks the link while the result is awaited, finished
     * before the task is freed. Under `watch`, held by one waiter at a time. */
    pthread_mutex_t watch;
    dsm_op_t ack, probe;
    uint8_t ack_buf[DSM_SPAWN_TOKEN_LEN];
    int acked, probing;
    uint64_t sent_ns, heard_ns;   /* the request left; the target last answered */
};

typedef struct spawn_job {
    dsm_node_t *node;
    dsm_fn_t fn;
    uint32_t fn_id;
    spawn_entry_t entry;      /* the caller */
    int notify;               /* the caller wants the start notice */
    dsm_task_t *local;        /* a spawn from this node: its task */
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

/* A job ended: a peer's spawn, or (local) this node's to itself. */
static void spawn_finished(dsm_node_t *n, int local)
{
    pthread_mutex_lock(&n->lock);
    if (local)
        n->local_running--;
    else
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

/* A spawn's result, one way: {token, status} and the result bytes. In a
 * handler (the progress thread) only a post, which does not block. */
static void result_send(dsm_node_t *n, uint32_t rank, uint64_t token, dsm_status_t st, const void *data,
                        size_t len, int in_handler)
{
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

/* The acknowledgement of a spawn: the token if it was taken, else why not. */
static void spawn_ack(dsm_node_t *n, const dsm_am_msg_t *msg, uint64_t token, dsm_status_t st)
{
    uint8_t buf[DSM_SPAWN_TOKEN_LEN];
    if (st == DSM_OK) dsm_spawn_ack_encode(buf, token);
    (void)dsm_fabric_am_reply(n->fabric, msg->src_rank, msg->request_id, st, buf, st == DSM_OK ? sizeof buf : 0);
}

static void task_set_started(dsm_task_t *t)
{
    pthread_mutex_lock(&t->lock);
    t->started = 1;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

/* Complete task t: a spawn on a peer, its entry already off the node's
 * list (n->lock held), or a spawn here, by its job. */
static void task_complete(dsm_task_t *t, dsm_status_t st, uint8_t *result, size_t result_len)
{
    pthread_mutex_lock(&t->lock);
    t->status = st;
    t->result = result;
    t->result_len = result_len;
    t->done = 1;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

static void spawn_job_run(void *arg)
{
    spawn_job_t *job = arg;
    if (job->local) {
        task_set_started(job->local);
    } else if (job->notify) {
        uint8_t token[DSM_SPAWN_TOKEN_LEN];
        dsm_spawn_token_encode(token, job->entry.token);
        /* a caller that is gone learns nothing; the job runs on to its reply */
        (void)dsm_fabric_am_send(job->node->fabric, job->entry.rank, DSM_AM_RUNTIME_STARTED, token, sizeof token);
    }
    uint8_t *result;
    size_t result_len;
    dsm_status_t st = run_fn(job, &result, &result_len);
    if (job->local) {
        task_complete(job->local, st, result, result_len);   /* the task owns the result now */
    } else {
        result_send(job->node, job->entry.rank, job->entry.token, st, result, result_len, 0);
        free(result);
    }
    spawn_finished(job->node, job->local != NULL);
    free(job);
}

static void on_spawn(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_node_t *n = ctx;
    if (!msg->request_id) {   /* nobody waits for it, and nothing could tell them */
        DSM_WARN("spawn", "rank %u: one-way spawn from rank %u dropped", n->rank, msg->src_rank);
        return;
    }
    dsm_spawn_header_t h;
    if (dsm_spawn_header_decode(msg->data, msg->len, &h) != DSM_OK) {
        DSM_WARN("spawn", "rank %u: malformed spawn from rank %u (%zu bytes) refused", n->rank, msg->src_rank,
                 msg->len);
        spawn_ack(n, msg, 0, DSM_ERR_PROTO);
        return;
    }
    dsm_fn_t fn = dsm_registry_find(h.fn_id, NULL);
    if (!fn) {
        DSM_WARN("spawn", "rank %u: rank %u asked for unknown function id %08x", n->rank, msg->src_rank, h.fn_id);
        spawn_ack(n, msg, h.token, DSM_ERR_NO_HANDLER);
        return;
    }
    size_t args_len = msg->len - DSM_SPAWN_HEADER_LEN;
    spawn_job_t *job = malloc(sizeof *job + args_len);
    if (!job) {
        spawn_ack(n, msg, h.token, DSM_ERR_NOMEM);
        return;
    }
    *job = (spawn_job_t){.node = n, .fn = fn, .fn_id = h.fn_id, .entry = {.rank = msg->src_rank, .token = h.token},
                         .notify = h.notify, .args_len = args_len};
    memcpy(job->args, (const uint8_t *)msg->data + DSM_SPAWN_HEADER_LEN, args_len);
    pthread_mutex_lock(&n->lock);
    int closed = n->closed && n->joined;
    int busy = !closed && n->spawns_running >= DSM_SPAWN_MAX_RUNNING;
    if (!closed && !busy) n->spawns_running++;
    pthread_mutex_unlock(&n->lock);
    if (busy || closed) {
        if (busy)
            DSM_WARN("spawn", "rank %u: refused a spawn from rank %u: %d spawns already running", n->rank,
                     msg->src_rank, DSM_SPAWN_MAX_RUNNING);
        spawn_ack(n, msg, h.token, busy ? DSM_ERR_BUSY : DSM_ERR_CLOSED);
        free(job);
        return;
    }
    entry_add(n, &n->jobs, &job->entry);
    if (early_cancel_seen(job->entry.rank, job->entry.token)) stop_raise(&job->stop);
    /* acknowledged before the job is handed on: the ack leaves ahead of its
     * start notice and result */
    spawn_ack(n, msg, h.token, DSM_OK);
    dsm_status_t st = dsm_spawn_pool_run(n->pool, spawn_job_run, job);
    if (st != DSM_OK) {
        result_send(n, msg->src_rank, h.token, st, NULL, 0, 1);
        entry_remove(n, &n->jobs, &job->entry);
        spawn_finished(n, 0);
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

/* The link to this node's spawn on `rank` under `token` in n->tasks, or
 * NULL: n->lock held. */
static spawn_entry_t **task_find_locked(dsm_node_t *n, uint32_t rank, uint64_t token)
{
    for (spawn_entry_t **p = &n->tasks; *p; p = &(*p)->next)
        if ((*p)->token == token && (*p)->rank == rank) return p;
    return NULL;
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
    spawn_entry_t **e = task_find_locked(n, msg->src_rank, token);
    if (e) task_set_started(CONTAINER(*e, dsm_task_t, entry));
    pthread_mutex_unlock(&n->lock);
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
    spawn_entry_t **e = task_find_locked(n, msg->src_rank, token);
    if (e) {
        dsm_task_t *t = CONTAINER(*e, dsm_task_t, entry);
        *e = (*e)->next;
        task_complete(t, st, result, len);
        result = NULL;
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
        task_complete(t, st, NULL, 0);
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

/* A spawn to this node: its job on the node's pool, listed before it is
 * queued, so a cancel always finds it. */
static dsm_status_t local_start(dsm_node_t *n, dsm_task_t *t, dsm_fn_t fn, const void *args, size_t len)
{
    if (!fn) return DSM_ERR_NO_HANDLER;   /* unregistered since it was looked up */
    spawn_job_t *job = malloc(sizeof *job + len);
    if (!job) return DSM_ERR_NOMEM;
    *job = (spawn_job_t){.node = n, .fn = fn, .fn_id = t->fn_id, .entry = {.rank = n->rank, .token = t->entry.token},
                         .local = t, .args_len = len};
    if (len) memcpy(job->args, args, len);
    pthread_mutex_lock(&n->lock);
    n->local_running++;   /* the node's destroy waits for it; peers' spawns are not refused for it */
    pthread_mutex_unlock(&n->lock);
    entry_add(n, &n->jobs, &job->entry);
    dsm_status_t st = dsm_spawn_pool_run(n->pool, spawn_job_run, job);
    if (st != DSM_OK) {
        entry_remove(n, &n->jobs, &job->entry);
        spawn_finished(n, 1);
        free(job);
    }
    return st;
}

/* A new task to `rank`; NULL if out of memory. */
static dsm_task_t *task_new(dsm_node_t *n, uint32_t rank, uint32_t fn_id, int notify)
{
    dsm_task_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->node = n;
    t->entry = (spawn_entry_t){.rank = rank, .token = atomic_fetch_add(&next_token, 1)};
    t->fn_id = fn_id;
    t->notify = notify;
    t->local = rank == n->rank;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    pthread_mutex_init(&t->watch, NULL);
    return t;
}

static void task_free(dsm_task_t *t)
{
    free(t->result);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->watch);
    free(t);
}

/* Sends task t's request (its bytes as they are) to its peer. */
static dsm_status_t task_send(dsm_node_t *n, dsm_task_t *t, const void *request, size_t len)
{
    /* Listed before it leaves (its result or start notice may come at
     * once), and the peer looked at again after: a death marked before the
     * listing is seen here, one after it fails the task (on_peer_dead). No
     * deadline of its own: a spawn may run long; its waiters watch it. */
    entry_add(n, &n->tasks, &t->entry);
    dsm_status_t st = dsm_node_peer_state(n, t->entry.rank);
    t->sent_ns = t->heard_ns = dsm_now_ns();
    /* a request without waiting: its reply, the acknowledgement, finishes t->ack */
    if (st == DSM_OK)
        st = dsm_fabric_am_request_nb(n->fabric, t->entry.rank, DSM_AM_RUNTIME_SPAWN, request, len, t->ack_buf,
                                      sizeof t->ack_buf, &t->ack);
    if (st != DSM_OK) entry_remove(n, &n->tasks, &t->entry);   /* a failed request_nb holds nothing */
    return st;
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
    /* internal tasks ('_' names: own places one per task) want no notice */
    dsm_task_t *t = task_new(n, rank, id, fn[0] != '_');
    if (!t) return DSM_ERR_NOMEM;
    if (t->local) {
        st = local_start(n, t, dsm_registry_find(id, NULL), args, len);
    } else {
        uint8_t *request = malloc(DSM_SPAWN_HEADER_LEN + len);
        if (request) {
            dsm_spawn_header_t h = {.fn_id = id, .token = t->entry.token, .notify = t->notify};
            dsm_spawn_header_encode(request, &h);
            if (len) memcpy(request + DSM_SPAWN_HEADER_LEN, args, len);
            st = task_send(n, t, request, DSM_SPAWN_HEADER_LEN + len);   /* copied by the request */
            free(request);
        } else {
            st = DSM_ERR_NOMEM;
        }
    }
    if (st != DSM_OK) {
        task_free(t);
        return st;
    }
    *out = t;
    return DSM_OK;
}

dsm_status_t dsm_spawn_raw(dsm_node_t *n, uint32_t rank, const void *request, size_t len, dsm_task_t **out)
{
    if (!n || !out || (len && !request) || rank == n->rank) return DSM_ERR_INVALID;
    dsm_task_t *t = task_new(n, rank, 0, 0);
    if (!t) return DSM_ERR_NOMEM;
    dsm_status_t st = task_send(n, t, request, len);
    if (st != DSM_OK) {
        task_free(t);
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
    if (t->local) {
        jobs_stop(n, n->rank, t->entry.token);
        return DSM_OK;
    }
    uint8_t msg[DSM_SPAWN_TOKEN_LEN];
    dsm_spawn_token_encode(msg, t->entry.token);
    return dsm_fabric_am_send(n->fabric, t->entry.rank, DSM_AM_RUNTIME_CANCEL, msg, sizeof msg);
}

/* Fail task t with st unless it is done already (n->tasks lists it until then). */
static void task_fail(dsm_task_t *t, dsm_status_t st)
{
    dsm_node_t *n = t->node;
    pthread_mutex_lock(&n->lock);
    for (spawn_entry_t **p = &n->tasks; *p; p = &(*p)->next)
        if (*p == &t->entry) {
            *p = t->entry.next;
            task_complete(t, st, NULL, 0);
            break;
        }
    pthread_mutex_unlock(&n->lock);
}

/* How long the target may leave the link to it silent while a task waits
 * for its result before a ping asks it: the ping costs a round trip a
 * second of such a wait, and finds a cut within this and the op timeout. */
enum { PROBE_AFTER_MS = 1000 };

/* One look at a spawn on a peer that is not done, by a waiter (t->watch
 * held; nothing here blocks): the acknowledgement's arrival (a refusal
 * fails the task with its status), and while the result is awaited the
 * link (a ping once the peer was silent for PROBE_AFTER_MS). An
 * acknowledgement or a ping left unanswered for the op timeout fails the
 * peer as any operation does (dsm_fabric_test_for), which fails its tasks
 * here (on_peer_dead): without that, a spawn or its result lost on a cut
 * link, which no error reports, would be waited for forever. */
static void task_watch(dsm_task_t *t)
{
    dsm_node_t *n = t->node;
    uint32_t rank = t->entry.rank;
    uint64_t now = dsm_now_ns();
    if (!t->acked) {
        if (!dsm_fabric_test_for(&t->ack, t->sent_ns, 0)) return;
        t->acked = 1;
        t->heard_ns = now;
        uint64_t token = 0;
        dsm_status_t st = dsm_spawn_ack_decode(t->ack.status, t->ack_buf, (size_t)t->ack.result, &token);
        if (st == DSM_OK && token != t->entry.token) st = DSM_ERR_PROTO;
        if (st != DSM_OK) {
            if (st == DSM_ERR_PROTO)
                DSM_WARN("spawn", "rank %u: rank %u refused a spawn as malformed, or answered it so", n->rank, rank);
            task_fail(t, st);
        }
        return;
    }
    if (t->probing) {
        if (dsm_fabric_test_for(&t->probe, t->heard_ns, 0)) {   /* an answer, or the peer failed */
            t->probing = 0;
            t->heard_ns = now;
        }
    } else if (now - t->heard_ns >= (uint64_t)PROBE_AFTER_MS * 1000000u) {
        t->heard_ns = now;   /* from here, the ping's op timeout runs */
        t->probing = dsm_fabric_am_request_nb(n->fabric, rank, DSM_AM_RUNTIME_PING, NULL, 0, NULL, 0, &t->probe) ==
                     DSM_OK;   /* a failed one holds nothing; a dead peer failed the task */
    }
}

/* Waits until t, a spawn on a peer, is done (or, with `started`, has
 * begun) or the deadline (dsm_now_ns; 0: none) passes, watching it
 * meanwhile (task_watch). Where
 * the progress thread blocks, the waiter attends the node's worker while it
 * waits (dsm_fabric_backoff), so the result is handled by the waiting
 * thread as it arrives: one wake-up, where the progress thread's wake-up
 * and then the joiner's were two; a result another thread
 * handles meanwhile is seen at the pause's end (2 ms at most). With busy
 * progress the progress thread polls anyway: the waiter sleeps on the
 * task, waking for the next look. */
enum { JOIN_PAUSE_NS = 50000, JOIN_PAUSE_MAX_NS = 2000000 };

static int task_reached(dsm_task_t *t, int started)
{
    pthread_mutex_lock(&t->lock);
    int r = t->done || (started && t->started);
    pthread_mutex_unlock(&t->lock);
    return r;
}

static void task_wait(dsm_task_t *t, uint64_t deadline, int started)
{
    long pause = JOIN_PAUSE_NS;
    while (!task_reached(t, started)) {   /* done: its node may be gone, so looked at first */
        dsm_node_t *n = t->node;
        int attend = dsm_progress_resolve(n->config.progress, n->config.transport) != DSM_PROGRESS_BUSY;
        pthread_mutex_lock(&t->watch);
        task_watch(t);
        int acked = t->acked, probing = t->probing;
        uint64_t next = t->heard_ns + (uint64_t)PROBE_AFTER_MS * 1000000u;
        pthread_mutex_unlock(&t->watch);
        uint64_t now = dsm_now_ns();
        if (deadline && now >= deadline) return;
        long max = JOIN_PAUSE_MAX_NS;
        if (!attend && acked && !probing) max = next > now ? (long)(next - now) : 1;
        if (deadline && (long)(deadline - now) < max) max = (long)(deadline - now);
        if (attend) {
            if (pause > max) pause = max;
            (void)dsm_fabric_backoff(n->fabric, &pause, max);
        } else {
            struct timespec until;
            dsm_realtime_deadline(&until, (uint32_t)((max + 999999) / 1000000));
            pthread_mutex_lock(&t->lock);
            if (!(t->done || (started && t->started))) pthread_cond_timedwait(&t->cond, &t->lock, &until);
            pthread_mutex_unlock(&t->lock);
        }
    }
}

/* A spawn to this node: a thread of its pool signals t, and there is no
 * peer to watch, so a plain wait on t. */
static void local_task_wait(dsm_task_t *t, uint64_t deadline, int started)
{
    pthread_mutex_lock(&t->lock);
    while (!(t->done || (started && t->started))) {
        if (!deadline) {
            pthread_cond_wait(&t->cond, &t->lock);
            continue;
        }
        uint64_t now = dsm_now_ns();
        if (now >= deadline) break;
        struct timespec until;
        dsm_realtime_deadline(&until, (uint32_t)((deadline - now + 999999) / 1000000));
        pthread_cond_timedwait(&t->cond, &t->lock, &until);
    }
    pthread_mutex_unlock(&t->lock);
}

static int task_wait_ms(dsm_task_t *t, uint32_t timeout_ms, int started)
{
    uint64_t deadline = timeout_ms ? dsm_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
    if (t->local)
        local_task_wait(t, deadline, started);
    else
        task_wait(t, deadline, started);
    return task_reached(t, started);
}

int dsm_task_started(dsm_task_t *t)
{
    if (!t) return 0;
    /* a look at a spawn on a peer too: a refused one is done */
    if (!t->local && !task_reached(t, 1) && pthread_mutex_trylock(&t->watch) == 0) {
        task_watch(t);
        pthread_mutex_unlock(&t->watch);
    }
    return task_reached(t, 1);
}

dsm_status_t dsm_task_wait_started(dsm_task_t *t, uint32_t timeout_ms)
{
    if (!t) return DSM_ERR_INVALID;
    return task_wait_ms(t, timeout_ms, 1) ? DSM_OK : DSM_ERR_TIMEOUT;
}

dsm_status_t dsm_join(dsm_task_t *t, void *ret, size_t cap, size_t *ret_len, uint32_t timeout_ms)
{
    if (!t) return DSM_ERR_INVALID;
    /* Not done yet: the task stays valid and may be joined again. */
    if (!task_wait_ms(t, timeout_ms, 0)) return DSM_ERR_TIMEOUT;
    if (!t->local) {
        /* the fabric may still write them: finished before t goes (the ack
         * leaves ahead of the result, a ping is one round trip; a destroyed
         * node's fabric failed both) */
        if (!t->acked) (void)dsm_fabric_wait(&t->ack);
        if (t->probing) (void)dsm_fabric_wait(&t->probe);
    }
    dsm_status_t st = t->status;
    if (ret_len) *ret_len = t->result_len;
    if (st == DSM_OK && t->result_len > cap) st = DSM_ERR_TOO_BIG;
    else if (ret && t->result_len) memcpy(ret, t->result, t->result_len < cap ? t->result_len : cap);
    task_free(t);
    return st;
}
