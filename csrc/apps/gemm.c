/* Workload "gemm": DRust's GEMM, C = A x B on n x n matrices of 64-bit
 * integers (arithmetic mod 2^64, so every order of the sums gives the same
 * C), stored as tiles of tile x tile elements, each tile an object, by
 * recursive divide and conquer: C's quadrants each add the products of
 * A's and B's quadrants, down to one tile (C_ij += A_ik B_kj: a mutable
 * borrow of C_ij, shared borrows of A_ik and B_kj). Tile (i, j) of every
 * matrix is made by node (i * T + j) % nodes (T = n / tile), which also
 * computes C_ij: C is written where it lives (own: colour bumps; dir: a
 * local write), A and B are read from everywhere (own: cached copies;
 * dir: read misses that register sharers), each borrowed once per node
 * for the whole product; under own through reference copies of its
 * maker's borrow (dsm_own_ref_copy: the cache, no owner record). Under protocol=local the same
 * recursion runs in one process on plain memory: the original.
 * Params: n (64), tile (16), n / tile a power of two, threads (1; local on
 * more: product_on_threads); the common ones
 * (protocol, seed, checks, directory: 8 * (1 + 3 * (n/tile)^2) zeroed
 * bytes). Results: ops (tile products this node computed), ops_per_sec, seconds (its measured phase),
 * checksum (rank_index 0 and local; 0 elsewhere), the counters, and (own
 * and dir) the fabric's over the measured phase: fabric_am_sent,
 * fabric_onesided, round_trips_waited and round_trip_wait_ns. */
#include <stdlib.h>
#include <string.h>

#include "apps/refuse.h"
#include "apps/run_util.h"
#include "apps/workloads.h"
#include "dsm/clock.h"

enum { GEMM_TYPE = 0x474d };   /* "GM" */

typedef struct gemm {
    const dsm_apps_run_t *r;
    uint32_t T, tile;
    uint64_t *h;            /* A tiles, then B's, then C's: 3 T^2 handles */
    dsm_coh_ref_t *pin;     /* A's and B's tiles this node has borrowed (for the whole product) */
    uint8_t *pinned;
    int own;                /* own: A's and B's tiles are read through reference copies */
    dsm_own_ref_t *lend;    /* own: the borrows of this node's A and B tiles that lend them */
    uint64_t leaves;
    const dsm_stop_t *stop;
    uint32_t team, member;  /* local on threads: this thread's C tiles are (i * T + j) % team == member */
} gemm_t;

static uint64_t *hA(gemm_t *g, uint32_t i, uint32_t j) { return &g->h[(uint64_t)i * g->T + j]; }
static uint64_t *hB(gemm_t *g, uint32_t i, uint32_t j) { return &g->h[(uint64_t)g->T * g->T + (uint64_t)i * g->T + j]; }
static uint64_t *hC(gemm_t *g, uint32_t i, uint32_t j)
{
    return &g->h[2ull * g->T * g->T + (uint64_t)i * g->T + j];
}
static int mine(gemm_t *g, uint32_t i, uint32_t j)
{
    if (g->r->local)
        return g->team <= 1 || ((uint64_t)i * g->T + j) % g->team == g->member;
    return ((uint64_t)i * g->T + j) % g->r->nodes == g->r->index;
}
static uint64_t elem(uint64_t seed, uint64_t which, uint64_t row, uint64_t col)
{
    return dsm_hash64(seed ^ (which << 56) ^ (row << 28) ^ col) % 17;
}

static dsm_status_t fill(gemm_t *g, uint64_t h, uint64_t which, uint32_t ti, uint32_t tj)
{
    dsm_coh_mut_t m;
    dsm_status_t st = g->r->ops->borrow_mut(g->r->node, h, &m);
    if (st != DSM_OK)
        return st;
    uint64_t *d = m.data;
    for (uint32_t a = 0; a < g->tile; a++)
        for (uint32_t b = 0; b < g->tile; b++)
            d[a * g->tile + b] = elem(g->r->seed, which, (uint64_t)ti * g->tile + a, (uint64_t)tj * g->tile + b);
    return g->r->ops->release_mut(g->r->node, &m);
}

