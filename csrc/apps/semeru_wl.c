/* The Semeru workloads (shaped like the paper's) on a managed heap: a graph
 * kept across PageRank-like iterations, a temporaries-heavy stream and
 * serialized buffers, each ending with a digest of the data it kept that
 * names objects by content, never by address, so every design, cache size
 * and fabric gives the same one. Shared by the registered workload "semeru"
 * and dsm-bench-semeru. */
#include <stdlib.h>
#include <string.h>

#include "apps/semeru_wl.h"
#include "dsm/clock.h"
#include "dsm/mix.h"

enum { T_VERTEX, T_EDGE, T_RANK, T_TEMP, T_BUF, T_REC, NTYPES };
static const uint32_t vertex_refs[] = {0, 8}, edge_refs[] = {0, 8}, temp_refs[] = {0}, rec_refs[] = {0};
const dsm_mheap_type_t dsm_semeru_types[NTYPES] = {
    [T_VERTEX] = {.size = 32, .nrefs = 2, .ref_offsets = vertex_refs},   /* edges, rank, u64 id, double acc */
    [T_EDGE] = {.size = 16, .nrefs = 2, .ref_offsets = edge_refs},       /* next, dst */
    [T_RANK] = {.size = 504, .nrefs = 0, .ref_offsets = NULL},           /* double rank, history */
    [T_TEMP] = {.size = 120, .nrefs = 1, .ref_offsets = temp_refs},      /* next, bytes */
    [T_BUF] = {.size = 16384, .nrefs = 0, .ref_offsets = NULL},          /* a serialized batch */
    [T_REC] = {.size = 40, .nrefs = 1, .ref_offsets = rec_refs},         /* next, fields */
};
const uint32_t dsm_semeru_ntypes = NTYPES;

static const char *const names[DSM_SEMERU_NWL] = {"graph", "temps", "buffers"};

const char *dsm_semeru_wl_name(int wl) { return wl >= 0 && wl < DSM_SEMERU_NWL ? names[wl] : NULL; }

int dsm_semeru_wl_find(const char *name)
{
    for (int i = 0; name && i < DSM_SEMERU_NWL; i++)
        if (!strcmp(names[i], name))
            return i;
    return -1;
}

static uint64_t mix(uint64_t d, uint64_t x)
{
    return dsm_hash64(d ^ x);
}

#define TRY(x)                                                                                                 \
    do {                                                                                                       \
        if ((st = (x)) != DSM_OK)                                                                              \
            goto out;                                                                                          \
    } while (0)
#define POLL(stop)                                                                                             \
    do {                                                                                                       \
        if ((stop) && dsm_stop_requested(stop)) {                                                              \
            st = DSM_ERR_CANCELLED;                                                                            \
            goto out;                                                                                          \
        }                                                                                                      \
    } while (0)

/* The end of the work: time and counters, before the digest pulls pages. */
static void work_done(dsm_mheap_t *h, uint64_t t0, dsm_semeru_wl_out_t *o)
{
    o->work_s = (double)(dsm_now_ns() - t0) / 1e9;
    dsm_mheap_stats(h, &o->stats);
}

/* Table 5 in miniature, like for like: tracing throughput over the graph
 * once its pages are all evicted, either a round of memory-server traces
 * (Semeru) or the CPU server marking through its cache, pulling the pages
 * (the baseline's way; nothing is collected either way). MB/s of the
 * objects traced. */
static dsm_status_t probe_trace(dsm_mheap_t *h, double *mbps)
{
    dsm_mheap_stats_t a, b;
    dsm_status_t st;
    TRY(dsm_mheap_collect(h, DSM_MHEAP_GC_AUTO));   /* roots for the servers' traces */
    TRY(dsm_mheap_trace_wait(h));
    TRY(dsm_mheap_evict(h, 0));
    dsm_mheap_stats(h, &a);
    uint64_t t0 = dsm_now_ns(), live = 0;
    /* The baseline heap has no memory-server tracing: the CPU marks. */
    int msct = (st = dsm_mheap_trace_start(h)) != DSM_ERR_UNSUPPORTED;
    if (msct) {
        TRY(st);
        TRY(dsm_mheap_trace_wait(h));
    } else {
        TRY(dsm_mheap_trace_cpu(h, &live));
    }
    double dt = (double)(dsm_now_ns() - t0) / 1e9;
    dsm_mheap_stats(h, &b);
    double bytes = msct ? (double)(b.bytes_traced_server - a.bytes_traced_server) : (double)live;
    *mbps = dt > 0 ? bytes / dt / 1e6 : 0;
out:
    return st;
}

