/* The client calls of a CoRM store: the RPCs (alloc, free, read, write,
 * release, compact; local calls on this node's own store), and the
 * one-sided reads (direct_read, scan_read) with their validation, retries
 * with backoff and fallbacks (get), and batches of reads timed here
 * (read_many). */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compact/ids.h"
#include "compact/internal.h"
#include "compact/layout.h"
#include "compact/wire.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG_MOD "compact"

enum { DIRECT_TRIES = 24, SCAN_TRIES = 12 };

/* ---- RPC ------------------------------------------------------------------ */

static int is_local(dsm_compact_t *c, uint32_t rank) { return rank == dsm_node_rank(c->node) && c->store; }

dsm_status_t dsm_compact_rpc(dsm_compact_t *c, uint32_t rank, uint16_t handler, const dsm_compact_msg_t *req, uint16_t want,
                          dsm_compact_msg_t *rep, uint8_t *in, size_t cap)
{
    uint8_t out[DSM_COMPACT_MSG_HEADER_LEN + 20 + DSM_COMPACT_MSG_MAX_DATA];
    size_t n = dsm_compact_msg_encode(req, out), in_len = 0;
    if (n == 0)
        return DSM_ERR_INVALID;
    dsm_status_t st = dsm_fabric_am_request(c->fabric, rank, handler, out, n, in, cap, &in_len, 0);
    if (st != DSM_OK)
        return st;
    if (dsm_compact_msg_decode(in, in_len, rep) != DSM_OK || rep->type != want) {
        DSM_WARN(LOG_MOD, "malformed reply from rank %u", rank);
        return DSM_ERR_PROTO;
    }
    return DSM_OK;
}

static dsm_status_t check_ptr(dsm_compact_t *c, const dsm_compact_ptr_t *ptr, dsm_compact_ptr_fields_t *f)
{
    if (c == NULL || ptr == NULL)
        return DSM_ERR_INVALID;
    dsm_compact_ptr_decode(ptr, f);
    if (f->rank >= DSM_MAX_RANKS)
        return DSM_ERR_NO_PEER;
    return DSM_OK;
}

dsm_status_t dsm_compact_alloc(dsm_compact_t *c, uint32_t rank, size_t size, dsm_compact_ptr_t *out)
{
    if (c == NULL || out == NULL)
        return DSM_ERR_INVALID;
    if (dsm_compact_class_for(size) < 0)
        return DSM_ERR_TOO_BIG;
    if (is_local(c, rank))
        return dsm_compact_store_alloc(c->store, size, out);
    dsm_compact_msg_t req = {.type = DSM_COMPACT_MSG_ALLOC_REQ, .size = size}, rep;
    uint8_t in[64];
    dsm_status_t st = dsm_compact_rpc(c, rank, DSM_AM_COMPACT_REQ, &req, DSM_COMPACT_MSG_ALLOC_REP, &rep, in, sizeof in);
    if (st == DSM_OK)
        *out = rep.ptr;
    return st;
}

/* The RPCs that take a pointer and hand back a corrected one. */
static dsm_status_t ptr_rpc(dsm_compact_t *c, uint16_t type, uint16_t want, dsm_compact_ptr_t *ptr, const void *data,
                            size_t len, void *buf, size_t cap, size_t *out_len)
{
    dsm_compact_ptr_fields_t f;
    dsm_status_t st = check_ptr(c, ptr, &f);
    if (st != DSM_OK)
        return st;
    if (len > DSM_COMPACT_MSG_MAX_DATA)
        return DSM_ERR_TOO_BIG;
    dsm_compact_msg_t req = {.type = type, .ptr = *ptr, .data = data, .len = (uint32_t)len}, rep;
    uint8_t in[DSM_COMPACT_MSG_HEADER_LEN + 20 + DSM_COMPACT_MSG_MAX_DATA];
    st = dsm_compact_rpc(c, f.rank, DSM_AM_COMPACT_REQ, &req, want, &rep, in, sizeof in);
    if (st != DSM_OK)
        return st;
    if (want != DSM_COMPACT_MSG_FREE_REP)
        *ptr = rep.ptr;
    if (want == DSM_COMPACT_MSG_READ_REP) {
        if (out_len)
            *out_len = rep.len;
        if (rep.len > cap)
            return DSM_ERR_TOO_BIG;
        if (rep.len)
            memcpy(buf, rep.data, rep.len);
    }
    return DSM_OK;
}