static dsm_status_t create(gemm_t *g)
{
    size_t bytes = (size_t)g->tile * g->tile * 8;
    dsm_status_t st = DSM_OK;
    for (uint32_t i = 0; i < g->T && st == DSM_OK; i++)
        for (uint32_t j = 0; j < g->T && st == DSM_OK; j++) {
            if (!mine(g, i, j))
                continue;
            if ((st = g->r->ops->alloc(g->r->node, GEMM_TYPE, bytes, hA(g, i, j))) != DSM_OK ||
                (st = g->r->ops->alloc(g->r->node, GEMM_TYPE, bytes, hB(g, i, j))) != DSM_OK ||
                (st = g->r->ops->alloc(g->r->node, GEMM_TYPE, bytes, hC(g, i, j))) != DSM_OK ||
                (st = fill(g, *hA(g, i, j), 1, i, j)) != DSM_OK || (st = fill(g, *hB(g, i, j), 2, i, j)) != DSM_OK)
                break;
        }
    return st;
}

/* A and B are only read while C is computed: a node borrows each of
 * their tiles it needs once, at first use, and holds the borrow (a shared
 * reference, as `&Tile` in the original) until the product is done. */
static dsm_status_t pinned(gemm_t *g, uint64_t *h, const void **data)
{
    uint64_t k = (uint64_t)(h - g->h);
    if (!g->pinned[k]) {
        dsm_coh_ref_t *p = &g->pin[k];
        dsm_status_t st = g->own ? dsm_own_ref_copy(g->r->node, *h, GEMM_TYPE, (size_t)g->tile * g->tile * 8, &p->u.own)
                                 : g->r->ops->borrow(g->r->node, *h, p);
        if (st != DSM_OK)
            return st;
        if (g->own)
            p->data = p->u.own.data;
        g->pinned[k] = 1;
    }
    *data = g->pin[k].data;
    return DSM_OK;
}

/* own: the maker of an A or B tile borrows it for the product and lends
 * it: the directory gets the tile's coloured address, which the others
 * read through (a reference copy each, no owner record on the way). */
static dsm_status_t lend(gemm_t *g)
{
    for (uint64_t k = 0; k < 2ull * g->T * g->T; k++)
        if (g->h[k] != 0) {
            dsm_status_t st = dsm_own_box_borrow(g->r->node, g->h[k], &g->lend[k]);
            if (st != DSM_OK)
                return st;
            g->h[k] = g->lend[k].g;
        }
    return DSM_OK;
}

static void unlend(gemm_t *g)
{
    for (uint64_t k = 0; k < 2ull * g->T * g->T; k++)
        if (g->lend[k].data != NULL)
            (void)dsm_own_box_release(g->r->node, &g->lend[k]);
}

static dsm_status_t unpin_all(gemm_t *g)
{
    dsm_status_t st = DSM_OK;
    for (uint64_t k = 0; k < 2ull * g->T * g->T; k++)
        if (g->pinned[k]) {
            dsm_status_t rs = g->own ? dsm_own_ref_copy_release(g->r->node, &g->pin[k].u.own)
                                     : g->r->ops->release(g->r->node, &g->pin[k]);
            st = st != DSM_OK ? st : rs;
            g->pinned[k] = 0;
        }
    return st;
}

/* The leaf: C_ij += A_ik B_kj. */
static dsm_status_t leaf(gemm_t *g, uint32_t i, uint32_t j, uint32_t k)
{
    const dsm_coh_ops_t *ops = g->r->ops;
    dsm_node_t *n = g->r->node;
    const void *a, *b;
    dsm_coh_mut_t c;
    dsm_status_t st;
    if ((st = pinned(g, hA(g, i, k), &a)) != DSM_OK || (st = pinned(g, hB(g, k, j), &b)) != DSM_OK)
        return st;
    if ((st = ops->borrow_mut(n, *hC(g, i, j), &c)) == DSM_OK) {
        const uint64_t *x = a, *y = b;
        uint64_t *z = c.data;
        uint32_t t = g->tile;
        for (uint32_t p = 0; p < t; p++)
            for (uint32_t q = 0; q < t; q++) {
                uint64_t xv = x[p * t + q];
                for (uint32_t s = 0; s < t; s++)
                    z[p * t + s] += xv * y[q * t + s];
            }
        st = ops->release_mut(n, &c);
        g->leaves++;
    }
    return st;
}

/* C[ci.., cj..] += A[ci.., ck..] B[ck.., cj..] over size x size tiles. */
static dsm_status_t rec(gemm_t *g, uint32_t ci, uint32_t cj, uint32_t ck, uint32_t size)
{
    if (dsm_stop_requested(g->stop))
        return DSM_ERR_CANCELLED;
    if (size == 1)
        return mine(g, ci, cj) ? leaf(g, ci, cj, ck) : DSM_OK;
    uint32_t h = size / 2;
    dsm_status_t st = DSM_OK;
    for (uint32_t q = 0; q < 8 && st == DSM_OK; q++)
        st = rec(g, ci + (q >> 2) * h, cj + ((q >> 1) & 1) * h, ck + (q & 1) * h, h);
    return st;
}

