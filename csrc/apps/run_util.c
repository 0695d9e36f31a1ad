/* The coherence workloads' shared run steps (see run_util.h). */
#include "apps/run_util.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "apps/refuse.h"
#include "apps/workloads.h"
#include "dsm/clock.h"

/* POKE_MAX: members the last arrival pokes; one beyond them still sees the
 * counter at its next look, only later. */
enum { WAIT_MS = 120000, POKE_MAX = 64 };

/* The last to arrive pokes every other member: a waiter away from the
 * counter sleeps on its fabric until then, instead of looking (a round trip
 * to the counter's node) at growing intervals and starting late. */
static void poke_members(dsm_node_t *node)
{
    uint32_t ranks[POKE_MAX];
    uint32_t n = dsm_node_daemons(node, ranks, POKE_MAX);
    for (uint32_t i = 0; i < n && i < POKE_MAX; i++)
        if (ranks[i] != dsm_node_rank(node))
            (void)dsm_node_poke(node, ranks[i]);
}

dsm_status_t dsm_apps_rendezvous(dsm_node_t *node, dsm_gaddr_t counter, uint64_t k, uint64_t nodes)
{
    uint64_t old;
    dsm_status_t st = dsm_fetch_add(node, counter, 1, &old);
    if (st == DSM_OK && old + 1 == k * nodes)
        poke_members(node);
    uint64_t deadline = dsm_deadline_ns(WAIT_MS);
    /* At the counter's node a look is a load: wake on every message (an
     * arrival is one). Elsewhere a look is a round trip to that node, which
     * may still be in its measured phase: look again when poked, or else at
     * growing intervals, whatever else arrives here (a home's requests, a
     * channel's items), so that serving them costs the measured node no
     * poll. */
    dsm_fabric_t *f = dsm_node_fabric(node);
    int here = dsm_gaddr_node(counter) == dsm_node_rank(node);
    long pause_ns = here ? 1000 : 20000;
    while (st == DSM_OK) {
        uint64_t pokes = dsm_node_pokes(node), v;
        /* an atomic look (adding 0): a plain read would race the others' adds */
        if ((st = dsm_fetch_add(node, counter, 0, &v)) != DSM_OK || v >= k * nodes)
            break;
        uint64_t now = dsm_now_ns();
        if (now > deadline)
            return DSM_ERR_TIMEOUT;
        if (here) {
            (void)dsm_fabric_backoff(f, &pause_ns, 1000000);
            continue;
        }
        for (uint64_t until = now + (uint64_t)pause_ns; dsm_node_pokes(node) == pokes && now < until;
             now = dsm_now_ns()) {
            long left = (long)(until - now);
            (void)dsm_fabric_backoff(f, &left, left);
        }
        if (pause_ns < 2000000)
            pause_ns *= 2;
    }
    return st;
}

void dsm_apps_counters(dsm_node_t *node, dsm_coh_stats_t *out)
{
    dsm_coh_stats_t a = {0}, b = {0};
    if (node) {
        dsm_coh_ops("own")->stats(node, &a);
        dsm_coh_ops("dir")->stats(node, &b);
    }
    *out = (dsm_coh_stats_t){a.messages + b.messages, a.bytes + b.bytes, a.cache_hits + b.cache_hits,
                             a.cache_misses + b.cache_misses, a.moves + b.moves, a.invalidations + b.invalidations,
                             a.held_back + b.held_back, a.cache_evictions + b.cache_evictions,
                             a.chained_round_trips + b.chained_round_trips};
}

void dsm_apps_wire(dsm_node_t *node, dsm_apps_wire_t *out)
{
    dsm_stats_t s;
    *out = (dsm_apps_wire_t){0, 0, 0, 0};
    if (node == NULL || dsm_node_fabric(node) == NULL)
        return;
    dsm_fabric_stats(dsm_node_fabric(node), &s);
    dsm_coh_stats_t c;
    dsm_apps_counters(node, &c);
    *out = (dsm_apps_wire_t){s.am_sent, s.gets + s.puts + s.atomics, s.round_trips_waited + c.chained_round_trips,
                             s.round_trip_wait_ns};
}

