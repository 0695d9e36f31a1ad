/* libFuzzer target for own's untrusted inputs: the message decoder (FREE, LOCK, UNLOCK,
 * UNLOCK_BOX, GRANT, ALLOC)
 * (a decoded message re-encodes to the same bytes), and the object-header
 * and owner-record decoders (memory a peer controls), whose accepted
 * values must respect the documented ranges; then the input drives the
 * per-slot colour memory, whose start colours must never go down. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "dsm/log.h"
#include "own/colour.h"
#include "own/msg.h"
#include "own/object.h"
#include "util/bytes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_set_log_level(0);
    own_msg_t m;
    if (own_msg_decode(data, size, &m) == DSM_OK) {
        uint8_t buf[OWN_MSG_MAX_LEN];
        size_t n = own_msg_encode(&m, buf);
        if (n != size || memcmp(buf, data, n) != 0)
            abort();
        if (m.type == OWN_MSG_ALLOC ? (m.g != 0 || m.arg > OWN_MAX_SIZE) : dsm_gaddr_offset(m.g) == 0)
            abort();
        int typed = m.type == OWN_MSG_FREE || m.type == OWN_MSG_GRANT || m.type == OWN_MSG_ALLOC;
        if (typed ? (m.obj_type == 0 || m.obj_type > OWN_MAX_TYPE)
                  : (m.obj_type != 0 || dsm_gaddr_strip(m.g) != m.g))
            abort();
        int has_arg = m.type == OWN_MSG_GRANT || m.type == OWN_MSG_UNLOCK_BOX || m.type == OWN_MSG_ALLOC;
        if ((m.type == OWN_MSG_GRANT && m.arg > OWN_MAX_SIZE) ||
            (m.type == OWN_MSG_UNLOCK_BOX && dsm_gaddr_offset(m.arg) == 0) || (!has_arg && m.arg != 0))
            abort();
    }
    own_obj_header_t h;
    if (own_obj_header_decode(data, size, &h) == DSM_OK && (h.type == 0 || h.size > OWN_MAX_SIZE))
        abort();
    own_record_t r;
    uint16_t gen = size >= 2 ? dsm_get_u16(data) : 1;
    if (size >= 2 && own_record_decode(data + 2, size - 2, gen, &r) == DSM_OK) {
        if (r.gen != gen || r.gen == 0 || r.type == 0 || (r.g != 0 && dsm_gaddr_offset(r.g) == 0))
            abort();
        uint8_t buf[OWN_REC_SIZE];
        own_record_encode(&r, buf);
        own_record_t again;
        if (own_record_decode(buf, sizeof buf, gen, &again) != DSM_OK || again.g != r.g ||
            again.type != r.type || again.size != r.size)
            abort();
    }
    /* Colour memory: (u16 slot, u16 colour) pairs. */
    own_colours_t *t;
    if (own_colours_create(&t) != DSM_OK)
        return 0;
    for (size_t i = 0; i + 4 <= size; i += 4) {
        uint64_t off = 64 + 16 * (uint64_t)dsm_get_u16(data + i);
        uint16_t c = dsm_get_u16(data + i + 2);
        uint16_t before = own_colours_start(t, off);
        int r2 = own_colours_freed(t, off, c);
        uint16_t after = own_colours_start(t, off);
        if (after < before || (r2 == 1 && after <= c) || (r2 == 0 && c != UINT16_MAX))
            abort();
    }
    own_colours_destroy(t);
    return 0;
}
