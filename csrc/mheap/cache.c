/* The CPU server's page cache of the universal heap: an inclusive,
 * software-managed cache of 4 KiB pages within a budget of frames. A page
 * is Init (never written back: reads as zeros, nothing fetched), Cached (in
 * a frame, maybe dirty) or Evicted (the memory server's copy is the only
 * one). LRU eviction; a dirty victim writes back every dirty page of its
 * region in one batch, bracketed by the region's tag: fetch-add "started",
 * the page writes (one dsm_write_batch, complete at the targets before the
 * next step), fetch-add
 * "finished", so a memory server's trace that overlaps a write-back sees
 * the tag move and is discarded. The tag word and the rest of the region
 * header are never written back: they belong to the memory server's copy.
 * A fault contiguous with the last one reads ahead (readahead_pages).
 * All under the heap lock, but the trace driver's send of a write-back
 * (cache_trace_send), which evictions of its region wait for. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mheap/cpu.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG_MOD "mheap"

enum { RA_MAX = CACHE_RA_MAX };

static inline uint64_t page_addr(dsm_mheap_t *h, uint32_t p)
{
    (void)h;
    return DSM_MHEAP_UBASE + (uint64_t)p * DSM_MHEAP_PAGE;
}

static inline uint32_t page_index(uint64_t a) { return (uint32_t)((a - DSM_MHEAP_UBASE) / DSM_MHEAP_PAGE); }

/* Where universal address a lives on its memory server, as a heap gaddr. */
static inline dsm_gaddr_t remote_of(dsm_mheap_t *h, uint64_t a)
{
    uint64_t rel = a - DSM_MHEAP_UBASE;
    uint32_t s = (uint32_t)(rel / h->part_bytes);
    return h->chunk[s] + rel % h->part_bytes;
}

dsm_status_t cache_init(dsm_mheap_t *h)
{
    h->npages = (uint32_t)((uint64_t)h->nregions * h->region_bytes / DSM_MHEAP_PAGE);
    uint64_t budget = (uint64_t)h->npages * h->cfg.cache_percent / 100;
    if (budget < 16)
        budget = 16;   /* an object spans at most a region, but one page at a time */
    if (budget > h->npages)
        budget = h->npages;
    h->budget = (uint32_t)budget;
    h->pages = calloc(h->npages, sizeof *h->pages);
    h->frames = malloc((size_t)h->budget * DSM_MHEAP_PAGE);
    h->free_frames = malloc((size_t)h->budget * sizeof(uint32_t));
    uint32_t per_region = h->region_bytes / DSM_MHEAP_PAGE;
    h->wb_stage = malloc((size_t)per_region * DSM_MHEAP_PAGE);
    h->wb_addrs = malloc((size_t)per_region * sizeof *h->wb_addrs);
    h->wb_page0 = malloc(DSM_MHEAP_PAGE);
    h->tw_stage = malloc((size_t)per_region * DSM_MHEAP_PAGE);
    h->tw_addrs = malloc((size_t)per_region * sizeof *h->tw_addrs);
    h->tw_page0 = malloc(DSM_MHEAP_PAGE);
    h->tw_region = UINT32_MAX;
    pthread_mutex_init(&h->tw_mu, NULL);
    pthread_cond_init(&h->tw_cv, NULL);
    h->ra_buf = malloc((size_t)RA_MAX * DSM_MHEAP_PAGE);
    h->ra_last = NO_PAGE;
    if (!h->pages || !h->frames || !h->free_frames || !h->wb_stage || !h->wb_addrs || !h->wb_page0 ||
        !h->tw_stage || !h->tw_addrs || !h->tw_page0 || !h->ra_buf)
        return DSM_ERR_NOMEM;
    for (uint32_t i = 0; i < h->npages; i++) {
        h->pages[i].state = PAGE_INIT;
        h->pages[i].prev = h->pages[i].next = NO_PAGE;
    }
    for (uint32_t i = 0; i < h->budget; i++)
        h->free_frames[i] = h->budget - 1 - i;
    h->nfree_frames = h->budget;
    h->lru_head = h->lru_tail = NO_PAGE;
    return DSM_OK;
}

