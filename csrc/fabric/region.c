/* Memory regions: local memory registered for one-sided access, or allocated
 * by UCX itself (with its packed remote key), and the table of peers' regions
 * (base, length, unpacked key) that every one-sided operation is checked
 * against. */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "fabric/tsan_hb.h"
#include "util/clock.h"
#include "util/log.h"

struct dsm_region {
    dsm_fabric_t *fabric;
    void *base;
    size_t length;
    ucp_mem_h memh;
    void *key;
    size_t key_len;
    int allocated;        /* UCX's memory (region_alloc), not the caller's */
    /* Replies sent from this memory in place (dsm_fabric_region_send_begin)
     * that UCX has not finished with: unregister waits for them. */
    _Atomic unsigned sending;
    dsm_region_t *next;   /* the fabric's local_regions list */
};

/* Packs the remote key of a mapped region; on failure unmaps and frees it. */
static dsm_status_t region_finish(dsm_region_t *r, dsm_region_t **out)
{
    ucs_status_t st = ucp_rkey_pack(r->fabric->context, r->memh, &r->key, &r->key_len);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_rkey_pack: %s", ucs_status_string(st));
        ucp_mem_unmap(r->fabric->context, r->memh);
        free(r);
        return DSM_ERR_FABRIC;
    }
    /* findable by the emulation's target side from now on */
    dsm_fabric_t *f = r->fabric;
    pthread_rwlock_wrlock(&f->regions_lock);
    r->next = f->local_regions;
    f->local_regions = r;
    pthread_rwlock_unlock(&f->regions_lock);
    *out = r;
    return DSM_OK;
}

static dsm_status_t mem_map_error(const char *what, size_t len, ucs_status_t st)
{
    DSM_ERROR(DSM_FABRIC_LOG, "ucp_mem_map(%s %zu bytes): %s", what, len, ucs_status_string(st));
    return dsm_fabric_status_from_ucs(st) == DSM_ERR_NOMEM ? DSM_ERR_NOMEM : DSM_ERR_FABRIC;
}

dsm_status_t dsm_fabric_region_register(dsm_fabric_t *f, void *base, size_t len, dsm_region_t **out)
{
    if (f == NULL || base == NULL || len == 0 || out == NULL)
        return DSM_ERR_INVALID;
    dsm_region_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return DSM_ERR_NOMEM;
    r->fabric = f;
    r->base = base;
    r->length = len;

    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = base,
        .length = len,
    };
    ucs_status_t st = ucp_mem_map(f->context, &params, &r->memh);
    if (st != UCS_OK) {
        free(r);
        return mem_map_error("register", len, st);
    }
    return region_finish(r, out);
}

/* UCX allocates with the first method of UCX_ALLOC_PRIO that works: sysv or
 * posix shared memory (when those transports are enabled), huge pages, THP,
 * anonymous mmap, and only as a last resort the heap. All but the heap hand
 * out fresh kernel pages, which read as zero and which a page-residency check
 * reports as absent; only pages that are already resident can hold old data.
 * So zero exactly those, instead of touching (and committing) every page of
 * what may be a large, sparsely used partition. */
static void zero_resident_pages(uint8_t *base, size_t len)
{
    enum { CHUNK_PAGES = 4096 };
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *end = base + len;
    uint8_t *p = (uint8_t *)((uintptr_t)base & ~(uintptr_t)(page - 1));
    while (p < end) {
        size_t n = (size_t)(end - p + page - 1) / page;
        if (n > CHUNK_PAGES)
            n = CHUNK_PAGES;
        unsigned char v[CHUNK_PAGES];
        if (mincore(p, n * page, v) != 0) {
            memset(base, 0, len);   /* cannot tell: zero everything */
            return;
        }
        for (size_t i = 0; i < n; i++) {
            if (!(v[i] & 1))
                continue;
            uint8_t *lo = p + i * page, *hi = lo + page;
            if (lo < base)
                lo = base;
            if (hi > end)
                hi = end;
            memset(lo, 0, (size_t)(hi - lo));
        }
        p += n * page;
    }
}