static dsm_status_t new_handles(dsm_mheap_t *h, dsm_mheap_handle_t *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        dsm_status_t st = dsm_mheap_handle_new(h, &v[i]);
        if (st != DSM_OK)
            return st;
    }
    return DSM_OK;
}
static void free_handles(dsm_mheap_t *h, dsm_mheap_handle_t *v, uint32_t n)
{
    for (uint32_t i = 0; v && i < n; i++)
        if (v[i])
            dsm_mheap_handle_free(h, v[i]);
}

static dsm_status_t wl_graph(dsm_mheap_t *h, uint32_t scale, uint32_t iters, int probe, const dsm_stop_t *stop,
                             dsm_semeru_wl_out_t *o)
{
    if (scale < 1 || scale > 20)
        return DSM_ERR_INVALID;
    uint32_t nv = 1u << scale, ne = nv * 6;
    enum { E, T, R, NTMP };
    dsm_mheap_handle_t *v = calloc(nv, sizeof *v), tmp[NTMP] = {0};
    dsm_status_t st = v ? DSM_OK : DSM_ERR_NOMEM;
    if (st != DSM_OK)
        return st;
    uint64_t t0 = dsm_now_ns();
    TRY(new_handles(h, tmp, NTMP));
    TRY(new_handles(h, v, nv));
    for (uint32_t i = 0; i < nv; i++) {
        TRY(dsm_mheap_alloc(h, T_VERTEX, v[i]));
        uint64_t id = i;
        TRY(dsm_mheap_write(h, v[i], 16, &id, 8));
    }
    uint64_t s = 1;
    for (uint32_t k = 0; k < ne; k++) {   /* R-MAT (0.57, 0.19, 0.19, 0.05) */
        uint32_t a = 0, b = 0;
        for (uint32_t bit = 0; bit < scale; bit++) {
            uint64_t p = dsm_splitmix64(&s) % 100;
            a = a << 1 | (p >= 76);
            b = b << 1 | (p >= 57 && p < 76) | (p >= 95);
        }
        TRY(dsm_mheap_alloc(h, T_EDGE, tmp[E]));
        TRY(dsm_mheap_load_ref(h, v[a], 0, tmp[T]));
        TRY(dsm_mheap_store_ref(h, tmp[E], 0, tmp[T]));
        TRY(dsm_mheap_store_ref(h, tmp[E], 8, v[b]));
        TRY(dsm_mheap_store_ref(h, v[a], 0, tmp[E]));
    }
    for (uint32_t it = 0; it < iters; it++) {
        POLL(stop);
        for (uint32_t i = 0; i < nv; i++) {   /* push rank along out-edges */
            double acc = 0;
            TRY(dsm_mheap_load_ref(h, v[i], 8, tmp[R]));
            if (dsm_mheap_addr(h, tmp[R]))
                TRY(dsm_mheap_read(h, tmp[R], 0, &acc, 8));
            TRY(dsm_mheap_load_ref(h, v[i], 0, tmp[E]));
            while (dsm_mheap_addr(h, tmp[E])) {
                TRY(dsm_mheap_load_ref(h, tmp[E], 8, tmp[T]));
                double d;
                TRY(dsm_mheap_read(h, tmp[T], 24, &d, 8));
                d += acc / 6 + 1e-3;
                TRY(dsm_mheap_write(h, tmp[T], 24, &d, 8));
                TRY(dsm_mheap_load_ref(h, tmp[E], 0, tmp[E]));
            }
        }
        for (uint32_t i = 0; i < nv; i++) {   /* every vertex gets a new rank object */
            double d;
            TRY(dsm_mheap_read(h, v[i], 24, &d, 8));
            TRY(dsm_mheap_alloc(h, T_RANK, tmp[R]));
            TRY(dsm_mheap_write(h, tmp[R], 0, &d, 8));
            TRY(dsm_mheap_store_ref(h, v[i], 8, tmp[R]));
            d = 0;
            TRY(dsm_mheap_write(h, v[i], 24, &d, 8));
        }
    }
    work_done(h, t0, o);
    if (probe)
        TRY(probe_trace(h, &o->trace_mbps));
    /* Digest: every vertex's rank and its out-edges' destinations, by id. */
    uint64_t d = 0;
    for (uint32_t i = 0; i < nv; i++) {
        uint64_t rank = 0, id;
        TRY(dsm_mheap_load_ref(h, v[i], 8, tmp[R]));
        if (dsm_mheap_addr(h, tmp[R]))
            TRY(dsm_mheap_read(h, tmp[R], 0, &rank, 8));
        d = mix(d, i * 0x100000001b3ull ^ rank);
        TRY(dsm_mheap_load_ref(h, v[i], 0, tmp[E]));
        while (dsm_mheap_addr(h, tmp[E])) {
            TRY(dsm_mheap_load_ref(h, tmp[E], 8, tmp[T]));
            TRY(dsm_mheap_read(h, tmp[T], 16, &id, 8));
            d = mix(d, id);
            TRY(dsm_mheap_load_ref(h, tmp[E], 0, tmp[E]));
        }
    }
    o->digest = d;
out:
    free_handles(h, v, nv);
    free_handles(h, tmp, NTMP);
    free(v);
    return st;
}

