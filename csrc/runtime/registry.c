/* The function registry: C functions by name, process-wide. A function's id
 * is the FNV-1a hash of its name, so every process of the same binary (or
 * with the same plugin) agrees on ids without talking; only ids cross the
 * wire, never code pointers, so ASLR stays on. Tasks (dsm_fn_t, run by
 * dsm_spawn) and the closures of mechanisms (delegation) share the table and
 * the id space; each entry has a kind, and a lookup of the wrong kind finds
 * nothing, so a closure is never run as a task or the reverse. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/node_internal.h"
#include "util/log.h"

enum { MAX_FUNCTIONS = 1024, MAX_NAME = 128 };

typedef struct entry {
    uint32_t id;
    int kind;              /* DSM_REG_TASK, or a mechanism's closure kind */
    char name[MAX_NAME];
    dsm_fn_t fn;           /* tasks */
    dsm_closure_t closure; /* closures */
} entry_t;

enum { DSM_REG_TASK = 0 };

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t entries[MAX_FUNCTIONS];
static uint32_t n_entries;

uint32_t dsm_registry_id(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h ? h : 1;
}

static dsm_status_t reg_add(const char *name, int kind, dsm_fn_t fn, dsm_closure_t closure, uint32_t *id_out)
{
    if (!name || !name[0] || strlen(name) >= MAX_NAME) return DSM_ERR_INVALID;
    uint32_t id = dsm_registry_id(name);
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&registry_lock);
    for (uint32_t i = 0; i < n_entries; i++) {
        if (entries[i].id != id) continue;
        /* Registering the same function again is harmless; anything else is a clash. */
        if (strcmp(entries[i].name, name) != 0 || entries[i].kind != kind || entries[i].fn != fn ||
            entries[i].closure != closure) {
            DSM_ERROR("registry", "'%s' clashes with registered '%s'", name, entries[i].name);
            st = DSM_ERR_EXISTS;
        }
        pthread_mutex_unlock(&registry_lock);
        if (st == DSM_OK && id_out) *id_out = id;
        return st;
    }
    if (n_entries == MAX_FUNCTIONS) {
        st = DSM_ERR_NOMEM;
    } else {
        entries[n_entries].id = id;
        entries[n_entries].kind = kind;
        strcpy(entries[n_entries].name, name);
        entries[n_entries].fn = fn;
        entries[n_entries].closure = closure;
        n_entries++;
    }
    pthread_mutex_unlock(&registry_lock);
    if (st == DSM_OK && id_out) *id_out = id;
    return st;
}

dsm_status_t dsm_register(const char *name, dsm_fn_t fn)
{
    if (!fn) return DSM_ERR_INVALID;
    return reg_add(name, DSM_REG_TASK, fn, NULL, NULL);
}

dsm_status_t dsm_register_closure(const char *name, int kind, dsm_closure_t fn, uint32_t *id)
{
    if (!fn || kind <= DSM_REG_TASK) return DSM_ERR_INVALID;
    return reg_add(name, kind, NULL, fn, id);
}

dsm_closure_t dsm_closure_find(uint32_t id, int kind)
{
    dsm_closure_t fn = NULL;
    pthread_mutex_lock(&registry_lock);
    for (uint32_t i = 0; i < n_entries && !fn; i++)
        if (entries[i].id == id && entries[i].kind == kind) fn = entries[i].closure;
    pthread_mutex_unlock(&registry_lock);
    return fn;
}

dsm_fn_t dsm_registry_find(uint32_t id, const char **name)
{
    dsm_fn_t fn = NULL;
    pthread_mutex_lock(&registry_lock);
    for (uint32_t i = 0; i < n_entries && !fn; i++) {
        if (entries[i].id == id && entries[i].kind == DSM_REG_TASK) {
            fn = entries[i].fn;
            if (name) *name = entries[i].name;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return fn;
}

dsm_status_t dsm_lookup(const char *name, uint32_t *id)
{
    if (!name) return DSM_ERR_INVALID;
    uint32_t want = dsm_registry_id(name);
    const char *found = NULL;
    if (!dsm_registry_find(want, &found) || strcmp(found, name) != 0) return DSM_ERR_NO_HANDLER;
    if (id) *id = want;
    return DSM_OK;
}

const char *dsm_registered_name(uint32_t index)
{
    /* tasks only, what dsm_spawn can run, but not the internal ones ('_') */
    const char *name = NULL;
    pthread_mutex_lock(&registry_lock);
    for (uint32_t i = 0, seen = 0; i < n_entries && !name; i++)
        if (entries[i].kind == DSM_REG_TASK && entries[i].name[0] != '_' && seen++ == index) name = entries[i].name;
    pthread_mutex_unlock(&registry_lock);
    return name;
}