dsm_status_t dsm_compact_free(dsm_compact_t *c, dsm_compact_ptr_t *ptr)
{
    dsm_compact_ptr_fields_t f;
    dsm_status_t st = check_ptr(c, ptr, &f);
    if (st != DSM_OK)
        return st;
    if (is_local(c, f.rank))
        return dsm_compact_store_free(c->store, ptr);
    return ptr_rpc(c, DSM_COMPACT_MSG_FREE_REQ, DSM_COMPACT_MSG_FREE_REP, ptr, NULL, 0, NULL, 0, NULL);
}

dsm_status_t dsm_compact_read(dsm_compact_t *c, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len)
{
    dsm_compact_ptr_fields_t f;
    dsm_status_t st = check_ptr(c, ptr, &f);
    if (st != DSM_OK || (buf == NULL && cap))
        return st != DSM_OK ? st : DSM_ERR_INVALID;
    if (is_local(c, f.rank))
        return dsm_compact_store_read(c->store, ptr, buf, cap, len);
    return ptr_rpc(c, DSM_COMPACT_MSG_READ_REQ, DSM_COMPACT_MSG_READ_REP, ptr, NULL, 0, buf, cap, len);
}

dsm_status_t dsm_compact_write(dsm_compact_t *c, dsm_compact_ptr_t *ptr, const void *data, size_t len)
{
    dsm_compact_ptr_fields_t f;
    dsm_status_t st = check_ptr(c, ptr, &f);
    if (st != DSM_OK || (data == NULL && len))
        return st != DSM_OK ? st : DSM_ERR_INVALID;
    if (f.size_class < DSM_COMPACT_NCLASSES && len > dsm_compact_class_capacity(f.size_class))
        return DSM_ERR_TOO_BIG;
    if (is_local(c, f.rank))
        return dsm_compact_store_write(c->store, ptr, data, len);
    return ptr_rpc(c, DSM_COMPACT_MSG_WRITE_REQ, DSM_COMPACT_MSG_WRITE_REP, ptr, data, len, NULL, 0, NULL);
}

dsm_status_t dsm_compact_release_ptr(dsm_compact_t *c, dsm_compact_ptr_t *ptr)
{
    dsm_compact_ptr_fields_t f;
    dsm_status_t st = check_ptr(c, ptr, &f);
    if (st != DSM_OK)
        return st;
    if (is_local(c, f.rank))
        return dsm_compact_store_release(c->store, ptr);
    return ptr_rpc(c, DSM_COMPACT_MSG_RELEASE_REQ, DSM_COMPACT_MSG_RELEASE_REP, ptr, NULL, 0, NULL, 0, NULL);
}

dsm_status_t dsm_compact_now(dsm_compact_t *c, uint32_t rank, int cls, dsm_compact_stats_t *stats)
{
    if (c == NULL || cls < -1 || cls >= DSM_COMPACT_NCLASSES)
        return DSM_ERR_INVALID;
    dsm_compact_stats_t local = {0};
    if (is_local(c, rank)) {
        dsm_status_t st = dsm_compact_local_round(c, cls, &local);
        if (stats)
            *stats = local;
        return st;
    }
    dsm_compact_msg_t req = {.type = DSM_COMPACT_MSG_COMPACT_REQ, .cls = cls}, rep;
    uint8_t in[64];
    dsm_status_t st = dsm_compact_rpc(c, rank, DSM_AM_COMPACT_COMPACT, &req, DSM_COMPACT_MSG_COMPACT_REP, &rep, in, sizeof in);
    if (st == DSM_OK && stats)
        *stats = rep.stats;
    return st == DSM_OK ? (dsm_status_t)rep.status : st;
}