void cache_free(dsm_mheap_t *h)
{
    free(h->pages);
    free(h->frames);
    free(h->free_frames);
    free(h->wb_stage);
    free(h->wb_addrs);
    free(h->wb_page0);
    free(h->tw_stage);
    free(h->tw_addrs);
    free(h->tw_page0);
    pthread_mutex_destroy(&h->tw_mu);
    pthread_cond_destroy(&h->tw_cv);
    free(h->ra_buf);
}

static void lru_unlink(dsm_mheap_t *h, uint32_t p)
{
    page_t *g = &h->pages[p];
    if (g->prev != NO_PAGE)
        h->pages[g->prev].next = g->next;
    else
        h->lru_head = g->next;
    if (g->next != NO_PAGE)
        h->pages[g->next].prev = g->prev;
    else
        h->lru_tail = g->prev;
    g->prev = g->next = NO_PAGE;
}

static void lru_push(dsm_mheap_t *h, uint32_t p)
{
    page_t *g = &h->pages[p];
    g->prev = NO_PAGE;
    g->next = h->lru_head;
    if (h->lru_head != NO_PAGE)
        h->pages[h->lru_head].prev = p;
    h->lru_head = p;
    if (h->lru_tail == NO_PAGE)
        h->lru_tail = p;
}

static inline uint8_t *frame_of(dsm_mheap_t *h, uint32_t p)
{
    return h->frames + (size_t)h->pages[p].frame * DSM_MHEAP_PAGE;
}

/* Drop a cached page without writing it back. */
static void drop(dsm_mheap_t *h, uint32_t p, uint8_t new_state)
{
    page_t *g = &h->pages[p];
    if (g->state == PAGE_CACHED) {
        lru_unlink(h, p);
        h->free_frames[h->nfree_frames++] = g->frame;
        h->ncached--;
    }
    g->state = new_state;
    g->dirty = 0;
}

/* A dirty page whose copy the trace driver has in flight, not written
 * since (a write makes it plain dirty again). */
enum { DIRTY_IN_FLIGHT = 2 };

/* The dirty cached pages of [first, first + n) are on their server now
 * (one write-back, one sequence number); with `only`, those whose dirty
 * mark is still `only`. */
static void pages_mark_written(dsm_mheap_t *h, uint32_t first, uint32_t n, uint8_t only)
{
    h->wb_seq++;
    for (uint32_t i = 0; i < n; i++) {
        page_t *g = &h->pages[first + i];
        if (g->state == PAGE_CACHED && g->dirty && (!only || g->dirty == only)) {
            g->dirty = 0;
            g->wb_seq = h->wb_seq;
            h->st.pages_written_back++;
        }
    }
}

/* Pages staged for a write-back: n pages, page k from buf + k * PAGE to
 * addr[k]. A run of at least RUN_PAGES pages at consecutive addresses goes
 * as one write (a region's fresh allocations are such a run: one message
 * instead of a batch of page-sized ones); the pages left over go as one
 * batch, compacted in place once the runs are out. Returns the round trips
 * taken (runs one after another, the batch one), or -1 with *st set. */
enum { RUN_PAGES = 16 };
static int write_staged(dsm_mheap_t *h, dsm_gaddr_t *addr, uint8_t *buf, uint32_t n, dsm_status_t *st)
{
    int trips = 0;
    uint32_t left = 0;
    for (uint32_t a = 0; a < n;) {
        uint32_t b = a + 1;
        while (b < n && addr[b] == addr[b - 1] + DSM_MHEAP_PAGE)
            b++;
        if (b - a >= RUN_PAGES) {
            if ((*st = dsm_write(h->node, addr[a], buf + (size_t)a * DSM_MHEAP_PAGE,
                                 (size_t)(b - a) * DSM_MHEAP_PAGE)) != DSM_OK)
                return -1;
            trips++;
        } else {
            for (uint32_t k = a; k < b; k++, left++)
                if (left != k) {
                    addr[left] = addr[k];
                    memmove(buf + (size_t)left * DSM_MHEAP_PAGE, buf + (size_t)k * DSM_MHEAP_PAGE, DSM_MHEAP_PAGE);
                }
        }
        a = b;
    }
    if (left && (*st = dsm_write_batch(h->node, addr, buf, DSM_MHEAP_PAGE, left, NULL)) != DSM_OK)
        return -1;
    *st = DSM_OK;
    return trips + (left > 0);
}

