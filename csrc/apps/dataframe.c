/* Workload "dataframe": DRust's DataFrame in miniature, a chunked columnar
 * table (a key column and a value column, `chunk` rows per chunk) and one
 * query: filter value >= min_value, group by key, sum and count. Chunk c
 * is loaded by node c % nodes.
 *  - own: a chunk is a TBox group (its two columns move and are cached
 *    together); the node of rank_index 0 runs the query with spawn_to, so
 *    each part runs where its chunks are, and merges the parts' results,
 *    which come back as the tasks' results; the chunks node 0 loaded it
 *    queries in place (no task). per_node=1 (the default: own's best
 *    placement, as dir's affinity=1 is dir's) spawns one task to each
 *    other node for all the chunks it loaded, as a locality-aware
 *    scheduler groups partitions; per_node=0 one task per chunk (at most
 *    2 * nodes at once).
 *  - dir: a column is an object; node i takes the chunks it loaded,
 *    c % nodes == i (affinity=1, the default: each protocol with its best
 *    placement, as own's spawn_to finds the chunks where they are);
 *    affinity=0 takes them by number instead, (c + 1) % nodes == i, as a
 *    program that does not know where a chunk was loaded would,
 *    reads them through the directory, and leaves its partial result in an
 *    object that node 0 reads.
 *  - local: the original, all chunks in one process on plain memory.
 * Params: rows (4096), chunk (256), groups (16), min_value (100; values
 * are 0..999), affinity (1), queries (1: the query runs that many times in
 * the measured phase, its sums added up; a phase long beside the
 * scheduler's time slice when nodes share cores), threads (1; local on
 * more: query_local_threads); the common ones
 * (protocol, seed, checks, directory: 8 * (1 + 2 * chunks + 2 * nodes)
 * zeroed bytes, chunks = ceil(rows/chunk)).
 * Results: ops (rows this node's query read: under own all of them on
 * node 0), ops_per_sec, seconds (the measured phase), checksum (rank_index
 * 0 and local), groups_hit, tasks (own: the tasks node 0 spawned), and the
 * counters. timing=1 (own and dir) adds where node 0's query time went, in
 * ns: t_send_ns (own: the spawn calls; dir: its part written and shared),
 * t_work_ns (the chunks queried here), t_recv_ns (own: the joins; dir: the
 * parts read), and under own per task (means): t_task_start_ns (spawn call
 * to the task function's start), t_task_run_ns (the function), and
 * t_task_tail_ns (the last task's end to its join's return). The task
 * times read one clock on both sides: only meaningful with every node in
 * one process, as dsm-bench-drust runs them. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/refuse.h"
#include "apps/run_util.h"
#include "apps/workloads.h"
#include "dsm/clock.h"

enum { DF_TYPE = 0x4446, DF_MAX_GROUPS = 4096 };   /* "DF" */
#define DF_PART "dataframe.part"

typedef struct df {
    const dsm_apps_run_t *r;
    uint64_t rows, chunk, chunks, groups, min_value, affinity, per_node, timing, queries;
    uint64_t tasks;   /* own: tasks node 0 spawned */
    /* timing=1: node 0's phases and own's tasks' (sums over tasks), ns */
    uint64_t t_send, t_work, t_recv, t_task_start, t_task_run, t_task_tail;
    uint64_t *h;   /* own: chunks group handles; dir, local: 2 per chunk (keys, values) */
    uint64_t *res; /* dir: one result object per node */
} df_t;

static uint64_t rows_of(const df_t *d, uint64_t c)
{
    uint64_t left = d->rows - c * d->chunk;
    return left < d->chunk ? left : d->chunk;
}
static int is_own(const df_t *d) { return strcmp(d->r->proto, "own") == 0; }
/* The clock when timing, else 0 (the phases then add nothing). */
static uint64_t tick(const df_t *d) { return d->timing ? dsm_now_ns() : 0; }
/* A task's result: its sums, then with timing its start and end. */
static size_t part_len(const df_t *d) { return 16 * d->groups + (d->timing ? 16 : 0); }

/* The query over one chunk's columns, added into acc[2 * groups]. */
static void part(const uint64_t *keys, const uint64_t *vals, uint64_t n, uint64_t groups, uint64_t min_value,
                 uint64_t *acc)
{
    for (uint64_t i = 0; i < n; i++)
        if (vals[i] >= min_value && keys[i] < groups) {
            acc[2 * keys[i]] += vals[i];
            acc[2 * keys[i] + 1]++;
        }
}

