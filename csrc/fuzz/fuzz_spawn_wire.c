/* libFuzzer target: the runtime's task-message decoders (a spawn's header,
 * the token of a cancel or a start notice). What decodes must encode back
 * to the same bytes, and a decoded token is never 0 nor carries the
 * notice bit. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spawn_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_spawn_header_t h;
    if (dsm_spawn_header_decode(data, size, &h) == DSM_OK) {
        if (size < DSM_SPAWN_HEADER_LEN || h.token == 0 || h.token >> 63) abort();
        uint8_t again[DSM_SPAWN_HEADER_LEN];
        dsm_spawn_header_encode(again, &h);
        if (memcmp(again, data, sizeof again) != 0) abort();
    }
    uint64_t token;
    if (dsm_spawn_token_decode(data, size, &token) == DSM_OK) {
        if (size != DSM_SPAWN_TOKEN_LEN || token == 0 || token >> 63) abort();
        uint8_t again[DSM_SPAWN_TOKEN_LEN];
        dsm_spawn_token_encode(again, token);
        if (memcmp(again, data, sizeof again) != 0) abort();
    }
    return 0;
}