dsm_status_t dsm_compact_usage(dsm_compact_t *c, uint32_t rank, dsm_compact_usage_t *out)
{
    if (c == NULL || out == NULL)
        return DSM_ERR_INVALID;
    if (is_local(c, rank)) {
        dsm_compact_store_usage(c->store, out);
        return DSM_OK;
    }
    dsm_compact_msg_t req = {.type = DSM_COMPACT_MSG_USAGE_REQ}, rep;
    uint8_t in[DSM_COMPACT_MSG_HEADER_LEN + 8 * (8 + 2 * DSM_COMPACT_CLASSES)];
    dsm_status_t st = dsm_compact_rpc(c, rank, DSM_AM_COMPACT_REQ, &req, DSM_COMPACT_MSG_USAGE_REP, &rep, in, sizeof in);
    if (st == DSM_OK)
        *out = rep.usage;
    return st;
}

/* ---- one-sided reads ---------------------------------------------------------- */

/* rank's store bytes [offset, offset + len) where they are mapped here
 * (this node's own store, or a caught-up mirror): *at points at them and
 * DSM_OK; *at NULL and DSM_OK if they are reached through the fabric only;
 * DSM_ERR_BAD_ADDR out of the range. Validating in place is as safe as
 * validating a copy: the checks read the header once and checksum the
 * payload as it is copied out, so a change meanwhile is a mismatch. */
static dsm_status_t mapped(dsm_compact_t *c, uint32_t rank, uint64_t offset, size_t len, const uint8_t **at)
{
    *at = NULL;
    if (rank == dsm_node_rank(c->node)) {
        if (c->store == NULL || offset > dsm_compact_store_size(c->store) ||
            len > dsm_compact_store_size(c->store) - offset)
            return DSM_ERR_BAD_ADDR;
        *at = dsm_compact_store_base(c->store) + offset;
        return DSM_OK;
    }
    compact_peer_t *p = &c->peers[rank];
    uint8_t *m = __atomic_load_n(&p->mirror, __ATOMIC_ACQUIRE);
    if (m == NULL && __atomic_load_n(&p->view, __ATOMIC_ACQUIRE) && dsm_compact_mirror_catch_up(c, rank))
        m = __atomic_load_n(&p->mirror, __ATOMIC_ACQUIRE);
    if (m) {
        if (offset > p->size || len > p->size - offset)
            return DSM_ERR_BAD_ADDR;
        *at = m + offset;
    }
    return DSM_OK;
}

/* The bytes to validate: in place where mapped, else fetched into buf. */
static dsm_status_t source(dsm_compact_t *c, uint32_t rank, uint64_t offset, size_t len, uint8_t *buf,
                           const uint8_t **src)
{
    dsm_status_t st = mapped(c, rank, offset, len, src);
    if (st != DSM_OK || *src)
        return st;
    *src = buf;
    return dsm_fabric_get(c->fabric, rank, DSM_COMPACT_REGION, offset, buf, len);
}

dsm_status_t dsm_compact_fetch(dsm_compact_t *c, uint32_t rank, uint64_t offset, void *dst, size_t len)
{
    const uint8_t *src;
    dsm_status_t st = source(c, rank, offset, len, dst, &src);
    if (st == DSM_OK && src != dst)
        memcpy(dst, src, len);
    return st;
}

/* Backoff between retries of a locked or torn read: yield, then sleep
 * doubling from 1 us up to 1 ms (a preempted writer on a loaded machine). */
