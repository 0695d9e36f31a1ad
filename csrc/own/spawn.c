/* Placement of work and allocations (DRust §4.1.2, §4.2): own's task
 * functions run through the runtime's function registry and spawn,
 * wrapped by the trampoline "_own.task", which counts the tasks running on
 * each node; spawn_to runs a task on the node that holds a box's object;
 * spawn runs it here while this node has a free task slot, and otherwise
 * where the controller finds the most vacant node. Vacancy: fewest own
 * tasks running, then most free heap bytes, then the lowest rank; the
 * controller asks every member ("_own.load", one spawn each) at the moment
 * it places. dsm_own_box_alloc_on makes a box on a chosen or the most vacant
 * node (own.c's ALLOC message to that home). */
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "own/internal.h"
#include "own/place.h"
#include "own/place_msg.h"
#include "util/log.h"

#define LOG_MOD "own"
enum { LOAD_TIMEOUT_MS = 30000, MAX_MEMBERS = 256, MAX_TASKS = 256, MAX_TASK_NAME = 64 };

/* Names of the own tasks registered in this process, with their registry
 * ids (the registry finds a closure by id and kind, not by name). */
static pthread_mutex_t tasks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[MAX_TASK_NAME];
    uint32_t id;
} tasks[MAX_TASKS];
static uint32_t n_tasks;

static int task_id(const char *name, uint32_t *id)
{
    int found = 0;
    pthread_mutex_lock(&tasks_lock);
    for (uint32_t i = 0; i < n_tasks && !found; i++)
        if (strcmp(tasks[i].name, name) == 0) {
            *id = tasks[i].id;
            found = 1;
        }
    pthread_mutex_unlock(&tasks_lock);
    return found;
}

static _Thread_local dsm_own_box_t current_box;

dsm_own_box_t dsm_own_task_box(void) { return current_box; }

static struct own_place *place_of(dsm_node_t *node)
{
    own_node_t *o = own_lookup(node);
    return o ? o->place : NULL;
}

static dsm_status_t spawn_envelope(dsm_node_t *node, uint32_t rank, const own_task_hdr_t *h, const void *args,
                                   size_t len, dsm_task_t **out);

/* The node holding box's object (reading its record: a load where the
 * record is, a round trip elsewhere). */
static dsm_status_t box_node(dsm_node_t *node, dsm_own_box_t box, uint32_t *where)
{
    dsm_gaddr_t g;
    dsm_status_t st = dsm_own_box_addr(node, box, &g);
    if (st == DSM_OK && g == 0) {
        DSM_WARN(LOG_MOD, "box 0x%llx is dropped", (unsigned long long)box);
        st = DSM_ERR_BAD_ADDR;
    }
    if (st == DSM_OK)
        *where = dsm_gaddr_node(dsm_gaddr_strip(g));
    return st;
}

/* A task sent to a box's record whose object has moved on: run it where the
 * object is, from here, and pass its result back; a cancel of this one
 * cancels that one. */
static dsm_status_t forward_task(dsm_node_t *node, uint32_t where, const own_task_hdr_t *h, const void *args,
                                 size_t len, void *ret, size_t cap, size_t *ret_len)
{
    enum { CANCEL_LOOK_MS = 50 };
    own_task_hdr_t on = {.task = h->task, .origin = dsm_node_rank(node), .box = h->box};
    dsm_task_t *t;
    dsm_status_t st = spawn_envelope(node, where, &on, args, len, &t);
    const dsm_stop_t *stop = dsm_spawn_stop();
    int cancelled = 0;
    while (st == DSM_OK && (st = dsm_join(t, ret, cap, ret_len, CANCEL_LOOK_MS)) == DSM_ERR_TIMEOUT) {
        st = DSM_OK;
        if (!cancelled && dsm_stop_requested(stop)) {
            (void)dsm_task_cancel(t);
            cancelled = 1;
        }
    }
    return st;
}

/* "_own.task": decode the envelope, run the task function it names with
 * the user's bytes, counting it as running here meanwhile. */
static dsm_status_t run_task(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                             size_t *ret_len)
{
    struct own_place *p = place_of(node);
    own_task_hdr_t h;
    const void *uargs;
    size_t ulen;
    if (p == NULL)
        return DSM_ERR_STATE;
    if (own_task_decode(args, len, &h, &uargs, &ulen) != DSM_OK) {
        DSM_WARN(LOG_MOD, "malformed task envelope refused");
        return DSM_ERR_PROTO;
    }
    dsm_fn_t fn = (dsm_fn_t)dsm_closure_find(h.task, DSM_OWN_CLOSURE_KIND);
    if (fn == NULL) {
        DSM_WARN(LOG_MOD, "task id %08x is not a registered own task", h.task);
        return DSM_ERR_NO_HANDLER;
    }
    if (h.flags & OWN_TASK_FIND) {
        uint32_t where;
        dsm_status_t st = box_node(node, h.box, &where);
        if (st != DSM_OK)
            return st;
        if (where != dsm_node_rank(node))
            return forward_task(node, where, &h, uargs, ulen, ret, cap, ret_len);
    }
    __atomic_fetch_add(&p->running, 1, __ATOMIC_RELAXED);
    dsm_own_box_t saved = current_box;
    current_box = h.box;
    dsm_status_t st = fn(node, uargs, ulen, ret, cap, ret_len);
    current_box = saved;
    /* The reply carrying the result is this node's message. */
    own_node_t *o = own_lookup(node);
    if (h.origin != own_self(o)) {
        own_count(o, C_MESSAGES, 1);
        own_count(o, C_BYTES, st == DSM_OK ? *ret_len : 0);
    }
    __atomic_fetch_sub(&p->running, 1, __ATOMIC_RELAXED);
    return st;
}