dsm_status_t dsm_fabric_region_alloc(dsm_fabric_t *f, size_t len, dsm_region_t **out)
{
    if (f == NULL || len == 0 || out == NULL)
        return DSM_ERR_INVALID;
    dsm_region_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return DSM_ERR_NOMEM;
    r->fabric = f;

    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = NULL,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucs_status_t st = ucp_mem_map(f->context, &params, &r->memh);
    if (st != UCS_OK) {
        free(r);
        return mem_map_error("allocate", len, st);
    }
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    st = ucp_mem_query(r->memh, &attr);
    if (st != UCS_OK || attr.address == NULL || attr.length < len) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_mem_query: %s", ucs_status_string(st));
        ucp_mem_unmap(f->context, r->memh);
        free(r);
        return DSM_ERR_FABRIC;
    }
    r->base = attr.address;
    r->length = len;   /* UCX may round up; peers see what was asked for */
    r->allocated = 1;
    zero_resident_pages(r->base, len);
    return region_finish(r, out);
}

dsm_status_t dsm_fabric_region_key(dsm_region_t *r, const void **key, size_t *len)
{
    if (r == NULL || key == NULL || len == NULL)
        return DSM_ERR_INVALID;
    *key = r->key;
    *len = r->key_len;
    return DSM_OK;
}

void *dsm_fabric_region_base(const dsm_region_t *r)
{
    return r ? r->base : NULL;
}

size_t dsm_fabric_region_length(const dsm_region_t *r)
{
    return r ? r->length : 0;
}

/* How long unregister waits for in-place replies: each ends when its
 * peer has the data or is found dead, which the peer timeout bounds. */
enum { REGION_DRAIN_MS = 30000 };

/* Progress until UCX is done with every reply sent from r in place (the
 * region is out of the table, so no new one starts). false if some are
 * still on after the bound: their completions will still touch r. */
static bool region_drain(dsm_region_t *r)
{
    if (atomic_load_explicit(&r->sending, memory_order_acquire) == 0)
        return true;
    uint64_t deadline = dsm_deadline_ns(REGION_DRAIN_MS);
    while (atomic_load_explicit(&r->sending, memory_order_acquire) != 0) {
        if (dsm_now_ns() >= deadline) {
            DSM_ERROR(DSM_FABRIC_LOG, "region %p: %u replies still being sent from it after %d ms; its record "
                      "and registration are left behind", r->base, atomic_load(&r->sending), REGION_DRAIN_MS);
            return false;
        }
        /* inside a handler only another thread may progress the worker */
        if (dsm_fabric_handler_depth > 0 || dsm_fabric_progress(r->fabric) == 0)
            sched_yield();
    }
    return true;
}

void dsm_fabric_region_unregister(dsm_region_t *r)
{
    if (r == NULL)
        return;
    /* The write lock waits for a handler still touching the region. */
    dsm_fabric_t *f = r->fabric;
    pthread_rwlock_wrlock(&f->regions_lock);
    for (dsm_region_t **pp = &f->local_regions; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    pthread_rwlock_unlock(&f->regions_lock);
    if (!region_drain(r))
        return;
    ucp_rkey_buffer_release(r->key);
    ucp_mem_unmap(r->fabric->context, r->memh);   /* frees allocated memory too */
    free(r);
}

uint8_t *dsm_fabric_local_acquire(dsm_fabric_t *f, uint64_t addr, uint64_t len, dsm_region_t **region)
{
    pthread_rwlock_rdlock(&f->regions_lock);
    for (dsm_region_t *r = f->local_regions; r; r = r->next) {
        uint64_t base = (uint64_t)(uintptr_t)r->base;
        if (addr >= base && addr - base <= r->length && len <= r->length - (addr - base)) {
            if (region)
                *region = r;
            return (uint8_t *)r->base + (addr - base);
        }
    }
    pthread_rwlock_unlock(&f->regions_lock);
    return NULL;
}

void dsm_fabric_local_release(dsm_fabric_t *f)
{
    pthread_rwlock_unlock(&f->regions_lock);
}

void dsm_fabric_region_send_begin(dsm_region_t *r)
{
    atomic_fetch_add_explicit(&r->sending, 1, memory_order_relaxed);
}

void dsm_fabric_region_send_end(void *region)
{
    dsm_region_t *r = region;
    atomic_fetch_sub_explicit(&r->sending, 1, memory_order_release);
}

unsigned dsm_fabric_region_sends(const dsm_region_t *r)
{
    return atomic_load_explicit(&r->sending, memory_order_acquire);
}

dsm_status_t dsm_fabric_region_reregister(dsm_region_t *r)
{
    if (r == NULL)
        return DSM_ERR_INVALID;
    if (r->allocated)
        return DSM_ERR_UNSUPPORTED;   /* UCX's own memory is never remapped under it */
    dsm_fabric_t *f = r->fabric;
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = r->base,
        .length = r->length,
    };
    ucp_mem_h memh;
    ucs_status_t st = ucp_mem_map(f->context, &params, &memh);
    if (st != UCS_OK)
        return mem_map_error("re-register", r->length, st);
    void *key;
    size_t key_len;
    st = ucp_rkey_pack(f->context, memh, &key, &key_len);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_rkey_pack (re-register): %s", ucs_status_string(st));
        ucp_mem_unmap(f->context, memh);
        return DSM_ERR_FABRIC;
    }
    /* The old registration stays valid until the new one is in place. */
    pthread_rwlock_wrlock(&f->regions_lock);
    ucp_mem_h old_memh = r->memh;
    void *old_key = r->key;
    r->memh = memh;
    r->key = key;
    r->key_len = key_len;
    pthread_rwlock_unlock(&f->regions_lock);
    ucp_rkey_buffer_release(old_key);
    ucp_mem_unmap(f->context, old_memh);
    return DSM_OK;
}