static void gen(const df_t *d, uint64_t c, uint64_t *keys, uint64_t *vals)
{
    for (uint64_t i = 0; i < rows_of(d, c); i++) {
        uint64_t x = dsm_hash64(d->r->seed ^ ((c * d->chunk + i) << 1));
        keys[i] = x % d->groups;
        vals[i] = (x >> 32) % 1000;
    }
}

static dsm_status_t load(df_t *d)
{
    const dsm_apps_run_t *r = d->r;
    size_t col = (size_t)d->chunk * 8;
    dsm_status_t st = DSM_OK;
    for (uint64_t c = 0; c < d->chunks && st == DSM_OK; c++) {
        if (!r->local && c % r->nodes != r->index)
            continue;
        if (is_own(d)) {
            size_t sizes[2] = {col, col};
            dsm_own_tbox_mut_t m;
            void *vals;
            size_t vlen;
            if ((st = dsm_own_tbox_new(r->node, DF_TYPE, 2, sizes, &d->h[c])) != DSM_OK ||
                (st = dsm_own_tbox_borrow_mut(r->node, d->h[c], 0, &m)) != DSM_OK)
                break;
            if ((st = dsm_own_tbox_member_mut(&m, 1, &vals, &vlen)) == DSM_OK)
                gen(d, c, m.data, vals);
            dsm_status_t rs = dsm_own_tbox_release_mut(r->node, &m);
            st = st != DSM_OK ? st : rs;
            continue;
        }
        dsm_coh_mut_t k, v;
        if ((st = r->ops->alloc(r->node, DF_TYPE, col, &d->h[2 * c])) != DSM_OK ||
            (st = r->ops->alloc(r->node, DF_TYPE, col, &d->h[2 * c + 1])) != DSM_OK ||
            (st = r->ops->borrow_mut(r->node, d->h[2 * c], &k)) != DSM_OK)
            break;
        if ((st = r->ops->borrow_mut(r->node, d->h[2 * c + 1], &v)) == DSM_OK) {
            gen(d, c, k.data, v.data);
            st = r->ops->release_mut(r->node, &v);
        }
        dsm_status_t rs = r->ops->release_mut(r->node, &k);
        st = st != DSM_OK ? st : rs;
    }
    return st;
}

/* The query over one chunk's TBox group (on the node that holds it), added
 * into acc[2 * groups]. */
static dsm_status_t part_of_group(dsm_node_t *node, dsm_own_box_t box, uint64_t rows, uint64_t groups,
                                  uint64_t min_value, uint64_t *acc)
{
    dsm_own_tbox_ref_t k;
    dsm_status_t st = dsm_own_tbox_borrow(node, box, 0, &k);
    if (st != DSM_OK)
        return st;
    const void *vals;
    size_t vlen;
    if ((st = dsm_own_tbox_member(&k, 1, &vals, &vlen)) == DSM_OK && (rows * 8 > k.size || rows * 8 > vlen))
        st = DSM_ERR_INVALID;
    if (st == DSM_OK)
        part(k.data, vals, rows, groups, min_value, acc);
    dsm_status_t rs = dsm_own_tbox_release(node, &k);
    return st != DSM_OK ? st : rs;
}

enum { DF_TASK_MAX_CHUNKS = 64 };   /* chunks one task's arguments name */

/* The own task: the query over the chunk it was spawned to (local here)
 * and the `more` chunks its arguments name (box_K, rows_K), loaded on the
 * same node. */
static dsm_status_t df_part_task(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                 size_t *ret_len)
{
    int bad = 0;   /* dsm_workload_begin has checked the numbers */
    uint64_t groups = dsm_param_u64(args, len, "groups", 0, &bad);
    uint64_t min_value = dsm_param_u64(args, len, "min_value", 0, &bad);
    uint64_t rows = dsm_param_u64(args, len, "rows", 0, &bad);
    uint64_t more = dsm_param_u64(args, len, "more", 0, &bad);
    uint64_t timing = dsm_param_u64(args, len, "timing", 0, &bad);
    uint64_t t0 = timing ? dsm_now_ns() : 0;
    if (bad || groups == 0 || groups > DF_MAX_GROUPS || cap < 16 * groups + 16 * timing || more >= DF_TASK_MAX_CHUNKS)
        return DSM_ERR_INVALID;
    memset(ret, 0, 16 * groups);
    dsm_status_t st = part_of_group(node, dsm_own_task_box(), rows, groups, min_value, ret);
    for (uint64_t k = 1; k <= more && st == DSM_OK; k++) {
        char kb[16], kr[16];
        snprintf(kb, sizeof kb, "box_%llu", (unsigned long long)k);
        snprintf(kr, sizeof kr, "rows_%llu", (unsigned long long)k);
        dsm_own_box_t box = dsm_param_u64(args, len, kb, 0, &bad);
        uint64_t n = dsm_param_u64(args, len, kr, 0, &bad);
        st = bad || box == 0 ? DSM_ERR_INVALID : part_of_group(node, box, n, groups, min_value, ret);
    }
    if (st == DSM_OK)
        *ret_len = 16 * groups;
    if (st == DSM_OK && timing) {   /* the function's start and end, after the sums */
        uint64_t *tt = (uint64_t *)ret + 2 * groups;
        tt[0] = t0;
        tt[1] = dsm_now_ns();
        *ret_len += 16;
    }
    return st;
}

