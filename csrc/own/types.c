/* The object-type registry: a fixed append-only table, process-wide like
 * the function registry, so every node of a process (and every process that
 * registers the same types) agrees on what an id means. Registration is
 * under a mutex; an entry never changes once the count that publishes it
 * is stored, so a check (every allocation makes one) reads without it. */
#include "own/types.h"

#include <pthread.h>
#include <string.h>

#include "dsm/own.h"
#include "own/object.h"
#include "util/log.h"

#define LOG_MOD "own"

enum { MAX_TYPES = 256, NAME_MAX_LEN = 47 };

typedef struct type {
    uint32_t id;
    uint64_t size;
    char name[NAME_MAX_LEN + 1];
} type_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static type_t types[MAX_TYPES];
static unsigned ntypes;

static type_t *find(uint32_t id)
{
    unsigned n = __atomic_load_n(&ntypes, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        if (types[i].id == id)
            return &types[i];
    return NULL;
}

dsm_status_t dsm_own_type_register(uint32_t id, const char *name, size_t size)
{
    if (id == 0 || id > OWN_MAX_TYPE || name == NULL || strlen(name) > NAME_MAX_LEN ||
        (uint64_t)size > OWN_MAX_SIZE)
        return DSM_ERR_INVALID;
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&lock);
    type_t *t = find(id);
    if (t) {
        if (t->size != size || strcmp(t->name, name) != 0) {
            DSM_WARN(LOG_MOD, "type id %u is already '%s'", id, t->name);
            st = DSM_ERR_EXISTS;
        }
    } else if (ntypes == MAX_TYPES) {
        st = DSM_ERR_TOO_BIG;
    } else {
        t = &types[ntypes];
        t->id = id;
        t->size = size;
        memcpy(t->name, name, strlen(name) + 1);
        __atomic_store_n(&ntypes, ntypes + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    return st;
}

dsm_status_t own_type_check(uint32_t id, uint64_t size)
{
    const type_t *t = find(id);
    uint64_t want = t ? t->size : 0;
    if (t == NULL) {
        DSM_WARN(LOG_MOD, "unknown type id %u", id);
        return DSM_ERR_INVALID;
    }
    if (want != 0 && want != size) {
        DSM_WARN(LOG_MOD, "type %u holds %llu bytes, not %llu", id, (unsigned long long)want,
                 (unsigned long long)size);
        return DSM_ERR_INVALID;
    }
    return DSM_OK;
}
