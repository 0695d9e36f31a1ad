/* The read cache (see cache.h): a chained hash map under one mutex, with a
 * FIFO of entries for eviction and a condition variable for readers that
 * find an entry still being fetched. */
#include "own/cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { NBUCKETS = 4096 };

typedef struct entry {
    uint64_t key;
    uint8_t *copy;
    size_t len;
    long count;
    int pending;              /* being fetched by the thread that inserted it */
    struct entry *chain;      /* bucket chain */
    struct entry *prev, *next;/* insertion order, for eviction */
} entry_t;

struct own_cache {
    pthread_mutex_t lock;
    pthread_cond_t fetched;
    entry_t *buckets[NBUCKETS];
    entry_t *oldest, *newest;
    uint64_t budget, bytes, entries, evictions;
};

static unsigned bucket(uint64_t key)
{
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 32;
    return (unsigned)(key & (NBUCKETS - 1));
}

dsm_status_t own_cache_create(uint64_t budget, own_cache_t **out)
{
    own_cache_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSM_ERR_NOMEM;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->fetched, NULL);
    c->budget = budget;
    *out = c;
    return DSM_OK;
}

void own_cache_destroy(own_cache_t *c)
{
    if (c == NULL)
        return;
    for (entry_t *e = c->oldest, *n; e; e = n) {
        n = e->next;
        free(e->copy);
        free(e);
    }
    pthread_cond_destroy(&c->fetched);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void own_cache_set_budget(own_cache_t *c, uint64_t budget)
{
    pthread_mutex_lock(&c->lock);
    c->budget = budget;
    pthread_mutex_unlock(&c->lock);
}

static entry_t *lookup(own_cache_t *c, uint64_t key)
{
    for (entry_t *e = c->buckets[bucket(key)]; e; e = e->chain)
        if (e->key == key)
            return e;
    return NULL;
}

static void unlink_entry(own_cache_t *c, entry_t *e)
{
    entry_t **pp = &c->buckets[bucket(e->key)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    if (e->prev) e->prev->next = e->next; else c->oldest = e->next;
    if (e->next) e->next->prev = e->prev; else c->newest = e->prev;
    c->bytes -= e->len;
    c->entries--;
}

/* Under the lock: evict zero-count entries, oldest first, down to target. */
static uint64_t evict_locked(own_cache_t *c, uint64_t target)
{
    uint64_t n = 0;
    for (entry_t *e = c->oldest, *next; e && c->bytes > target; e = next) {
        next = e->next;
        if (e->count != 0 || e->pending)
            continue;
        unlink_entry(c, e);
        free(e->copy);
        free(e);
        n++;
    }
    c->evictions += n;
    return n;
}

dsm_status_t own_cache_acquire(own_cache_t *c, uint64_t key, size_t len, own_fetch_fn fetch, void *ctx,
                               const uint8_t **copy, int *hit)
{
    *copy = NULL;
    *hit = 0;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        entry_t *e = lookup(c, key);
        if (e == NULL)
            break;
        if (e->pending) {
            /* Another thread is fetching this key: wait for it (no fetch is
             * made under the lock; the fetcher broadcasts either way). */
            pthread_cond_wait(&c->fetched, &c->lock);
            continue;
        }
        if (e->len != len) {
            pthread_mutex_unlock(&c->lock);
            return DSM_ERR_BAD_ADDR;
        }
        e->count++;
        *copy = e->copy;
        *hit = 1;
        pthread_mutex_unlock(&c->lock);
        return DSM_OK;
    }
    entry_t *e = calloc(1, sizeof *e);
    uint8_t *buf = malloc(len ? len : 1);
    if (e == NULL || buf == NULL) {
        pthread_mutex_unlock(&c->lock);
        free(e);
        free(buf);
        return DSM_ERR_NOMEM;
    }
    e->key = key;
    e->copy = buf;
    e->len = len;
    e->count = 1;
    e->pending = 1;
    e->chain = c->buckets[bucket(key)];
    c->buckets[bucket(key)] = e;
    e->prev = c->newest;
    if (c->newest) c->newest->next = e; else c->oldest = e;
    c->newest = e;
    c->bytes += len;
    c->entries++;
    pthread_mutex_unlock(&c->lock);

    dsm_status_t st = fetch(ctx, key, buf, len);

    pthread_mutex_lock(&c->lock);
    e->pending = 0;
    if (st != DSM_OK) {
        unlink_entry(c, e);
        free(e->copy);
        free(e);
    } else {
        *copy = e->copy;
        if (c->bytes > c->budget)
            evict_locked(c, c->budget);
    }
    pthread_cond_broadcast(&c->fetched);
    pthread_mutex_unlock(&c->lock);
    return st;
}

dsm_status_t own_cache_release(own_cache_t *c, uint64_t key)
{
    pthread_mutex_lock(&c->lock);
    entry_t *e = lookup(c, key);
    dsm_status_t st = DSM_ERR_STATE;
    if (e && !e->pending && e->count > 0) {
        e->count--;
        st = DSM_OK;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

int own_cache_forget(own_cache_t *c, uint64_t key)
{
    pthread_mutex_lock(&c->lock);
    entry_t *e = lookup(c, key);
    int freed = 0;
    if (e && !e->pending && e->count == 0) {
        unlink_entry(c, e);
        free(e->copy);
        free(e);
        freed = 1;
    }
    pthread_mutex_unlock(&c->lock);
    return freed;
}

uint64_t own_cache_evict(own_cache_t *c, uint64_t target)
{
    pthread_mutex_lock(&c->lock);
    uint64_t n = evict_locked(c, target);
    pthread_mutex_unlock(&c->lock);
    return n;
}

void own_cache_usage(own_cache_t *c, uint64_t *entries, uint64_t *bytes, uint64_t *evictions)
{
    pthread_mutex_lock(&c->lock);
    if (entries) *entries = c->entries;
    if (bytes) *bytes = c->bytes;
    if (evictions) *evictions = c->evictions;
    pthread_mutex_unlock(&c->lock);
}

long own_cache_count(own_cache_t *c, uint64_t key)
{
    pthread_mutex_lock(&c->lock);
    entry_t *e = lookup(c, key);
    long n = e && !e->pending ? e->count : -1;
    pthread_mutex_unlock(&c->lock);
    return n;
}