dsm_status_t dsm_dataframe_register_tasks(void) { return dsm_own_task_register(DF_PART, df_part_task); }

/* Spawns the task for chunk `first` and the `n - 1` chunks in more[]. */
static dsm_status_t spawn_part(df_t *d, uint64_t first, const uint64_t *more, uint64_t n, dsm_task_t **t)
{
    char a[96 + DF_TASK_MAX_CHUNKS * 64];
    int len = snprintf(a, sizeof a, "groups=%llu\nmin_value=%llu\nrows=%llu\nmore=%llu\ntiming=%llu\n",
                       (unsigned long long)d->groups, (unsigned long long)d->min_value,
                       (unsigned long long)rows_of(d, first), (unsigned long long)(n - 1),
                       (unsigned long long)d->timing);
    for (uint64_t k = 1; k < n && len > 0 && (size_t)len < sizeof a; k++)
        len += snprintf(a + len, sizeof a - (size_t)len, "box_%llu=%llu\nrows_%llu=%llu\n", (unsigned long long)k,
                        (unsigned long long)d->h[more[k - 1]], (unsigned long long)k,
                        (unsigned long long)rows_of(d, more[k - 1]));
    if (len < 0 || (size_t)len >= sizeof a)
        return DSM_ERR_TOO_BIG;
    uint64_t t0 = tick(d);
    dsm_status_t st = dsm_own_spawn_to(d->r->node, d->h[first], DF_PART, a, (size_t)len, t, NULL);
    d->t_send += tick(d) - t0;
    d->tasks += st == DSM_OK;
    return st;
}

/* A part's sums and counts added into acc[2 * groups]. */
static void add_part(const df_t *d, uint64_t *acc, const uint64_t *part)
{
    for (uint64_t g = 0; g < 2 * d->groups; g++)
        acc[g] += part[g];
}

/* The rows of the chunks node x loaded (c % nodes == x). */
static uint64_t rows_loaded_by(const df_t *d, uint64_t x)
{
    uint64_t n = 0;
    for (uint64_t c = x; c < d->chunks; c += d->r->nodes)
        n += rows_of(d, c);
    return n;
}

/* own, per_node=1: one task to every other node for the chunks it loaded
 * (all spawned first), node 0's own chunks queried in place while they
 * run, then the tasks joined. */
static dsm_status_t query_own_per_node(df_t *d, uint64_t *acc, uint64_t *rows_read)
{
    const dsm_apps_run_t *r = d->r;
    uint64_t *part_acc = malloc(part_len(d)), *more = malloc(sizeof *more * DF_TASK_MAX_CHUNKS);
    dsm_task_t **t = calloc(r->nodes, sizeof *t);
    uint64_t *spawned_at = calloc(r->nodes, 8), last_end = 0;
    dsm_status_t st = part_acc && more && t ? DSM_OK : DSM_ERR_NOMEM;
    for (uint64_t x = 0; x < r->nodes && st == DSM_OK; x++) {
        if (x == r->index || x >= d->chunks)
            continue;
        uint64_t n = 0;
        for (uint64_t c = x + r->nodes; c < d->chunks && st == DSM_OK; c += r->nodes) {
            if (n + 1 >= DF_TASK_MAX_CHUNKS)
                st = DSM_ERR_TOO_BIG;
            else
                more[n++] = c;
        }
        if (st == DSM_OK && spawned_at == NULL)
            st = DSM_ERR_NOMEM;
        if (st == DSM_OK) {
            spawned_at[x] = tick(d);
            st = spawn_part(d, x, more, n + 1, &t[x]);
        }
    }
    const dsm_stop_t *stop = dsm_spawn_stop();
    uint64_t t0 = tick(d);
    for (uint64_t c = r->index; c < d->chunks && st == DSM_OK; c += r->nodes) {
        st = part_of_group(r->node, d->h[c], rows_of(d, c), d->groups, d->min_value, acc);
        *rows_read += rows_of(d, c);
        if (st == DSM_OK && dsm_stop_requested(stop))
            st = DSM_ERR_CANCELLED;
    }
    d->t_work += tick(d) - t0;
    t0 = tick(d);
    for (uint64_t x = 0; t != NULL && x < r->nodes; x++) {
        if (t[x] == NULL)
            continue;
        size_t rl = part_len(d);
        dsm_status_t js = dsm_join(t[x], part_acc, part_len(d), &rl, 0);
        if (js == DSM_OK && rl != part_len(d))
            js = DSM_ERR_PROTO;
        if (js == DSM_OK && d->timing) {
            const uint64_t *tt = part_acc + 2 * d->groups;
            d->t_task_start += tt[0] - spawned_at[x];
            d->t_task_run += tt[1] - tt[0];
            last_end = tt[1] > last_end ? tt[1] : last_end;
        }
        if (js == DSM_OK && st == DSM_OK) {
            add_part(d, acc, part_acc);
            *rows_read += rows_loaded_by(d, x);
        }
        st = st != DSM_OK ? st : js;
    }
    uint64_t t1 = tick(d);
    d->t_recv += t1 - t0;
    if (last_end && t1 > last_end)
        d->t_task_tail += t1 - last_end;
    free(part_acc);
    free(more);
    free(t);
    free(spawned_at);
    return st;
}

