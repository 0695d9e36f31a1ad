/* The sharded key-value store (apps layer, on delegation): one chained hash
 * table per shard, each shard entrusted to a trustee, every access a
 * delegated closure (§2.6.3). Items follow memcached's rules (flags, exptime,
 * cas unique ids, incr/decr on decimal text, append/prepend, flush_all with
 * delay) so that the memcached front end answers exactly like stock
 * memcached. A shard is only touched by its trustee: no locks, no atomics.
 *
 * Memory: with a limit (dsm_kv_set_memory) each shard keeps its items on an
 * LRU list, most recent first. The limit is one byte budget for the whole
 * store (as memcached's -m), counted in one shared atomic: a store evicts
 * from its own shard's tail while the total is over, and when its shard
 * had too little the front has the fullest shard evict (KV_EVICT), so no
 * shard keeps a minimum that grows with the shard count. A hit moves
 * the item to the front. */
#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/kv.h"
#include "apps/mc_proto.h"
#include "dsm/log.h"

typedef struct kv_item {
    struct kv_item *next;
    struct kv_item *lru_prev, *lru_next; /* prev = more recent */
    uint64_t hash;
    uint64_t cas;
    int64_t exp;     /* absolute expiry (unix s), 0 = never */
    int64_t time;    /* when stored, for delayed flush_all */
    uint32_t flags;
    uint32_t klen, vlen;
    uint8_t data[];  /* key then value */
} kv_item_t;

typedef struct kv_shard {
    kv_item_t **buckets;
    size_t nbuckets, count;
    uint64_t cas_seq;
    int64_t flush_at;   /* delayed flush_all: items stored at or before it die then */
    unsigned index, nshards;
    kv_item_t *lru_head, *lru_tail;
    size_t bytes;       /* item bytes held */
    size_t limit;       /* the store's byte budget, 0: no limit */
    _Atomic uint64_t *total; /* the store's item bytes, shared by its shards */
    _Atomic uint64_t approx_count; /* read by `stats` on other threads */
    _Atomic uint64_t approx_bytes;
    _Atomic uint64_t evictions;
} kv_shard_t;

struct dsm_kv {
    dsm_deleg_rt_t *rt;
    unsigned nshards;
    kv_shard_t *shards;
    dsm_deleg_trust_t *trusts;
    size_t limit;
    _Atomic uint64_t bytes; /* item bytes held by every shard */
};

#define REL_MAX 2592000 /* memcached: exptimes above 30 days are absolute */

/* Wall-clock seconds: memcached expiry times above 30 days are unix times. */
static int64_t unix_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return ts.tv_sec;
}

static uint64_t hash_key(const void *key, size_t len)
{
    /* FNV-1a, then a finaliser so low bits are usable for buckets and shards */
    const uint8_t *p = key;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* The trustee's prefetch hook (hinted requests; the hint is the key's hash): the
 * bucket, then the first item of its chain. Loads a bucket pointer only in
 * pass 1, when pass 0 has had the batch's other misses to hide behind. */
static void shard_prefetch(void *obj, uint64_t h, int pass)
{
    kv_shard_t *s = obj;
    kv_item_t **b = &s->buckets[h & (s->nbuckets - 1)];
    if (pass == 0) __builtin_prefetch(b, 0, 3);
    else if (*b) __builtin_prefetch(*b, 1, 3);
}

static unsigned shard_of_hash(const dsm_kv_t *kv, uint64_t h) { return (unsigned)((h >> 40) % kv->nshards); }

unsigned dsm_kv_shard_of(const dsm_kv_t *kv, const void *key, size_t klen)
{
    return shard_of_hash(kv, hash_key(key, klen));
}

unsigned dsm_kv_shards(const dsm_kv_t *kv) { return kv->nshards; }

void dsm_kv_set_memory(dsm_kv_t *kv, size_t total)
{
    kv->limit = total;
    for (unsigned i = 0; i < kv->nshards; i++) kv->shards[i].limit = total;
}

static void kv_mc_fn(dsm_deleg_ret_t *ret, void *prop, const void *envp, const void *args, size_t args_len);

int dsm_kv_over_limit(const dsm_kv_t *kv)
{
    if (!kv->limit || atomic_load_explicit(&kv->bytes, memory_order_relaxed) <= kv->limit) return -1;
    unsigned best = 0;
    uint64_t most = 0;
    for (unsigned i = 0; i < kv->nshards; i++) {
        uint64_t b = atomic_load_explicit(&kv->shards[i].approx_bytes, memory_order_relaxed);
        if (b > most) {
            most = b;
            best = i;
        }
    }
    return most ? (int)best : -1;
}