/* The trace driver's write-back in flight, if it is region r's: wait for
 * it to land (heap lock held; the send needs no lock). */
static void wait_trace_send(dsm_mheap_t *h, const region_t *r)
{
    uint32_t ri = (uint32_t)(r - h->regions);
    if (__atomic_load_n(&h->tw_region, __ATOMIC_ACQUIRE) != ri)
        return;
    pthread_mutex_lock(&h->tw_mu);
    while (__atomic_load_n(&h->tw_region, __ATOMIC_ACQUIRE) == ri)
        pthread_cond_wait(&h->tw_cv, &h->tw_mu);
    pthread_mutex_unlock(&h->tw_mu);
}

/* A region's write-back, staged: its dirty pages copied out, page 0
 * without the region header (the tag stays the memory server's) and the
 * others with their remote addresses, each marked `mark` if nonzero. */
typedef struct staged {
    uint32_t ndirty, nstaged;
    int page0;
} staged_t;

static staged_t stage_region(dsm_mheap_t *h, const region_t *r, uint8_t *stage, dsm_gaddr_t *addrs,
                             uint8_t *page0, uint8_t mark)
{
    uint32_t first = page_index(r->start), n = h->region_bytes / DSM_MHEAP_PAGE;
    staged_t s = {0};
    for (uint32_t i = 0; i < n; i++) {
        page_t *g = &h->pages[first + i];
        if (g->state != PAGE_CACHED || !g->dirty)
            continue;
        s.ndirty++;
        if (mark)
            g->dirty = mark;
        if (i == 0) {
            memcpy(page0, frame_of(h, first) + DSM_MHEAP_REGION_HDR, DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR);
            s.page0 = 1;
            continue;
        }
        addrs[s.nstaged] = remote_of(h, page_addr(h, first + i));
        memcpy(stage + (size_t)s.nstaged * DSM_MHEAP_PAGE, frame_of(h, first + i), DSM_MHEAP_PAGE);
        s.nstaged++;
    }
    return s;
}

/* Send a staged write-back: the tag to "started", page 0 alone, the
 * others as one batch (a round trip per window, not per page), the tag to
 * "finished". Touches no cache state: it may run without the heap lock. */
static dsm_status_t send_staged(dsm_mheap_t *h, const region_t *r, const staged_t *s, uint8_t *stage,
                                dsm_gaddr_t *addrs, const uint8_t *page0)
{
    dsm_gaddr_t tag = remote_of(h, r->start);
    uint64_t old;
    dsm_status_t st = dsm_fetch_add(h->node, tag, DSM_MHEAP_TAG_START, &old);
    if (st == DSM_OK && s->page0) {
        st = dsm_write(h->node, tag + DSM_MHEAP_REGION_HDR, page0, DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR);
        mheap_fabric_bytes(h, DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR);
    }
    int trips = st == DSM_OK ? write_staged(h, addrs, stage, s->nstaged, &st) : -1;
    if (st != DSM_OK)
        return st;
    mheap_fabric_bytes(h, (uint64_t)s->nstaged * DSM_MHEAP_PAGE);
    if ((st = dsm_fetch_add(h->node, tag, DSM_MHEAP_TAG_FINISH, &old)) != DSM_OK)
        return st;
    mheap_fabric_bytes(h, 32);
    mheap_round_trips(h, 2 + (uint64_t)trips + (uint64_t)s->page0);   /* the tag twice, the pages, page 0 */
    return DSM_OK;
}