static dsm_status_t checksum(gemm_t *g, uint64_t *sum)
{
    *sum = 0;
    for (uint32_t i = 0; i < g->T; i++)
        for (uint32_t j = 0; j < g->T; j++) {
            dsm_coh_ref_t c;
            dsm_status_t st = g->r->ops->borrow(g->r->node, *hC(g, i, j), &c);
            if (st != DSM_OK)
                return st;
            const uint64_t *z = c.data;
            for (uint64_t e = 0; e < (uint64_t)g->tile * g->tile; e++)
                *sum += z[e] * (((uint64_t)i * g->T + j) * g->tile * g->tile + e + 1);
            if ((st = g->r->ops->release(g->r->node, &c)) != DSM_OK)
                return st;
        }
    return DSM_OK;
}

/* local, threads=N: the original on N threads, thread t computing the C
 * tiles (i * T + j) % N == t, as node t does, and pinning the A and B tiles
 * it reads itself. The phase runs from the first thread's start to the
 * last one's end. */
typedef struct gemm_member {
    gemm_t g;
    double start, end;
    dsm_status_t st;
} gemm_member_t;

static void gemm_member_run(void *arg)
{
    gemm_member_t *m = arg;
    m->start = dsm_now_s();
    m->st = rec(&m->g, 0, 0, 0, m->g.T);
    dsm_status_t us = unpin_all(&m->g);
    m->st = m->st != DSM_OK ? m->st : us;
    m->end = dsm_now_s();
}

static dsm_status_t product_on_threads(gemm_t *g, uint32_t threads, double *seconds)
{
    gemm_member_t *m = calloc(threads, sizeof *m);
    if (m == NULL)
        return DSM_ERR_NOMEM;
    dsm_status_t st = DSM_OK;
    for (uint32_t i = 0; i < threads; i++) {
        m[i].g = *g;
        m[i].g.team = threads;
        m[i].g.member = i;
        m[i].g.leaves = 0;
        m[i].g.pin = calloc(2ull * g->T * g->T, sizeof *g->pin);
        m[i].g.pinned = calloc(2ull * g->T * g->T, 1);
        if (m[i].g.pin == NULL || m[i].g.pinned == NULL)
            st = DSM_ERR_NOMEM;
    }
    if (st == DSM_OK)
        st = dsm_apps_team_run(threads, gemm_member_run, m, sizeof *m);
    double first = 0, last = 0;
    for (uint32_t i = 0; i < threads; i++) {
        if (st == DSM_OK) {
            st = m[i].st;
            g->leaves += m[i].g.leaves;
            first = i == 0 || m[i].start < first ? m[i].start : first;
            last = m[i].end > last ? m[i].end : last;
        }
        free(m[i].g.pin);
        free(m[i].g.pinned);
    }
    free(m);
    *seconds = last - first;
    return st;
}

static const dsm_param_info_t gemm_params[] = {
    DSM_APPS_RUN_PARAMS("8*(1+3*(n/tile)^2) zeroed shared bytes"
                       " for own and dir (0: pydsm's run makes one)"),
    {"n", "u64", "64", "matrix order (n/tile a power of two)"},
    {"tile", "u64", "16", "tile order: each tile (tile^2 * 8 bytes) is one object"},
    {"threads", "u64", "1", "local: the original on this many threads, thread t computing the C tiles (i*T+j) % threads == t"},
};
/* The directory: an arrival counter, then each tile's three words. */
static uint64_t gemm_directory_bytes(uint64_t n, uint64_t tile)
{
    uint64_t T = tile ? n / tile : 0;
    return 8 * (1 + 3 * T * T);
}

static uint64_t gemm_scratch(const char *param, const void *args, size_t len, uint64_t nodes)
{
    (void)nodes;
    int bad = 0;
    uint64_t n = dsm_param_u64(args, len, "n", 64, &bad), tile = dsm_param_u64(args, len, "tile", 16, &bad);
    return bad ? 0 : dsm_apps_directory_scratch(param, args, len, gemm_directory_bytes(n, tile));
}

const dsm_workload_info_t dsm_gemm_info = {
    "gemm", "DRust's GEMM (recursive divide and conquer on tiles) under own, dir or the original",
    dsm_workload_gemm, gemm_params, sizeof gemm_params / sizeof gemm_params[0], gemm_scratch};

