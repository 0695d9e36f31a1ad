/* SSSP on delegation across nodes: the Kronecker graph, the Dijkstra
 * reference and the delegated label-correcting run (see sssp.h).
 *
 * The run: relax(v, d) is a closure on v's partition, dsm_sssp_relax
 * (sssp_local.c) on its part, delegating each relaxation for another
 * partition with apply_then, from inside the closure (allowed: it does not
 * block). The
 * source's owner starts it; the runtimes' termination detection (every
 * request answered on every node) says when no relaxation is left, so the
 * distances are then final. */
#include "apps/sssp.h"

#include <stdlib.h>
#include <string.h>

#include "dsm/log.h"
#include "dsm/mix.h"

typedef struct part {
    /* relaxations of this partition's own vertices are done in a loop
     * there: a closure delegated to its own trustee would run inline,
     * recursively */
    dsm_sssp_local_t local;
    dsm_deleg_trust_t *peers;  /* a trust to every partition, usable here */
    dsm_status_t err;
    const dsm_stop_t *stop;
} part_t;

struct dsm_sssp {
    dsm_deleg_loss_t loss;   /* the last run's, read before its runtime recovered */
    const dsm_sssp_graph_t *g;
    unsigned nodes, first, trustees, parts;
    dsm_deleg_rt_t *rt[64];
    part_t *part;
    dsm_deleg_trust_t *owner; /* the entrusting trust of each partition */
    uint32_t src;
    /* one node of a run across processes (dsm_sssp_create_node): only this
     * node's partitions are here, rt[0] is its runtime, self its index */
    int one_node;
    unsigned self;
    dsm_deleg_trust_t *imported; /* [parts]: the trust each other node handed over */
};

/* Partition p lives in this process. */
static int part_here(const dsm_sssp_t *s, uint32_t p) { return !s->one_node || p / s->trustees == s->self; }

/* ---- the graph ------------------------------------------------------------ */