/* own: spawn_to every chunk from node 0, at most `window` tasks at once; a
 * chunk node 0 loaded itself is queried in place (where spawn_to would run
 * it, without a task's thread) while the tasks run elsewhere. With the
 * window full, node 0 joins its oldest task after each chunk of its own
 * (freeing a place for the next spawn, so the others stay busy), and
 * otherwise only when it has no chunk of its own left to query. */
static dsm_status_t query_own(df_t *d, uint64_t *acc, uint64_t *rows_read)
{
    const dsm_apps_run_t *r = d->r;
    uint64_t window = 2 * r->nodes, *part_acc = malloc(part_len(d));
    dsm_task_t **t = calloc(d->chunks, sizeof *t);
    if (part_acc == NULL || t == NULL) {
        free(part_acc);
        free(t);
        return DSM_ERR_NOMEM;
    }
    dsm_status_t st = DSM_OK;
    const dsm_stop_t *stop = dsm_spawn_stop();
    uint64_t spawned = 0, joined = 0, here = 0;   /* next chunk to spawn, to join, to query here */
    int after_here = 0;                           /* the last step queried a chunk here */
    for (;;) {
        while (spawned < d->chunks && spawned % r->nodes == r->index)
            spawned++;
        while (joined < spawned && t[joined] == NULL)
            joined++;
        while (here < d->chunks && here % r->nodes != r->index)
            here++;
        uint64_t running = 0;
        for (uint64_t c = joined; c < spawned; c++)
            running += t[c] != NULL;
        uint64_t c;
        dsm_status_t js;
        size_t rl = part_len(d);
        if (st == DSM_OK && spawned < d->chunks && running < window) {
            st = spawn_part(d, spawned, NULL, 1, &t[spawned]);
            if (st == DSM_OK)
                spawned++;
            continue;
        }
        if (st == DSM_OK && here < d->chunks && !(after_here && running == window)) {
            c = here++;
            memset(part_acc, 0, 16 * d->groups);
            js = part_of_group(r->node, d->h[c], rows_of(d, c), d->groups, d->min_value, part_acc);
            after_here = 1;
        } else if (joined < spawned) {
            c = joined++;
            after_here = 0;
            js = dsm_join(t[c], part_acc, part_len(d), &rl, 0);
            t[c] = NULL;
            if (js == DSM_OK && rl != part_len(d))
                js = DSM_ERR_PROTO;
        } else {
            break;
        }
        if (js == DSM_OK) {
            add_part(d, acc, part_acc);
            *rows_read += rows_of(d, c);
        }
        st = st != DSM_OK ? st : js;
        if (st == DSM_OK && dsm_stop_requested(stop))
            st = DSM_ERR_CANCELLED;
    }
    free(part_acc);
    free(t);
    return st;
}

/* The chunks first, first + step, ... queried into acc (dir: this node's;
 * local: all, or a thread's). */