void dsm_apps_wire_begin(dsm_node_t *node, dsm_apps_wire_t *out)
{
    if (node != NULL && dsm_node_fabric(node) != NULL)
        dsm_fabric_time_waits(dsm_node_fabric(node), 1);
    dsm_apps_wire(node, out);
}

void dsm_apps_wire_end(dsm_node_t *node, dsm_apps_wire_t *out)
{
    dsm_apps_wire(node, out);
    if (node != NULL && dsm_node_fabric(node) != NULL)
        dsm_fabric_time_waits(dsm_node_fabric(node), 0);
}

dsm_status_t dsm_apps_report_waited(const dsm_apps_wire_t *before, const dsm_apps_wire_t *after, void *ret,
                                    size_t cap, size_t *ret_len)
{
    dsm_status_t st = dsm_result_add_kind(ret, cap, ret_len, "round_trips_waited",
                                          (double)(after->waited - before->waited), "round trips", DSM_FIGURE_TOTAL);
    if (st == DSM_OK)
        st = dsm_result_add_kind(ret, cap, ret_len, "round_trip_wait_ns", (double)(after->wait_ns - before->wait_ns),
                                 "ns", DSM_FIGURE_TOTAL);
    return st;
}

dsm_status_t dsm_apps_report_wire(const dsm_apps_wire_t *before, const dsm_apps_wire_t *after, void *ret, size_t cap,
                                  size_t *ret_len)
{
    dsm_status_t st = dsm_result_add_kind(ret, cap, ret_len, "fabric_am_sent", (double)(after->am - before->am), "msgs",
                                          DSM_FIGURE_TOTAL);
    if (st == DSM_OK)
        st = dsm_result_add_kind(ret, cap, ret_len, "fabric_onesided", (double)(after->onesided - before->onesided),
                                 "ops", DSM_FIGURE_TOTAL);
    return st;
}

dsm_status_t dsm_apps_directory_fresh(const dsm_workload_info_t *w, dsm_node_t *node, dsm_gaddr_t directory,
                                      uint64_t nodes, uint64_t directory_bytes, const void *args, size_t len,
                                      void *ret, size_t cap, size_t *ret_len)
{
    uint64_t arrivals;   /* the others may be arriving: an atomic look (adding 0) */
    dsm_status_t st = dsm_fetch_add(node, directory, 0, &arrivals);
    if (st != DSM_OK || arrivals < nodes)
        return st;
    return dsm_apps_refuse_param(w, args, len, "directory", ret, cap, ret_len,
                                 "%llu freshly zeroed shared bytes, not reused: its first word holds %llu, left by "
                                 "an earlier run (zero it, or pass none and the run makes one)",
                                 (unsigned long long)directory_bytes, (unsigned long long)arrivals);
}

dsm_status_t dsm_apps_run_fresh(const dsm_apps_run_t *r, const dsm_workload_info_t *w, const void *args, size_t len,
                                void *ret, size_t cap, size_t *ret_len)
{
    return r->local ? DSM_OK
                    : dsm_apps_directory_fresh(w, r->node, r->directory, r->nodes, r->directory_bytes, args, len,
                                               ret, cap, ret_len);
}

uint64_t dsm_apps_directory_scratch(const char *param, const void *args, size_t len, uint64_t bytes)
{
    char proto[16] = "own";
    int bad = 0;
    dsm_param_str(args, len, "protocol", proto, sizeof proto, &bad);
    return strcmp(param, "directory") == 0 && strcmp(proto, "local") != 0 ? bytes : 0;
}