static double unit(uint64_t *s) { return (double)(dsm_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }

dsm_status_t dsm_sssp_kronecker(unsigned scale, unsigned edge_factor, uint64_t seed, dsm_sssp_graph_t *out)
{
    if (!out || scale < 1 || scale > 26 || edge_factor < 1 || edge_factor > 64) return DSM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    uint32_t n = 1u << scale;
    uint64_t me = (uint64_t)edge_factor * n;
    uint32_t *src = malloc(me * sizeof *src), *dst = malloc(me * sizeof *dst), *w = malloc(me * sizeof *w);
    uint32_t *perm = malloc((size_t)n * sizeof *perm);
    uint64_t *off = calloc((size_t)n + 1, sizeof *off);
    if (!src || !dst || !w || !perm || !off) goto nomem;
    uint64_t s = seed;
    for (uint32_t i = 0; i < n; i++) perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(dsm_splitmix64(&s) % (i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    uint64_t kept = 0;
    for (uint64_t e = 0; e < me; e++) {
        uint32_t a = 0, b = 0;
        for (unsigned bit = 0; bit < scale; bit++) {
            double r = unit(&s);
            /* quadrants: A = 0.57 (0,0), B = 0.19 (0,1), C = 0.19 (1,0), D (1,1) */
            uint32_t ia = r >= 0.57 + 0.19, ib = (r >= 0.57 && r < 0.76) || r >= 0.95;
            a = (a << 1) | ia;
            b = (b << 1) | ib;
        }
        uint32_t wt = 1 + (uint32_t)(dsm_splitmix64(&s) % 255);
        if (a == b) continue;
        src[kept] = perm[a];
        dst[kept] = perm[b];
        w[kept] = wt;
        kept++;
    }
    for (uint64_t e = 0; e < kept; e++) {
        off[src[e] + 1]++;
        off[dst[e] + 1]++;
    }
    for (uint32_t v = 0; v < n; v++) off[v + 1] += off[v];
    out->n = n;
    out->m = 2 * kept;
    out->off = off;
    out->dst = malloc(out->m * sizeof *out->dst);
    out->w = malloc(out->m * sizeof *out->w);
    uint64_t *fill = malloc((size_t)n * sizeof *fill);
    if (!out->dst || !out->w || !fill) {
        free(fill);
        goto nomem;
    }
    memcpy(fill, off, (size_t)n * sizeof *fill);
    for (uint64_t e = 0; e < kept; e++) {
        uint64_t i = fill[src[e]]++, j = fill[dst[e]]++;
        out->dst[i] = dst[e];
        out->w[i] = w[e];
        out->dst[j] = src[e];
        out->w[j] = w[e];
    }
    free(fill);
    free(src);
    free(dst);
    free(w);
    free(perm);
    return DSM_OK;
nomem:
    free(src);
    free(dst);
    free(w);
    free(perm);
    free(out->dst);
    free(out->w);
    free(off);
    memset(out, 0, sizeof *out);
    return DSM_ERR_NOMEM;
}

void dsm_sssp_graph_free(dsm_sssp_graph_t *g)
{
    if (!g) return;
    free(g->off);
    free(g->dst);
    free(g->w);
    memset(g, 0, sizeof *g);
}

uint32_t dsm_sssp_source(const dsm_sssp_graph_t *g)
{
    uint32_t best = 0;
    for (uint32_t v = 1; v < g->n; v++)
        if (g->off[v + 1] - g->off[v] > g->off[best + 1] - g->off[best]) best = v;
    return best;
}

/* ---- Dijkstra: a binary heap of (distance, vertex), stale entries skipped -- */

typedef struct hent {
    uint64_t d;
    uint32_t v;
} hent_t;

static void heap_push(hent_t *h, size_t *len, hent_t e)
{
    size_t i = (*len)++;
    while (i > 0 && h[(i - 1) / 2].d > e.d) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static hent_t heap_pop(hent_t *h, size_t *len)
{
    hent_t top = h[0], last = h[--*len];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *len) break;
        if (c + 1 < *len && h[c + 1].d < h[c].d) c++;
        if (h[c].d >= last.d) break;
        h[i] = h[c];
        i = c;
    }
    if (*len) h[i] = last;
    return top;
}

dsm_status_t dsm_sssp_dijkstra(const dsm_sssp_graph_t *g, uint32_t src, uint64_t *dist)
{
    if (!g || !dist || src >= g->n) return DSM_ERR_INVALID;
    /* every improvement pushes once: at most m + 1 entries */
    hent_t *h = malloc((g->m + 1) * sizeof *h);
    if (!h) return DSM_ERR_NOMEM;
    for (uint32_t v = 0; v < g->n; v++) dist[v] = DSM_SSSP_INF;
    size_t len = 0;
    dist[src] = 0;
    heap_push(h, &len, (hent_t){0, src});
    while (len) {
        hent_t e = heap_pop(h, &len);
        if (e.d != dist[e.v]) continue;
        for (uint64_t i = g->off[e.v]; i < g->off[e.v + 1]; i++) {
            uint64_t nd = e.d + g->w[i];
            if (nd < dist[g->dst[i]]) {
                dist[g->dst[i]] = nd;
                heap_push(h, &len, (hent_t){nd, g->dst[i]});
            }
        }
    }
    free(h);
    return DSM_OK;
}

/* ---- the delegated run ------------------------------------------------------ */

static void relax_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len);

static dsm_status_t send_relax(void *ctx, uint32_t owner, uint32_t v, uint64_t d)
{
    part_t *p = ctx;
    dsm_sssp_relaxation_t out = {.v = v, .d = d};
    return dsm_deleg_apply_then(&p->peers[owner], relax_fn, &out, sizeof out, NULL, 0, 0, NULL, NULL);
}

static void relax_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)args;
    (void)args_len;
    part_t *p = prop;
    dsm_sssp_relaxation_t e;
    memcpy(&e, env, sizeof e);
    if (dsm_stop_requested(p->stop)) {
        p->err = DSM_ERR_CANCELLED; /* this relaxation and what it would start are dropped */
        return;
    }
    dsm_status_t st = dsm_sssp_relax(&p->local, e.v, e.d, send_relax, p);
    if (st != DSM_OK && p->err == DSM_OK) p->err = st;
}

static dsm_status_t share(dsm_deleg_trust_t *src, dsm_deleg_rt_t *from, dsm_deleg_rt_t *rt, dsm_deleg_trust_t *out)
{
    if (from == rt) return dsm_deleg_trust_clone(src, out);
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    dsm_status_t st = dsm_deleg_trust_export(src, wire, sizeof wire);
    return st != DSM_OK ? st : dsm_deleg_trust_import(rt, wire, sizeof wire, out);
}

