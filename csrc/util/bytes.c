/* The growable writer behind every encoder. */
#include "util/bytes.h"

#include <stdlib.h>

int dsm_writer_reserve(dsm_writer_t *w, size_t more)
{
    if (!w->ok && w->cap) return 0;
    if (w->len + more <= w->cap) { w->ok = 1; return 1; }
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + more) cap *= 2;
    uint8_t *buf = realloc(w->buf, cap);
    if (!buf) { w->ok = 0; return 0; }
    w->buf = buf;
    w->cap = cap;
    w->ok = 1;
    return 1;
}

void dsm_writer_free(dsm_writer_t *w)
{
    free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
}
