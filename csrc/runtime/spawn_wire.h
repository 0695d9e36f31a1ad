/* The runtime's task messages on the wire: a spawn's header {u32 function
 * id, u64 token} before its argument bytes, its acknowledgement (the reply
 * to the spawn's request: DSM_OK and the token, or an error status and
 * nothing), its result's header {u64 token, i32 status} before the result
 * bytes, and the token alone of a cancel and of a start notice. A token's
 * top bit, in a spawn only, asks for the start notice. Pure codecs:
 * decoders check every length and trust nothing. */
#ifndef DSM_RUNTIME_SPAWN_WIRE_H
#define DSM_RUNTIME_SPAWN_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/status.h"

enum { DSM_SPAWN_HEADER_LEN = 12, DSM_SPAWN_TOKEN_LEN = 8, DSM_SPAWN_RESULT_HEADER_LEN = 12 };

typedef struct dsm_spawn_header {
    uint32_t fn_id;
    uint64_t token;   /* names the job for a cancel; never 0, top bit clear */
    int notify;       /* the caller wants the start notice */
} dsm_spawn_header_t;

void dsm_spawn_header_encode(uint8_t out[DSM_SPAWN_HEADER_LEN], const dsm_spawn_header_t *h);
/* DSM_ERR_PROTO for fewer than DSM_SPAWN_HEADER_LEN bytes or a token of 0;
 * the arguments are the bytes after the header. */
dsm_status_t dsm_spawn_header_decode(const uint8_t *p, size_t len, dsm_spawn_header_t *h);

/* A result's header; decode gives DSM_ERR_PROTO for fewer bytes, a token
 * of 0 or with its top bit, or a status that is no error code nor DSM_OK;
 * the result is the bytes after the header. */
void dsm_spawn_result_encode(uint8_t out[DSM_SPAWN_RESULT_HEADER_LEN], uint64_t token, dsm_status_t status);
dsm_status_t dsm_spawn_result_decode(const uint8_t *p, size_t len, uint64_t *token, dsm_status_t *status);

/* A spawn's acknowledgement: the reply's status and payload. decode gives
 * DSM_OK and *token for DSM_OK with exactly a token (top bit clear), the
 * error status itself for an error with no payload, and DSM_ERR_PROTO for
 * anything else (an OK without its token, an error with bytes, a status
 * that is no error code). */
void dsm_spawn_ack_encode(uint8_t out[DSM_SPAWN_TOKEN_LEN], uint64_t token);
dsm_status_t dsm_spawn_ack_decode(dsm_status_t status, const uint8_t *p, size_t len, uint64_t *token);

/* A cancel's or a start notice's payload: exactly the token (top bit clear). */
void dsm_spawn_token_encode(uint8_t out[DSM_SPAWN_TOKEN_LEN], uint64_t token);
dsm_status_t dsm_spawn_token_decode(const uint8_t *p, size_t len, uint64_t *token);

#endif
