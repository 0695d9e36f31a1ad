/* libFuzzer target for chan's join/connect/leave messages (names, regions
 * and shapes): a decoded message keeps to the documented rules and re-encodes to exactly the same
 * bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chan/wire.h"
#include "dsm/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_set_log_level(0);
    chan_msg_t m;
    if (chan_msg_decode(data, size, &m) != DSM_OK)
        return 0;
    if (m.type < CHAN_MSG_JOIN || m.type > CHAN_MSG_LEAVE || m.nregions > DSM_CHAN_MAX_REGIONS ||
        m.nshape > DSM_CHAN_MAX_SHAPE || !chan_name_ok(m.name, strlen(m.name), DSM_CHAN_NAME_MAX))
        abort();
    if (m.type == CHAN_MSG_LEAVE && (m.kind != 0 || m.nregions != 0 || m.nshape != 0))
        abort();
    for (unsigned i = 0; i < m.nregions; i++)
        if (m.regions[i].size == 0 || m.regions[i].offset + m.regions[i].size < m.regions[i].offset)
            abort();
    uint8_t buf[CHAN_MSG_MAX_LEN];
    if (size > sizeof buf || chan_msg_encode(&m, buf) != size || memcmp(buf, data, size) != 0)
        abort();
    return 0;
}