/* Partition p's memory, the partition entrusted to its trustee on rt. */
static dsm_status_t part_make(dsm_sssp_t *s, uint32_t p, dsm_deleg_rt_t *rt)
{
    part_t *q = &s->part[p];
    q->peers = calloc(s->parts, sizeof *q->peers);
    if (!q->peers || dsm_sssp_local_init(&q->local, s->g, p, s->parts) != DSM_OK) return DSM_ERR_NOMEM;
    return dsm_deleg_entrust(rt, s->first + p % s->trustees, q, NULL, 0, &s->owner[p]);
}

/* The memory of s (trusts already made are the runtimes' business). */
static void sssp_free(dsm_sssp_t *s)
{
    if (s->part)
        for (uint32_t p = 0; p < s->parts; p++) {
            dsm_sssp_local_free(&s->part[p].local);
            free(s->part[p].peers);
        }
    free(s->part);
    free(s->owner);
    free(s->imported);
    free(s);
}

dsm_status_t dsm_sssp_create(const dsm_sssp_graph_t *g, dsm_deleg_rt_t *const *rts, unsigned nodes,
                             unsigned first, unsigned trustees, dsm_sssp_t **out)
{
    if (!g || !rts || !out || nodes == 0 || nodes > 64 || g->n == 0) return DSM_ERR_INVALID;
    unsigned threads = dsm_deleg_rt_threads(rts[0]);
    for (unsigned i = 1; i < nodes; i++)
        if (dsm_deleg_rt_threads(rts[i]) != threads) return DSM_ERR_INVALID;
    if (first >= threads) return DSM_ERR_INVALID;
    if (trustees == 0) trustees = threads - first;
    if (first + trustees > threads) return DSM_ERR_INVALID;
    dsm_status_t st = dsm_deleg_register("apps.sssp.relax", relax_fn);
    if (st != DSM_OK && st != DSM_ERR_EXISTS) return st;
    dsm_sssp_t *s = calloc(1, sizeof *s);
    if (!s) return DSM_ERR_NOMEM;
    s->loss = (dsm_deleg_loss_t){.rank = -1, .trustee = -1};
    s->g = g;
    s->nodes = nodes;
    s->first = first;
    s->trustees = trustees;
    s->parts = nodes * trustees;
    memcpy(s->rt, rts, nodes * sizeof *rts);
    s->part = calloc(s->parts, sizeof *s->part);
    s->owner = calloc(s->parts, sizeof *s->owner);
    if (!s->part || !s->owner) goto fail_nomem;
    for (uint32_t p = 0; p < s->parts; p++)
        if ((st = part_make(s, p, rts[p / trustees])) != DSM_OK) goto fail;
    for (uint32_t p = 0; p < s->parts; p++)
        for (uint32_t q = 0; q < s->parts; q++)
            if ((st = share(&s->owner[q], rts[q / trustees], rts[p / trustees], &s->part[p].peers[q])) != DSM_OK)
                goto fail;
    *out = s;
    return DSM_OK;
fail_nomem:
    st = DSM_ERR_NOMEM;
fail:
    /* trusts already made are the runtimes' leak: they go with them */
    sssp_free(s);
    return st;
}

/* One node of a run across processes: this node's partitions entrusted to
 * its runtime, a trust to each exported to every other attached node
 * through the runtime's board, and theirs imported from their boards. */