dsm_status_t dsm_apps_run_begin(dsm_apps_run_t *r, const dsm_workload_info_t *w, dsm_node_t *node,
                                const void *args, size_t len, uint64_t directory_bytes, void *ret, size_t cap,
                                size_t *ret_len)
{
    memset(r, 0, sizeof *r);
    int bad = 0;
    strcpy(r->proto, "own");
    dsm_param_str(args, len, "protocol", r->proto, sizeof r->proto, &bad);
    r->index = dsm_param_u64(args, len, "rank_index", 0, &bad);
    r->nodes = dsm_param_u64(args, len, "nodes", 1, &bad);
    r->directory = dsm_param_u64(args, len, "directory", 0, &bad);
    r->checks = dsm_param_u64(args, len, "checks", 2, &bad);
    r->seed = dsm_param_u64(args, len, "seed", 42, &bad);
    /* dsm_workload_begin has checked the numbers: bad is a protocol too long */
    r->ops = bad ? NULL : dsm_coh_ops(r->proto);
    r->local = r->ops && strcmp(r->proto, "local") == 0;
    if (r->ops == NULL)
        return dsm_apps_refuse_param(w, args, len, "protocol", ret, cap, ret_len, "own, dir or local");
    if (r->nodes == 0 || r->nodes > 256)
        return dsm_apps_refuse_param(w, args, len, "nodes", ret, cap, ret_len, "1..256");
    if (r->index >= r->nodes)
        return dsm_apps_refuse_param(w, args, len, "rank_index", ret, cap, ret_len, "below nodes (%llu)",
                                     (unsigned long long)r->nodes);
    if (r->checks > 2)
        return dsm_apps_refuse_param(w, args, len, "checks", ret, cap, ret_len, "0, 1 or 2");
    if (!r->local && (r->directory == 0 || node == NULL))
        return dsm_apps_refuse_param(w, args, len, "directory", ret, cap, ret_len,
                                     "the global address of %llu zeroed shared bytes for protocol %s, run on a "
                                     "daemon (pydsm's run makes one when none is given)",
                                     (unsigned long long)directory_bytes, r->proto);
    r->node = r->local ? NULL : node;
    r->directory_bytes = directory_bytes;
    if (r->checks < 2 && r->node && dsm_own_set_checks(r->node, (int)r->checks) != DSM_OK)
        return DSM_ERR_STATE;
    dsm_apps_counters(r->node, &r->before);
    return DSM_OK;
}

dsm_status_t dsm_apps_report_since(dsm_node_t *node, const dsm_coh_stats_t *before, double ops, void *ret, size_t cap,
                                   size_t *ret_len)
{
    dsm_coh_stats_t now;
    dsm_apps_counters(node, &now);
    return dsm_apps_report_between(before, &now, ops, ret, cap, ret_len);
}

dsm_status_t dsm_apps_report_between(const dsm_coh_stats_t *before, const dsm_coh_stats_t *after, double ops,
                                     void *ret, size_t cap, size_t *ret_len)
{
    const dsm_coh_stats_t *b0 = before;
    const dsm_coh_stats_t now = *after;
    double m = (double)(now.messages - b0->messages), b = (double)(now.bytes - b0->bytes);
    dsm_status_t st;
    if ((st = dsm_result_add_kind(ret, cap, ret_len, "messages", m, "msgs", DSM_FIGURE_TOTAL)) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "bytes", b, "B", DSM_FIGURE_TOTAL)) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "cache_hits", (double)(now.cache_hits - b0->cache_hits), "",
                                  DSM_FIGURE_TOTAL)) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "cache_misses", (double)(now.cache_misses - b0->cache_misses),
                                  "", DSM_FIGURE_TOTAL)) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "cache_evictions",
                                  (double)(now.cache_evictions - b0->cache_evictions), "", DSM_FIGURE_TOTAL)) !=
            DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "moves", (double)(now.moves - b0->moves), "",
                                  DSM_FIGURE_TOTAL)) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "invalidations", (double)(now.invalidations - b0->invalidations),
                                  "msgs", DSM_FIGURE_TOTAL)) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "held_back", (double)(now.held_back - b0->held_back),
                                  "", DSM_FIGURE_TOTAL)) != DSM_OK ||
        (st = dsm_result_add_ratio(ret, cap, ret_len, "messages_per_op", m, ops, "msgs")) != DSM_OK)
        return st;
    return dsm_result_add_ratio(ret, cap, ret_len, "bytes_per_op", b, ops, "B");
}

