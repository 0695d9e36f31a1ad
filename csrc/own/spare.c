/* A thread slot's spare heap slots (see spare.h): two small stacks. */
#include "own/spare.h"

#include <stddef.h>

int own_spare_obj_put(own_spares_t *s, uint64_t addr, uint64_t len, uint16_t colour)
{
    if (s == NULL || s->nobj == OWN_SPARES)
        return 0;
    s->obj[s->nobj++] = (own_spare_obj_t){.addr = addr, .len = len, .colour = colour};
    return 1;
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
            s->obj[i] = s->obj[--s->nobj];
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
