/* Sealed control frames: after the handshake every control frame, both
 * ways, carries a trailer {seq u64, mac[32]} after its payload (the
 * header's length counts it, its flags say DSM_CTL_FLAG_SEALED). The MAC is
 * HMAC-SHA256 under a session key over the direction, the seq, the header
 * and the payload; each direction numbers its frames from 0. So a frame
 * from anyone without the key (a proxy on the path that does not know the
 * secret), a replay, a reordering or a dropped frame fails its check. The
 * session key is derived from the secret and both handshake nonces: only
 * the two ends of this connection can compute it. */
#ifndef DSM_RUNTIME_CTL_SEAL_H
#define DSM_RUNTIME_CTL_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"
#include "runtime/ctl_wire.h"
#include "util/bytes.h"

enum { DSM_CTL_KEY_LEN = 32 };

typedef enum { DSM_CTL_TO_MEMBER = 0, DSM_CTL_TO_COORD = 1 } dsm_ctl_dir_t;

typedef struct dsm_ctl_session {
    uint8_t key[DSM_CTL_KEY_LEN];
    uint64_t send_seq, recv_seq;  /* the next frame's, each way */
} dsm_ctl_session_t;

/* The session of a join: the member's and the coordinator's nonces and the
 * rank the coordinator gave. Sequences start at 0. */
dsm_status_t dsm_ctl_session_derive(const char *secret, const uint8_t member_nonce[DSM_CTL_NONCE_LEN],
                                    const uint8_t coord_nonce[DSM_CTL_NONCE_LEN], uint32_t rank,
                                    dsm_ctl_session_t *out);
/* Seal the frame w holds from offset `start` (as dsm_ctl_encode wrote it):
 * append the trailer, set the flag and the length; send_seq advances. */
dsm_status_t dsm_ctl_seal(dsm_ctl_session_t *s, dsm_ctl_dir_t dir, dsm_writer_t *w, size_t start);
/* Check a frame: its 16 header bytes, h as decoded from them, and the
 * h.length bytes after. DSM_OK: *payload_len is the payload's length
 * (before the trailer) and recv_seq advances. DSM_ERR_AUTH: not sealed, a
 * wrong MAC or out of sequence; the session is unchanged (the frame is to
 * be dropped). */
dsm_status_t dsm_ctl_open(dsm_ctl_session_t *s, dsm_ctl_dir_t dir, const uint8_t header[DSM_CTL_HEADER_LEN],
                          const dsm_ctl_header_t *h, const uint8_t *body, size_t *payload_len);

#endif