dsm_status_t cache_writeback_region(dsm_mheap_t *h, region_t *r)
{
    wait_trace_send(h, r);
    staged_t s = stage_region(h, r, h->wb_stage, h->wb_addrs, h->wb_page0, 0);
    if (s.ndirty == 0)
        return DSM_OK;
    dsm_status_t st = send_staged(h, r, &s, h->wb_stage, h->wb_addrs, h->wb_page0);
    if (st != DSM_OK)
        return mheap_failed(h, st);   /* the pages stay dirty: nothing is lost here */
    pages_mark_written(h, page_index(r->start), h->region_bytes / DSM_MHEAP_PAGE, 0);
    h->st.writeback_batches++;
    return DSM_OK;
}

uint32_t cache_trace_stage(dsm_mheap_t *h, region_t *r)
{
    staged_t s = stage_region(h, r, h->tw_stage, h->tw_addrs, h->tw_page0, DIRTY_IN_FLIGHT);
    h->tw_ndirty = s.ndirty;
    h->tw_nstaged = s.nstaged;
    if (s.ndirty)
        __atomic_store_n(&h->tw_region, (uint32_t)(r - h->regions), __ATOMIC_RELEASE);
    return s.ndirty;
}

static dsm_mheap_send_hook_t send_hook;
static void *send_hook_ctx;

void dsm_mheap_set_send_hook(dsm_mheap_send_hook_t fn, void *ctx)
{
    __atomic_store_n(&send_hook_ctx, ctx, __ATOMIC_RELEASE);
    __atomic_store_n(&send_hook, fn, __ATOMIC_RELEASE);
}

