/* Sealing and checking control frames under a session key (see ctl_seal.h). */
#include "runtime/ctl_seal.h"

#include <string.h>

#include "runtime/auth.h"

dsm_status_t dsm_ctl_session_derive(const char *secret, const uint8_t member_nonce[DSM_CTL_NONCE_LEN],
                                    const uint8_t coord_nonce[DSM_CTL_NONCE_LEN], uint32_t rank,
                                    dsm_ctl_session_t *out)
{
    uint8_t nonces[2 * DSM_CTL_NONCE_LEN], rank_bytes[4];
    memcpy(nonces, member_nonce, DSM_CTL_NONCE_LEN);
    memcpy(nonces + DSM_CTL_NONCE_LEN, coord_nonce, DSM_CTL_NONCE_LEN);
    dsm_put_u32(rank_bytes, rank);
    memset(out, 0, sizeof *out);
    return dsm_auth_mac(secret, "dsm-session-v1", nonces, sizeof nonces, rank_bytes, sizeof rank_bytes, out->key);
}

/* The MAC of a frame: direction, seq and the (final) header, then the payload. */
static dsm_status_t frame_mac(const dsm_ctl_session_t *s, dsm_ctl_dir_t dir, uint64_t seq, const uint8_t *header,
                              const uint8_t *payload, size_t payload_len, uint8_t mac[32])
{
    uint8_t lead[1 + 8 + DSM_CTL_HEADER_LEN];
    lead[0] = (uint8_t)dir;
    dsm_put_u64(lead + 1, seq);
    memcpy(lead + 9, header, DSM_CTL_HEADER_LEN);
    return dsm_auth_mac_key(s->key, sizeof s->key, "dsm-frame-v1", lead, sizeof lead, payload, payload_len, mac);
}

dsm_status_t dsm_ctl_seal(dsm_ctl_session_t *s, dsm_ctl_dir_t dir, dsm_writer_t *w, size_t start)
{
    if (!w->ok || w->len < start + DSM_CTL_HEADER_LEN) return DSM_ERR_INVALID;
    size_t payload_len = w->len - start - DSM_CTL_HEADER_LEN;
    if (!dsm_writer_reserve(w, DSM_CTL_SEAL_LEN)) return DSM_ERR_NOMEM;
    uint8_t *h = w->buf + start;
    dsm_put_u32(h + 8, (uint32_t)(payload_len + DSM_CTL_SEAL_LEN));
    dsm_put_u32(h + 12, DSM_CTL_FLAG_SEALED);
    uint8_t trailer[DSM_CTL_SEAL_LEN];
    dsm_put_u64(trailer, s->send_seq);
    dsm_status_t st = frame_mac(s, dir, s->send_seq, h, h + DSM_CTL_HEADER_LEN, payload_len, trailer + 8);
    if (st != DSM_OK) return st;
    dsm_write_bytes(w, trailer, sizeof trailer);
    s->send_seq++;
    return w->ok ? DSM_OK : DSM_ERR_NOMEM;
}

dsm_status_t dsm_ctl_open(dsm_ctl_session_t *s, dsm_ctl_dir_t dir, const uint8_t header[DSM_CTL_HEADER_LEN],
                          const dsm_ctl_header_t *h, const uint8_t *body, size_t *payload_len)
{
    if (!(h->flags & DSM_CTL_FLAG_SEALED) || h->length < DSM_CTL_SEAL_LEN) return DSM_ERR_AUTH;
    size_t len = h->length - DSM_CTL_SEAL_LEN;
    const uint8_t *trailer = body + len;
    uint64_t seq = dsm_get_u64(trailer);
    uint8_t expect[32];
    if (seq != s->recv_seq || frame_mac(s, dir, seq, header, body, len, expect) != DSM_OK ||
        !dsm_auth_equal(expect, trailer + 8, sizeof expect))
        return DSM_ERR_AUTH;
    s->recv_seq++;
    *payload_len = len;
    return DSM_OK;
}
