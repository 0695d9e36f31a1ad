/* libFuzzer target for the active-message wire header decoder: arbitrary
 * header bytes and a claimed payload length must never crash it, and
 * anything it accepts must satisfy the invariants the receive path relies on.
 * The same bytes go through the fabric address's prefix decoder, which a
 * joining node's address reaches at the coordinator and at every member. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/fabric.h"
#include "fabric/am_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t claimed;
    memcpy(&claimed, data, 4);   /* the payload length UCX would report */
    data += 4;
    size -= 4;

    /* exact-size copy so ASan sees any read past the header */
    uint8_t *hdr = malloc(size ? size : 1);
    if (hdr == NULL)
        return 0;
    if (size)
        memcpy(hdr, data, size);
    dsm_am_wire_t h;
    dsm_status_t st = dsm_am_wire_decode(size ? hdr : NULL, size, claimed, &h);
    if (st == DSM_OK) {
        if (size != DSM_AM_WIRE_HEADER_LEN || h.payload_len != claimed ||
            h.payload_len > DSM_AM_MAX_PAYLOAD || h.handler >= DSM_AM_MAX_HANDLERS ||
            h.flags > DSM_AM_KIND_REQUEST_BATCH || h.src_rank >= DSM_FABRIC_MAX_PEERS || !h.addressable ||
            (h.flags != DSM_AM_KIND_PLAIN && h.request_id == 0))
            abort();
        /* re-encoding an accepted header gives back the same bytes */
        uint8_t again[DSM_AM_WIRE_HEADER_LEN];
        dsm_am_wire_encode(&h, again);
        if (memcmp(again, hdr, DSM_AM_WIRE_HEADER_LEN) != 0)
            abort();
    } else if (st != DSM_ERR_PROTO && st != DSM_ERR_NO_HANDLER) {
        abort();
    }
    unsigned version;
    const void *transport;
    size_t transport_len;
    st = dsm_fabric_addr_decode(size ? hdr : NULL, size, &version, &transport, &transport_len);
    if (st == DSM_OK) {
        if (size <= DSM_FABRIC_ADDR_PREFIX || version != DSM_AM_WIRE_VERSION || hdr[0] != DSM_FABRIC_ADDR_MAGIC ||
            transport != hdr + DSM_FABRIC_ADDR_PREFIX || transport_len != size - DSM_FABRIC_ADDR_PREFIX)
            abort();
    } else if (st != DSM_ERR_PROTO || transport != NULL || transport_len != 0 ||
               (version != 0 && (size < DSM_FABRIC_ADDR_PREFIX || version != hdr[1]))) {
        abort();
    }
    free(hdr);
    return 0;
}
