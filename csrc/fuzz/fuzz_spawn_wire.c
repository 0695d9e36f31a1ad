/* libFuzzer target: the runtime's task-message decoders (a spawn's header,
 * its acknowledgement, its result's header, the token of a cancel or a
 * start notice). What decodes must encode back to the same bytes, a
 * decoded token is never 0 nor carries the notice bit, and a decoded
 * status is DSM_OK or an error code the AM wire carries. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spawn_wire.h"
#include "util/bytes.h"

static void check_token(uint64_t token)
{
    if (token == 0 || token >> 63) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_spawn_header_t h;
    if (dsm_spawn_header_decode(data, size, &h) == DSM_OK) {
        if (size < DSM_SPAWN_HEADER_LEN) abort();
        check_token(h.token);
        uint8_t again[DSM_SPAWN_HEADER_LEN];
        dsm_spawn_header_encode(again, &h);
        if (memcmp(again, data, sizeof again) != 0) abort();
    }
    uint64_t token;
    if (dsm_spawn_token_decode(data, size, &token) == DSM_OK) {
        if (size != DSM_SPAWN_TOKEN_LEN) abort();
        check_token(token);
        uint8_t again[DSM_SPAWN_TOKEN_LEN];
        dsm_spawn_token_encode(again, token);
        if (memcmp(again, data, sizeof again) != 0) abort();
    }
    dsm_status_t st;
    if (dsm_spawn_result_decode(data, size, &token, &st) == DSM_OK) {
        if (size < DSM_SPAWN_RESULT_HEADER_LEN || (int)st > 0 || (int)st < -64) abort();
        check_token(token);
        uint8_t again[DSM_SPAWN_RESULT_HEADER_LEN];
        dsm_spawn_result_encode(again, token, st);
        if (memcmp(again, data, sizeof again) != 0) abort();
    }
    /* an acknowledgement: the reply's status (the input's first 4 bytes,
     * as the wire's i16 widened) and its payload (the rest) */
    if (size >= 4) {
        dsm_status_t status = (dsm_status_t)(int32_t)dsm_get_u32(data);
        const uint8_t *p = data + 4;
        size_t len = size - 4;
        token = 0;
        st = dsm_spawn_ack_decode(status, p, len, &token);
        if (st == DSM_OK) {
            if (status != DSM_OK || len != DSM_SPAWN_TOKEN_LEN) abort();
            check_token(token);
            uint8_t again[DSM_SPAWN_TOKEN_LEN];
            dsm_spawn_ack_encode(again, token);
            if (memcmp(again, p, sizeof again) != 0) abort();
        } else if ((int)st > 0 || (int)st < -64) {
            abort();
        } else if (st != DSM_ERR_PROTO && (st != status || len != 0)) {
            abort();   /* an error comes back only as itself, from an empty ack */
        }
    }
    return 0;
}
