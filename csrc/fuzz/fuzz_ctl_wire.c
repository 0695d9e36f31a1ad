/* libFuzzer target: the coordinator's control-message decoders, member
 * entries' published values included. The first byte picks the message type
 * so that every payload decoder is reached both behind a valid header and
 * raw; behind a valid header, also the seal check of frames after the
 * handshake. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ctl_seal.h"
#include "runtime/ctl_wire.h"

/* A decoded value list must be within bounds, copyable, and findable. */
static void check_values(const dsm_ctl_values_t *vs)
{
    if (dsm_ctl_values_check(vs) != DSM_OK) abort();
    dsm_ctl_values_t *copy = dsm_ctl_values_dup(vs);
    if (!copy) return;
    for (unsigned i = 0; i < vs->count; i++) {
        char key[DSM_NODE_MAX_KEY + 1];
        memcpy(key, vs->v[i].key, vs->v[i].key_len);
        key[vs->v[i].key_len] = 0;
        const dsm_ctl_value_t *v = dsm_ctl_values_find(copy, key);
        if (!v || v->value_len != vs->v[i].value_len || memcmp(v->value, vs->v[i].value, v->value_len) != 0)
            abort();
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_ctl_header_t h;
    if (size >= DSM_CTL_HEADER_LEN && dsm_ctl_header_decode(data, size, &h) == DSM_OK) {
        size_t avail = size - DSM_CTL_HEADER_LEN;
        dsm_ctl_msg_t msg;
        dsm_ctl_decode(h.type, data + DSM_CTL_HEADER_LEN, h.length < avail ? h.length : avail, &msg);
        /* A frame after the handshake: a forgery must never open, and a
         * frame sealed here must, exactly once. */
        if (h.length <= avail) {
            static const uint8_t nonce[DSM_CTL_NONCE_LEN] = {1};
            dsm_ctl_session_t s;
            if (dsm_ctl_session_derive("fuzz-secret", nonce, nonce, 1, &s) != DSM_OK) abort();
            size_t len;
            if (dsm_ctl_open(&s, DSM_CTL_TO_MEMBER, data, &h, data + DSM_CTL_HEADER_LEN, &len) == DSM_OK) abort();
            if (!(h.flags & DSM_CTL_FLAG_SEALED) && h.length + DSM_CTL_SEAL_LEN <= DSM_CTL_MAX_PAYLOAD) {
                dsm_writer_t w = {0};
                dsm_write_bytes(&w, data, DSM_CTL_HEADER_LEN + h.length);
                dsm_ctl_session_t peer = s;
                dsm_ctl_header_t sh;
                if (dsm_ctl_seal(&s, DSM_CTL_TO_MEMBER, &w, 0) != DSM_OK ||
                    dsm_ctl_header_decode(w.buf, w.len, &sh) != DSM_OK ||
                    dsm_ctl_open(&peer, DSM_CTL_TO_MEMBER, w.buf, &sh, w.buf + DSM_CTL_HEADER_LEN, &len) != DSM_OK ||
                    len != h.length ||
                    dsm_ctl_open(&peer, DSM_CTL_TO_MEMBER, w.buf, &sh, w.buf + DSM_CTL_HEADER_LEN, &len) == DSM_OK)
                    abort();   /* sealed frames open once; a replay fails */
                dsm_writer_free(&w);
            }
        }
    }
    if (size >= 1) {
        dsm_ctl_msg_t msg;
        if (dsm_ctl_decode((uint16_t)(data[0] % (DSM_CTL_TYPE_MAX + 2)), data + 1, size - 1, &msg) == DSM_OK &&
            (msg.type == DSM_CTL_MEMBER || msg.type == DSM_CTL_HELLO)) {
            check_values(msg.type == DSM_CTL_MEMBER ? &msg.u.member.values : &msg.u.hello.self.values);
            /* A decoded entry must be re-encodable: its pointers are in bounds. */
            dsm_writer_t w = {0};
            if (msg.type == DSM_CTL_MEMBER && dsm_ctl_encode(&msg, &w) != DSM_OK) abort();
            dsm_writer_free(&w);
        }
    }
    return 0;
}