static void backoff(int attempt)
{
    if (attempt < 4) {
        sched_yield();
        return;
    }
    long ns = 1000L << (attempt - 4 < 10 ? attempt - 4 : 10);
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Checks a pointer against what the peer published; fills its slot size and block. */
static dsm_status_t locate(dsm_compact_t *c, const dsm_compact_ptr_t *ptr, dsm_compact_ptr_fields_t *f, uint32_t *slot,
                           uint32_t *bsize)
{
    dsm_status_t st = check_ptr(c, ptr, f);
    if (st != DSM_OK)
        return st;
    compact_peer_t *p = &c->peers[f->rank];
    uint64_t size;
    uint16_t tag;
    if (f->rank == dsm_node_rank(c->node)) {
        if (c->store == NULL)
            return DSM_ERR_BAD_ADDR;
        size = dsm_compact_store_size(c->store);
        *bsize = dsm_compact_store_block_size(c->store);
        tag = c->key_tag;
    } else {
        if (!__atomic_load_n(&p->serves, __ATOMIC_ACQUIRE))
            return DSM_ERR_BAD_ADDR;
        size = p->size;
        *bsize = p->block_size;
        tag = p->key_tag;
    }
    if (f->key_tag != tag) {
        DSM_WARN(LOG_MOD, "pointer with key tag %u refused: rank %u's store has another", f->key_tag, f->rank);
        return DSM_ERR_INVALID;
    }
    *slot = dsm_compact_class_slot(f->size_class);
    if (*slot == 0 || *slot > *bsize || f->id == 0 || f->offset >= size)
        return DSM_ERR_BAD_ADDR;
    uint64_t in_block = f->offset % *bsize;
    if (in_block % *slot || in_block + *slot > *bsize)
        return DSM_ERR_BAD_ADDR;
    return DSM_OK;
}

dsm_status_t dsm_compact_direct_read(dsm_compact_t *c, const dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len)
{
    dsm_compact_ptr_fields_t f;
    uint32_t slot, bsize;
    dsm_status_t st = locate(c, ptr, &f, &slot, &bsize);
    if (st != DSM_OK)
        return st;
    uint8_t copy[DSM_COMPACT_MAX_SLOT_COPY];
    uint32_t origin = (uint32_t)(f.offset / bsize);
    for (int attempt = 0; attempt < DIRECT_TRIES; attempt++) {
        const uint8_t *src;
        if ((st = source(c, f.rank, f.offset, slot, copy, &src)) != DSM_OK)
            return st;
        if (c->copy_hook && src != copy) {
            memcpy(copy, src, slot / 2);
            c->copy_hook(c->hook_ctx, ptr);
            memcpy(copy + slot / 2, src + slot / 2, slot - slot / 2);
            src = copy;
        }
        size_t n = 0;
        dsm_compact_hdr_t h;
        switch (dsm_compact_obj_check(src, slot, f.id, origin, buf, cap, &n, &h)) {
        case DSM_COMPACT_VALID:
            if (len)
                *len = n;
            return DSM_OK;
        case DSM_COMPACT_SMALL:
            if (len)
                *len = n;
            return DSM_ERR_TOO_BIG;
        case DSM_COMPACT_OTHER:
            return DSM_ERR_BAD_ADDR;
        case DSM_COMPACT_LOCKED:
            __atomic_fetch_add(&c->seen_locked, 1, __ATOMIC_RELAXED);
            if (h.lock & DSM_COMPACT_LOCK_COMPACT) {
                /* Moved away (this view shows the source until the remap
                 * notice lands) or being copied: waiting would outlast a
                 * notice's round trip; the caller's scan or RPC finds it. */
                __atomic_fetch_add(&c->seen_moving, 1, __ATOMIC_RELAXED);
                return DSM_ERR_BAD_ADDR;
            }
            backoff(attempt);
            break;
        default:
            __atomic_fetch_add(&c->seen_torn, 1, __ATOMIC_RELAXED);
            backoff(attempt);
        }
    }
    return DSM_ERR_TIMEOUT;
}

dsm_status_t dsm_compact_scan_read(dsm_compact_t *c, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len)
{
    dsm_compact_ptr_fields_t f;
    uint32_t slot, bsize;
    dsm_status_t st = locate(c, ptr, &f, &slot, &bsize);
    if (st != DSM_OK)
        return st;
    uint64_t start = f.offset - f.offset % bsize;
    uint32_t origin = (uint32_t)(f.offset / bsize);
    const uint8_t *block;
    uint8_t *copy = NULL;   /* only where the block is not mapped here */
    if ((st = mapped(c, f.rank, start, bsize, &block)) != DSM_OK)
        return st;
    if (block == NULL && (copy = malloc(bsize)) == NULL)
        return DSM_ERR_NOMEM;
    st = DSM_ERR_BAD_ADDR;
    for (int attempt = 0; attempt < SCAN_TRIES; attempt++) {
        dsm_status_t fs = copy ? dsm_fabric_get(c->fabric, f.rank, DSM_COMPACT_REGION, start, copy, bsize) : DSM_OK;
        if (fs != DSM_OK) {
            st = fs;
            break;
        }
        if (copy)
            block = copy;
        int busy = 0, moving = 0, found = -1;
        size_t n = 0;
        for (uint32_t i = 0; i + slot <= bsize && found < 0; i += slot) {
            dsm_compact_hdr_t h;
            dsm_compact_check_t r = dsm_compact_obj_check(block + i, slot, f.id, origin, buf, cap, &n, &h);
            if (r == DSM_COMPACT_VALID || r == DSM_COMPACT_SMALL) {
                found = (int)i;
                if (r == DSM_COMPACT_SMALL) {
                    if (len)
                        *len = n;
                    free(copy);
                    return DSM_ERR_TOO_BIG;
                }
                f.version = h.version;
            } else if (r != DSM_COMPACT_OTHER) {
                __atomic_fetch_add(r == DSM_COMPACT_LOCKED ? &c->seen_locked : &c->seen_torn, 1, __ATOMIC_RELAXED);
                busy = 1;
                moving |= r == DSM_COMPACT_LOCKED && (h.lock & DSM_COMPACT_LOCK_COMPACT);
            }
        }
        if (found >= 0) {
            f.offset = start + (uint64_t)found;
            *ptr = dsm_compact_ptr_make(&f);
            if (len)
                *len = n;
            free(copy);
            return DSM_OK;
        }
        if (!busy)
            break;   /* not in this block's view: ask the server */
        if (moving) {
            /* Under the compaction bit: moved away (this view shows the
             * source until the remap notice lands) or being copied. Backing
             * off would wait out the notice's round trip; the server knows
             * where the object is now and corrects the pointer. */
            __atomic_fetch_add(&c->seen_moving, 1, __ATOMIC_RELAXED);
            break;
        }
        backoff(attempt);
    }
    free(copy);
    if (st != DSM_ERR_BAD_ADDR)
        return st;
    /* The view may be stale (a peer that missed a notice) or the object
     * gone: the server's answer is authoritative and corrects the pointer. */
    __atomic_fetch_add(&c->scan_rpcs, 1, __ATOMIC_RELAXED);
    return dsm_compact_read(c, ptr, buf, cap, len);
}

dsm_status_t dsm_compact_get(dsm_compact_t *c, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len)
{
    dsm_status_t st = dsm_compact_direct_read(c, ptr, buf, cap, len);
    if (st == DSM_ERR_BAD_ADDR || st == DSM_ERR_TIMEOUT)
        st = dsm_compact_scan_read(c, ptr, buf, cap, len);
    return st;
}

/* ---- batches -------------------------------------------------------------- */

dsm_status_t dsm_compact_read_many(dsm_compact_t *c, dsm_compact_read_kind_t how, dsm_compact_ptr_t *ptrs, size_t n, void *buf,
                                size_t stride, size_t *lens, size_t *done, uint64_t *elapsed_ns)
{
    *done = 0;
    if (elapsed_ns) *elapsed_ns = 0;
    if (how < DSM_COMPACT_READ_RPC || how > DSM_COMPACT_READ_GET) return DSM_ERR_INVALID;
    dsm_status_t st = DSM_OK;
    uint8_t *out = buf;
    uint64_t t0 = dsm_now_ns();
    size_t i = 0;
    for (; i < n && st == DSM_OK; i++) {
        void *slot = out + i * stride;
        switch (how) {
        case DSM_COMPACT_READ_RPC: st = dsm_compact_read(c, &ptrs[i], slot, stride, &lens[i]); break;
        case DSM_COMPACT_READ_DIRECT: st = dsm_compact_direct_read(c, &ptrs[i], slot, stride, &lens[i]); break;
        case DSM_COMPACT_READ_SCAN: st = dsm_compact_scan_read(c, &ptrs[i], slot, stride, &lens[i]); break;
        case DSM_COMPACT_READ_GET: st = dsm_compact_get(c, &ptrs[i], slot, stride, &lens[i]); break;
        }
    }
    if (elapsed_ns) *elapsed_ns = dsm_now_ns() - t0;
    *done = st == DSM_OK ? i : i - 1;
    return st;
}