static dsm_status_t query_chunks(df_t *d, uint64_t first, uint64_t step, uint64_t *acc, uint64_t *rows_read,
                                 const dsm_stop_t *stop)
{
    const dsm_apps_run_t *r = d->r;
    for (uint64_t c = first; c < d->chunks; c += step) {
        if (dsm_stop_requested(stop))
            return DSM_ERR_CANCELLED;
        dsm_coh_ref_t k, v;
        dsm_status_t st = r->ops->borrow(r->node, d->h[2 * c], &k);
        if (st != DSM_OK)
            return st;
        if ((st = r->ops->borrow(r->node, d->h[2 * c + 1], &v)) == DSM_OK) {
            part(k.data, v.data, rows_of(d, c), d->groups, d->min_value, acc);
            *rows_read += rows_of(d, c);
            st = r->ops->release(r->node, &v);
        }
        dsm_status_t rs = r->ops->release(r->node, &k);
        if (st != DSM_OK || rs != DSM_OK)
            return st != DSM_OK ? st : rs;
    }
    return DSM_OK;
}

/* dir and local: this node's chunks by number (dir's affinity=0 shifts
 * them one node on). */
static dsm_status_t query_by_number(df_t *d, uint64_t *acc, uint64_t *rows_read)
{
    const dsm_apps_run_t *r = d->r;
    if (r->local)
        return query_chunks(d, 0, 1, acc, rows_read, dsm_spawn_stop());
    uint64_t first = d->affinity ? r->index : (r->index + r->nodes - 1) % r->nodes;
    return query_chunks(d, first, r->nodes, acc, rows_read, dsm_spawn_stop());
}

/* local, threads=T > 1: the original as a multi-threaded program on one
 * machine, the shape of DRust's single-machine baseline. Thread i queries
 * the chunks c % T == i, as node i does under dir (affinity=1), and leaves
 * its part for thread 0, which adds the parts up after a barrier: dir's
 * gather (gather_dir) with shared memory for the parts and a pthread
 * barrier for the meeting. Two parts a thread by turns, so one barrier a
 * query. */
typedef struct df_team {
    df_t *d;
    uint64_t threads;
    uint64_t *parts;                 /* [2][threads][stride]: a part's sums, cache-line aligned */
    uint64_t stride;                 /* 2 * groups rounded up to a cache line's words */
    pthread_barrier_t meet;
    const dsm_stop_t *stop;          /* the caller's: thread 0 looks at it */
    _Atomic uint64_t stop_after;     /* 1 + the query after which all stop (0: none) */
} df_team_t;

typedef struct df_member {
    df_team_t *team;
    uint64_t index, rows_read;
    uint64_t *acc;                   /* thread 0: the result */
    double seconds;                  /* thread 0: start to the last merge */
    dsm_status_t st;
} df_member_t;

static uint64_t *team_part(const df_team_t *t, uint64_t i, uint64_t q)
{
    return t->parts + ((q % 2) * t->threads + i) * t->stride;
}

static void team_query(void *arg)
{
    df_member_t *m = arg;
    df_team_t *t = m->team;
    df_t *d = t->d;
    pthread_barrier_wait(&t->meet);   /* all start together */
    double start = dsm_now_s();
    for (uint64_t q = 0; q < d->queries; q++) {
        uint64_t *mine = team_part(t, m->index, q);
        memset(mine, 0, 16 * d->groups);
        dsm_status_t st = query_chunks(d, m->index, t->threads, mine, &m->rows_read, NULL);
        if (st == DSM_OK && m->index == 0 && dsm_stop_requested(t->stop))
            st = DSM_ERR_CANCELLED;
        m->st = m->st != DSM_OK ? m->st : st;
        uint64_t none = 0;
        if (st != DSM_OK)   /* every thread leaves after this query's barrier */
            atomic_compare_exchange_strong(&t->stop_after, &none, q + 1);
        pthread_barrier_wait(&t->meet);
        if (m->index == 0) {
            for (uint64_t i = 0; i < t->threads; i++)
                add_part(d, m->acc, team_part(t, i, q));
            m->seconds = dsm_now_s() - start;
        }
        uint64_t after = atomic_load(&t->stop_after);
        if (after != 0 && after - 1 <= q)
            break;
    }
}

static dsm_status_t query_local_threads(df_t *d, uint64_t threads, uint64_t *acc, uint64_t *rows_read,
                                        double *seconds)
{
    /* each thread adds into its own cache lines: a line two threads'
       sums shared would bounce between their cores on every row */
    df_team_t t = {.d = d, .threads = threads, .stop = dsm_spawn_stop(), .stride = (2 * d->groups + 7) / 8 * 8};
    df_member_t *m = calloc(threads, sizeof *m);
    t.parts = aligned_alloc(64, 2 * threads * t.stride * 8);
    dsm_status_t st = m && t.parts ? DSM_OK : DSM_ERR_NOMEM;
    if (st == DSM_OK && pthread_barrier_init(&t.meet, NULL, (unsigned)threads) != 0)
        st = DSM_ERR_NOMEM;
    if (st == DSM_OK) {
        for (uint64_t i = 0; i < threads; i++)
            m[i] = (df_member_t){.team = &t, .index = i, .acc = acc};
        st = dsm_apps_team_run((uint32_t)threads, team_query, m, sizeof *m);
        for (uint64_t i = 0; i < threads && st == DSM_OK; i++) {
            st = m[i].st;
            *rows_read += m[i].rows_read;
        }
        *seconds = m[0].seconds;
        pthread_barrier_destroy(&t.meet);
    }
    free(m);
    free(t.parts);
    return st;
}

