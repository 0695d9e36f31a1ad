/* A thread slot's spare heap slots (see spare.h): two small lists, objects
 * oldest first (the oldest makes room), records a stack. */
#include "own/spare.h"

#include <stddef.h>
#include <string.h>

int own_spare_obj_put(own_spares_t *s, uint64_t addr, uint64_t len, uint16_t colour, own_spare_obj_t *evicted)
{
    if (s == NULL)
        return 0;
    int r = 1;
    if (s->nobj == OWN_SPARES) {
        *evicted = s->obj[0];
        memmove(&s->obj[0], &s->obj[1], (OWN_SPARES - 1) * sizeof s->obj[0]);
        s->nobj--;
        r = 2;
    }
    s->obj[s->nobj++] = (own_spare_obj_t){.addr = addr, .len = len, .colour = colour};
    return r;
}

int own_spare_rec_put(own_spares_t *s, uint64_t addr)
{
    if (s == NULL || s->nrec == OWN_SPARES)
        return 0;
    s->rec[s->nrec++] = addr;
    return 1;
}

int own_spare_obj_take(own_spares_t *s, uint64_t len, own_spare_obj_t *out)
{
    for (uint32_t i = s ? s->nobj : 0; i-- > 0;)
        if (s->obj[i].len == len) {
            *out = s->obj[i];
            memmove(&s->obj[i], &s->obj[i + 1], (--s->nobj - i) * sizeof s->obj[0]);   /* keep the age order */
            return 1;
        }
    return 0;
}

int own_spare_rec_take(own_spares_t *s, uint64_t *addr)
{
    if (s == NULL || s->nrec == 0)
        return 0;
    *addr = s->rec[--s->nrec];
    return 1;
}
