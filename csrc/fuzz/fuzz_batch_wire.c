/* libFuzzer target for the batched reply's payload decoder (batch_wire.h):
 * the first 2 bytes are the entry count the message header would claim,
 * the rest the payload. Nothing may crash it; an accepted payload must walk
 * as exactly that many entries, each inside the input, and re-encode to the
 * same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/am_wire.h"
#include "fabric/batch_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint64_t count = (uint64_t)data[0] | (uint64_t)data[1] << 8;
    data += 2;
    size -= 2;
    /* exact-size copy so ASan sees any read past the payload */
    uint8_t *buf = malloc(size ? size : 1);
    uint8_t *again = malloc(size ? size : 1);
    if (buf == NULL || again == NULL)
        abort();
    if (size)
        memcpy(buf, data, size);
    if (dsm_batch_wire_check(buf, size, count) == DSM_OK) {
        size_t off = 0, used = 0;
        uint64_t n = 0;
        dsm_batch_entry_t e;
        while (dsm_batch_wire_next(buf, size, &off, &e)) {
            if (e.request_id == 0 || e.status > 0 || e.status < DSM_AM_WIRE_MIN_STATUS ||
                (e.len && (e.data < buf || e.data + e.len > buf + size)) || (e.len == 0 && e.data != NULL))
                abort();
            if (!dsm_batch_wire_append(again, size, &used, e.request_id, e.status, e.data, e.len))
                abort();
            n++;
        }
        if (n != count || off != size || used != size || memcmp(again, buf, size) != 0)
            abort();
    }
    free(again);
    free(buf);
    return 0;
}
