/* One partition's side of the label-correcting SSSP (see sssp.h), the
 * same whichever way relaxations travel between partitions: delegated
 * closures (sssp.c) or the benchmark's naive active messages.
 *
 * A relaxation that improves a vertex settles it and every vertex of this
 * partition it improves in turn, nearest first (a binary heap on distance,
 * as Dijkstra settles them, so that a vertex is rarely settled twice in one
 * relaxation); an improvement for another partition's vertex goes out only
 * if it beats what this partition already sent for that vertex, which is
 * on its way and no worse. */
#include <stdlib.h>

#include "apps/sssp.h"

dsm_status_t dsm_sssp_local_init(dsm_sssp_local_t *l, const dsm_sssp_graph_t *g, uint32_t id, uint32_t parts)
{
    *l = (dsm_sssp_local_t){.g = g, .id = id, .parts = parts};
    l->dist = malloc(((size_t)g->n / parts + 1) * sizeof *l->dist);
    l->sent = malloc((size_t)g->n * sizeof *l->sent);
    if (!l->dist || !l->sent) {
        dsm_sssp_local_free(l);
        return DSM_ERR_NOMEM;
    }
    dsm_sssp_local_reset(l);
    return DSM_OK;
}

void dsm_sssp_local_reset(dsm_sssp_local_t *l)
{
    for (size_t i = 0; i < (size_t)l->g->n / l->parts + 1; i++) l->dist[i] = DSM_SSSP_INF;
    for (size_t v = 0; v < l->g->n; v++) l->sent[v] = DSM_SSSP_INF;
    l->relaxations = 0;
}

void dsm_sssp_local_free(dsm_sssp_local_t *l)
{
    free(l->dist);
    free(l->sent);
    free(l->heap);
    *l = (dsm_sssp_local_t){0};
}

static int heap_push(dsm_sssp_local_t *l, uint32_t v, uint64_t d)
{
    if (l->len == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        dsm_sssp_relaxation_t *h = realloc(l->heap, cap * sizeof *h);
        if (!h) return -1;
        l->heap = h;
        l->cap = cap;
    }
    size_t i = l->len++;
    for (; i > 0 && l->heap[(i - 1) / 2].d > d; i = (i - 1) / 2) l->heap[i] = l->heap[(i - 1) / 2];
    l->heap[i] = (dsm_sssp_relaxation_t){.v = v, .d = d};
    return 0;
}

static dsm_sssp_relaxation_t heap_pop(dsm_sssp_local_t *l)
{
    dsm_sssp_relaxation_t top = l->heap[0], last = l->heap[--l->len];
    size_t i = 0;
    for (size_t c = 1; c < l->len; i = c, c = 2 * c + 1) {
        if (c + 1 < l->len && l->heap[c + 1].d < l->heap[c].d) c++;
        if (l->heap[c].d >= last.d) break;
        l->heap[i] = l->heap[c];
    }
    if (l->len > 0) l->heap[i] = last;
    return top;
}

dsm_status_t dsm_sssp_relax(dsm_sssp_local_t *l, uint32_t v, uint64_t d, dsm_sssp_send_fn send, void *ctx)
{
    if (v >= l->g->n || dsm_sssp_part_of(v, l->parts) != l->id) return DSM_ERR_INVALID;
    const dsm_sssp_graph_t *g = l->g;
    dsm_status_t err = DSM_OK;
    l->len = 0;
    if (heap_push(l, v, d) != 0) return DSM_ERR_NOMEM;
    while (l->len > 0) {
        dsm_sssp_relaxation_t e = heap_pop(l);
        l->relaxations++;
        uint64_t *slot = &l->dist[e.v / l->parts];
        if (e.d >= *slot) continue;
        *slot = e.d;
        for (uint64_t i = g->off[e.v]; i < g->off[e.v + 1]; i++) {
            uint32_t u = g->dst[i];
            uint64_t du = e.d + g->w[i];
            uint32_t owner = dsm_sssp_part_of(u, l->parts);
            dsm_status_t st = DSM_OK;
            if (owner == l->id) {
                if (du < l->dist[u / l->parts] && heap_push(l, u, du) != 0) st = DSM_ERR_NOMEM;
            } else if (du < l->sent[u]) {
                l->sent[u] = du;
                st = send(ctx, owner, u, du);
            }
            if (st != DSM_OK && err == DSM_OK) err = st;
        }
    }
    return err;
}
