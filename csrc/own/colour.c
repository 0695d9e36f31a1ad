/* The per-slot colour memory of a home node (see colour.h): an
 * open-addressing hash map offset -> next start colour. It only grows, by
 * one entry per distinct slot own ever freed, which the partition bounds. */
#include "own/colour.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct slot {
    uint64_t off;     /* 0: empty (offset 0 is never an object) */
    uint16_t next;    /* start colour of the next object here */
} slot_t;

struct own_colours {
    pthread_mutex_t lock;
    slot_t *slots;
    uint64_t cap, used, quarantined;
};

static uint64_t hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

dsm_status_t own_colours_create(own_colours_t **out)
{
    own_colours_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return DSM_ERR_NOMEM;
    t->cap = 1024;
    t->slots = calloc(t->cap, sizeof *t->slots);
    if (t->slots == NULL) {
        free(t);
        return DSM_ERR_NOMEM;
    }
    pthread_mutex_init(&t->lock, NULL);
    *out = t;
    return DSM_OK;
}

void own_colours_destroy(own_colours_t *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->slots);
    free(t);
}

static slot_t *find(slot_t *slots, uint64_t cap, uint64_t off)
{
    for (uint64_t i = hash(off) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (slots[i].off == off || slots[i].off == 0)
            return &slots[i];
}

static int grow(own_colours_t *t)
{
    uint64_t cap = t->cap * 2;
    slot_t *s = calloc(cap, sizeof *s);
    if (s == NULL)
        return 0;
    for (uint64_t i = 0; i < t->cap; i++)
        if (t->slots[i].off)
            *find(s, cap, t->slots[i].off) = t->slots[i];
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 1;
}

uint16_t own_colours_start(own_colours_t *t, uint64_t off)
{
    pthread_mutex_lock(&t->lock);
    slot_t *s = find(t->slots, t->cap, off);
    uint16_t c = s->off == off ? s->next : 0;
    pthread_mutex_unlock(&t->lock);
    return c;
}

int own_colours_freed(own_colours_t *t, uint64_t off, uint16_t colour)
{
    if (off == 0)
        return 0;
    pthread_mutex_lock(&t->lock);
    if ((t->used + 1) * 2 > t->cap && !grow(t)) {
        pthread_mutex_unlock(&t->lock);
        return -2;   /* DSM_ERR_NOMEM */
    }
    slot_t *s = find(t->slots, t->cap, off);
    if (s->off == 0) {
        s->off = off;
        t->used++;
    }
    int give_back = colour != UINT16_MAX;
    /* A colour never goes down at a slot, whatever a free claims. */
    if (give_back && (uint16_t)(colour + 1) > s->next)
        s->next = (uint16_t)(colour + 1);
    else if (!give_back) {
        s->next = UINT16_MAX;
        t->quarantined++;
    }
    pthread_mutex_unlock(&t->lock);
    return give_back;
}

uint64_t own_colours_quarantined(own_colours_t *t)
{
    pthread_mutex_lock(&t->lock);
    uint64_t q = t->quarantined;
    pthread_mutex_unlock(&t->lock);
    return q;
}