dsm_status_t dsm_sssp_create_node(const dsm_sssp_graph_t *g, dsm_deleg_rt_t *rt, uint32_t self_rank, unsigned first,
                                  unsigned trustees, uint32_t timeout_ms, dsm_sssp_t **out)
{
    if (!g || !rt || !out || g->n == 0) return DSM_ERR_INVALID;
    unsigned threads = dsm_deleg_rt_threads(rt);
    if (first >= threads) return DSM_ERR_INVALID;
    if (trustees == 0) trustees = threads - first;
    if (first + trustees > threads) return DSM_ERR_INVALID;
    /* the nodes of the run: this one and its attached peers, by rank */
    uint32_t ranks[64];
    uint32_t peers = dsm_deleg_peers(rt, ranks, 63);
    if (peers > 63) return DSM_ERR_INVALID;
    unsigned nodes = peers + 1, self = 0;
    while (self < peers && ranks[self] < self_rank) self++;
    memmove(ranks + self + 1, ranks + self, (peers - self) * sizeof *ranks);
    ranks[self] = self_rank;
    size_t board_len = (size_t)trustees * nodes * DSM_DELEG_TRUST_WIRE;
    if (board_len > 4096) return DSM_ERR_TOO_BIG;
    dsm_status_t st = dsm_deleg_register("apps.sssp.relax", relax_fn);
    if (st != DSM_OK && st != DSM_ERR_EXISTS) return st;
    dsm_sssp_t *s = calloc(1, sizeof *s);
    uint8_t *board = calloc(1, board_len), *theirs = calloc(1, board_len);
    if (!s || !board || !theirs) {
        free(s);
        free(board);
        free(theirs);
        return DSM_ERR_NOMEM;
    }
    s->g = g;
    s->nodes = nodes;
    s->first = first;
    s->trustees = trustees;
    s->parts = nodes * trustees;
    s->rt[0] = rt;
    s->one_node = 1;
    s->self = self;
    s->part = calloc(s->parts, sizeof *s->part);
    s->owner = calloc(s->parts, sizeof *s->owner);
    s->imported = calloc(s->parts, sizeof *s->imported);
    if (!s->part || !s->owner || !s->imported) goto fail_nomem;
    for (uint32_t p = self * trustees; p < (self + 1) * trustees; p++) {
        if ((st = part_make(s, p, rt)) != DSM_OK) goto fail;
        /* board entry (t, j): partition t of this node, for node j (its
         * weight counted as node j's from now: given back if j dies) */
        for (unsigned j = 0; j < nodes; j++)
            if (j != self &&
                (st = dsm_deleg_trust_export_to(rt, &s->owner[p], ranks[j],
                                                board + ((p % trustees) * nodes + j) * DSM_DELEG_TRUST_WIRE,
                                                DSM_DELEG_TRUST_WIRE)) != DSM_OK)
                goto fail;
    }
    if ((st = dsm_deleg_board_set(rt, board, board_len)) != DSM_OK) goto fail;
    for (unsigned j = 0; j < nodes; j++) {
        if (j == self) continue;
        size_t len = 0;
        if ((st = dsm_deleg_board_get(rt, ranks[j], theirs, board_len, &len, timeout_ms)) != DSM_OK) goto fail;
        if (len != board_len) {
            DSM_ERROR("apps", "sssp: rank %u runs another partitioning (%zu board bytes, %zu here)", ranks[j], len,
                      board_len);
            st = DSM_ERR_PROTO;
            goto fail;
        }
        for (unsigned t = 0; t < trustees; t++)
            if ((st = dsm_deleg_trust_import(rt, theirs + (t * nodes + self) * DSM_DELEG_TRUST_WIRE,
                                             DSM_DELEG_TRUST_WIRE, &s->imported[j * trustees + t])) != DSM_OK)
                goto fail;
    }
    for (uint32_t p = self * trustees; p < (self + 1) * trustees; p++)
        for (uint32_t q = 0; q < s->parts; q++) {
            dsm_deleg_trust_t *src = part_here(s, q) ? &s->owner[q] : &s->imported[q];
            if ((st = dsm_deleg_trust_clone(src, &s->part[p].peers[q])) != DSM_OK) goto fail;
        }
    free(board);
    free(theirs);
    *out = s;
    return DSM_OK;
fail_nomem:
    st = DSM_ERR_NOMEM;
fail:
    free(board);
    free(theirs);
    sssp_free(s);
    return st;
}

typedef struct node_arg {
    dsm_sssp_t *s;
    unsigned node;
} node_arg_t;

static void start_main(void *arg, unsigned worker)
{
    node_arg_t *a = arg;
    dsm_sssp_t *s = a->s;
    uint32_t owner = dsm_sssp_part_of(s->src, s->parts);
    if (worker != 0 || owner / s->trustees != a->node) return;
    /* the first partition of this node holds a trust to the owner */
    part_t *here = &s->part[a->node * s->trustees];
    dsm_sssp_relaxation_t e = {.v = s->src, .d = 0};
    dsm_status_t st = dsm_deleg_apply_then(&here->peers[owner], relax_fn, &e, sizeof e, NULL, 0, 0, NULL, NULL);
    if (st != DSM_OK) here->err = st;
}