dsm_status_t dsm_apps_report_counters(const dsm_apps_run_t *r, double ops, void *ret, size_t cap, size_t *ret_len)
{
    return dsm_apps_report_since(r->node, &r->before, ops, ret, cap, ret_len);
}

dsm_status_t dsm_apps_meet(const dsm_apps_run_t *r, uint64_t round)
{
    return r->local ? DSM_OK : dsm_apps_rendezvous(r->node, r->directory, round, r->nodes);
}

dsm_status_t dsm_apps_share(const dsm_apps_run_t *r, uint64_t *h, uint64_t n, uint64_t round)
{
    if (r->local)
        return DSM_OK;
    dsm_status_t st = DSM_OK;
    for (uint64_t k = 0; k < n && st == DSM_OK; k++)
        if (h[k] != 0)
            st = dsm_write(r->node, r->directory + 8 + 8 * k, &h[k], 8);
    dsm_status_t ms = dsm_apps_meet(r, round);
    if (st == DSM_OK)
        st = ms;
    if (st == DSM_OK)
        st = dsm_read(r->node, r->directory + 8, h, 8 * n);
    return st;
}

/* ---- the original on threads ---------------------------------------------------- */

typedef struct team_seat {
    void (*fn)(void *member);
    void *member;
    sem_t *go;
    const int *abandon;
} team_seat_t;

static void *team_seat_main(void *arg)
{
    team_seat_t *s = arg;
    while (sem_wait(s->go) != 0)
        ;
    if (!*s->abandon)
        s->fn(s->member);
    return NULL;
}

dsm_status_t dsm_apps_team_param(const dsm_workload_info_t *w, const void *args, size_t len, uint64_t *threads,
                                 void *ret, size_t cap, size_t *ret_len)
{
    int bad = 0;   /* dsm_workload_begin has checked the numbers */
    char proto[8] = "";
    *threads = dsm_param_u64(args, len, "threads", 1, &bad);
    (void)dsm_param_str(args, len, "protocol", proto, sizeof proto, &bad);
    if (*threads == 0 || *threads > DSM_APPS_TEAM_MAX)
        return dsm_apps_refuse_param(w, args, len, "threads", ret, cap, ret_len, "1..%d", DSM_APPS_TEAM_MAX);
    if (*threads > 1 && strcmp(proto, "local") != 0)
        return dsm_apps_refuse_param(w, args, len, "threads", ret, cap, ret_len, "1 (above 1 only for local)");
    return DSM_OK;
}

dsm_status_t dsm_apps_team_run(uint32_t threads, void (*fn)(void *member), void *members, size_t size)
{
    sem_t go;
    if (threads == 0)
        return DSM_ERR_INVALID;
    if (sem_init(&go, 0, 0) != 0)
        return DSM_ERR_NOMEM;
    int abandon = 0;
    pthread_t *th = calloc(threads, sizeof *th);
    team_seat_t *seat = calloc(threads, sizeof *seat);
    uint32_t started = 1;
    if (th == NULL || seat == NULL)
        abandon = 1;
    while (!abandon && started < threads) {
        seat[started] = (team_seat_t){fn, (char *)members + (size_t)started * size, &go, &abandon};
        if (pthread_create(&th[started], NULL, team_seat_main, &seat[started]) == 0)
            started++;
        else
            abandon = 1;
    }
    for (uint32_t i = 1; i < started; i++)
        sem_post(&go);
    if (!abandon)
        fn(members);
    for (uint32_t i = 1; i < started; i++)
        pthread_join(th[i], NULL);
    sem_destroy(&go);
    free(th);
    free(seat);
    return abandon ? DSM_ERR_NOMEM : DSM_OK;
}