static uint64_t df_checksum(const uint64_t *acc, uint64_t groups, uint64_t *hit)
{
    uint64_t sum = 0;
    *hit = 0;
    for (uint64_t g = 0; g < groups; g++) {
        sum += acc[2 * g] * (g + 1) + acc[2 * g + 1] * 7919;
        *hit += acc[2 * g + 1] != 0;
    }
    return sum;
}

/* Where node i's part object for query q is in h[] (dir): two a node,
 * used by turns. */
static uint64_t part_slot(const df_t *d, uint64_t i, uint64_t q) { return 2 * d->chunks + 2 * i + q % 2; }

/* dir: every node leaves query q's partial result in its part object and
 * meets the others (arrival 2 + q); node 0 then adds the parts up (*merged:
 * when it had). The parts are made before the measured phase, two a node
 * used by turns: a node writes a part again two queries later, after the
 * next meeting, which node 0 reaches only once it has read this one, so
 * one meeting a query is enough (the last is followed by one more before
 * the parts are dropped). */
static dsm_status_t gather_dir(df_t *d, uint64_t *acc, uint64_t q, double *merged)
{
    const dsm_apps_run_t *r = d->r;
    uint64_t t0 = tick(d);
    dsm_coh_mut_t m;
    dsm_status_t st = r->ops->borrow_mut(r->node, d->h[part_slot(d, r->index, q)], &m);
    if (st == DSM_OK) {
        memcpy(m.data, acc, 16 * d->groups);
        st = r->ops->release_mut(r->node, &m);
    }
    dsm_status_t ms = dsm_apps_meet(r, 2 + q);   /* even after a failed write: the others wait for it */
    st = st != DSM_OK ? st : ms;
    uint64_t t1 = tick(d);
    d->t_send += t1 - t0;
    if (st == DSM_OK && r->index == 0) {
        memset(acc, 0, 16 * d->groups);
        for (uint64_t i = 0; i < r->nodes && st == DSM_OK; i++) {
            dsm_coh_ref_t p;
            if ((st = r->ops->borrow(r->node, d->h[part_slot(d, i, q)], &p)) != DSM_OK)
                break;
            add_part(d, acc, p.data);
            st = r->ops->release(r->node, &p);
        }
    }
    *merged = dsm_now_s();
    d->t_recv += tick(d) - t1;
    return st;
}

/* dir: this node's two part objects (gather_dir), in h[] before the handles are shared. */
static dsm_status_t make_parts(df_t *d)
{
    const dsm_apps_run_t *r = d->r;
    dsm_status_t st = DSM_OK;
    for (uint64_t q = 0; q < 2 && st == DSM_OK; q++)
        st = r->ops->alloc(r->node, DF_TYPE, 16 * d->groups, &d->h[part_slot(d, r->index, q)]);
    return st;
}

static const dsm_param_info_t df_params[] = {
    DSM_APPS_RUN_PARAMS("8*(1+2*chunks+2*nodes) zeroed shared bytes, chunks=ceil(rows/chunk)"
                       " for own and dir (0: pydsm's run makes one)"),
    {"rows", "u64", "4096", "table rows"},
    {"chunk", "u64", "256", "rows per chunk (a TBox group of two columns under own)"},
    {"groups", "u64", "16", "distinct keys (group-by groups)"},
    {"min_value", "u64", "100", "the filter: value >= min_value (values are 0..999)"},
    {"affinity", "u64", "1", "dir: 1 a node queries the chunks it loaded (as own's spawn_to does), 0 chunks by number"},
    {"queries", "u64", "1", "times the query runs in the measured phase (its sums added up)"},
    {"per_node", "u64", "1", "own: 1 one task to each node for the chunks it loaded, 0 one task per chunk"},
    {"threads", "u64", "1", "local: the original on this many threads, thread i querying the chunks c % threads == i, thread 0 adding the parts up after a barrier each query"},
    {"timing", "u64", "0", "own and dir: 1 reports where node 0's query time went (t_send_ns, t_work_ns, t_recv_ns; own: t_task_start_ns, t_task_run_ns, t_task_tail_ns per task)"},
};
/* The directory: an arrival counter, two words per chunk, two per node (dir's parts). */
static uint64_t df_directory_bytes(uint64_t rows, uint64_t chunk, uint64_t nodes)
{
    return 8 * (1 + 2 * ((rows + chunk - 1) / chunk) + 2 * nodes);
}