dsm_status_t dsm_kv_evict_then(dsm_kv_t *kv, unsigned shard, dsm_deleg_then_fn then, void *cb_arg)
{
    kv_env_t e = {.op = KV_EVICT};
    return dsm_deleg_apply_then(&kv->trusts[shard], kv_mc_fn, &e, sizeof e, NULL, 0, DSM_DELEG_VARSIZE, then,
                                cb_arg);
}

void dsm_kv_memory_stats(const dsm_kv_t *kv, uint64_t *bytes, uint64_t *evictions)
{
    uint64_t b = 0, e = 0;
    for (unsigned i = 0; i < kv->nshards; i++) {
        b += atomic_load_explicit(&kv->shards[i].approx_bytes, memory_order_relaxed);
        e += atomic_load_explicit(&kv->shards[i].evictions, memory_order_relaxed);
    }
    if (bytes) *bytes = b;
    if (evictions) *evictions = e;
}

uint64_t dsm_kv_approx_items(const dsm_kv_t *kv)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < kv->nshards; i++) n += atomic_load_explicit(&kv->shards[i].approx_count, memory_order_relaxed);
    return n;
}

static size_t item_bytes(const kv_item_t *it) { return sizeof *it + it->klen + it->vlen; }

static void lru_unlink(kv_shard_t *s, kv_item_t *it)
{
    if (it->lru_prev) it->lru_prev->lru_next = it->lru_next;
    else s->lru_head = it->lru_next;
    if (it->lru_next) it->lru_next->lru_prev = it->lru_prev;
    else s->lru_tail = it->lru_prev;
    it->lru_prev = it->lru_next = NULL;
}

static void lru_push(kv_shard_t *s, kv_item_t *it)
{
    it->lru_prev = NULL;
    it->lru_next = s->lru_head;
    if (s->lru_head) s->lru_head->lru_prev = it;
    s->lru_head = it;
    if (!s->lru_tail) s->lru_tail = it;
}

static void lru_bump(kv_shard_t *s, kv_item_t *it)
{
    if (s->lru_head == it) return;
    lru_unlink(s, it);
    lru_push(s, it);
}

/* An item enters or leaves the shard's accounting (not its hash chain). */
static void item_held(kv_shard_t *s, kv_item_t *it)
{
    lru_push(s, it);
    s->bytes += item_bytes(it);
    atomic_store_explicit(&s->approx_bytes, s->bytes, memory_order_relaxed);
    if (s->limit) atomic_fetch_add_explicit(s->total, item_bytes(it), memory_order_relaxed);
}

static void item_drop(kv_shard_t *s, kv_item_t *it)
{
    lru_unlink(s, it);
    s->bytes -= item_bytes(it);
    atomic_store_explicit(&s->approx_bytes, s->bytes, memory_order_relaxed);
    if (s->limit) atomic_fetch_sub_explicit(s->total, item_bytes(it), memory_order_relaxed);
    free(it);
}

static void shard_free_items(kv_shard_t *s)
{
    for (size_t b = 0; b < s->nbuckets; b++) {
        kv_item_t *it = s->buckets[b];
        while (it) {
            kv_item_t *n = it->next;
            free(it);
            it = n;
        }
        s->buckets[b] = NULL;
    }
    if (s->limit) atomic_fetch_sub_explicit(s->total, s->bytes, memory_order_relaxed);
    s->count = 0;
    s->bytes = 0;
    s->lru_head = s->lru_tail = NULL;
    atomic_store_explicit(&s->approx_count, 0, memory_order_relaxed);
    atomic_store_explicit(&s->approx_bytes, 0, memory_order_relaxed);
}

static void shard_dtor(void *p)
{
    kv_shard_t *s = p;
    s->limit = 0; /* the store, and its byte count, may already be gone */
    shard_free_items(s);
    free(s->buckets);
}