/* The digest of a chain of objects linked through their field at 0: each
 * one's payload bytes [8, 8 + len). */
static dsm_status_t chain_digest(dsm_mheap_t *h, dsm_mheap_handle_t head, dsm_mheap_handle_t cur, uint32_t len,
                                 uint64_t *d)
{
    uint8_t bytes[112];
    dsm_status_t st;
    TRY(dsm_mheap_handle_set(h, cur, head));
    uint64_t n = 0;
    while (dsm_mheap_addr(h, cur)) {
        TRY(dsm_mheap_read(h, cur, 8, bytes, len));
        for (uint32_t k = 0; k < len; k += 8) {
            uint64_t w;
            memcpy(&w, bytes + k, 8);
            *d = mix(*d, w);
        }
        n++;
        TRY(dsm_mheap_load_ref(h, cur, 0, cur));
    }
    *d = mix(*d, n);
out:
    return st;
}

static dsm_status_t wl_temps(dsm_mheap_t *h, uint32_t ops, const dsm_stop_t *stop, dsm_semeru_wl_out_t *o)
{
    enum { KEEP = 2048 };
    dsm_mheap_handle_t keep[KEEP] = {0}, tmp[2] = {0};
    dsm_status_t st;
    uint64_t t0 = dsm_now_ns();
    TRY(new_handles(h, keep, KEEP));
    TRY(new_handles(h, tmp, 2));
    uint64_t s = 2;
    uint8_t bytes[112];
    for (uint32_t op = 0; op < ops; op++) {
        if (op % 1024 == 0)
            POLL(stop);
        uint32_t len = 4 + (uint32_t)(dsm_splitmix64(&s) % 12);
        TRY(dsm_mheap_handle_set(h, tmp[0], 0));
        for (uint32_t k = 0; k < len; k++) {   /* a chain of temporaries */
            memset(bytes, (int)(op + k), sizeof bytes);
            memcpy(bytes, &op, sizeof op);
            TRY(dsm_mheap_alloc(h, T_TEMP, tmp[1]));
            TRY(dsm_mheap_write(h, tmp[1], 8, bytes, sizeof bytes));
            TRY(dsm_mheap_store_ref(h, tmp[1], 0, tmp[0]));
            TRY(dsm_mheap_handle_set(h, tmp[0], tmp[1]));
        }
        if (dsm_splitmix64(&s) % 4 == 0)   /* a few survive, replacing old survivors */
            TRY(dsm_mheap_handle_set(h, keep[dsm_splitmix64(&s) % KEEP], tmp[0]));
    }
    work_done(h, t0, o);
    uint64_t d = 0;
    for (int i = 0; i < KEEP; i++)
        TRY(chain_digest(h, keep[i], tmp[0], sizeof bytes, &d));
    o->digest = d;
out:
    free_handles(h, keep, KEEP);
    free_handles(h, tmp, 2);
    return st;
}