/* shm (cma/posix) and tcp read the page tables at access time, so a remap is
 * invisible to them: DSM_OK at once. On verbs the registration pinned the
 * old pages: the region is registered anew over the same range (the
 * ibv_rereg_mr analogue through UCX), and its key changes. */
dsm_status_t dsm_fabric_region_remapped(dsm_region_t *r, size_t offset, size_t len)
{
    if (r == NULL)
        return DSM_ERR_INVALID;
    if (offset > r->length || len > r->length - offset)
        return DSM_ERR_BAD_ADDR;
    if (r->fabric->transport != DSM_TRANSPORT_VERBS)
        return DSM_OK;
    return dsm_fabric_region_reregister(r);
}

/* ------------------------------------------------------------ remote regions */

/* The packed key, kept for lanes; without it (no memory) a lane uses the
 * shared endpoint for this region. */
static void keep_packed(dsm_remote_region_t *rr, const void *key, size_t key_len)
{
    free(rr->packed);
    rr->packed = malloc(key_len);
    rr->packed_len = rr->packed ? key_len : 0;
    if (rr->packed)
        memcpy(rr->packed, key, key_len);
}

dsm_status_t dsm_fabric_remote_region_add(dsm_fabric_t *f, uint32_t rank, uint32_t region_id,
                                          uint64_t remote_base, uint64_t len,
                                          const void *key, size_t key_len)
{
    if (f == NULL || key == NULL || key_len == 0 || len == 0)
        return DSM_ERR_INVALID;
    if (region_id >= DSM_FABRIC_MAX_REGIONS)
        return DSM_ERR_INVALID;
    if (remote_base + len < remote_base)
        return DSM_ERR_BAD_ADDR;
    dsm_peer_t *peer;
    dsm_status_t ret = dsm_fabric_peer_acquire(f, rank, &peer);
    if (ret != DSM_OK)
        return ret;
    pthread_mutex_lock(&f->lock);
    dsm_remote_region_t *rr = &peer->regions[region_id];
    if (atomic_load(&rr->valid)) {
        ret = DSM_ERR_EXISTS;
    } else {
        ucs_status_t st = ucp_ep_rkey_unpack(peer->ep, key, &rr->rkey);
        if (st != UCS_OK) {
            DSM_WARN(DSM_FABRIC_LOG, "rank %u region %u: bad remote key: %s", rank, region_id,
                     ucs_status_string(st));
            ret = DSM_ERR_PROTO;
        } else {
            rr->base = remote_base;
            rr->length = len;
            keep_packed(rr, key, key_len);
            /* Over shm, memory the peer allocated through the fabric can be
             * mapped here; registered user memory (cma) and tcp cannot. */
            void *p = NULL;
            rr->direct = ucp_rkey_ptr(rr->rkey, remote_base, &p) == UCS_OK ? p : NULL;
            if (rr->direct)
                dsm_fabric_tsan_map_add(rr->direct, len, remote_base);
            DSM_DEBUG(DSM_FABRIC_LOG, "rank %u region %u: %s access", rank, region_id,
                      rr->direct ? "direct (mapped)" : "through UCX");
            atomic_store_explicit(&rr->valid, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&f->lock);
    dsm_fabric_peer_release(peer);
    return ret;
}

dsm_status_t dsm_fabric_remote_region_rekey(dsm_fabric_t *f, uint32_t rank, uint32_t region_id, const void *key,
                                            size_t key_len)
{
    if (f == NULL || key == NULL || key_len == 0 || region_id >= DSM_FABRIC_MAX_REGIONS)
        return DSM_ERR_INVALID;
    dsm_peer_t *peer;
    dsm_status_t ret = dsm_fabric_peer_acquire(f, rank, &peer);
    if (ret != DSM_OK)
        return ret;
    struct dsm_rkey_retired *old = malloc(sizeof *old);
    pthread_mutex_lock(&f->lock);
    dsm_remote_region_t *rr = &peer->regions[region_id];
    ucp_rkey_h rkey = NULL;
    if (!atomic_load(&rr->valid)) {
        ret = DSM_ERR_BAD_ADDR;   /* a key for a region we never learnt */
    } else if (old == NULL) {
        ret = DSM_ERR_NOMEM;
    } else if (ucp_ep_rkey_unpack(peer->ep, key, &rkey) != UCS_OK) {
        DSM_WARN(DSM_FABRIC_LOG, "rank %u region %u: bad new remote key: the old one stays", rank, region_id);
        ret = DSM_ERR_PROTO;
    } else {
        old->rkey = rr->rkey;
        old->next = rr->retired;
        rr->retired = old;
        old = NULL;
        void *p = NULL;
        rr->direct = ucp_rkey_ptr(rkey, rr->base, &p) == UCS_OK ? p : NULL;
        if (rr->direct)
            dsm_fabric_tsan_map_add(rr->direct, rr->length, rr->base);
        rr->rkey = rkey;
        keep_packed(rr, key, key_len);
        atomic_fetch_add_explicit(&rr->version, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&f->lock);
    free(old);
    dsm_fabric_peer_release(peer);
    return ret;
}

uint64_t dsm_fabric_remote_region_length(dsm_fabric_t *f, uint32_t rank, uint32_t region_id)
{
    if (f == NULL || rank >= DSM_FABRIC_MAX_PEERS || region_id >= DSM_FABRIC_MAX_REGIONS)
        return 0;
    dsm_remote_region_t *rr = &f->peers[rank].regions[region_id];
    return atomic_load_explicit(&rr->valid, memory_order_acquire) ? rr->length : 0;
}

int dsm_fabric_remote_emulated(dsm_fabric_t *f, uint32_t rank, uint32_t region_id)
{
    if (f == NULL || !f->emulate_rma || rank >= DSM_FABRIC_MAX_PEERS || region_id >= DSM_FABRIC_MAX_REGIONS)
        return 0;
    dsm_remote_region_t *rr = &f->peers[rank].regions[region_id];
    return atomic_load_explicit(&rr->valid, memory_order_acquire) && rr->direct == NULL;
}

/* Called with no users on the peer (endpoint close). */
void dsm_fabric_remote_regions_clear(dsm_peer_t *peer)
{
    for (int i = 0; i < DSM_FABRIC_MAX_REGIONS; i++) {
        dsm_remote_region_t *rr = &peer->regions[i];
        if (atomic_load(&rr->valid)) {
            atomic_store(&rr->valid, 0);
            if (rr->direct)
                dsm_fabric_tsan_map_drop(rr->direct);
            rr->direct = NULL;
            ucp_rkey_destroy(rr->rkey);   /* unmaps a direct mapping */
            rr->rkey = NULL;
        }
        free(rr->packed);
        rr->packed = NULL;
        rr->packed_len = 0;
        while (rr->retired) {
            struct dsm_rkey_retired *o = rr->retired;
            rr->retired = o->next;
            ucp_rkey_destroy(o->rkey);
            free(o);
        }
    }
}