dsm_status_t dsm_kv_create(dsm_deleg_rt_t *rt, unsigned shards, unsigned first, unsigned count,
                           dsm_kv_t **out)
{
    if (!rt || !out || shards == 0 || count == 0 || first + count > dsm_deleg_rt_threads(rt)) return DSM_ERR_INVALID;
    dsm_kv_t *kv = calloc(1, sizeof *kv);
    if (!kv) return DSM_ERR_NOMEM;
    kv->rt = rt;
    kv->nshards = shards;
    kv->shards = calloc(shards, sizeof *kv->shards);
    kv->trusts = calloc(shards, sizeof *kv->trusts);
    if (!kv->shards || !kv->trusts) goto fail;
    for (unsigned i = 0; i < shards; i++) {
        kv_shard_t *s = &kv->shards[i];
        s->nbuckets = 1024;
        s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
        s->index = i;
        s->nshards = shards;
        s->total = &kv->bytes;
        if (!s->buckets) goto fail;
        if (dsm_deleg_entrust(rt, first + i % count, s, shard_dtor, 0, &kv->trusts[i]) != DSM_OK) goto fail;
        dsm_deleg_trust_set_prefetch(&kv->trusts[i], shard_prefetch);
    }
    *out = kv;
    return DSM_OK;
fail:
    if (kv->shards)
        for (unsigned i = 0; i < shards; i++) free(kv->shards[i].buckets);
    free(kv->shards);
    free(kv->trusts);
    free(kv);
    return DSM_ERR_NOMEM;
}

void dsm_kv_destroy(dsm_kv_t *kv)
{
    if (!kv) return;
    for (unsigned i = 0; i < kv->nshards; i++) dsm_deleg_trust_drop(&kv->trusts[i]);
    /* the shard memory itself stays until every drop has been applied */
    if (dsm_deleg_self() < 0) free(kv->shards);
    free(kv->trusts);
    free(kv);
}

/* ---- shard operations (run on the trustee) ---- */

static int live(const kv_shard_t *s, const kv_item_t *it, int64_t now)
{
    if (it->exp != 0 && it->exp <= now) return 0;
    if (s->flush_at != 0 && s->flush_at <= now && it->time <= s->flush_at) return 0;
    return 1;
}

static kv_item_t **find_slot(kv_shard_t *s, uint64_t h, const void *key, size_t klen)
{
    kv_item_t **pp = &s->buckets[h & (s->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->data, key, klen) == 0) return pp;
    return pp;
}

/* Find a live item; expired or flushed ones are unlinked on the way. */
static kv_item_t **lookup(kv_shard_t *s, uint64_t h, const void *key, size_t klen, int64_t now)
{
    kv_item_t **pp = find_slot(s, h, key, klen);
    if (*pp && !live(s, *pp, now)) {
        kv_item_t *dead = *pp;
        *pp = dead->next;
        item_drop(s, dead);
        s->count--;
        atomic_store_explicit(&s->approx_count, s->count, memory_order_relaxed);
    }
    return pp;
}