static uint64_t free_heap(dsm_node_t *node)
{
    uint64_t used = 0, cap = 0;
    dsm_heap_usage(node, &used, &cap);
    return cap > used ? cap - used : 0;
}

/* "_own.load": this node's running own tasks and free heap bytes. */
static dsm_status_t report_load(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                size_t *ret_len)
{
    (void)args;
    (void)len;
    struct own_place *p = place_of(node);
    if (p == NULL || cap < OWN_LOAD_LEN)
        return DSM_ERR_STATE;
    /* This report is itself a spawn, not an own task: it is not counted. */
    own_pair_encode(OWN_LOAD_MAGIC, __atomic_load_n(&p->running, __ATOMIC_RELAXED), free_heap(node), ret);
    *ret_len = OWN_LOAD_LEN;
    return DSM_OK;
}

dsm_status_t own_place_init(own_node_t *o)
{
    struct own_place *p = calloc(1, sizeof *p);
    if (p == NULL)
        return DSM_ERR_NOMEM;
    p->slots = 1;
    o->place = p;
    dsm_status_t st;
    if ((st = dsm_register("_own.task", run_task)) != DSM_OK || (st = dsm_register("_own.load", report_load)) != DSM_OK)
        DSM_ERROR(LOG_MOD, "cannot register own's placement functions: %s", dsm_strerror(st));
    return st;
}

void own_place_destroy(own_node_t *o)
{
    if (o == NULL || o->place == NULL)
        return;
    own_chans_destroy(o->place);
    free(o->place);
    o->place = NULL;
}

dsm_status_t dsm_own_task_register(const char *name, dsm_fn_t fn)
{
    if (name == NULL || fn == NULL || strlen(name) >= MAX_TASK_NAME)
        return DSM_ERR_INVALID;
    uint32_t id;
    dsm_status_t st = dsm_register_closure(name, DSM_OWN_CLOSURE_KIND, (dsm_closure_t)fn, &id);
    if (st != DSM_OK)
        return st;
    uint32_t known;
    if (task_id(name, &known))
        return DSM_OK;
    pthread_mutex_lock(&tasks_lock);
    if (n_tasks < MAX_TASKS) {
        strcpy(tasks[n_tasks].name, name);
        tasks[n_tasks++].id = id;
    } else
        st = DSM_ERR_NOMEM;
    pthread_mutex_unlock(&tasks_lock);
    return st;
}

dsm_status_t dsm_own_set_task_slots(dsm_node_t *node, uint32_t slots)
{
    struct own_place *p = place_of(node);
    if (p == NULL)
        return DSM_ERR_STATE;
    __atomic_store_n(&p->slots, slots, __ATOMIC_RELAXED);
    return DSM_OK;
}

uint32_t dsm_own_tasks_running(dsm_node_t *node)
{
    struct own_place *p = place_of(node);
    return p ? __atomic_load_n(&p->running, __ATOMIC_RELAXED) : 0;
}

/* A spawn's request (and its reply, when the caller counts both) in own's
 * counters: placement is part of the protocol's cost. */
static void count_spawn(dsm_node_t *node, uint64_t bytes, uint64_t messages)
{
    own_node_t *o = own_lookup(node);
    own_count(o, C_MESSAGES, messages);
    own_count(o, C_BYTES, bytes);
}

/* Spawn the trampoline on `rank` with envelope h. */
static dsm_status_t spawn_envelope(dsm_node_t *node, uint32_t rank, const own_task_hdr_t *h, const void *args,
                                   size_t len, dsm_task_t **out)
{
    if (len > DSM_SPAWN_MAX_RESULT || (len && args == NULL))
        return DSM_ERR_INVALID;
    uint8_t *buf = malloc(OWN_TASK_HEADER + len);
    if (buf == NULL)
        return DSM_ERR_NOMEM;
    own_task_encode(h, buf);
    if (len)
        memcpy(buf + OWN_TASK_HEADER, args, len);
    dsm_status_t st = dsm_spawn(node, rank, "_own.task", buf, OWN_TASK_HEADER + len, out);
    free(buf);
    if (rank != dsm_node_rank(node))
        count_spawn(node, OWN_TASK_HEADER + len, 1);
    return st;
}