dsm_status_t cache_trace_send(dsm_mheap_t *h, region_t *r)
{
    dsm_mheap_send_hook_t hook = __atomic_load_n(&send_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook(__atomic_load_n(&send_hook_ctx, __ATOMIC_ACQUIRE), (uint32_t)(r - h->regions));
    staged_t s = {.ndirty = h->tw_ndirty, .nstaged = h->tw_nstaged,
                  .page0 = h->tw_ndirty > h->tw_nstaged};
    dsm_status_t st = send_staged(h, r, &s, h->tw_stage, h->tw_addrs, h->tw_page0);
    pthread_mutex_lock(&h->tw_mu);
    __atomic_store_n(&h->tw_region, UINT32_MAX, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&h->tw_cv);
    pthread_mutex_unlock(&h->tw_mu);
    return st;
}

void cache_trace_written(dsm_mheap_t *h, region_t *r)
{
    pages_mark_written(h, page_index(r->start), h->region_bytes / DSM_MHEAP_PAGE, DIRTY_IN_FLIGHT);
    h->st.writeback_batches++;
}

dsm_status_t cache_writeback_regions(dsm_mheap_t *h, region_t *const *rs, uint32_t nr)
{
    uint32_t per_region = h->region_bytes / DSM_MHEAP_PAGE, nd = 0, npages = 0, nzero = 0;
    region_t **dirty = malloc((nr ? nr : 1) * sizeof *dirty);
    if (dirty == NULL)
        return DSM_ERR_NOMEM;
    for (uint32_t k = 0; k < nr; k++) {
        uint32_t first = page_index(rs[k]->start), n = 0;
        for (uint32_t i = 0; i < per_region; i++)
            if (h->pages[first + i].state == PAGE_CACHED && h->pages[first + i].dirty) {
                n++;
                nzero += i == 0;
            }
        if (n) {
            dirty[nd++] = rs[k];
            npages += n;
        }
    }
    if (nd <= 1) {   /* one region: the single write-back is as short */
        dsm_status_t st = nd ? cache_writeback_region(h, dirty[0]) : DSM_OK;
        free(dirty);
        return st;
    }
    /* Every region's tag moves to started, then every page is written (the
     * page-0 remainders, without the header, as one batch; the rest as
     * another), then every tag moves to finished: a few round trips for
     * all the regions, and each region still bracketed as a single
     * write-back brackets it. */
    uint32_t nfull = npages - nzero;
    dsm_gaddr_t *tags = malloc(nd * sizeof *tags), *za = malloc((nzero ? nzero : 1) * sizeof *za),
                *fa = malloc((nfull ? nfull : 1) * sizeof *fa);
    uint64_t *inc = malloc(nd * sizeof *inc);
    uint8_t *zb = malloc((size_t)(nzero ? nzero : 1) * (DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR)),
            *fb = malloc((size_t)(nfull ? nfull : 1) * DSM_MHEAP_PAGE);
    dsm_status_t st = tags && za && fa && inc && zb && fb ? DSM_OK : DSM_ERR_NOMEM;
    uint32_t zi = 0, fi = 0;
    for (uint32_t k = 0; k < nd && st == DSM_OK; k++) {
        tags[k] = remote_of(h, dirty[k]->start);
        inc[k] = DSM_MHEAP_TAG_START;
        uint32_t first = page_index(dirty[k]->start);
        for (uint32_t i = 0; i < per_region; i++) {
            page_t *g = &h->pages[first + i];
            if (g->state != PAGE_CACHED || !g->dirty)
                continue;
            if (i == 0) {
                za[zi] = remote_of(h, dirty[k]->start) + DSM_MHEAP_REGION_HDR;
                memcpy(zb + (size_t)zi * (DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR),
                       frame_of(h, first) + DSM_MHEAP_REGION_HDR, DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR);
                zi++;
            } else {
                fa[fi] = remote_of(h, page_addr(h, first + i));
                memcpy(fb + (size_t)fi * DSM_MHEAP_PAGE, frame_of(h, first + i), DSM_MHEAP_PAGE);
                fi++;
            }
        }
    }
    if (st == DSM_OK)
        st = dsm_fetch_add_batch(h->node, tags, inc, NULL, nd, NULL);
    if (st == DSM_OK && nzero)
        st = dsm_write_batch(h->node, za, zb, DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR, nzero, NULL);
    int trips = 0;
    if (st == DSM_OK && nfull)
        trips = write_staged(h, fa, fb, nfull, &st);
    if (st == DSM_OK) {
        mheap_fabric_bytes(h, (uint64_t)nzero * (DSM_MHEAP_PAGE - DSM_MHEAP_REGION_HDR) +
                                  (uint64_t)nfull * DSM_MHEAP_PAGE);
        h->wb_seq++;
        for (uint32_t k = 0; k < nd; k++) {
            uint32_t first = page_index(dirty[k]->start);
            for (uint32_t i = 0; i < per_region; i++) {
                page_t *g = &h->pages[first + i];
                if (g->state == PAGE_CACHED && g->dirty) {
                    g->dirty = 0;
                    g->wb_seq = h->wb_seq;
                    h->st.pages_written_back++;
                }
            }
            inc[k] = DSM_MHEAP_TAG_FINISH;
        }
        st = dsm_fetch_add_batch(h->node, tags, inc, NULL, nd, NULL);
    }
    if (st == DSM_OK) {
        mheap_fabric_bytes(h, 32 * (uint64_t)nd);
        mheap_round_trips(h, 2 + (nzero > 0) + (uint64_t)trips);
        h->st.writeback_batches += nd;
    }
    free(dirty);
    free(tags);
    free(za);
    free(fa);
    free(inc);
    free(zb);
    free(fb);
    /* A failure leaves the pages dirty (nothing is lost), maybe a tag
     * started and not finished: its region's traces are discarded. */
    return st == DSM_OK || st == DSM_ERR_NOMEM ? st : mheap_failed(h, st);
}

uint32_t cache_dirty_pages(dsm_mheap_t *h, const region_t *r)
{
    uint32_t first = page_index(r->start), n = 0;
    for (uint32_t i = 0; i < h->region_bytes / DSM_MHEAP_PAGE; i++)
        n += h->pages[first + i].state == PAGE_CACHED && h->pages[first + i].dirty;
    return n;
}

void cache_pages_item(dsm_mheap_t *h, const region_t *r, dsm_mheap_batch_t *b)
{
    uint32_t first = page_index(r->start), per_region = h->region_bytes / DSM_MHEAP_PAGE, n = 0;
    dsm_writer_t items = {0};
    for (uint32_t i = 0; i < per_region; i++) {
        page_t *g = &h->pages[first + i];
        if (g->state != PAGE_CACHED || !g->dirty)
            continue;
        dsm_write_u32(&items, i);
        dsm_write_bytes(&items, frame_of(h, first + i), DSM_MHEAP_PAGE);
        n++;
    }
    dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_PAGES, .heap_id = h->heap_id, .region = r->local, .npages = n,
                         .pages = items.buf};
    if (n == 0 || items.ok)
        dsm_mheap_batch_add(b, &m, DSM_OK);
    else
        b->w.ok = 0;
    dsm_writer_free(&items);
}

