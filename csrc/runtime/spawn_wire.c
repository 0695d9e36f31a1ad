/* The runtime's task messages on the wire (see spawn_wire.h). */
#include "runtime/spawn_wire.h"

#include "util/bytes.h"

#define NOTIFY_BIT (1ull << 63)
/* The lowest status the AM wire carries (its i16 field holds dsm_status_t's
 * codes, none below this). */
enum { MIN_STATUS = -64 };

void dsm_spawn_header_encode(uint8_t out[DSM_SPAWN_HEADER_LEN], const dsm_spawn_header_t *h)
{
    dsm_put_u32(out, h->fn_id);
    dsm_put_u64(out + 4, (h->token & ~NOTIFY_BIT) | (h->notify ? NOTIFY_BIT : 0));
}

dsm_status_t dsm_spawn_header_decode(const uint8_t *p, size_t len, dsm_spawn_header_t *h)
{
    if (len < DSM_SPAWN_HEADER_LEN) return DSM_ERR_PROTO;
    uint64_t word = dsm_get_u64(p + 4);
    *h = (dsm_spawn_header_t){.fn_id = dsm_get_u32(p), .token = word & ~NOTIFY_BIT, .notify = (word & NOTIFY_BIT) != 0};
    return h->token != 0 ? DSM_OK : DSM_ERR_PROTO;
}

void dsm_spawn_token_encode(uint8_t out[DSM_SPAWN_TOKEN_LEN], uint64_t token) { dsm_put_u64(out, token); }

dsm_status_t dsm_spawn_token_decode(const uint8_t *p, size_t len, uint64_t *token)
{
    if (len != DSM_SPAWN_TOKEN_LEN) return DSM_ERR_PROTO;
    *token = dsm_get_u64(p);
    return *token != 0 && !(*token & NOTIFY_BIT) ? DSM_OK : DSM_ERR_PROTO;
}

void dsm_spawn_result_encode(uint8_t out[DSM_SPAWN_RESULT_HEADER_LEN], uint64_t token, dsm_status_t status)
{
    dsm_put_u64(out, token);
    dsm_put_u32(out + 8, (uint32_t)(int32_t)status);
}

dsm_status_t dsm_spawn_result_decode(const uint8_t *p, size_t len, uint64_t *token, dsm_status_t *status)
{
    if (len < DSM_SPAWN_RESULT_HEADER_LEN) return DSM_ERR_PROTO;
    *token = dsm_get_u64(p);
    int32_t st = (int32_t)dsm_get_u32(p + 8);
    if (*token == 0 || (*token & NOTIFY_BIT) || st > 0 || st < MIN_STATUS) return DSM_ERR_PROTO;
    *status = (dsm_status_t)st;
    return DSM_OK;
}

void dsm_spawn_ack_encode(uint8_t out[DSM_SPAWN_TOKEN_LEN], uint64_t token) { dsm_put_u64(out, token); }

dsm_status_t dsm_spawn_ack_decode(dsm_status_t status, const uint8_t *p, size_t len, uint64_t *token)
{
    if (status == DSM_OK) return dsm_spawn_token_decode(p, len, token);
    return (int)status < 0 && (int)status >= MIN_STATUS && len == 0 ? status : DSM_ERR_PROTO;
}