dsm_status_t dsm_workload_gemm(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len)
{
    const dsm_workload_info_t *w = &dsm_gemm_info;
    dsm_status_t st = dsm_workload_begin(w, args, len, ret, cap, ret_len);
    if (st != DSM_OK)
        return st;
    int bad = 0;   /* dsm_workload_begin has checked the numbers */
    uint64_t n = dsm_param_u64(args, len, "n", 64, &bad), tile = dsm_param_u64(args, len, "tile", 16, &bad);
    uint64_t T = tile ? n / tile : 0, threads;
    if ((st = dsm_apps_team_param(w, args, len, &threads, ret, cap, ret_len)) != DSM_OK)
        return st;
    if (tile == 0 || tile > 256)
        return dsm_apps_refuse_param(w, args, len, "tile", ret, cap, ret_len, "1..256");
    if (n % tile || T == 0 || T > 64 || (T & (T - 1)))
        return dsm_apps_refuse_param(w, args, len, "n", ret, cap, ret_len,
                                     "tile (%llu) times a power of two up to 64", (unsigned long long)tile);
    dsm_apps_run_t r;
    if ((st = dsm_apps_run_begin(&r, w, node, args, len, gemm_directory_bytes(n, tile), ret, cap, ret_len)) != DSM_OK ||
        (st = dsm_apps_run_fresh(&r, w, args, len, ret, cap, ret_len)) != DSM_OK)
        return st;
    if ((st = dsm_own_type_register(GEMM_TYPE, "gemm.tile", 0)) != DSM_OK)
        return st;
    gemm_t g = {.r = &r, .T = (uint32_t)T, .tile = (uint32_t)tile, .stop = dsm_spawn_stop(),
                .own = strcmp(r.proto, "own") == 0};
    uint64_t nh = 3 * T * T;
    g.h = calloc(nh, 8);
    g.pin = calloc(2 * T * T, sizeof *g.pin);
    g.pinned = calloc(2 * T * T, 1);
    g.lend = calloc(2 * T * T, sizeof *g.lend);
    uint64_t *made = calloc(nh, 8);
    if (g.h == NULL || g.pin == NULL || g.pinned == NULL || g.lend == NULL || made == NULL) {
        free(g.h);
        free(g.pin);
        free(g.pinned);
        free(g.lend);
        free(made);
        return DSM_ERR_NOMEM;
    }
    st = create(&g);
    memcpy(made, g.h, nh * 8);
    if (st == DSM_OK && g.own)
        st = lend(&g);
    dsm_status_t ms = dsm_apps_share(&r, g.h, nh, 1);
    st = st != DSM_OK ? st : ms;
    dsm_apps_wire_t wire0, wire1;
    dsm_apps_wire_begin(r.node, &wire0);
    double start = dsm_now_s(), seconds = 0;
    if (threads > 1) {
        if (st == DSM_OK)
            st = product_on_threads(&g, (uint32_t)threads, &seconds);
    } else {
        if (st == DSM_OK)
            st = rec(&g, 0, 0, 0, g.T);
        dsm_status_t us = unpin_all(&g);
        st = st != DSM_OK ? st : us;
        seconds = dsm_now_s() - start;
    }
    dsm_apps_wire_end(r.node, &wire1);
    ms = dsm_apps_meet(&r, 2);
    st = st != DSM_OK ? st : ms;
    if (g.own)
        unlend(&g);
    uint64_t sum = 0;
    if (st == DSM_OK && r.index == 0)
        st = checksum(&g, &sum);
    ms = dsm_apps_meet(&r, 3);
    st = st != DSM_OK ? st : ms;
    for (uint64_t k = 0; k < nh; k++)
        if (made[k])
            (void)r.ops->drop(r.node, made[k]);
    free(made);
    free(g.h);
    free(g.pin);
    free(g.pinned);
    free(g.lend);
    if (st != DSM_OK)
        return st;
    double ops = (double)g.leaves;
    if (seconds <= 0)
        seconds = 1e-9;
    if ((st = dsm_result_add(ret, cap, ret_len, "ops", ops, "tile products")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "ops_per_sec", ops / seconds, "ops/s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "seconds", seconds, "s")) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "checksum", (double)(sum & ((1ull << 48) - 1)), "",
                                  DSM_FIGURE_FIRST)) != DSM_OK)
        return st;
    if (!r.local && ((st = dsm_apps_report_wire(&wire0, &wire1, ret, cap, ret_len)) != DSM_OK ||
                     (st = dsm_apps_report_waited(&wire0, &wire1, ret, cap, ret_len)) != DSM_OK))
        return st;
    return dsm_apps_report_counters(&r, ops, ret, cap, ret_len);
}