static dsm_status_t wl_buffers(dsm_mheap_t *h, uint32_t nbuf, const dsm_stop_t *stop, dsm_semeru_wl_out_t *o)
{
    /* The window kept: 160 buffers, or a sixth of a long run's (so that
     * at 25% cache a long run's live data does not fit in the cache). */
    enum { BUF = 16384 };
    const uint32_t WINDOW = nbuf / 6 > 160 ? nbuf / 6 : 160;
    dsm_mheap_handle_t *win = calloc(WINDOW, sizeof *win), *recs = calloc(WINDOW, sizeof *recs), tmp[2] = {0};
    uint8_t *buf = malloc(BUF);
    dsm_status_t st = buf && win && recs ? DSM_OK : DSM_ERR_NOMEM;
    if (st != DSM_OK) {
        free(win);
        free(recs);
        free(buf);
        return st;
    }
    uint64_t t0 = dsm_now_ns();
    TRY(new_handles(h, win, WINDOW));
    TRY(new_handles(h, recs, WINDOW));
    TRY(new_handles(h, tmp, 2));
    for (uint32_t n = 0; n < nbuf; n++) {
        if (n % 64 == 0)
            POLL(stop);
        for (size_t k = 0; k < BUF; k++)
            buf[k] = (uint8_t)(n + k);
        TRY(dsm_mheap_alloc(h, T_BUF, tmp[0]));        /* serialize */
        TRY(dsm_mheap_write(h, tmp[0], 0, buf, BUF));
        TRY(dsm_mheap_handle_set(h, win[n % WINDOW], tmp[0]));
        TRY(dsm_mheap_handle_set(h, recs[n % WINDOW], 0));
        for (int k = 0; k < 64; k++) {           /* deserialize some records */
            TRY(dsm_mheap_read(h, tmp[0], (uint32_t)k * 256, buf, 32));
            TRY(dsm_mheap_alloc(h, T_REC, tmp[1]));
            TRY(dsm_mheap_write(h, tmp[1], 8, buf, 32));
            TRY(dsm_mheap_store_ref(h, tmp[1], 0, recs[n % WINDOW]));
            TRY(dsm_mheap_handle_set(h, recs[n % WINDOW], tmp[1]));
        }
    }
    work_done(h, t0, o);
    uint64_t d = 0;
    for (uint32_t i = 0; i < WINDOW; i++) {
        if (dsm_mheap_addr(h, win[i])) {
            TRY(dsm_mheap_read(h, win[i], 0, buf, BUF));
            for (uint32_t k = 0; k < BUF; k += 8) {
                uint64_t w;
                memcpy(&w, buf + k, 8);
                d = mix(d, w);
            }
        }
        TRY(chain_digest(h, recs[i], tmp[1], 32, &d));
    }
    o->digest = d;
out:
    free_handles(h, win, WINDOW);
    free_handles(h, recs, WINDOW);
    free_handles(h, tmp, 2);
    free(win);
    free(recs);
    free(buf);
    return st;
}

dsm_status_t dsm_semeru_wl_run(dsm_mheap_t *h, int wl, uint32_t size, uint32_t iters, int probe,
                               const dsm_stop_t *stop, dsm_semeru_wl_out_t *out)
{
    if (h == NULL || out == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    dsm_status_t st;
    switch (wl) {
    case DSM_SEMERU_GRAPH:
        st = wl_graph(h, size, iters, probe, stop, out);
        break;
    case DSM_SEMERU_TEMPS:
        st = wl_temps(h, size, stop, out);
        break;
    case DSM_SEMERU_BUFFERS:
        st = wl_buffers(h, size, stop, out);
        break;
    default:
        return DSM_ERR_INVALID;
    }
    out->digest &= (1ull << 48) - 1;   /* exact as a double in result text */
    return st;
}
