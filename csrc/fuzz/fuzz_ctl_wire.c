/* libFuzzer target: the coordinator's control-message decoders. The first
 * byte picks the message type so that every payload decoder is reached both
 * behind a valid header and raw. */
#include <stddef.h>
#include <stdint.h>

#include "runtime/ctl_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_ctl_header_t h;
    if (size >= DSM_CTL_HEADER_LEN && dsm_ctl_header_decode(data, size, &h) == DSM_OK) {
        size_t avail = size - DSM_CTL_HEADER_LEN;
        dsm_ctl_msg_t msg;
        dsm_ctl_decode(h.type, data + DSM_CTL_HEADER_LEN, h.length < avail ? h.length : avail, &msg);
    }
    if (size >= 1) {
        dsm_ctl_msg_t msg;
        if (dsm_ctl_decode((uint16_t)(data[0] % (DSM_CTL_TYPE_MAX + 2)), data + 1, size - 1, &msg) == DSM_OK &&
            msg.type == DSM_CTL_MEMBER) {
            /* A decoded entry must be re-encodable: its pointers are in bounds. */
            dsm_writer_t w = {0};
            dsm_ctl_encode(&msg, &w);
            dsm_writer_free(&w);
        }
    }
    return 0;
}