static void grow(kv_shard_t *s)
{
    size_t n = s->nbuckets * 2;
    kv_item_t **b = calloc(n, sizeof *b);
    if (!b) return; /* keep the longer chains */
    for (size_t i = 0; i < s->nbuckets; i++) {
        kv_item_t *it = s->buckets[i];
        while (it) {
            kv_item_t *next = it->next;
            it->next = b[it->hash & (n - 1)];
            b[it->hash & (n - 1)] = it;
            it = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

static uint64_t next_cas(kv_shard_t *s)
{
    /* memcached's ids are one global sequence; with one shard this is it */
    s->cas_seq++;
    return (s->cas_seq - 1) * s->nshards + s->index + 1;
}

static int64_t abs_exptime(int32_t e, int64_t now)
{
    if (e == 0) return 0;
    if (e < 0) return 1; /* already expired, as memcached does */
    if (e > REL_MAX) return e <= now ? 1 : e;
    return now + e;
}

static kv_item_t *item_new(uint64_t h, const void *key, size_t klen, const void *val, size_t vlen)
{
    kv_item_t *it = malloc(sizeof *it + klen + vlen);
    if (!it) return NULL;
    memset(it, 0, sizeof *it);
    it->hash = h;
    it->klen = (uint32_t)klen;
    it->vlen = (uint32_t)vlen;
    memcpy(it->data, key, klen);
    if (vlen) memcpy(it->data + klen, val, vlen);
    return it;
}

/* While the store holds more than its limit, evict this shard's least
 * recently used items, never `keep`. */
static void evict(kv_shard_t *s, const kv_item_t *keep)
{
    while (s->limit && atomic_load_explicit(s->total, memory_order_relaxed) > s->limit && s->lru_tail &&
           s->lru_tail != keep) {
        kv_item_t *victim = s->lru_tail;
        kv_item_t **pp = find_slot(s, victim->hash, victim->data, victim->klen);
        if (*pp != victim) break; /* cannot happen: every held item is in its chain */
        *pp = victim->next;
        item_drop(s, victim);
        s->count--;
        atomic_store_explicit(&s->approx_count, s->count, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->evictions, 1, memory_order_relaxed);
    }
}

/* Replace *pp (may be NULL) by it, with a fresh cas id. */
static void link_item(kv_shard_t *s, kv_item_t **pp, kv_item_t *it, int64_t now)
{
    it->cas = next_cas(s);
    it->time = now;
    if (*pp) {
        it->next = (*pp)->next;
        item_drop(s, *pp);
        *pp = it;
    } else {
        it->next = NULL;
        *pp = it;
        s->count++;
        atomic_store_explicit(&s->approx_count, s->count, memory_order_relaxed);
        if (s->count > s->nbuckets * 2) grow(s);
    }
    item_held(s, it);
    evict(s, it);
}

#define RET(str) dsm_deleg_return(ret, str "\r\n", sizeof(str "\r\n") - 1)

/* memcached's safe_strtoull on item data: digits with optional leading
 * blanks, ending at a blank or the end, no minus sign. */
static int parse_u64(const uint8_t *p, size_t n, uint64_t *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, p, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno == ERANGE || end == buf) return 0;
    if (*end != 0 && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n' && *end != '\v' && *end != '\f')
        return 0;
    if ((long long)v < 0 && memchr(buf, '-', (size_t)(end - buf))) return 0;
    *out = v;
    return 1;
}

/* v in decimal at p (20 bytes at most); returns its length. */
static size_t put_dec(char *p, uint64_t v)
{
    char rev[20];
    size_t n = 0;
    do
        rev[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    for (size_t i = 0; i < n; i++) p[i] = rev[n - 1 - i];
    return n;
}

/* "VALUE key flags bytes [cas]\r\n", the value, "\r\n": written straight
 * into the answer, with no format call, as every hit makes one. */
static void do_get(dsm_deleg_ret_t *ret, kv_shard_t *s, kv_item_t *it, int with_cas)
{
    (void)s;
    char flags[20], bytes[20], cas[20];
    size_t nf = put_dec(flags, it->flags), nb = put_dec(bytes, it->vlen), nc = with_cas ? put_dec(cas, it->cas) : 0;
    size_t head = 6 + it->klen + 1 + nf + 1 + nb + (with_cas ? 1 + nc : 0) + 2;
    uint8_t *out = dsm_deleg_return_reserve(ret, head + it->vlen + 2);
    if (!out) return;
    uint8_t *p = out;
    memcpy(p, "VALUE ", 6);
    p += 6;
    memcpy(p, it->data, it->klen);
    p += it->klen;
    *p++ = ' ';
    memcpy(p, flags, nf);
    p += nf;
    *p++ = ' ';
    memcpy(p, bytes, nb);
    p += nb;
    if (with_cas) {
        *p++ = ' ';
        memcpy(p, cas, nc);
        p += nc;
    }
    memcpy(p, "\r\n", 2);
    p += 2;
    memcpy(p, it->data + it->klen, it->vlen);
    p += it->vlen;
    memcpy(p, "\r\n", 2);
}

/* ---- meta commands ---- */

/* The return flags asked for, in their order; without an item only k and O. */
static size_t meta_flags(char *out, size_t cap, const mc_meta_t *m, const kv_item_t *it, const uint8_t *key,
                         size_t klen, int64_t now)
{
    size_t n = 0;
    for (unsigned i = 0; i < m->norder && n < cap; i++) {
        char f = m->order[i];
        int w = 0;
        if (f == 'k') w = snprintf(out + n, cap - n, " k%.*s", (int)klen, (const char *)key);
        else if (f == 'O') w = snprintf(out + n, cap - n, " O%.*s", (int)m->olen, m->opaque);
        else if (!it) continue;
        else if (f == 's') w = snprintf(out + n, cap - n, " s%" PRIu32, it->vlen);
        else if (f == 'f') w = snprintf(out + n, cap - n, " f%" PRIu32, it->flags);
        else if (f == 'c') w = snprintf(out + n, cap - n, " c%" PRIu64, it->cas);
        else if (f == 't') w = snprintf(out + n, cap - n, " t%lld", it->exp == 0 || it->exp <= now ? -1ll
                                                                   : (long long)(it->exp - now));
        if (w > 0) n += (size_t)w;
    }
    return n < cap ? n : cap - 1;
}

/* A status line (HD, NF, EN, ...) with the flags; nothing when quiet hides it. */
static void meta_line(dsm_deleg_ret_t *ret, const char *code, const mc_meta_t *m, const kv_item_t *it,
                      const uint8_t *key, size_t klen, int64_t now)
{
    char line[400];
    size_t n = (size_t)snprintf(line, sizeof line, "%s", code);
    n += meta_flags(line + n, sizeof line - n - 2, m, it, key, klen, now);
    memcpy(line + n, "\r\n", 2);
    dsm_deleg_return(ret, line, n + 2);
}

/* VA <len> <flags>, the data, \r\n. */
static void meta_value(dsm_deleg_ret_t *ret, const mc_meta_t *m, const kv_item_t *it, const uint8_t *data,
                       size_t dlen, const uint8_t *key, size_t klen, int64_t now)
{
    char head[400];
    size_t n = (size_t)snprintf(head, sizeof head, "VA %zu", dlen);
    n += meta_flags(head + n, sizeof head - n - 2, m, it, key, klen, now);
    memcpy(head + n, "\r\n", 2);
    n += 2;
    uint8_t *out = dsm_deleg_return_reserve(ret, n + dlen + 2);
    if (!out) return;
    memcpy(out, head, n);
    memcpy(out + n, data, dlen);
    memcpy(out + n + dlen, "\r\n", 2);
}

static void link_item(kv_shard_t *s, kv_item_t **pp, kv_item_t *it, int64_t now);

static void meta_fn(dsm_deleg_ret_t *ret, kv_shard_t *s, const kv_env_t *e, const mc_meta_t *m,
                    const uint8_t *key, const uint8_t *val, size_t vlen, int64_t now)
{
    uint64_t h = e->hash;
    kv_item_t **pp = lookup(s, h, key, e->klen, now);
    kv_item_t *old = *pp;
    switch (e->op) {
    case KV_MG:
        if (!old) {
            if (!m->quiet) RET("EN");
            return;
        }
        if (m->has_ttl) old->exp = abs_exptime(m->ttl, now);
        lru_bump(s, old);
        if (m->value) meta_value(ret, m, old, old->data + old->klen, old->vlen, key, e->klen, now);
        else meta_line(ret, "HD", m, old, key, e->klen, now);
        return;
    case KV_MD:
        if (!old) { meta_line(ret, "NF", m, NULL, key, e->klen, now); return; }
        if (m->has_cas && old->cas != m->cas) { meta_line(ret, "EX", m, old, key, e->klen, now); return; }
        *pp = old->next;
        item_drop(s, old);
        s->count--;
        atomic_store_explicit(&s->approx_count, s->count, memory_order_relaxed);
        if (!m->quiet) meta_line(ret, "HD", m, NULL, key, e->klen, now);
        return;
    case KV_MS: {
        char mode = m->mode ? (char)m->mode : 'S';
        if (m->has_cas && !old) { meta_line(ret, "NF", m, NULL, key, e->klen, now); return; }
        if (m->has_cas && old->cas != m->cas) { meta_line(ret, "EX", m, old, key, e->klen, now); return; }
        if ((mode == 'E' && old) || ((mode == 'R' || mode == 'A' || mode == 'P') && !old))
            { meta_line(ret, "NS", m, old, key, e->klen, now); return; }
        kv_item_t *it;
        if (mode == 'A' || mode == 'P') {
            uint8_t *joined = malloc(old->vlen + vlen + 1);
            if (!joined) { RET("SERVER_ERROR out of memory storing object"); return; }
            const uint8_t *a = mode == 'A' ? old->data + old->klen : val, *b = mode == 'A' ? val : old->data + old->klen;
            size_t alen = mode == 'A' ? old->vlen : vlen, blen = mode == 'A' ? vlen : old->vlen;
            memcpy(joined, a, alen);
            memcpy(joined + alen, b, blen);
            it = item_new(h, key, e->klen, joined, alen + blen);
            free(joined);
            if (it) {
                it->flags = old->flags;
                it->exp = old->exp;
            }
        } else {
            it = item_new(h, key, e->klen, val, vlen);
            if (it) {
                it->flags = m->flags;
                it->exp = abs_exptime(m->has_ttl ? m->ttl : 0, now);
            }
        }
        if (!it) { RET("SERVER_ERROR out of memory storing object"); return; }
        link_item(s, pp, it, now);
        if (!m->quiet) meta_line(ret, "HD", m, it, key, e->klen, now);
        return;
    }
    case KV_MA: {
        char buf[32];
        int n;
        if (!old) {
            if (!m->has_vivify) { meta_line(ret, "NF", m, NULL, key, e->klen, now); return; }
            n = snprintf(buf, sizeof buf, "%" PRIu64, m->initial);
            kv_item_t *it = item_new(h, key, e->klen, buf, (size_t)n);
            if (!it) { RET("SERVER_ERROR out of memory storing object"); return; }
            it->exp = abs_exptime(m->vivify_ttl, now);
            link_item(s, pp, it, now);
            old = it;
        } else {
            if (m->has_cas && old->cas != m->cas) { meta_line(ret, "EX", m, old, key, e->klen, now); return; }
            uint64_t v;
            if (!parse_u64(old->data + old->klen, old->vlen, &v)) {
                RET("CLIENT_ERROR cannot increment or decrement non-numeric value");
                return;
            }
            if (m->mode == 'D') v = m->delta > v ? 0 : v - m->delta;
            else v += m->delta;
            n = snprintf(buf, sizeof buf, "%" PRIu64, v);
            if ((size_t)n <= old->vlen) {
                memcpy(old->data + old->klen, buf, (size_t)n);
                memset(old->data + old->klen + n, ' ', old->vlen - (size_t)n);
                old->cas = next_cas(s);
                lru_bump(s, old);
            } else {
                kv_item_t *it = item_new(h, key, e->klen, buf, (size_t)n);
                if (!it) { RET("SERVER_ERROR out of memory storing object"); return; }
                it->flags = old->flags;
                it->exp = old->exp;
                link_item(s, pp, it, now);
                old = it;
            }
        }
        if (m->has_ttl) old->exp = abs_exptime(m->ttl, now);
        if (m->value) meta_value(ret, m, old, (const uint8_t *)buf, (size_t)n, key, e->klen, now);
        else if (!m->quiet) meta_line(ret, "HD", m, old, key, e->klen, now);
        return;
    }
    default:
        return;
    }
}

static void kv_mc_fn(dsm_deleg_ret_t *ret, void *prop, const void *envp, const void *args, size_t args_len)
{
    kv_shard_t *s = prop;
    kv_env_t e;
    memcpy(&e, envp, sizeof e);
    const uint8_t *key = args, *val = (const uint8_t *)args + e.klen;
    size_t vlen = args_len - e.klen;
    int64_t now = unix_now_s();
    if (e.op == KV_EVICT) {
        evict(s, NULL); /* a store on a shard that had too little to free */
        return;
    }
    if (e.op >= KV_MG) {
        mc_meta_t m;
        memcpy(&m, val, sizeof m);
        meta_fn(ret, s, &e, &m, key, val + sizeof m, vlen - sizeof m, now);
        return;
    }
    if (e.op == KV_FLUSH) {
        if (e.exptime > 0) {
            s->flush_at = abs_exptime(e.exptime, now) - 1;
        } else {
            shard_free_items(s);
            s->flush_at = 0;
            next_cas(s); /* memcached takes a cas id to mark the flush */
        }
        RET("OK");
        return;
    }
    uint64_t h = e.hash;
    kv_item_t **pp = lookup(s, h, key, e.klen, now);
    kv_item_t *old = *pp;
    switch (e.op) {
    case KV_GET:
    case KV_GETS:
        if (old) {
            lru_bump(s, old);
            do_get(ret, s, old, e.op == KV_GETS);
        }
        return;
    case KV_GAT:
    case KV_GATS:
        if (old) {
            old->exp = abs_exptime(e.exptime, now);
            lru_bump(s, old);
            do_get(ret, s, old, e.op == KV_GATS);
        }
        return;
    case KV_TOUCH:
        if (!old) {
            RET("NOT_FOUND");
            return;
        }
        old->exp = abs_exptime(e.exptime, now);
        lru_bump(s, old);
        RET("TOUCHED");
        return;
    case KV_DELETE:
        if (!old) {
            RET("NOT_FOUND");
            return;
        }
        *pp = old->next;
        item_drop(s, old);
        s->count--;
        atomic_store_explicit(&s->approx_count, s->count, memory_order_relaxed);
        RET("DELETED");
        return;
    case KV_INCR:
    case KV_DECR: {
        uint64_t v;
        if (!old) {
            RET("NOT_FOUND");
            return;
        }
        if (!parse_u64(old->data + old->klen, old->vlen, &v)) {
            RET("CLIENT_ERROR cannot increment or decrement non-numeric value");
            return;
        }
        if (e.op == KV_INCR) v += e.num;
        else v = e.num > v ? 0 : v - e.num;
        char buf[32];
        int n = snprintf(buf, sizeof buf, "%" PRIu64, v);
        if ((size_t)n <= old->vlen) {
            /* in place, blank-padded like memcached */
            memcpy(old->data + old->klen, buf, (size_t)n);
            memset(old->data + old->klen + n, ' ', old->vlen - (size_t)n);
            old->cas = next_cas(s);
            lru_bump(s, old);
        } else {
            kv_item_t *it = item_new(h, key, e.klen, buf, (size_t)n);
            if (!it) {
                RET("SERVER_ERROR out of memory");
                return;
            }
            it->flags = old->flags;
            it->exp = old->exp;
            link_item(s, pp, it, now);
        }
        memcpy(buf + n, "\r\n", 2);
        dsm_deleg_return(ret, buf, (size_t)n + 2);
        return;
    }
    default:
        break;
    }
    /* storage commands */
    if ((e.op == KV_ADD && old) ) {
        RET("NOT_STORED");
        return;
    }
    if ((e.op == KV_REPLACE || e.op == KV_APPEND || e.op == KV_PREPEND) && !old) {
        RET("NOT_STORED");
        return;
    }
    if (e.op == KV_CAS) {
        if (!old) {
            RET("NOT_FOUND");
            return;
        }
        if (old->cas != e.num) {
            RET("EXISTS");
            return;
        }
    }
    kv_item_t *it;
    if (e.op == KV_APPEND || e.op == KV_PREPEND) {
        it = malloc(sizeof *it + e.klen + old->vlen + vlen);
        if (it) {
            memset(it, 0, sizeof *it);
            it->hash = h;
            it->klen = e.klen;
            it->vlen = (uint32_t)(old->vlen + vlen);
            memcpy(it->data, key, e.klen);
            uint8_t *d = it->data + e.klen;
            if (e.op == KV_APPEND) {
                memcpy(d, old->data + old->klen, old->vlen);
                memcpy(d + old->vlen, val, vlen);
            } else {
                memcpy(d, val, vlen);
                memcpy(d + vlen, old->data + old->klen, old->vlen);
            }
            it->flags = old->flags; /* append keeps the old flags and exptime */
            it->exp = old->exp;
        }
    } else {
        it = item_new(h, key, e.klen, val, vlen);
        if (it) {
            it->flags = e.flags;
            it->exp = abs_exptime(e.exptime, now);
        }
    }
    if (!it) {
        RET("SERVER_ERROR out of memory storing object");
        return;
    }
    link_item(s, pp, it, now);
    RET("STORED");
}

dsm_status_t dsm_kv_mc_then(dsm_kv_t *kv, const kv_env_t *env, const void *key, const void *meta,
                            const void *val, size_t vlen, dsm_deleg_then_fn then, void *cb_arg)
{
    if (env->op == KV_FLUSH) {
        for (unsigned i = 0; i < kv->nshards; i++) {
            dsm_status_t st = dsm_deleg_apply_then(&kv->trusts[i], kv_mc_fn, env, sizeof *env, NULL, 0,
                                                   DSM_DELEG_VARSIZE, then, cb_arg);
            if (st != DSM_OK) return st;
        }
        return DSM_OK;
    }
    kv_env_t e = *env;
    e.hash = hash_key(key, env->klen);
    unsigned s = shard_of_hash(kv, e.hash);
    /* key, meta flags and value travel as one argument blob */
    size_t mlen = meta ? sizeof(mc_meta_t) : 0;
    size_t n = env->klen + mlen + vlen;
    uint8_t small[512];
    uint8_t *buf = n <= sizeof small ? small : malloc(n);
    if (!buf) return DSM_ERR_NOMEM;
    memcpy(buf, key, env->klen);
    if (mlen) memcpy(buf + env->klen, meta, mlen);
    if (vlen) memcpy(buf + env->klen + mlen, val, vlen);
    dsm_status_t st = dsm_deleg_apply_then_hinted(&kv->trusts[s], kv_mc_fn, &e, sizeof e, buf, n, DSM_DELEG_VARSIZE,
                                                  then, cb_arg);
    if (buf != small) free(buf);
    return st;
}

/* ---- plain binary get/put (benchmark, tests) ---- */

/* A plain op's environment: the key's hash first (the prefetch hint, and the
 * trustee need not hash again), then the key length (puts). */
typedef struct kv_plain_env {
    uint64_t hash;
    uint32_t klen;
    uint32_t pad;
} kv_plain_env_t;

static void kv_put_fn(dsm_deleg_ret_t *ret, void *prop, const void *envp, const void *args, size_t args_len)
{
    (void)ret;
    kv_shard_t *s = prop;
    kv_plain_env_t e;
    memcpy(&e, envp, sizeof e);
    const uint8_t *key = args;
    kv_item_t **pp = find_slot(s, e.hash, key, e.klen);
    size_t vlen = args_len - e.klen;
    if (*pp && (*pp)->vlen == vlen) {
        memcpy((*pp)->data + e.klen, key + e.klen, vlen); /* same size: overwrite in place */
        (*pp)->cas = next_cas(s);
        lru_bump(s, *pp);
        return;
    }
    kv_item_t *it = item_new(e.hash, key, e.klen, key + e.klen, vlen);
    if (it) link_item(s, pp, it, 0);
}

static void kv_get_fn(dsm_deleg_ret_t *ret, void *prop, const void *envp, const void *args, size_t args_len)
{
    kv_shard_t *s = prop;
    uint64_t h;
    memcpy(&h, envp, 8);
    kv_item_t **pp = find_slot(s, h, args, args_len);
    kv_item_t *it = *pp;
    uint8_t *out = dsm_deleg_return_reserve(ret, it ? 1 + it->vlen : 1);
    if (!out) return;
    out[0] = it != NULL;
    if (it) memcpy(out + 1, it->data + it->klen, it->vlen);
}

/* A put's argument bytes: key then value, in `small` when they fit. */
static uint8_t *kv_pack(const void *key, size_t klen, const void *val, size_t vlen, uint8_t *small, size_t cap)
{
    uint8_t *buf = klen + vlen <= cap ? small : malloc(klen + vlen);
    if (buf) {
        memcpy(buf, key, klen);
        memcpy(buf + klen, val, vlen);
    }
    return buf;
}

/* One put, as a blocking apply or as apply_then (then may be NULL). */
static dsm_status_t kv_put_call(dsm_kv_t *kv, const void *key, size_t klen, const void *val, size_t vlen,
                                int blocking, dsm_deleg_then_fn then, void *cb_arg)
{
    uint8_t small[256];
    size_t n = klen + vlen;
    uint8_t *buf = kv_pack(key, klen, val, vlen, small, sizeof small);
    if (!buf) return DSM_ERR_NOMEM;
    kv_plain_env_t e = {.hash = hash_key(key, klen), .klen = (uint32_t)klen};
    dsm_deleg_trust_t *t = &kv->trusts[shard_of_hash(kv, e.hash)];
    dsm_status_t st = blocking ? dsm_deleg_apply_with(t, kv_put_fn, &e, sizeof e, buf, n, NULL, 0, NULL)
                               : dsm_deleg_apply_then_hinted(t, kv_put_fn, &e, sizeof e, buf, n, 0, then, cb_arg);
    if (buf != small) free(buf);
    return st;
}

dsm_status_t dsm_kv_put_then(dsm_kv_t *kv, const void *key, size_t klen, const void *val, size_t vlen,
                             dsm_deleg_then_fn then, void *cb_arg)
{
    return kv_put_call(kv, key, klen, val, vlen, 0, then, cb_arg);
}

dsm_status_t dsm_kv_get_then(dsm_kv_t *kv, const void *key, size_t klen, dsm_deleg_then_fn then,
                             void *cb_arg)
{
    uint64_t h = hash_key(key, klen);
    return dsm_deleg_apply_then_hinted(&kv->trusts[shard_of_hash(kv, h)], kv_get_fn, &h, sizeof h, key, klen,
                                       DSM_DELEG_VARSIZE, then, cb_arg);
}

dsm_status_t dsm_kv_put(dsm_kv_t *kv, const void *key, size_t klen, const void *val, size_t vlen)
{
    return kv_put_call(kv, key, klen, val, vlen, 1, NULL, NULL);
}

int dsm_kv_get(dsm_kv_t *kv, const void *key, size_t klen, void *val, size_t *vlen)
{
    uint8_t small[257];
    size_t cap = *vlen + 1, len = 0;
    uint8_t *buf = cap <= sizeof small ? small : malloc(cap);
    if (!buf) return DSM_ERR_NOMEM;
    uint64_t h = hash_key(key, klen);
    dsm_status_t st = dsm_deleg_apply_with(&kv->trusts[shard_of_hash(kv, h)], kv_get_fn, &h, sizeof h, key, klen,
                                           buf, cap, &len);
    int found = 0;
    if (st == DSM_OK && len >= 1 && buf[0]) {
        found = 1;
        size_t v = len - 1;
        memcpy(val, buf + 1, v < *vlen ? v : *vlen);
        *vlen = v;
    }
    if (buf != small) free(buf);
    return st != DSM_OK ? (int)st : found;
}
