/* libFuzzer target for the kvstore's tracker messages (chan/track_wire.h):
 * the first two bytes choose the sender and the number of participants,
 * the next two the slots, the rest is the message; what decodes keeps to
 * the documented rules, record by record. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chan/track_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t npeers = 1u + data[1] % 64u, from = data[0] % npeers, nslots = 1u + ((uint32_t)data[2] << 8 | data[3]);
    const uint8_t *msg = data + 4;
    size_t len = size - 4;
    chan_track_rec_t recs[CHAN_TRACK_MAX];
    int n = chan_track_decode(msg, len, from, npeers, nslots, recs);
    if (n < 0)
        return 0;
    if (n < 1 || n > CHAN_TRACK_MAX || len != (size_t)n * CHAN_TRACK_WORDS * 8)
        abort();
    for (int i = 0; i < n; i++) {
        uint64_t w[CHAN_TRACK_WORDS];
        memcpy(w, msg + (size_t)i * CHAN_TRACK_WORDS * 8, sizeof w);
        const chan_track_rec_t *r = &recs[i];
        if ((r->op != CHAN_TRACK_INSERT && r->op != CHAN_TRACK_DELETE) || r->host >= npeers || r->slot >= nslots ||
            (r->op == CHAN_TRACK_INSERT && r->host != from))
            abort();
        if (r->op != w[0] || r->key != w[1] || r->host != w[2] || r->slot != w[3] || r->counter != w[4])
            abort();
    }
    return 0;
}