static uint64_t df_scratch(const char *param, const void *args, size_t len, uint64_t nodes)
{
    int bad = 0;
    uint64_t rows = dsm_param_u64(args, len, "rows", 4096, &bad), chunk = dsm_param_u64(args, len, "chunk", 256, &bad);
    if (bad || chunk == 0) return 0;
    return dsm_apps_directory_scratch(param, args, len, df_directory_bytes(rows, chunk, nodes));
}

const dsm_workload_info_t dsm_dataframe_info = {
    "dataframe", "DRust's DataFrame (chunked columnar filter + group-by; TBox and spawn_to under own)",
    dsm_workload_dataframe, df_params, sizeof df_params / sizeof df_params[0], df_scratch};

dsm_status_t dsm_workload_dataframe(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                    size_t *ret_len)
{
    const dsm_workload_info_t *w = &dsm_dataframe_info;
    dsm_status_t st = dsm_workload_begin(w, args, len, ret, cap, ret_len);
    if (st != DSM_OK)
        return st;
    int bad = 0;
    df_t d = {0};
    d.rows = dsm_param_u64(args, len, "rows", 4096, &bad);
    d.chunk = dsm_param_u64(args, len, "chunk", 256, &bad);
    d.groups = dsm_param_u64(args, len, "groups", 16, &bad);
    d.min_value = dsm_param_u64(args, len, "min_value", 100, &bad);
    d.affinity = dsm_param_u64(args, len, "affinity", 1, &bad);
    d.per_node = dsm_param_u64(args, len, "per_node", 1, &bad);
    d.timing = dsm_param_u64(args, len, "timing", 0, &bad);
    d.queries = dsm_param_u64(args, len, "queries", 1, &bad);
    uint64_t threads;
    uint64_t nodes = dsm_param_u64(args, len, "nodes", 1, &bad);
    if (d.rows == 0 || d.rows > (1ull << 32))
        return dsm_apps_refuse_param(w, args, len, "rows", ret, cap, ret_len, "1..2^32");
    if (d.chunk == 0 || d.chunk > (1u << 20))
        return dsm_apps_refuse_param(w, args, len, "chunk", ret, cap, ret_len, "1..2^20");
    if (d.groups == 0 || d.groups > DF_MAX_GROUPS)
        return dsm_apps_refuse_param(w, args, len, "groups", ret, cap, ret_len, "1..%d", DF_MAX_GROUPS);
    if (d.affinity > 1)
        return dsm_apps_refuse_param(w, args, len, "affinity", ret, cap, ret_len, "0 or 1");
    if (d.per_node > 1)
        return dsm_apps_refuse_param(w, args, len, "per_node", ret, cap, ret_len, "0 or 1");
    if (d.timing > 1)
        return dsm_apps_refuse_param(w, args, len, "timing", ret, cap, ret_len, "0 or 1");
    if (d.queries == 0 || d.queries > 1000000)
        return dsm_apps_refuse_param(w, args, len, "queries", ret, cap, ret_len, "1..1000000");
    if ((st = dsm_apps_team_param(w, args, len, &threads, ret, cap, ret_len)) != DSM_OK)
        return st;
    char proto[8] = "";
    (void)dsm_param_str(args, len, "protocol", proto, sizeof proto, &bad);
    if (strcmp(proto, "own") == 0 && d.per_node && (d.rows + d.chunk - 1) / d.chunk > (DF_TASK_MAX_CHUNKS - 1) * nodes)
        return dsm_apps_refuse_param(w, args, len, "per_node", ret, cap, ret_len,
                                     "0 with more than %d chunks a node", DF_TASK_MAX_CHUNKS - 1);
    dsm_apps_run_t r;
    if ((st = dsm_apps_run_begin(&r, w, node, args, len, df_directory_bytes(d.rows, d.chunk, nodes), ret, cap,
                                 ret_len)) != DSM_OK ||
        (st = dsm_apps_run_fresh(&r, w, args, len, ret, cap, ret_len)) != DSM_OK)
        return st;
    if (d.timing && r.local)
        return dsm_apps_refuse_param(w, args, len, "timing", ret, cap, ret_len, "0 or 1 (1 only for own and dir)");
    d.r = &r;
    d.chunks = (d.rows + d.chunk - 1) / d.chunk;
    if ((st = dsm_own_type_register(DF_TYPE, "dataframe.chunk", 0)) != DSM_OK ||
        (st = dsm_dataframe_register_tasks()) != DSM_OK)
        return st;
    uint64_t nh = 2 * d.chunks + 2 * nodes;   /* the chunks' columns, then dir's parts */
    d.h = calloc(nh, 8);
    uint64_t *made = calloc(nh, 8), *acc = calloc(2 * d.groups, 8);
    if (d.h == NULL || made == NULL || acc == NULL) {
        free(d.h);
        free(made);
        free(acc);
        return DSM_ERR_NOMEM;
    }
    st = load(&d);
    if (st == DSM_OK && !is_own(&d) && !r.local)
        st = make_parts(&d);
    memcpy(made, d.h, nh * 8);
    dsm_status_t ms = dsm_apps_share(&r, d.h, nh, 1);
    st = st != DSM_OK ? st : ms;
    uint64_t rows_read = 0, *part = calloc(2 * d.groups, 8);
    if (part == NULL && st == DSM_OK)
        st = DSM_ERR_NOMEM;
    /* Each query ends with its result on node 0: own's tasks' results come
     * back with their joins; dir gathers the parts (gather_dir), as
     * collecting the tasks' results is part of own's query. Node 0's
     * measured phase ends with the last merged result; the others' with
     * their last part, as own's tasks' do (their last meet waits for node
     * 0's merge, not for a part of the query). */
    double start = dsm_now_s(), seconds = 0;
    if (threads > 1 && st == DSM_OK)
        st = query_local_threads(&d, threads, acc, &rows_read, &seconds);
    for (uint64_t q = 0; q < d.queries && st == DSM_OK && threads == 1; q++) {
        if (is_own(&d)) {
            if (r.index == 0)
                st = d.per_node ? query_own_per_node(&d, acc, &rows_read) : query_own(&d, acc, &rows_read);
            continue;
        }
        memset(part, 0, 16 * d.groups);
        uint64_t t0 = tick(&d);
        st = query_by_number(&d, part, &rows_read);
        d.t_work += tick(&d) - t0;
        seconds = dsm_now_s() - start;
        if (!r.local) {
            double merged = 0;
            ms = gather_dir(&d, part, q, &merged);   /* even after a failed part: the others wait for it */
            st = st != DSM_OK ? st : ms;
            if (r.index == 0)
                seconds = merged - start;
        }
        add_part(&d, acc, part);   /* on node 0 (and local) the query's whole result */
    }
    if (is_own(&d))
        seconds = dsm_now_s() - start;
    /* the parts and chunks stay until node 0 has read the last of them */
    ms = is_own(&d) ? dsm_apps_meet(&r, 2) : dsm_apps_meet(&r, 2 + d.queries);
    st = st != DSM_OK ? st : ms;
    free(part);
    uint64_t hit = 0, sum = r.index == 0 ? df_checksum(acc, d.groups, &hit) : 0;
    for (uint64_t k = 0; k < nh; k++)
        if (made[k])
            (void)r.ops->drop(r.node, made[k]);
    free(made);
    free(acc);
    free(d.h);
    if (st != DSM_OK)
        return st;
    if (seconds <= 0)
        seconds = 1e-9;
    double ops = (double)rows_read;
    if ((st = dsm_result_add(ret, cap, ret_len, "ops", ops, "rows")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "ops_per_sec", ops / seconds, "rows/s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "seconds", seconds, "s")) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "checksum", (double)(sum & ((1ull << 48) - 1)), "",
                                  DSM_FIGURE_FIRST)) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "groups_hit", (double)hit, "")) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "tasks", (double)d.tasks, "", DSM_FIGURE_TOTAL)) != DSM_OK)
        return st;
    double per_task = d.tasks ? (double)d.tasks : 1;
    const struct { const char *name; double ns; } phase[] = {
        {"t_send_ns", (double)d.t_send}, {"t_work_ns", (double)d.t_work}, {"t_recv_ns", (double)d.t_recv},
        {"t_task_start_ns", (double)d.t_task_start / per_task}, {"t_task_run_ns", (double)d.t_task_run / per_task},
        {"t_task_tail_ns", (double)d.t_task_tail}};
    for (size_t i = 0; i < sizeof phase / sizeof phase[0] && d.timing; i++)
        if ((st = dsm_result_add_kind(ret, cap, ret_len, phase[i].name, phase[i].ns, "ns", DSM_FIGURE_TOTAL)) != DSM_OK)
            return st;
    return dsm_apps_report_counters(&r, ops, ret, cap, ret_len);
}
