/* libFuzzer target for the memcached text-protocol parser of csrc/apps
 * (mc_proto.c): any bytes, parsed command after command the way a connection
 * does, must never read out of bounds, loop, or yield inconsistent lengths. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apps/mc_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a private, exactly sized copy: the parser writes NULs into it */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    size_t pos = 0;
    while (pos < size) {
        mc_cmd_t c;
        size_t n = mc_parse(buf + pos, size - pos, 1024 * 1024, &c);
        if (n == 0) break;
        if (n > size - pos) abort();
        if (c.kind == MC_GET || c.kind == MC_GETS || c.kind == MC_GAT || c.kind == MC_GATS) {
            const char *p = c.keys, *end = c.keys + c.keys_len, *k;
            size_t kl;
            if (c.keys < buf + pos || end > buf + pos + n) abort();
            while (mc_next_key(&p, end, &k, &kl))
                if (kl == 0 || kl > MC_KEY_MAX) abort();
        }
        if ((c.kind >= MC_SET && c.kind <= MC_TOUCH) || (c.kind >= MC_MG && c.kind <= MC_MA)) {
            if (c.klen > MC_KEY_MAX) abort();
            if (c.key && (c.key < buf + pos || c.key + c.klen > buf + pos + n)) abort();
        }
        if (c.kind >= MC_MG && c.kind <= MC_MA &&
            (c.meta.olen > MC_OPAQUE_MAX || c.meta.norder > sizeof c.meta.order))
            abort();
        if (c.kind == MC_MS && (size_t)c.vlen + 2 + c.klen + 56 > 1024 * 1024) abort();
        pos += n;
        /* a storage command's data block follows the line */
        if ((c.kind >= MC_SET && c.kind <= MC_CAS) || c.kind == MC_MS) {
            size_t skip = (size_t)c.vlen + 2;
            if (skip > size - pos) break;
            pos += skip;
        }
        if (c.kind == MC_CLOSE) break;
    }
    free(buf);
    return 0;
}