void cache_pages_written(dsm_mheap_t *h, const region_t *r)
{
    uint32_t first = page_index(r->start), per_region = h->region_bytes / DSM_MHEAP_PAGE;
    pages_mark_written(h, first, per_region, 0);
    h->st.writeback_batches++;
}

static dsm_status_t evict(dsm_mheap_t *h, uint32_t p)
{
    if (h->pages[p].state != PAGE_CACHED)
        return DSM_OK;
    wait_trace_send(h, region_of(h, page_addr(h, p)));
    if (h->pages[p].dirty) {
        uint64_t t0 = dsm_now_ns();
        dsm_status_t st = cache_writeback_region(h, region_of(h, page_addr(h, p)));
        mheap_program_ns(h, DSM_MHEAP_PHASE_EVICT, t0);
        if (st != DSM_OK)
            return st;
    }
    drop(h, p, PAGE_EVICTED);
    h->st.evictions++;
    return DSM_OK;
}

/* A free frame, evicting the LRU page if there is none. */
static dsm_status_t take_frame(dsm_mheap_t *h, uint32_t *frame)
{
    if (h->nfree_frames == 0) {
        dsm_status_t st = evict(h, h->lru_tail);
        if (st != DSM_OK)
            return st;
    }
    *frame = h->free_frames[--h->nfree_frames];
    return DSM_OK;
}

/* Swap-like readahead: a fault on the page after the last one faulted in
 * (or read ahead) reads the evicted pages after it in the same request,
 * the window doubling while faults stay contiguous (2, 4, 8 pages, as the
 * kernel's swap readahead with page-cluster 3); any other fault reads one
 * page and resets the window. */
static uint32_t readahead_pages(dsm_mheap_t *h, uint32_t p)
{
    int contiguous = h->ra_last != NO_PAGE && p == h->ra_last + 1;
    h->ra_window = contiguous ? (h->ra_window ? h->ra_window * 2 : 2) : 1;
    if (h->ra_window > RA_MAX)
        h->ra_window = RA_MAX;
    uint32_t per_region = h->region_bytes / DSM_MHEAP_PAGE, n = 1;
    while (n < h->ra_window && (p + n) % per_region != 0 && h->pages[p + n].state == PAGE_EVICTED &&
           n < h->budget / 2)
        n++;
    return n;
}

/* A fetched page into a free frame: cached, clean, at the LRU head. */
static dsm_status_t install(dsm_mheap_t *h, uint32_t p, const uint8_t *data)
{
    uint32_t frame;
    dsm_status_t st = take_frame(h, &frame);
    if (st != DSM_OK)
        return st;
    page_t *g = &h->pages[p];
    memcpy(h->frames + (size_t)frame * DSM_MHEAP_PAGE, data, DSM_MHEAP_PAGE);
    g->frame = frame;
    g->state = PAGE_CACHED;
    g->dirty = 0;
    h->ncached++;
    lru_push(h, p);
    return DSM_OK;
}