static dsm_status_t run_all(dsm_sssp_t *s, dsm_deleg_main_fn fn)
{
    node_arg_t args[64];
    dsm_status_t st = DSM_OK;
    unsigned started = 0;
    s->loss = (dsm_deleg_loss_t){.rank = -1, .trustee = -1};
    if (s->one_node) {
        args[0] = (node_arg_t){s, s->self};
        if ((st = dsm_deleg_rt_run(s->rt[0], fn, &args[0])) == DSM_ERR_PEER_DEAD) {
            /* fate sharing: the run is lost everywhere; what was lost is
             * kept, then the runtime is made runnable for the next run */
            dsm_deleg_rt_loss(s->rt[0], &s->loss);
            dsm_status_t r = dsm_deleg_rt_recover(s->rt[0], 30000);
            if (r != DSM_OK) DSM_ERROR("apps", "sssp: the runtime did not recover: %s", dsm_strerror(r));
        }
        return st;
    }
    for (unsigned i = 0; i < s->nodes && st == DSM_OK; i++) {
        args[i] = (node_arg_t){s, i};
        if ((st = dsm_deleg_rt_start(s->rt[i], fn, &args[i])) == DSM_OK) started++;
    }
    for (unsigned i = 0; i < started; i++) {
        dsm_status_t j = dsm_deleg_rt_join(s->rt[i]);
        if (st == DSM_OK) st = j;
    }
    if (st == DSM_ERR_PEER_DEAD) dsm_deleg_rt_loss(s->rt[0], &s->loss);
    return st;
}

void dsm_sssp_loss(const dsm_sssp_t *s, dsm_deleg_loss_t *out)
{
    *out = s->loss;
}

dsm_status_t dsm_sssp_run(dsm_sssp_t *s, uint32_t src, const dsm_stop_t *stop, uint64_t *relaxations)
{
    if (!s || src >= s->g->n) return DSM_ERR_INVALID;
    for (uint32_t p = 0; p < s->parts; p++) {
        part_t *q = &s->part[p];
        if (!part_here(s, p)) continue;
        dsm_sssp_local_reset(&q->local);
        q->err = DSM_OK;
        q->stop = stop;
    }
    s->src = src;
    dsm_status_t st = run_all(s, start_main);
    uint64_t total = 0;
    for (uint32_t p = 0; p < s->parts; p++) {
        if (!part_here(s, p)) continue;
        total += s->part[p].local.relaxations;
        if (st == DSM_OK) st = s->part[p].err;
    }
    if (relaxations) *relaxations = total;
    return st;
}

int dsm_sssp_vertex_here(const dsm_sssp_t *s, uint32_t v) { return part_here(s, dsm_sssp_part_of(v, s->parts)); }

void dsm_sssp_distances(const dsm_sssp_t *s, uint64_t *dist)
{
    for (uint32_t v = 0; v < s->g->n; v++) {
        uint32_t p = dsm_sssp_part_of(v, s->parts);
        dist[v] = part_here(s, p) ? s->part[p].local.dist[v / s->parts] : DSM_SSSP_INF;
    }
}

static void drop_main(void *arg, unsigned worker)
{
    node_arg_t *a = arg;
    dsm_sssp_t *s = a->s;
    if (worker != 0) return;
    /* drops go out from this node's first client thread, for every trust
     * made here */
    for (unsigned t = 0; t < s->trustees; t++) {
        uint32_t p = a->node * s->trustees + t;
        for (uint32_t q = 0; q < s->parts; q++) dsm_deleg_trust_drop(&s->part[p].peers[q]);
        dsm_deleg_trust_drop(&s->owner[p]);
    }
    if (s->imported)
        for (uint32_t q = 0; q < s->parts; q++)
            if (!part_here(s, q)) dsm_deleg_trust_drop(&s->imported[q]);
}

void dsm_sssp_destroy(dsm_sssp_t *s)
{
    if (!s) return;
    run_all(s, drop_main);
    sssp_free(s);
}