/* Spawn task `fn` on `rank` (flags: OWN_TASK_FIND or 0). */
static dsm_status_t spawn_task(dsm_node_t *node, uint32_t rank, dsm_own_box_t box, uint16_t flags, const char *fn,
                               const void *args, size_t len, dsm_task_t **out)
{
    uint32_t id;
    if (!task_id(fn, &id)) {
        DSM_WARN(LOG_MOD, "spawn of '%s': not a registered own task (dsm_own_task_register)", fn);
        return DSM_ERR_NO_HANDLER;
    }
    own_task_hdr_t h = {.flags = flags, .task = id, .origin = dsm_node_rank(node), .box = box};
    return spawn_envelope(node, rank, &h, args, len, out);
}

dsm_status_t dsm_own_spawn_to(dsm_node_t *node, dsm_own_box_t box, const char *fn, const void *args, size_t len,
                              dsm_task_t **out, uint32_t *rank)
{
    if (out == NULL || fn == NULL)
        return DSM_ERR_INVALID;
    *out = NULL;
    own_node_t *o = own_lookup(node);
    if (o == NULL)
        return DSM_ERR_STATE;
    if (!own_box_handle_ok(box)) {
        DSM_WARN(LOG_MOD, "spawn_to of '%s' refused: 0x%llx is not a box handle", fn, (unsigned long long)box);
        return DSM_ERR_BAD_ADDR;
    }
    /* A record elsewhere, and no caller waiting to learn the rank: the
     * task goes to the record's node, which finds the object (a load
     * there, and a second hop only if the object has moved), instead of
     * this thread waiting a round trip to read the record. As DRust's
     * spawn_to goes where the pointer names. */
    uint32_t home = dsm_gaddr_node(dsm_gaddr_strip(box));
    if (rank == NULL && home != own_self(o))
        return spawn_task(node, home, box, OWN_TASK_FIND, fn, args, len, out);
    uint32_t where;
    dsm_status_t st = box_node(node, box, &where);
    if (st != DSM_OK)
        return st;
    if (rank)
        *rank = where;
    return spawn_task(node, where, box, 0, fn, args, len, out);
}

dsm_status_t dsm_own_vacant_node(dsm_node_t *node, uint32_t *rank)
{
    if (rank == NULL)
        return DSM_ERR_INVALID;
    if (own_lookup(node) == NULL)
        return DSM_ERR_STATE;
    uint32_t ranks[MAX_MEMBERS];
    uint32_t n = dsm_node_daemons(node, ranks, MAX_MEMBERS);
    if (n > MAX_MEMBERS)
        n = MAX_MEMBERS;
    dsm_task_t *tasks[MAX_MEMBERS] = {0};
    for (uint32_t i = 0; i < n; i++) {
        if (dsm_spawn(node, ranks[i], "_own.load", NULL, 0, &tasks[i]) != DSM_OK)
            tasks[i] = NULL;
        else if (ranks[i] != dsm_node_rank(node))
            count_spawn(node, OWN_LOAD_LEN, 2);
    }
    uint32_t best = UINT32_MAX, best_running = UINT32_MAX;
    uint64_t best_free = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t buf[OWN_LOAD_LEN];
        size_t rl = 0;
        uint32_t running;
        uint64_t free_bytes;
        if (tasks[i] == NULL || dsm_join(tasks[i], buf, sizeof buf, &rl, LOAD_TIMEOUT_MS) != DSM_OK ||
            own_pair_decode(OWN_LOAD_MAGIC, buf, rl, &running, &free_bytes) != DSM_OK)
            continue;   /* unreachable or malformed: not a candidate */
        if (running < best_running || (running == best_running && free_bytes > best_free)) {
            best = ranks[i];
            best_running = running;
            best_free = free_bytes;
        }
    }
    if (best == UINT32_MAX)
        return DSM_ERR_NO_PEER;
    *rank = best;
    return DSM_OK;
}

dsm_status_t dsm_own_spawn(dsm_node_t *node, const char *fn, const void *args, size_t len, dsm_task_t **out,
                           uint32_t *rank)
{
    if (out == NULL || fn == NULL)
        return DSM_ERR_INVALID;
    *out = NULL;
    struct own_place *p = place_of(node);
    if (p == NULL)
        return DSM_ERR_STATE;
    uint32_t where = dsm_node_rank(node);
    if (__atomic_load_n(&p->running, __ATOMIC_RELAXED) >= __atomic_load_n(&p->slots, __ATOMIC_RELAXED)) {
        dsm_status_t st = dsm_own_vacant_node(node, &where);
        if (st != DSM_OK)
            return st;
    }
    if (rank)
        *rank = where;
    return spawn_task(node, where, 0, 0, fn, args, len, out);
}

dsm_status_t dsm_own_box_alloc_on(dsm_node_t *node, uint32_t rank, uint32_t type, size_t size, dsm_own_box_t *out)
{
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    if (own_lookup(node) == NULL)
        return DSM_ERR_STATE;
    dsm_status_t st;
    if (rank == DSM_OWN_VACANT && (st = dsm_own_vacant_node(node, &rank)) != DSM_OK)
        return st;
    return own_box_alloc_at(node, rank, type, size, out);   /* one ALLOC message to a remote home */
}
