/* The kvstore's tracker messages: the checked decoder (track_wire.h). */
#include <string.h>

#include "chan/track_wire.h"

int chan_track_decode(const void *msg, size_t len, uint32_t from, uint32_t npeers, uint32_t nslots,
                      chan_track_rec_t *recs)
{
    const size_t rec = CHAN_TRACK_WORDS * 8;
    if (msg == NULL || len == 0 || len % rec != 0 || len / rec > CHAN_TRACK_MAX)
        return DSM_ERR_PROTO;
    size_t n = len / rec;
    for (size_t i = 0; i < n; i++) {
        uint64_t w[CHAN_TRACK_WORDS];
        memcpy(w, (const uint8_t *)msg + i * rec, rec);
        if ((w[0] != CHAN_TRACK_INSERT && w[0] != CHAN_TRACK_DELETE) || w[2] >= npeers || w[3] >= nslots ||
            (w[0] == CHAN_TRACK_INSERT && w[2] != from))
            return DSM_ERR_PROTO;
        recs[i] = (chan_track_rec_t){.op = w[0], .key = w[1], .counter = w[4], .host = (uint32_t)w[2],
                                     .slot = (uint32_t)w[3]};
    }
    return (int)n;
}