static void fetch_delay(dsm_mheap_t *h)
{
    if (h->cfg.fetch_delay_us) {
        /* The thread waits as it would on a slower device (once per request). */
        struct timespec ts = {h->cfg.fetch_delay_us / 1000000u, (long)(h->cfg.fetch_delay_us % 1000000u) * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The frame of page p, faulting it in (evicting the LRU page if needed). */
static dsm_status_t fault(dsm_mheap_t *h, uint32_t p, uint8_t **out)
{
    page_t *g = &h->pages[p];
    if (g->state == PAGE_CACHED) {
        if (h->lru_head != p) {
            lru_unlink(h, p);
            lru_push(h, p);
        }
        *out = frame_of(h, p);
        return DSM_OK;
    }
    if (h->dead != DSM_OK)
        return h->dead;
    if (g->state == PAGE_EVICTED)   /* the read would meet the send's tag updates */
        wait_trace_send(h, region_of(h, page_addr(h, p)));
    h->st.page_faults++;
    uint32_t frame, n = g->state == PAGE_EVICTED ? readahead_pages(h, p) : 1;
    dsm_status_t st = take_frame(h, &frame);
    if (st != DSM_OK)
        return st;
    uint8_t *f = h->frames + (size_t)frame * DSM_MHEAP_PAGE;
    if (g->state == PAGE_EVICTED) {
        uint64_t t0 = dsm_now_ns();
        st = dsm_read(h->node, remote_of(h, page_addr(h, p)), n > 1 ? h->ra_buf : f, (size_t)n * DSM_MHEAP_PAGE);
        mheap_program_ns(h, DSM_MHEAP_PHASE_FAULT, t0);
        if (st != DSM_OK) {
            h->free_frames[h->nfree_frames++] = frame;
            return mheap_failed(h, st);
        }
        h->st.pages_fetched += n;
        h->st.pages_readahead += n - 1;
        mheap_fabric_bytes(h, (uint64_t)n * DSM_MHEAP_PAGE);
        mheap_round_trips(h, 1);
        fetch_delay(h);
        if (n > 1)
            memcpy(f, h->ra_buf, DSM_MHEAP_PAGE);
        /* The pages read ahead: cached, clean, behind p in the LRU. A
         * frame taken for one may evict a dirty page, whose region's
         * write-back leaves these (evicted) pages as they are. */
        for (uint32_t k = 1; k < n; k++)
            if (h->pages[p + k].state != PAGE_EVICTED || install(h, p + k, h->ra_buf + (size_t)k * DSM_MHEAP_PAGE) != DSM_OK)
                break;
        h->ra_last = p + n - 1;
        g->dirty = 0;
    } else {
        /* Init: zeros, and dirty, since the server's copy may hold a freed
         * region's old bytes. */
        memset(f, 0, DSM_MHEAP_PAGE);
        g->dirty = 1;
    }
    g->frame = frame;
    g->state = PAGE_CACHED;
    h->ncached++;
    lru_push(h, p);
    *out = f;
    return DSM_OK;
}

/* A word, the common copy (headers and reference fields), is copied as
 * one: a copy of any length up to a page the compiler makes a string
 * instruction, whose start-up cost outweighs a word's copy. */
static inline void copy_bytes(void *dst, const void *src, size_t n)
{
    if (n == 8)
        memcpy(dst, src, 8);
    else
        memcpy(dst, src, n);
}

dsm_status_t cache_read(dsm_mheap_t *h, uint64_t a, void *dst, size_t len)
{
    uint8_t *d = dst;
    while (len > 0) {
        uint32_t p = page_index(a), in = (uint32_t)(a % DSM_MHEAP_PAGE);
        size_t n = DSM_MHEAP_PAGE - in < len ? DSM_MHEAP_PAGE - in : len;
        uint8_t *f = NULL;
        dsm_status_t st = fault(h, p, &f);
        if (st != DSM_OK)
            return st;
        copy_bytes(d, f + in, n);
        d += n;
        a += n;
        len -= n;
    }
    return DSM_OK;
}

dsm_status_t cache_write(dsm_mheap_t *h, uint64_t a, const void *src, size_t len)
{
    const uint8_t *s = src;
    while (len > 0) {
        uint32_t p = page_index(a), in = (uint32_t)(a % DSM_MHEAP_PAGE);
        size_t n = DSM_MHEAP_PAGE - in < len ? DSM_MHEAP_PAGE - in : len;
        uint8_t *f = NULL;
        dsm_status_t st = fault(h, p, &f);
        if (st != DSM_OK)
            return st;
        copy_bytes(f + in, s, n);
        h->pages[p].dirty = 1;
        s += n;
        a += n;
        len -= n;
    }
    return DSM_OK;
}

dsm_status_t cache_load64(dsm_mheap_t *h, uint64_t a, uint64_t *v) { return cache_read(h, a, v, 8); }
dsm_status_t cache_store64(dsm_mheap_t *h, uint64_t a, uint64_t v) { return cache_write(h, a, &v, 8); }

int cache_is_cached(dsm_mheap_t *h, uint64_t a) { return h->pages[page_index(a)].state == PAGE_CACHED; }
int cache_is_init(dsm_mheap_t *h, uint64_t a) { return h->pages[page_index(a)].state == PAGE_INIT; }
int cache_is_evicted(dsm_mheap_t *h, uint64_t a) { return h->pages[page_index(a)].state == PAGE_EVICTED; }

void cache_fetch_plan(dsm_mheap_t *h, uint64_t a, cache_fetch_t *f)
{
    f->page = page_index(a);
    f->n = readahead_pages(h, f->page);
    f->seq = h->wb_seq;
    h->ra_last = f->page + f->n - 1;
}

dsm_status_t cache_fetch_read(dsm_mheap_t *h, const cache_fetch_t *f, uint32_t nf, uint8_t *buf)
{
    /* Only immutable fields of h: no lock needed. One batch: the reads are
     * in flight together, a request per memory server where they are
     * emulated, so the marker waits about a round trip per batch. */
    dsm_gaddr_t addrs[CACHE_FETCH_MAX * RA_MAX];
    uint32_t n = 0;
    for (uint32_t k = 0; k < nf && k < CACHE_FETCH_MAX; k++)
        for (uint32_t j = 0; j < f[k].n; j++)
            addrs[n++] = remote_of(h, page_addr(h, f[k].page + j));
    if (n == 0)
        return DSM_OK;
    dsm_status_t st = dsm_read_batch(h->node, addrs, buf, DSM_MHEAP_PAGE, n, NULL);
    if (st == DSM_OK) {
        mheap_fabric_bytes(h, (uint64_t)n * DSM_MHEAP_PAGE);
        fetch_delay(h);   /* once: the device serves the batch's reads together */
    }
    return st;
}

dsm_status_t cache_fetch_install(dsm_mheap_t *h, const cache_fetch_t *f, const uint8_t *buf)
{
    dsm_status_t st = DSM_OK;
    h->st.page_faults++;
    for (uint32_t k = 0; k < f->n && st == DSM_OK; k++) {
        page_t *g = &h->pages[f->page + k];
        /* Cached since, or written back since: the copy read is stale. */
        if (g->state != PAGE_EVICTED || g->wb_seq > f->seq)
            continue;
        if ((st = install(h, f->page + k, buf + (size_t)k * DSM_MHEAP_PAGE)) == DSM_OK) {
            h->st.pages_fetched++;
            h->st.pages_readahead += k > 0;
        }
    }
    return st;
}

dsm_status_t cache_evict_page(dsm_mheap_t *h, uint64_t a) { return evict(h, page_index(a)); }

dsm_status_t cache_evict_region(dsm_mheap_t *h, region_t *r)
{
    dsm_status_t st = cache_writeback_region(h, r);   /* waits for a trace's send of r */
    if (st != DSM_OK)
        return st;
    uint32_t first = page_index(r->start), n = h->region_bytes / DSM_MHEAP_PAGE;
    for (uint32_t i = 0; i < n; i++)
        if (h->pages[first + i].state == PAGE_CACHED) {
            drop(h, first + i, PAGE_EVICTED);
            h->st.evictions++;
        }
    return DSM_OK;
}

void cache_region_reset(dsm_mheap_t *h, region_t *r, uint32_t bp, int server_has_data)
{
    uint32_t first = page_index(r->start), n = h->region_bytes / DSM_MHEAP_PAGE;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t lo = (uint64_t)i * DSM_MHEAP_PAGE;
        if (lo < bp && server_has_data)
            drop(h, first + i, PAGE_EVICTED);
        else if (lo >= bp)
            drop(h, first + i, PAGE_INIT);
    }
}
